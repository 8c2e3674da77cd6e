"""Ranks that run the same program run each call as one lane-batched launch over every rank's
lanes (issue 25 item 4, nzjit/backend/rank_batch.py): the same bytes as one rank at a time and as
ranks on threads, each rank's memory its own, and the errors / rollback of ranks on threads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from orch_kernels import RANKS, data, pack, tp, tp_moe_case

import runtime
from nzjit import pl
from nzjit.backend import call as call_mod
from nzjit.backend import rank_batch, rank_processes
from nzjit.backend.options import Options, using
from runtime.cluster_memory import ClusterMemory

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture(autouse=True)
def _ranks_in_groups(monkeypatch):
    """These tests pin the ranks' mode to one group per thread (rank_batch.MODES); the modes and
    their choice have tests of their own, at the end."""
    monkeypatch.setattr(rank_batch, "FORCE", "groups")


@pytest.fixture(scope="module")
def moe():
    """examples/tp_moe.py: 4 ranks x (gate_up, act, down), intermediates on their rank, fp16 NZ weights."""
    return tp_moe_case("tp_moe_for_rank_batch", 3)


def _spy_launches(monkeypatch) -> tuple[list[Any], list[int]]:
    """Record each rank-batched attempt (the device ids of its ranks, or False when it fell back)
    and each rank's own launch (by device id)."""
    batched: list[Any] = []
    per_rank: list[int] = []
    real_together, real_execute = rank_batch.launch_together, call_mod.execute

    def together(plans, workers, vals):
        ok = real_together(plans, workers, vals)
        batched.append(ok and tuple(w.device_id for w in workers))
        return ok

    def execute(plan, worker, vals):
        per_rank.append(worker.device_id)
        return real_execute(plan, worker, vals)

    monkeypatch.setattr(rank_batch, "launch_together", together)
    monkeypatch.setattr(call_mod, "execute", execute)
    return batched, per_rank


def _one_rank(mod, r: int):
    @pl.orchestration
    def rank_r(
        xe: pl.Tensor[[mod.RANKS, mod.E_LOCAL, mod.CAP, mod.H], pl.FP16],
        wg: pl.Tensor[[mod.RANKS, mod.E_LOCAL, mod.F, mod.H], pl.FP16, pl.NZ],
        wu: pl.Tensor[[mod.RANKS, mod.E_LOCAL, mod.F, mod.H], pl.FP16, pl.NZ],
        wd: pl.Tensor[[mod.RANKS, mod.E_LOCAL, mod.H, mod.F], pl.FP16, pl.NZ],
        ye: pl.InOut[pl.Tensor[[mod.RANKS, mod.E_LOCAL, mod.CAP, mod.H], pl.FP32]],
    ):
        g, u = mod.gate_up(xe[r], wg[r], wu[r], device=r)
        h = mod.act(g, u, device=r)
        mod.down(h, wd[r], ye[r], device=r)

    return rank_r


def _groups(threads: int) -> list[tuple[int, ...]]:
    """The rank groups of 4 ranks with `threads` threads: one launch per group and call."""
    return {1: [(0, 1, 2, 3)], 2: [(0, 1), (2, 3)], 4: [(0,), (1,), (2,), (3,)]}[threads]


@pytest.mark.parametrize("threads", [1, 2])
def test_moe_program_is_one_launch_per_call_with_the_bytes_of_one_rank_at_a_time(moe, threads, monkeypatch):
    monkeypatch.setattr(runtime.threads, "THREADS", threads)
    mod, xe, ws = moe
    cluster = runtime.Cluster(mod.RANKS)
    wd = [cluster.alloc_stacked_tensor(runtime.pack_nz(w)) for w in ws]
    alone = np.zeros((mod.RANKS, mod.E_LOCAL, mod.CAP, mod.H), np.float32)
    for r in range(mod.RANKS):  # each rank by itself: a one-rank program, never batched
        _one_rank(mod, r)(xe, *wd, alone)
    with using(Options(rank_batch=False)):
        as_threads = mod.moe_experts(xe, *wd)
    batched, per_rank = _spy_launches(monkeypatch)
    together = mod.moe_experts(xe, *wd)
    # three calls (gate_up, act, down), each one launch per group of ranks (all 4 ranks' 8 lanes
    # with one thread; 2 ranks' 4 lanes on each of two threads); no rank alone
    assert sorted(batched) == sorted(_groups(threads) * 3) and per_rank == []
    assert together.tobytes() == alone.tobytes() == as_threads.tobytes()
    ref = mod.reference_experts(xe, *ws)
    np.testing.assert_allclose(together, ref, rtol=2e-2, atol=2e-2)  # fp16 activation in between


