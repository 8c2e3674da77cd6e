"""Ranks in processes of their own (issue 25 item 4, nzjit/backend/rank_processes.py): rank_batch's
mode "processes" runs every group of ranks but the first in a forked rank process that reaches the
ranks' shared GM in place. The same bytes as one rank at a time; the same errors, rollback and
refusals as ranks on threads; a process that dies fails the call with every output unchanged; an
allocation, a new cluster or a new kernel after the fork is seen there or forks again."""

from __future__ import annotations

import os
import signal
import sys

import numpy as np
import pytest
from orch_kernels import RANKS, data, gmm, pack, tp, tp_moe_case

import runtime
from nzjit import pl
from nzjit.backend import call as call_mod
from nzjit.backend import rank_batch, rank_processes
from nzjit.backend.options import Options, using
from runtime import memory, shared_gm
from runtime.cluster_memory import ClusterMemory
from runtime.memory import GlobalMemory

pytestmark = pytest.mark.skipif(
    not (sys.platform.startswith("linux") and shared_gm.available()), reason="rank processes are Linux only"
)


@pytest.fixture(autouse=True)
def _processes(monkeypatch):
    """Two threads (one rank process: ranks 0, 1 here, ranks 2, 3 there), the mode pinned, and no
    rank process left from elsewhere: a test's patches reach a process only when it is forked
    after them, and none of them outlives the test."""
    rank_processes.stop()
    monkeypatch.setattr(runtime.threads, "THREADS", 2)
    monkeypatch.setattr(rank_batch, "FORCE", "processes")
    yield
    rank_processes.stop()


@pytest.fixture(scope="module")
def moe():
    return tp_moe_case("tp_moe_for_rank_processes", 11)


def _case(seed: int):
    """int8 tp data on a new cluster: x, the reference, the cluster, the resident NZ weights, and
    a resident output holding `before` (and `before` itself)."""
    x, w, ref = data(seed)
    cluster = runtime.Cluster(RANKS)
    ws = cluster.alloc_stacked_tensor(pack(w))
    before = np.arange(ref.size, dtype=np.int32).reshape(ref.shape)
    return x, ref, cluster, ws, before, cluster.alloc_stacked_tensor(before)


def _pids() -> list[int]:
    return rank_processes.pids()


def _sent() -> int:
    return rank_processes.SENT[0]


def test_tp_moe_in_processes_has_the_bytes_of_one_rank_at_a_time(moe, monkeypatch):
    mod, xe, ws = moe
    cluster = runtime.Cluster(mod.RANKS)
    wd = [cluster.alloc_stacked_tensor(runtime.pack_nz(w)) for w in ws]
    monkeypatch.setattr(rank_batch, "FORCE", "alone")  # the one-process reference
    alone = mod.moe_experts(xe, *wd)
    with using(Options(rank_batch=False)):  # and ranks as threads, rank by rank
        as_threads = mod.moe_experts(xe, *wd)
    monkeypatch.setattr(rank_batch, "FORCE", "processes")
    sent = _sent()
    first = mod.moe_experts(xe, *wd)
    pids = _pids()
    again = mod.moe_experts(xe, *wd)
    assert _sent() == sent + 2 and len(pids) == 1 and _pids() == pids  # one process, kept
    assert pids[0] != os.getpid()
    assert first.tobytes() == again.tobytes() == alone.tobytes() == as_threads.tobytes()
    ref = mod.reference_experts(xe, *ws)
    np.testing.assert_allclose(first, ref, rtol=2e-2, atol=2e-2)  # fp16 activation in between


@pytest.mark.parametrize("resident", [True, False])
def test_int8_tp_exact_into_a_resident_or_host_output(resident):
    x, w, ref = data(21)
    cluster = runtime.Cluster(RANKS)
    ws = cluster.alloc_stacked_tensor(pack(w))
    host = np.full(ref.shape, 7, np.int32)
    out = cluster.alloc_stacked_tensor(host) if resident else host
    sent = _sent()
    tp(x, ws, out)
    assert _sent() == sent + 1
    got = cluster.copy_stacked_from(out) if resident else out
    np.testing.assert_array_equal(got, ref)  # exact: small integers in int32
    if resident:  # rank r's shard, written by the process of ranks 2, 3 too, is on worker r
        for r, worker in enumerate(cluster.workers):
            np.testing.assert_array_equal(worker.copy_from(out[r]), ref[r])


