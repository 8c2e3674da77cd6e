"""pld end to end on the local Cluster (issue 28): ranks run concurrently and talk through
windows; results exact against numpy; hangs and races stop every rank with one message."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from pld_kernels import (
    SIZE,
    add_one,
    ints,
    lonely_wait,
    mesh_allreduce,
    racy,
    read_peer0,
    run_counter,
    run_mesh_allreduce,
    set_one,
    stage,
)

import runtime
from nzjit import CompileError, pl, pld
from runtime.comm import CommHangError, CommRaceError, UnwrittenWindowReadWarning


@pytest.mark.parametrize("n", [2, 4])
def test_mesh_allreduce_with_notify_wait_remote_load_is_exact(n: int) -> None:
    x = ints((n, 1, SIZE), seed=n)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnwrittenWindowReadWarning)  # every byte read was staged
        y = run_mesh_allreduce(x, cluster=runtime.Cluster(n))
    np.testing.assert_array_equal(y, np.broadcast_to(x.sum(axis=0), x.shape))


def test_windows_are_fresh_and_zeroed_on_every_run() -> None:
    """Signal cells hold 1 after a run; the next run's windows start at zero again (PyPTO: zeroed at
    allocation), so the program does not pass its waits early."""
    cl = runtime.Cluster(2)
    for seed in range(3):
        x = ints((2, 1, SIZE), seed=seed)
        np.testing.assert_array_equal(run_mesh_allreduce(x, cluster=cl), np.broadcast_to(x.sum(0), x.shape))


def test_windows_are_freed_after_the_run() -> None:
    cl = runtime.Cluster(2)
    before = [w.gm.live_bytes for w in cl.workers]
    run_mesh_allreduce(ints((2, 1, SIZE)), cluster=cl)
    assert [w.gm.live_bytes for w in cl.workers] == before


def test_atomic_add_counter_across_three_ranks() -> None:
    x = np.arange(8, dtype=np.int32).reshape(1, 8)
    out = run_counter(add_one)(x, cluster=runtime.Cluster(3))
    np.testing.assert_array_equal(out, x)


def test_set_where_atomic_add_was_needed_is_a_diagnosed_hang(line_of) -> None:
    """PyPTO 04-debugging: 'Signal cell never reaches expected value: Set instead of AtomicAdd'."""
    import pld_kernels as K

    x = np.zeros((1, 8), np.int32)
    with pytest.raises(CommHangError) as ei:
        run_counter(set_one)(x, cluster=runtime.Cluster(3))
    msg = str(ei.value)
    site = f"{K.__file__}:{line_of(K.wait_for_all, 'COUNT-SITE')}"
    assert msg.startswith("rank 0: wait_for_all (")
    assert (
        "communication hang: every rank is blocked and none can proceed (on the device the program would hang here)"
        in msg
    )
    notify_site = f"{K.__file__}:{line_of(K.set_one, 'pld.system.notify')}"
    assert (
        f"  rank 0: waits at {site} for signal[0, 0] of window 'sig' to be >= 2 (WaitCmp.Ge); it holds 1; "
        f"notified by rank 1 (Set 1 at {notify_site}), rank 2 (Set 1 at {notify_site}) - several ranks Set "
        "this cell and the last Set wins: count them with NotifyOp.AtomicAdd\n"
    ) in msg
    assert (
        "  rank 1: finished (its kernels returned)" in msg
        and "  rank 2: finished (its kernels returned)" in msg
    )
    assert "help: every wait needs a notify on a peer" in msg
    assert isinstance(ei.value, runtime.DeviceError)


def test_every_rank_waiting_is_a_hang_naming_each_rank(line_of) -> None:
    import pld_kernels as K

    @pl.orchestration
    def all_wait(dummy: pl.Tensor[[1, 8], pl.INT32]):
        n = pld.world_size()
        sig = pld.alloc_window_buffer([n, 1], dtype=pl.INT32)
        for r in range(n):
            lonely_wait(pld.window(sig, [n, 1], dtype=pl.INT32), device=r)

    with pytest.raises(CommHangError) as ei:
        all_wait(np.zeros((1, 8), np.int32), cluster=runtime.Cluster(2))
    site = f"{K.__file__}:{line_of(K.lonely_wait, 'HANG-SITE')}"
    msg = str(ei.value)
    for r in (0, 1):
        assert (
            f"  rank {r}: waits at {site} for signal[{r}, 0] of window 'sig' to be == 1 (WaitCmp.Eq); "
            "it holds 0; no rank notified it\n"
        ) in msg


def test_a_hang_is_reported_within_a_bounded_time() -> None:
    """Detection is immediate when every rank is blocked: far below the no-progress timeout."""
    import time

    from nzjit.backend.comm_run import DEFAULT_TIMEOUT

    t0 = time.monotonic()
    with pytest.raises(CommHangError):
        run_counter(set_one)(np.zeros((1, 8), np.int32), cluster=runtime.Cluster(3))
    assert time.monotonic() - t0 < min(10.0, DEFAULT_TIMEOUT)


def test_a_hang_writes_no_output() -> None:
    x = np.arange(8, dtype=np.int32).reshape(1, 8)
    out = np.full((1, 8), -1, np.int32)
    with pytest.raises(CommHangError):
        run_counter(set_one)(x, out, cluster=runtime.Cluster(3))
    np.testing.assert_array_equal(out, -1)


def test_remote_load_before_the_peer_staged_is_a_race(line_of) -> None:
    """Whichever rank thread runs first, the report names both accesses in the same words."""
    import pld_kernels as K

    stage_site = f"{K.__file__}:{line_of(K.stage, 'STAGE-SITE')}"
    read_site = f"{K.__file__}:{line_of(K.read_peer0, 'RACE-SITE')}"
    for _ in range(3):
        with warnings.catch_warnings(), pytest.raises(CommRaceError) as ei:
            warnings.simplefilter("ignore", UnwrittenWindowReadWarning)  # when the read ran first
            racy(ints((1, SIZE)), cluster=runtime.Cluster(2))
        body = str(ei.value).split(": ", 2)[2]  # after "rank r: kernel (line): "
        assert body == (
            f"communication race on window 'buf' of rank 0, byte 0: rank 0's store into its own window at "
            f"{stage_site} and rank 1's remote_load at {read_site} are not ordered; no notify/wait chain (or "
            "collective) orders the two\nhelp: make rank 0 notify after its write and rank 1 wait for that notify "
            "before its read (or put a pld.tensor.barrier between them)"
        )


def test_a_window_parameter_refuses_a_host_array() -> None:
    with pytest.raises(
        runtime.DispatchError, match="parameter 'data' is a pld.DistributedTensor: pass a window"
    ):
        stage(ints((1, SIZE)), np.zeros((1, SIZE), np.float32))
    assert read_peer0 is not None and mesh_allreduce is not None


def test_world_size_needs_the_cluster() -> None:
    with pytest.raises(CompileError, match=r"pld.world_size\(\) needs the cluster"):
        run_mesh_allreduce(ints((2, 1, SIZE)))


@pytest.mark.parametrize("n", [2, 3, 4])
def test_pypto_barrier_and_remote_accumulate_with_one_armed_ifs(n: int) -> None:
    """PyPTO 02-primitives 'Writing Your Own Collective', `if peer != my_rank:` inside pl.range (issue 28)."""
    from pld_kernels import barrier_allreduce, run_barrier_allreduce

    ir = str(barrier_allreduce.lower().ir("trace"))
    assert ir.count(" = cond ") == 1 and ir.count("cond ") >= 3  # two side-effect arms, one carried arm
    x = ints((n, 1, SIZE), seed=10 + n)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnwrittenWindowReadWarning)
        y = run_barrier_allreduce(x, cluster=runtime.Cluster(n))
    np.testing.assert_array_equal(y, np.broadcast_to(x.sum(axis=0), x.shape))


def test_a_rank_failing_on_its_own_is_named_as_the_cause() -> None:
    """Rank 1 faults (an out-of-bounds window from a runtime offset); rank 0, waiting for it, only reports
    that it stopped: the error raised is rank 1's."""

    @pl.kernel
    def faulty(
        x: pl.Tensor[[4, SIZE], pl.FP32],
        off: pl.Scalar[pl.INT32],
        signal: pl.InOut[pld.DistributedTensor[[2, 1], pl.INT32]],
    ):
        me = pld.rank(pld.get_comm_ctx(signal))
        t = pl.load(x, [off, 0], [1, SIZE])  # off = 9 on rank 1: outside x
        pld.system.notify(signal, 1 - me, [0, 0], 1, op=pld.NotifyOp.Set)
        pld.system.wait(signal, [0, 0], 1, cmp=pld.WaitCmp.Ge)
        assert t is not None

    @pl.orchestration
    def prog(x: pl.Tensor[[2, 4, SIZE], pl.FP32]):
        sig = pld.alloc_window_buffer([2, 1], dtype=pl.INT32)
        for r in range(2):
            faulty(x[r], 9 * r, pld.window(sig, [2, 1], dtype=pl.INT32), device=r)

    with pytest.raises(runtime.DispatchError) as ei:
        prog(ints((2, 4, SIZE)), cluster=runtime.Cluster(2))
    assert str(ei.value).startswith("rank 1: faulty (")
    assert "is out of bounds" in str(ei.value)