@pytest.mark.parametrize("threads", [1, 2, 4])
def test_int8_program_exact_and_outputs_on_their_own_rank(threads, monkeypatch):
    monkeypatch.setattr(runtime.threads, "THREADS", threads)
    x, w, ref = data(5)
    cluster = runtime.Cluster(RANKS)
    ws = cluster.alloc_stacked_tensor(pack(w))
    out = cluster.alloc_stacked_tensor(np.full(ref.shape, 7, np.int32))  # resident InOut-like Out shards
    batched, per_rank = _spy_launches(monkeypatch)
    tp(x, ws, out)
    if threads == 4:  # one rank per thread: nothing to batch, each rank its own launch
        assert batched == [] and sorted(per_rank) == [0, 1, 2, 3]
    else:
        assert sorted(batched) == _groups(threads) and per_rank == []
    for r, worker in enumerate(cluster.workers):  # rank r's shard on rank r's worker holds rank r's numbers
        assert out[r].worker is worker
        np.testing.assert_array_equal(worker.copy_from(out[r]), ref[r])


def test_a_call_that_cannot_batch_runs_rank_by_rank_exactly(moe, monkeypatch):
    monkeypatch.setattr(runtime.threads, "THREADS", 2)
    # every rank-batched attempt falls back (an access refused): each call runs rank by rank, with
    # the same bytes, and the kernels' own lane-batching is not counted as failing
    mod, xe, ws = moe
    cluster = runtime.Cluster(mod.RANKS)
    wd = [cluster.alloc_stacked_tensor(runtime.pack_nz(w)) for w in ws]
    want = mod.moe_experts(xe, *wd)

    def refused(self, *args):
        raise runtime.DeviceError("refused for the test")

    monkeypatch.setattr(ClusterMemory, "view_span", refused)
    batched, per_rank = _spy_launches(monkeypatch)
    for _ in range(4):  # more often than batched.MAX_FAILS
        got = mod.moe_experts(xe, *wd)
        assert got.tobytes() == want.tobytes()
    groups = _groups(2)
    assert batched == [False] * (4 * 3 * 2)  # 4 programs of 3 calls, on 2 groups of ranks
    assert sorted(per_rank) == sorted([0, 1, 2, 3] * 12)
    monkeypatch.undo()
    monkeypatch.setattr(runtime.threads, "THREADS", 2)
    batched, per_rank = _spy_launches(monkeypatch)
    mod.moe_experts(xe, *wd)
    assert sorted(batched) == sorted(groups * 3) and per_rank == []  # the body plans are still batched


@pytest.mark.parametrize("bad", [(2,), (1, 3)])
def test_an_error_in_one_rank_leaves_every_output_untouched(bad, monkeypatch):
    x, w, ref = data(6)
    cluster = runtime.Cluster(RANKS)
    ws = cluster.alloc_stacked_tensor(pack(w))
    before = np.arange(ref.size, dtype=np.int32).reshape(ref.shape)
    resident = cluster.alloc_stacked_tensor(before)
    host = before.copy()

    def refused(self, *args):  # the rank-batched attempt falls back ...
        raise runtime.DeviceError("refused for the test")

    real = call_mod.execute

    def execute(plan, worker, vals):  # ... and the ranks `bad` fault in their own launch
        out = real(plan, worker, vals)
        if worker.device_id in bad:
            raise runtime.DeviceError(f"fault on worker {worker.device_id}")
        return out

    monkeypatch.setattr(ClusterMemory, "view_span", refused)
    monkeypatch.setattr(call_mod, "execute", execute)
    messages = []
    for options in (Options(), Options(rank_batch=False)):  # rank-batched, and ranks as threads
        for out in (resident, host):
            with using(options), pytest.raises(runtime.DeviceError) as e:
                tp(x, ws, out)
            messages.append(str(e.value))
    assert messages[0].startswith(f"rank {bad[0]}: gmm (") and messages[0].endswith(
        f": fault on worker {bad[0]}"
    )
    assert messages == [messages[0]] * 4  # the same report on either path, the lowest failing rank's
    np.testing.assert_array_equal(cluster.copy_stacked_from(resident), before)  # restored from snapshots
    np.testing.assert_array_equal(host, before)  # never copied back