def test_allocations_and_frees_after_the_fork_reach_the_process_without_a_new_fork():
    x, w, ref = data(22)
    cluster = runtime.Cluster(RANKS)
    ws = cluster.alloc_stacked_tensor(pack(w))
    first = cluster.alloc_stacked_tensor(np.zeros(ref.shape, np.int32))
    tp(x, ws, first)
    pids = _pids()
    cluster.free_stacked(first)  # freed and allocated after the fork: the process mirrors both
    for seed in (23, 24):
        x2, w2, ref2 = data(seed)
        ws2 = cluster.alloc_stacked_tensor(pack(w2))
        out = cluster.alloc_stacked_tensor(np.zeros(ref2.shape, np.int32))
        tp(x2, ws2, out)
        np.testing.assert_array_equal(cluster.copy_stacked_from(out), ref2)
    assert _pids() == pids


def test_a_new_cluster_or_a_new_kernel_forks_the_processes_again():
    x, w, ref = data(25)
    cluster = runtime.Cluster(RANKS)
    ws = cluster.alloc_stacked_tensor(pack(w))
    tp(x, ws, np.zeros(ref.shape, np.int32))
    pids = _pids()
    other = runtime.Cluster(RANKS)  # workers the process does not have: forked again
    ws_other = other.alloc_stacked_tensor(pack(w))
    out = np.zeros(ref.shape, np.int32)
    tp(x, ws_other, out)
    np.testing.assert_array_equal(out, ref)
    assert _pids() != pids and len(_pids()) == 1
    pids = _pids()

    @pl.kernel
    def doubled(  # a kernel traced after the fork: forked again
        x: pl.Tensor[[2, 32, 256], pl.INT32],
        out: pl.Out[pl.Tensor[[2, 32, 256], pl.INT32]],
    ):
        for e in pl.spmd(2):
            t = pl.load(x, [e, 0, 0], [1, 32, 256])
            pl.store(pl.add(t, t), [e, 0, 0], out)

    @pl.orchestration
    def tp_then_double(
        x: pl.Tensor[[RANKS, 2, 32, 512], pl.INT8],
        w: pl.Tensor[[RANKS, 2, 256, 512], pl.INT8, pl.NZ],
        out: pl.Out[pl.Tensor[[RANKS, 2, 32, 256], pl.INT32]],
    ):
        for r in range(RANKS):
            y = pl.create_tensor([2, 32, 256], pl.INT32)  # rank r's, from its first use on
            gmm(x[r], w[r], y, device=r)
            doubled(y, out[r], device=r)

    out2 = np.zeros(ref.shape, np.int32)
    tp_then_double(x, ws_other, out2)
    np.testing.assert_array_equal(out2, 2 * ref)
    assert _pids() != pids


def test_a_failing_rank_in_a_process_is_reported_and_rolled_back_as_on_threads(monkeypatch):
    # ranks 2, 3 run in the rank process: rank 2's fault there gives the thread path's message
    x, ref, cluster, ws, before, resident = _case(26)
    host = before.copy()

    def refused(self, *args):  # every rank-batched attempt falls back to rank by rank ...
        raise runtime.DeviceError("refused for the test")

    real = call_mod.execute

    def execute(plan, worker, vals):  # ... and rank 2 faults after its launch wrote
        out = real(plan, worker, vals)
        if worker.device_id == 2:
            raise runtime.DeviceError("fault on worker 2")
        return out

    monkeypatch.setattr(ClusterMemory, "view_span", refused)
    monkeypatch.setattr(call_mod, "execute", execute)
    monkeypatch.setattr(
        rank_processes, "execute", execute
    )  # the rank process's launch, patched before its fork
    messages = []
    for mode in ("processes", "groups"):
        monkeypatch.setattr(rank_batch, "FORCE", mode)
        for out in (resident, host):
            sent = _sent()
            with pytest.raises(runtime.DeviceError) as e:
                tp(x, ws, out)
            assert _sent() == sent + (mode == "processes")
            messages.append(str(e.value))
    assert messages[0].startswith("rank 2: gmm (") and messages[0].endswith(": fault on worker 2")
    assert "orch_kernels.py:" in messages[0]  # the kernel's line, as on a thread
    assert messages == [messages[0]] * 4
    np.testing.assert_array_equal(cluster.copy_stacked_from(resident), before)  # restored
    np.testing.assert_array_equal(host, before)  # never copied back