def test_pl_range_over_world_size_in_an_orchestration_body() -> None:
    """PyPTO's host idiom `for r in pl.range(pld.world_size()):` runs as a Python loop in an orchestration."""

    @pl.orchestration
    def prog(x: pl.Tensor[[2, 1, SIZE], pl.FP32], y: pl.Out[pl.Tensor[[2, 1, SIZE], pl.FP32]]):
        data_buf = pld.alloc_window_buffer([1, SIZE], dtype=pl.FP32)
        signal_buf = pld.alloc_window_buffer([2, 1], dtype=pl.INT32)
        for r in pl.range(pld.world_size()):
            mesh_allreduce(
                x[r],
                y[r],
                pld.window(data_buf, [1, SIZE], dtype=pl.FP32),
                pld.window(signal_buf, [2, 1], dtype=pl.INT32),
                device=r,
            )

    x = ints((2, 1, SIZE), seed=21)
    np.testing.assert_array_equal(prog(x, cluster=runtime.Cluster(2)), np.broadcast_to(x.sum(0), x.shape))
    with pytest.raises(CompileError, match="only available while tracing"):
        next(iter(pl.range(2)))  # outside a kernel and an orchestration body it stays a kernel-only loop


def test_pl_range_in_a_kernel_traced_during_an_orchestration_body_stays_staged() -> None:
    """Only the body's own `pl.range` is a Python loop: a kernel traced while the body records (here
    by `k.lower()`) still stages its loops (tracing.in_trace must say that a trace is running)."""

    @pl.kernel
    def k(x: pl.Tensor[[4, 32], pl.INT32], y: pl.Out[pl.Tensor[[4, 32], pl.INT32]]):
        for i in pl.range(4):
            pl.store(pl.load(x, [i, 0], [1, 32]), [i, 0], y)

    seen = []

    @pl.orchestration
    def prog(x: pl.Tensor[[4, 32], pl.INT32], y: pl.Out[pl.Tensor[[4, 32], pl.INT32]]):
        seen.append(k.lower(np.zeros((4, 32), np.int32)).ir())
        k(x, y)

    x = np.arange(4 * 32, dtype=np.int32).reshape(4, 32)
    np.testing.assert_array_equal(prog(x), x)
    assert [e.primitive.name for e in seen[0].eqns] == ["for"]  # one staged loop, not four unrolled trips