def test_each_group_snapshots_its_own_ranks_on_its_own_thread_and_a_failure_restores_them(monkeypatch):
    # the caller's thread plans and gathers the whole program: each group's thread takes its own
    # ranks' snapshots before their launches (docs/performance.md, issue 25 item 4)
    import threading

    monkeypatch.setattr(runtime.threads, "THREADS", 2)
    x, w, ref = data(8)
    cluster = runtime.Cluster(RANKS)
    ws = cluster.alloc_stacked_tensor(pack(w))
    before = np.arange(ref.size, dtype=np.int32).reshape(ref.shape)
    resident = cluster.alloc_stacked_tensor(before)
    begun: dict[int, int] = {}
    launched: dict[int, int] = {}
    real_begin, real_together = call_mod.RankPlan.begin, rank_batch.launch_together

    def begin(self):
        begun[self.rank] = threading.get_ident()
        real_begin(self)

    def together(plans, workers, vals):
        for wk in workers:
            assert wk.device_id in begun  # its snapshot came first
            launched[wk.device_id] = threading.get_ident()
        if workers[0].device_id == 2:  # the second group faults after the first group wrote
            raise runtime.DeviceError("fault for the test")
        return real_together(plans, workers, vals)

    monkeypatch.setattr(call_mod.RankPlan, "begin", begin)
    monkeypatch.setattr(rank_batch, "launch_together", together)
    with pytest.raises(runtime.DeviceError, match="fault for the test"):
        tp(x, ws, resident)
    assert begun == launched and sorted(begun) == list(range(RANKS))
    assert begun[0] == begun[1] != begun[2] == begun[3]  # two groups, two threads
    np.testing.assert_array_equal(cluster.copy_stacked_from(resident), before)  # restored from snapshots


def test_ranks_with_different_programs_run_as_threads(monkeypatch):
    x, w, ref = data(7)
    cluster = runtime.Cluster(RANKS)
    ws = cluster.alloc_stacked_tensor(pack(w))
    from orch_kernels import gmm

    @pl.orchestration
    def uneven(
        x: pl.Tensor[[RANKS, *x.shape[1:]], pl.INT8],
        w: pl.Tensor[[RANKS, *w.shape[1:]], pl.INT8, pl.NZ],
        out: pl.Out[pl.Tensor[[RANKS, *ref.shape[1:]], pl.INT32]],
    ):
        for r in range(RANKS):
            gmm(x[r], w[r], out[r], device=r)
        gmm(x[0], w[0], out[0], device=0)  # rank 0 runs one call more

    batched, per_rank = _spy_launches(monkeypatch)
    np.testing.assert_array_equal(uneven(x, ws), ref)
    assert batched == [] and sorted(per_rank) == [0, 0, 1, 2, 3]


def test_same_program_needs_every_rank_batchable():
    class Stub:  # what same_program reads of a RankPlan
        def __init__(self, launches, target="A2A3"):
            self.launches, self.worker = launches, type("W", (), {"target": target})()

    assert not rank_batch.same_program([])
    assert not rank_batch.same_program([Stub([])])  # one rank: nothing to batch
    assert not rank_batch.same_program([Stub([]), Stub([], "A5")])  # two targets
    assert not rank_batch.same_program([Stub([]), Stub([None])])  # different call counts