def test_a_rank_whose_placement_fails_is_reported_and_rolled_back_as_on_threads(monkeypatch):
    # the driver places every launch of the rank process's ranks before it runs: rank 3's refusal
    # there is raised as a thread raises it, the other ranks' outputs restored
    x, ref, cluster, ws, before, resident = _case(32)
    real = call_mod.RankPlan.place

    def place(self, i):
        if self.rank == 3:
            raise runtime.DeviceError("no room on rank 3 for the test")
        return real(self, i)

    monkeypatch.setattr(call_mod.RankPlan, "place", place)
    messages = []
    for mode in ("processes", "groups"):
        monkeypatch.setattr(rank_batch, "FORCE", mode)
        with pytest.raises(runtime.DeviceError) as e:
            tp(x, ws, resident)
        messages.append(str(e.value))
    assert messages[0] == messages[1] and messages[0].startswith("rank 3: ")
    assert messages[0].endswith("no room on rank 3 for the test")
    np.testing.assert_array_equal(cluster.copy_stacked_from(resident), before)


def test_a_process_killed_between_calls_is_replaced():
    x, w, ref = data(27)
    cluster = runtime.Cluster(RANKS)
    ws = cluster.alloc_stacked_tensor(pack(w))
    tp(x, ws, np.zeros(ref.shape, np.int32))
    (pid,) = _pids()
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    out = np.zeros(ref.shape, np.int32)
    tp(x, ws, out)  # a new process runs the call
    np.testing.assert_array_equal(out, ref)
    assert _pids() != [pid]


def test_a_process_that_dies_during_a_call_fails_it_and_changes_no_output(monkeypatch):
    x, ref, cluster, ws, before, resident = _case(28)
    host = before.copy()
    driver = os.getpid()
    real = rank_batch.launch_together
    die = [True]

    def together(plans, workers, vals):  # in the rank process only: it writes, then dies
        ok = real(plans, workers, vals)
        if os.getpid() != driver and die[0]:
            os._exit(9)
        return ok

    monkeypatch.setattr(rank_batch, "launch_together", together)
    for out in (resident, host):
        with pytest.raises(
            runtime.DeviceError,
            match=r"^ranks \[2, 3\]: their process failed during the call \(its process ended\); "
            r"every output is unchanged, and the next call starts a new process$",
        ):
            tp(x, ws, out)
        assert _pids() == []  # reaped
    np.testing.assert_array_equal(cluster.copy_stacked_from(resident), before)
    np.testing.assert_array_equal(host, before)
    die[0] = False  # the next process is forked with this
    tp(x, ws, resident)
    np.testing.assert_array_equal(cluster.copy_stacked_from(resident), ref)


def test_an_interrupted_caller_ends_its_processes_before_the_outputs_are_restored(monkeypatch):
    x, ref, cluster, ws, before, resident = _case(29)
    tp(x, ws, np.zeros(ref.shape, np.int32))  # the process exists
    (pid,) = _pids()

    def interrupted(ranks, failed=None):  # Ctrl-C while the caller runs its own group
        raise KeyboardInterrupt

    monkeypatch.setattr(rank_batch, "_run_group", interrupted)
    with pytest.raises(KeyboardInterrupt):
        tp(x, ws, resident)
    assert _pids() == []
    with pytest.raises(ChildProcessError):  # killed and reaped before the restore
        os.waitpid(pid, os.WNOHANG)
    np.testing.assert_array_equal(cluster.copy_stacked_from(resident), before)


def test_a_call_whose_values_do_not_pickle_runs_in_this_process(monkeypatch):
    class Refuses:
        @staticmethod
        def dumps(obj):
            raise TypeError("not picklable for the test")

    x, w, ref = data(30)
    cluster = runtime.Cluster(RANKS)
    ws = cluster.alloc_stacked_tensor(pack(w))
    monkeypatch.setattr(rank_processes, "pickle", Refuses)
    sent = _sent()
    out = np.zeros(ref.shape, np.int32)
    tp(x, ws, out)
    np.testing.assert_array_equal(out, ref)
    assert _sent() == sent and _pids() == []  # run "alone", nothing sent, no process kept