@pytest.mark.parametrize("lane_group", [1, 3])
def test_lane_groups_that_cut_across_ranks_give_the_same_bytes(lane_group, monkeypatch):
    # lane groups of 1 or 3 lanes (of the 2 ranks x 2 lanes of a group): each group sees its own
    # lanes' addresses, whichever ranks they belong to
    monkeypatch.setattr(runtime.threads, "THREADS", 2)
    x, w, ref = data(8)
    cluster = runtime.Cluster(RANKS)
    ws = cluster.alloc_stacked_tensor(pack(w))
    batched, per_rank = _spy_launches(monkeypatch)
    with using(Options(lane_group=lane_group)):
        out = tp(x, ws)
    np.testing.assert_array_equal(out, ref)
    assert sorted(batched) == _groups(2) and per_rank == []


@pytest.mark.parametrize("threads", [1, 2])
def test_snapshots_copy_only_the_outputs_a_failure_restores_not_the_programs_intermediates(
    moe, threads, monkeypatch
):
    # issue 25 item 4: an intermediate (g, u, h of tp_moe) is allocated for the program and freed
    # when it ends, by failure too, so its bytes are not snapshotted; the resident Out still is,
    # and a fault in the last call restores it on every rank
    monkeypatch.setattr(runtime.threads, "THREADS", threads)
    mod, xe, ws = moe
    cluster = runtime.Cluster(mod.RANKS)
    w_d = [cluster.alloc_stacked_tensor(runtime.pack_nz(w)) for w in ws]
    before = np.arange(mod.RANKS * mod.E_LOCAL * mod.CAP * mod.H, dtype=np.float32)
    resident = cluster.alloc_stacked_tensor(before.reshape(mod.RANKS, mod.E_LOCAL, mod.CAP, mod.H))
    snapped: dict[int, int] = {}
    real_begin, real_together = call_mod.RankPlan.begin, rank_batch.launch_together

    def begin(self):
        real_begin(self)
        snapped[self.rank] = sum(saved.nbytes for _, saved in self.snapshots)

    def together(plans, workers, vals):
        ok = real_together(plans, workers, vals)
        if plans[0].kernel is mod.down:  # after down wrote its shards of the resident Out
            raise runtime.DeviceError("fault in down for the test")
        return ok

    monkeypatch.setattr(call_mod.RankPlan, "begin", begin)
    monkeypatch.setattr(rank_batch, "launch_together", together)
    with pytest.raises(runtime.DeviceError, match="fault in down"):
        mod.moe_experts(xe, *w_d, resident)
    shard = mod.E_LOCAL * mod.CAP * mod.H * 4
    assert snapped == {r: shard for r in range(mod.RANKS)}  # ye's shard only: no g, u, h
    np.testing.assert_array_equal(cluster.copy_stacked_from(resident).ravel(), before)


# ---------------------------------------------------------------------- the modes and their choice
@pytest.mark.parametrize("threads", [1, 2])
def test_every_mode_gives_the_bytes_of_one_rank_at_a_time(moe, threads, monkeypatch):
    # rank_batch.MODES: groups side by side, one group with helpers, one group alone - which
    # thread computes what changes, no byte written does
    mod, xe, ws = moe
    monkeypatch.setattr(runtime.threads, "THREADS", threads)
    cluster = runtime.Cluster(mod.RANKS)
    wd = [cluster.alloc_stacked_tensor(runtime.pack_nz(w)) for w in ws]
    alone = np.zeros((mod.RANKS, mod.E_LOCAL, mod.CAP, mod.H), np.float32)
    for r in range(mod.RANKS):  # each rank by itself: a one-rank program, never batched
        _one_rank(mod, r)(xe, *wd, alone)
    for mode in rank_batch.MODES:
        monkeypatch.setattr(rank_batch, "FORCE", mode)
        assert mod.moe_experts(xe, *wd).tobytes() == alone.tobytes(), mode


def test_a_program_tries_each_mode_then_keeps_the_fastest(moe, monkeypatch):
    mod, xe, ws = moe
    monkeypatch.setattr(runtime.threads, "THREADS", 2)
    monkeypatch.setattr(rank_batch, "FORCE", None)
    monkeypatch.setattr(rank_batch, "_times", {})
    monkeypatch.setattr(rank_batch, "_chosen", {})
    cost = {"groups": 3.0, "one": 2.0, "alone": 1.0, "processes": 4.0}  # seconds a trial "takes"
    ran: list[str] = []
    real_timed = rank_batch.timed

    def fake_timed(key, mode, seconds, processes):
        ran.append(mode)
        real_timed(key, mode, cost[mode], processes)

    monkeypatch.setattr(rank_batch, "timed", fake_timed)
    cluster = runtime.Cluster(mod.RANKS)
    wd = [cluster.alloc_stacked_tensor(runtime.pack_nz(w)) for w in ws]
    modes = rank_batch.modes(rank_processes.usable(cluster.workers))
    first = mod.moe_experts(xe, *wd)
    trials = len(modes) * rank_batch.TRIALS
    forks, calls = rank_processes.FORKS[0], 1
    while len(ran) < trials + 3 and calls < trials + 3 + 2 * rank_processes.WARM_CALLS:
        assert mod.moe_experts(xe, *wd).tobytes() == first.tobytes()
        calls += 1
    assert sorted(ran[:trials]) == sorted(modes * rank_batch.TRIALS)  # each mode, in turn
    if "processes" in modes:  # the first calls of the new processes ran, untimed, then 3 trials
        assert rank_processes.FORKS[0] == forks + 1
        assert calls == trials + 3 + rank_processes.WARM_CALLS
    assert ran[trials:] == ["alone"] * 3  # then the fastest, every call
    assert list(rank_batch._chosen.values()) == ["alone"] and rank_batch._times == {}


@pytest.mark.parametrize("processes", [True, False])
def test_the_modes_are_timed_again_after_retry_after_calls(processes, monkeypatch):
    # the load changes over a long run: after RETRY_AFTER calls in the chosen mode the modes are
    # tried again, and the now fastest is kept; ranks that cannot run as processes never try it
    monkeypatch.setattr(rank_batch, "FORCE", None)
    monkeypatch.setattr(rank_batch, "_times", {})
    monkeypatch.setattr(rank_batch, "_chosen", {})
    monkeypatch.setattr(rank_batch, "_since", {})
    monkeypatch.setattr(rank_batch, "RETRY_AFTER", 3)
    cost = {"groups": 3.0, "one": 2.0, "alone": 1.0, "processes": 1.5}
    modes = rank_batch.MODES if processes else ("groups", "one", "alone")
    ran = []

    def call() -> None:
        mode = rank_batch.mode_for("p", processes)
        ran.append(mode)
        rank_batch.timed("p", mode, cost[mode], processes)

    trials = len(modes) * rank_batch.TRIALS
    for _ in range(trials + 3):
        call()
    assert sorted(ran[:trials]) == sorted(modes * rank_batch.TRIALS)
    assert ran[trials:] == ["alone"] * 3 and "p" not in rank_batch._chosen  # the retry is due
    cost = (
        {"groups": 3.0, "one": 2.0, "alone": 1.0, "processes": 0.5}
        if processes
        else {"groups": 0.5, "one": 2.0, "alone": 1.0}
    )
    for _ in range(trials + 1):
        call()
    assert sorted(ran[trials + 3 : 2 * trials + 3]) == sorted(modes * rank_batch.TRIALS)
    best = "processes" if processes else "groups"
    assert ran[-1] == best and rank_batch._chosen == {"p": best}


def test_forced_mode_is_not_timed(monkeypatch):
    monkeypatch.setattr(rank_batch, "FORCE", "one")
    monkeypatch.setattr(rank_batch, "_times", {})
    monkeypatch.setattr(rank_batch, "_chosen", {})
    assert rank_batch.mode_for("k") == "one"
    monkeypatch.setattr(rank_batch, "FORCE", "processes")  # cannot run as processes: in one, alone
    assert rank_batch.mode_for("k", False) == "alone" and rank_batch.mode_for("k", True) == "processes"
    rank_batch.timed("k", "one", 1.0)
    assert rank_batch._times == {} and rank_batch._chosen == {}