def test_ranks_that_cannot_be_processes_run_alone(monkeypatch):
    x, w, ref = data(31)
    cluster = runtime.Cluster(RANKS)
    ws = cluster.alloc_stacked_tensor(pack(w))
    monkeypatch.setattr(runtime.threads, "THREADS", 1)  # one core: no process to gain
    sent = _sent()
    out = np.zeros(ref.shape, np.int32)
    tp(x, ws, out)
    np.testing.assert_array_equal(out, ref)
    assert _sent() == sent and _pids() == []


def test_usable_needs_linux_shared_gm_two_threads_two_ranks_and_no_ray(monkeypatch):
    workers = runtime.Cluster(2).workers
    assert rank_processes.usable(workers)
    assert not rank_processes.usable(workers[:1])  # one rank
    assert not rank_processes.usable([workers[0], runtime.Worker(1)])  # a private GM
    monkeypatch.setattr(runtime.threads, "THREADS", 1)
    assert not rank_processes.usable(workers)
    monkeypatch.setattr(runtime.threads, "THREADS", 2)

    class FakeRay:
        @staticmethod
        def is_initialized() -> bool:
            return True

    monkeypatch.setitem(sys.modules, "ray", FakeRay)  # a Ray driver's threads must not be forked
    assert not rank_processes.usable(workers)


def test_a_warning_raised_in_a_process_is_raised_again_in_the_driver(monkeypatch):
    # a hardware defect the simulator reproduces warns: from a rank process as from a thread, so the
    # caller's filters (pytest.warns, "error") see it
    import warnings

    x, ref, cluster, ws, before, resident = _case(33)
    real = rank_batch.launch_together

    def together(plans, workers, vals):
        if workers[0].device_id == 2:  # the group of ranks 2, 3: the rank process's
            warnings.warn(f"defect on rank 2, pid {os.getpid()}", runtime.HardwareDefectWarning, stacklevel=2)
        return real(plans, workers, vals)

    monkeypatch.setattr(rank_batch, "launch_together", together)
    for mode in ("processes", "groups"):
        monkeypatch.setattr(rank_batch, "FORCE", mode)
        with pytest.warns(runtime.HardwareDefectWarning, match="defect on rank 2") as got:
            tp(x, ws, resident)
        pids = {str(w.message).rsplit(" ", 1)[1] for w in got if "defect on rank 2" in str(w.message)}
        assert (pids != {str(os.getpid())}) == (mode == "processes")  # raised there, seen here
        np.testing.assert_array_equal(cluster.copy_stacked_from(resident), ref)
    with warnings.catch_warnings():
        warnings.simplefilter("error", runtime.HardwareDefectWarning)
        monkeypatch.setattr(rank_batch, "FORCE", "processes")
        with pytest.raises(runtime.HardwareDefectWarning, match="defect on rank 2"):
            tp(x, ws, resident)  # the caller's "error" filter turns it into an error, as on threads


@pl.kernel
def exp_through_a_pipe(
    a: pl.Tensor[[4, 16, 64], pl.FP16],
    b: pl.Tensor[[4, 64, 32], pl.FP16],
    y: pl.Out[pl.Tensor[[4, 16, 32], pl.FP32]],
):
    for e in pl.spmd(4):
        acc = pl.matmul(
            pl.load(a, [e, 0, 0], [1, 16, 64], target_memory=pl.Mem.Mat),
            pl.load(b, [e, 0, 0], [1, 64, 32], target_memory=pl.Mem.Mat),
        )
        # cube -> vector on A2/A3: a GM FIFO slot, allocated while the kernel runs
        pl.store(pl.exp(pl.move(acc, target_memory=pl.Mem.Vec)), [e, 0, 0], y)


@pl.orchestration
def pipe_on_every_rank(
    a: pl.Tensor[[RANKS, 4, 16, 64], pl.FP16],
    b: pl.Tensor[[RANKS, 4, 64, 32], pl.FP16],
    y: pl.Out[pl.Tensor[[RANKS, 4, 16, 32], pl.FP32]],
):
    for r in range(RANKS):
        exp_through_a_pipe(a[r], b[r], y[r], device=r)


@pytest.mark.parametrize("batched", [True, False])
def test_a_kernel_that_allocates_gm_while_it_runs_runs_in_a_process(batched, monkeypatch):
    # a mixed kernel's pipe slots (and a kernel's pl.create_tensor) take GM while it runs: a rank
    # process takes them from memory of its own, at addresses the driver never hands out
    rng = np.random.default_rng(34)
    a = (rng.standard_normal((RANKS, 4, 16, 64)) / 8).astype(np.float16)
    b = (rng.standard_normal((RANKS, 4, 64, 32)) / 8).astype(np.float16)
    cluster = runtime.Cluster(RANKS)
    a_d, b_d = cluster.alloc_stacked_tensor(a), cluster.alloc_stacked_tensor(b)
    if not batched:  # every lane-batched attempt falls back: each rank's launch lane by lane,
        # whose pushes take a GM slot each (a batched one only counts them, CrossCorePipe.reserve)
        from nzjit.backend import batched as batched_mod

        monkeypatch.setattr(rank_batch, "launch_together", lambda plans, workers, vals: False)
        monkeypatch.setattr(batched_mod, "try_run_spmd", lambda *args, **kwargs: False)
        pushes: list[int] = []
        real_alloc = GlobalMemory.alloc

        def alloc(self, nbytes, zero=False):  # counted in the driver and in the rank process
            base = real_alloc(self, nbytes, zero)
            pushes.append(base)
            return base

        monkeypatch.setattr(GlobalMemory, "alloc", alloc)
    monkeypatch.setattr(rank_batch, "FORCE", "alone")
    want = pipe_on_every_rank(a_d, b_d)
    monkeypatch.setattr(rank_batch, "FORCE", "processes")
    live = [w.gm.live_bytes for w in cluster.workers]
    for _ in range(3):  # the process's own allocations are freed and stay apart from the driver's
        sent = _sent()
        got = pipe_on_every_rank(a_d, b_d)
        assert _sent() == sent + 1
        assert got.tobytes() == want.tobytes()
    assert [w.gm.live_bytes for w in cluster.workers] == live
    if not batched:  # the driver's own ranks pushed through GM slots at the driver's addresses
        assert pushes and all(base < memory._PROCESS_BASE for base in pushes)
    ref = np.exp(a.astype(np.float32) @ b.astype(np.float32))
    np.testing.assert_allclose(want, ref, rtol=1e-5, atol=1e-5)


def test_a_hung_process_fails_the_call_in_bounded_time_and_changes_no_output(monkeypatch, tmp_path):
    """A rank process that never answers (here: it sleeps; in life, a lock another thread of the
    driver held when it forked) is taken for hung once it is `HANG_FACTOR` times the caller's own
    ranks' time late (at least `HANG_FLOOR` s): the call fails, nothing is written, and the next
    call forks a new process."""
    import time

    x, ref, cluster, ws, before, resident = _case(29)
    flag = tmp_path / "hang"
    real = rank_processes._run_here

    def run_here(pinned, msg):  # in the rank process, forked after this patch
        if flag.exists():
            time.sleep(3600)
        return real(pinned, msg)

    monkeypatch.setattr(rank_processes, "_run_here", run_here)
    monkeypatch.setattr(rank_processes, "HANG_FLOOR", 0.5)
    flag.write_text("")
    start = time.monotonic()
    with pytest.raises(
        runtime.DeviceError,
        match=r"^ranks \[2, 3\]: their process failed during the call \(no answer [0-9.]+ s after the "
        r"caller's own ranks ended, 20x their time: taken for hung .* and stopped\); every output is "
        r"unchanged, and the next call starts a new process$",
    ):
        tp(x, ws, resident)
    assert time.monotonic() - start < 30 and _pids() == []  # bounded, and the process is gone
    np.testing.assert_array_equal(cluster.copy_stacked_from(resident), before)
    flag.unlink()
    tp(x, ws, resident)
    np.testing.assert_array_equal(cluster.copy_stacked_from(resident), ref)
