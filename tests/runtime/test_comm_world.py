"""runtime.comm: the simulated communication world on its own (issue 28): windows, signals,
RMA, collectives, hang diagnosis and race detection, ranks as real threads."""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable

import numpy as np
import pytest

import runtime
from runtime import comm_collectives as coll
from runtime.comm import (
    CommError,
    CommHangError,
    CommRaceError,
    CommWorld,
    Endpoint,
    UnwrittenWindowReadWarning,
)

TIMEOUT = 20.0  # a test thread that outlives this is a hang of the simulator itself


def run_world(world: CommWorld, fns: dict[int, Callable[[Endpoint], object]]) -> dict[int, object]:
    """Run one function per rank in its own thread inside `world`; every thread must end."""
    results: dict[int, object] = {}

    def body(r: int) -> None:
        try:
            with world.running(r) as ep:
                results[r] = fns[r](ep)
        except BaseException as e:  # collected for the assertions
            results[r] = e

    threads = [threading.Thread(target=body, args=(r,), daemon=True) for r in fns]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT)
        assert not t.is_alive(), "a rank thread hung"
    return results


def make(n: int = 2, **kw: object) -> CommWorld:
    return CommWorld(dict(enumerate(runtime.Cluster(n).workers)), **kw)


def test_windows_start_zeroed_and_belong_to_their_rank() -> None:
    w = make(2)
    win = w.alloc_window(64, "data")
    a, b = (w.workers[r].copy_from(win.tensors[r]) for r in (0, 1))
    assert not a.any() and not b.any()
    assert win.tensors[0].worker is w.workers[0] and win.tensors[1].worker is w.workers[1]
    w.close()
    assert all(t.freed for t in win.tensors.values()) and not w.windows


def test_notify_wait_orders_a_remote_load_exactly() -> None:
    w = make(2)
    data, sig = w.alloc_window(4 * 8, "data", grain=4), w.alloc_window(4 * 2, "signal")
    x = np.arange(1, 9, dtype=np.float32)  # no all-zero element: a zero stored over zero is invisible

    def r0(ep: Endpoint) -> None:
        t = data.tensor(0, (1, 8), np.float32)
        w.workers[0].write_tensor(t, x.reshape(1, 8))  # the owner's local store
        ep.notify(sig, 1, (2, 1), (0, 0), 1, "set", "k.py:3")

    def r1(ep: Endpoint) -> np.ndarray:
        ep.wait(sig, (2, 1), (0, 0), 1, "ge", "k.py:9")
        return ep.remote_load(data, 0, (1, 8), np.float32, (0, 0), (1, 8), "k.py:10")

    res = run_world(w, {0: r0, 1: r1})
    np.testing.assert_array_equal(res[1], x.reshape(1, 8))


def test_atomic_add_counts_every_notifier() -> None:
    w = make(3)
    sig = w.alloc_window(4, "signal")

    def notifier(ep: Endpoint) -> None:
        ep.notify(sig, 0, (1,), (0,), 1, "atomic_add", f"k.py:{ep.rank}")

    def waiter(ep: Endpoint) -> int:
        ep.wait(sig, (1,), (0,), 2, "eq", "k.py:20")
        return int(w.workers[0].copy_from(sig.tensor(0, (1,), np.int32))[0])

    res = run_world(w, {0: waiter, 1: notifier, 2: notifier})
    assert res[0] == 2


def test_hang_names_every_rank_cell_expected_held_and_line() -> None:
    """A Set where AtomicAdd was needed: the cell reaches 1, never 2 (PyPTO 04-debugging)."""
    w = make(3)
    sig = w.alloc_window(4, "signal")

    def notifier(ep: Endpoint) -> None:
        ep.notify(sig, 0, (1,), (0,), 1, "set", f"k.py:{10 + ep.rank}")

    def waiter(ep: Endpoint) -> None:
        ep.wait(sig, (1,), (0,), 2, "ge", "k.py:20")

    res = run_world(w, {0: waiter, 1: notifier, 2: notifier})
    e = res[0]
    assert isinstance(e, CommHangError) and isinstance(e, runtime.DeviceError)
    msg = str(e)
    assert "communication hang: every rank is blocked and none can proceed" in msg
    assert (
        "rank 0: waits at k.py:20 for signal[0] of window 'signal' to be >= 2 (WaitCmp.Ge); it holds 1" in msg
    )
    assert "rank 1: finished (its kernels returned)" in msg and "rank 2: finished" in msg


def test_mutual_wait_hang_stops_both_ranks() -> None:
    w = make(2)
    sig = w.alloc_window(8, "signal")

    def body(ep: Endpoint) -> None:
        ep.wait(sig, (2,), (1 - ep.rank,), 1, "eq", f"k.py:{30 + ep.rank}")

    res = run_world(w, {0: body, 1: body})
    for r in (0, 1):
        assert isinstance(res[r], CommHangError)
    msg = str(res[0])
    assert (
        "rank 0: waits at k.py:30 for signal[1] of window 'signal' to be == 1 (WaitCmp.Eq); it holds 0" in msg
    )
    assert "rank 1: waits at k.py:31 for signal[0]" in msg


def test_collective_some_rank_never_enters_is_a_hang() -> None:
    w = make(2)
    data = w.alloc_window(16, "data")

    def r0(ep: Endpoint) -> None:
        coll.allreduce(ep, data, (4,), np.float32, "sum", "k.py:40")

    res = run_world(w, {0: r0, 1: lambda ep: None})
    assert isinstance(res[0], CommHangError)
    assert (
        "rank 0: entered allreduce (collective #1) at k.py:40; waiting for rank(s) 1, which never entered it"
        in str(res[0])
    )


def test_remote_load_without_a_chain_is_a_race_naming_both_ranks() -> None:
    w = make(2)
    data, sig = w.alloc_window(16, "data", grain=4), w.alloc_window(4, "signal")

    def r0(ep: Endpoint) -> None:
        w.workers[0].write_tensor(data.tensor(0, (4,), np.float32), np.ones(4, np.float32))
        ep.notify(sig, 1, (1,), (0,), 1, "set", "k.py:5")  # publishes, then rank 1 reads: ordered

    def r1(ep: Endpoint) -> object:
        ep.wait(sig, (1,), (0,), 1, "ge", "k.py:8")
        return ep.remote_load(data, 0, (4,), np.float32, (0,), (4,), "k.py:9")

    ok = run_world(w, {0: r0, 1: r1})
    np.testing.assert_array_equal(ok[1], np.ones(4, np.float32))

    # the store published only *before* it happens: the notify orders nothing
    w2 = make(2)
    data, sig = w2.alloc_window(16, "data", grain=4), w2.alloc_window(4, "signal")
    done = threading.Event()

    def s0(ep: Endpoint) -> None:
        ep.notify(sig, 1, (1,), (0,), 1, "set", "k.py:5")  # notify BEFORE the store
        w2.workers[0].write_tensor(data.tensor(0, (4,), np.float32), np.ones(4, np.float32))
        ep.local_store(data, (4,), 4, (0,), (4,), "k.py:6")  # what an instrumented pl.store reports
        done.set()

    def s1(ep: Endpoint) -> object:
        ep.wait(sig, (1,), (0,), 1, "ge", "k.py:8")
        done.wait(TIMEOUT)
        return ep.remote_load(data, 0, (4,), np.float32, (0,), (4,), "k.py:9")

    res = run_world(w2, {0: s0, 1: s1})
    e = res[1]
    assert isinstance(e, CommRaceError), e
    assert str(e) == (
        "communication race on window 'data' of rank 0, byte 0: rank 0's store into its own window at k.py:6 and "
        "rank 1's remote_load at k.py:9 are not ordered; no notify/wait chain (or collective) orders the two\n"
        "help: make rank 0 notify after its write and rank 1 wait for that notify before its read (or put a "
        "pld.tensor.barrier between them)"
    )


def test_an_unrecorded_store_is_dated_by_comparison() -> None:
    """A store the world was not told about (here: a host write) is found by comparing the bytes."""
    w = make(2)
    data = w.alloc_window(16, "data", grain=4)
    done = threading.Event()

    read = threading.Event()

    def r0(ep: Endpoint) -> None:
        w.workers[0].write_tensor(data.tensor(0, (4,), np.float32), np.ones(4, np.float32))
        done.set()
        read.wait(TIMEOUT)  # stays "running" (no scan of its own) until the peer has looked

    def r1(ep: Endpoint) -> object:
        done.wait(TIMEOUT)
        try:
            return ep.remote_load(data, 0, (4,), np.float32, (0,), (4,), "k.py:9")
        finally:
            read.set()

    res = run_world(w, {0: r0, 1: r1})
    assert isinstance(res[1], CommRaceError)
    assert (
        "rank 0's store into its own window (seen at k.py:9) and rank 1's remote_load at k.py:9 are not "
        "ordered" in str(res[1])
    )


def test_read_then_unordered_write_is_a_race_too() -> None:
    """The reader came first in real time: the owner's later store is the race, same message."""
    w = make(2)
    data = w.alloc_window(16, "data")
    read = threading.Event()

    def r0(ep: Endpoint) -> None:
        read.wait(TIMEOUT)
        w.workers[0].write_tensor(data.tensor(0, (4,), np.float32), np.ones(4, np.float32))
        ep.local_store(data, (4,), 4, (0,), (4,), "k.py:6")

    def r1(ep: Endpoint) -> object:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UnwrittenWindowReadWarning)
            out = ep.remote_load(data, 0, (4,), np.float32, (0,), (4,), "k.py:9")
        read.set()
        return out

    res = run_world(w, {0: r0, 1: r1})
    assert isinstance(res[0], CommRaceError)
    assert str(res[0]).startswith(
        "communication race on window 'data' of rank 0, byte 0: rank 0's store into its own window at k.py:6 and "
        "rank 1's remote_load at k.py:9 are not ordered"
    )


def test_local_load_of_a_peers_unordered_remote_store_is_a_race() -> None:
    w = make(2)
    data = w.alloc_window(16, "data")
    stored = threading.Event()

    def r0(ep: Endpoint) -> None:
        ep.remote_store(data, 1, (4,), (0,), np.ones(4, np.float32), False, "k.py:3")
        stored.set()

    def r1(ep: Endpoint) -> None:
        stored.wait(TIMEOUT)
        ep.local_load(data, (4,), 4, (0,), (4,), "k.py:7")

    res = run_world(w, {0: r0, 1: r1})
    assert isinstance(res[1], CommRaceError)
    assert (
        "rank 0's remote_store at k.py:3 and rank 1's load of its own window at k.py:7 are not ordered"
        in str(res[1])
    )


def test_unwritten_window_read_warns() -> None:
    w = make(2)
    data = w.alloc_window(32, "data")

    def r1(ep: Endpoint) -> object:
        with warnings.catch_warnings(record=True) as got:
            warnings.simplefilter("always")
            out = ep.remote_load(data, 0, (2, 4), np.float32, (1, 0), (1, 4), "k.py:12")
        return out, [str(x.message) for x in got if x.category is UnwrittenWindowReadWarning]

    res = run_world(w, {0: lambda ep: None, 1: r1})
    out, msgs = res[1]  # type: ignore[misc]
    assert not out.any()
    assert msgs == [
        "k.py:12: rank 1 remote_loads 16 bytes of window 'data' of rank 0 that no rank has written "
        "since allocation (first: element (1, 0)); it reads the allocation's zeros - check that its "
        "offsets and shape match what the peer stored"
    ]


def test_remote_store_atomic_add_and_region_bounds() -> None:
    w = make(3)
    acc = w.alloc_window(4 * 4, "acc")

    def adder(ep: Endpoint) -> None:
        ep.remote_store(acc, 0, (4,), (0,), np.full(4, ep.rank, np.int32), True, f"k.py:{ep.rank}")
        coll.barrier(ep, "k.py:50")

    run_world(w, {r: adder for r in range(3)})
    np.testing.assert_array_equal(w.workers[0].copy_from(acc.tensor(0, (4,), np.int32)), [3, 3, 3, 3])

    w2 = make(2)
    acc = w2.alloc_window(16, "acc")
    res = run_world(
        w2,
        {
            0: lambda ep: ep.remote_store(acc, 1, (4,), (2,), np.zeros(4, np.int32), False, "k.py:1"),
            1: lambda ep: None,
        },
    )
    assert isinstance(res[0], CommError)
    assert "the region [2, 6) on axis 0 is outside the window view [4]" in str(res[0])


@pytest.mark.parametrize("op,ref", [("sum", np.sum), ("max", np.max), ("min", np.min), ("prod", np.prod)])
def test_allreduce_every_op_exact(op: str, ref: Callable[..., np.ndarray]) -> None:
    n = 3
    w = make(n)
    win = w.alloc_window(4 * 6, "data")
    xs = np.random.default_rng(0).integers(-3, 4, (n, 2, 3)).astype(np.int32)

    def body(ep: Endpoint) -> None:
        w.workers[ep.rank].write_tensor(win.tensor(ep.rank, (2, 3), np.int32), xs[ep.rank])
        coll.allreduce(ep, win, (2, 3), np.int32, op, "k.py:60")

    run_world(w, {r: body for r in range(n)})
    for r in range(n):
        np.testing.assert_array_equal(
            w.workers[r].copy_from(win.tensor(r, (2, 3), np.int32)), ref(xs, axis=0)
        )


def test_allgather_reduce_scatter_all_to_all_exact() -> None:
    n = 2
    w = make(n)
    g, rs, a2a = (w.alloc_window(4 * n * 4, name) for name in ("gather", "rs", "a2a"))
    chunks = np.arange(n * 4, dtype=np.float32).reshape(n, 4)
    staged = np.arange(n * n * 4, dtype=np.float32).reshape(n, n, 4)

    def body(ep: Endpoint) -> None:
        r = ep.rank
        coll.allgather(ep, chunks[r], g, (n, 4), np.float32, "k.py:70")
        w.workers[r].write_tensor(rs.tensor(r, (n, 4), np.float32), staged[r])
        coll.reduce_scatter(ep, rs, (n, 4), np.float32, "sum", "k.py:72")
        coll.all_to_all(ep, staged[r], a2a, (n, 4), np.float32, "k.py:73")

    run_world(w, {r: body for r in range(n)})
    for r in range(n):
        np.testing.assert_array_equal(w.workers[r].copy_from(g.tensor(r, (n, 4), np.float32)), chunks)
        np.testing.assert_array_equal(
            w.workers[r].copy_from(rs.tensor(r, (n, 4), np.float32))[r], staged[:, r].sum(axis=0)
        )
        np.testing.assert_array_equal(w.workers[r].copy_from(a2a.tensor(r, (n, 4), np.float32)), staged[:, r])


def test_mismatched_collectives_name_both_ranks() -> None:
    w = make(2)
    win = w.alloc_window(16, "data")
    res = run_world(
        w,
        {
            0: lambda ep: coll.allreduce(ep, win, (4,), np.float32, "sum", "k.py:1"),
            1: lambda ep: coll.allreduce(ep, win, (4,), np.float32, "max", "k.py:2"),
        },
    )
    errs = [e for e in res.values() if isinstance(e, CommError)]
    assert errs and "collective #1 differs between ranks" in str(errs[0])
    assert "at k.py:1" in str(errs[0]) and "at k.py:2" in str(errs[0])


def test_a_failing_rank_stops_its_waiting_peer() -> None:
    w = make(2)
    sig = w.alloc_window(4, "signal")

    def r0(ep: Endpoint) -> None:
        raise runtime.DispatchError("bad argument")

    res = run_world(w, {0: r0, 1: lambda ep: ep.wait(sig, (1,), (0,), 1, "eq", "k.py:3")})
    assert isinstance(res[1], CommHangError)
    assert "rank 0: stopped by an error: DispatchError: bad argument" in str(res[1])


def test_no_progress_timeout_is_bounded() -> None:
    """A rank that computes forever (here: sleeps) while its peer waits: stopped after `timeout`."""
    w = make(2, timeout=0.3)
    sig = w.alloc_window(4, "signal")
    stop = threading.Event()

    def busy(ep: Endpoint) -> None:
        stop.wait(TIMEOUT)

    def waiter(ep: Endpoint) -> None:
        try:
            ep.wait(sig, (1,), (0,), 1, "eq", "k.py:3")
        finally:
            stop.set()

    res = run_world(w, {0: busy, 1: waiter})
    assert isinstance(res[1], CommHangError)
    assert "no blocked rank made progress for 0.3 s" in str(res[1]) and "rank 0: running" in str(res[1])


def test_a_peer_outside_the_world_is_refused() -> None:
    w = make(2)
    sig = w.alloc_window(4, "signal")
    res = run_world(w, {0: lambda ep: ep.notify(sig, 2, (1,), (0,), 1, "set", "k.py:4"), 1: lambda ep: None})
    assert isinstance(res[0], CommError)
    assert str(res[0]) == "k.py:4: notify: peer 2 is not a rank of the world (ranks 0..1)"


def test_atomic_add_on_a_signal_cell_wraps_at_32_bits() -> None:
    w = make(2)
    sig = w.alloc_window(4, "signal")
    run_world(
        w,
        {
            0: lambda ep: [
                ep.notify(sig, 1, (1,), (0,), (1 << 31) - 1, "atomic_add", "k.py:1"),
                ep.notify(sig, 1, (1,), (0,), 2, "atomic_add", "k.py:2"),
            ],
            1: lambda ep: None,
        },
    )
    assert int(w.workers[1].copy_from(sig.tensor(1, (1,), np.int32))[0]) == -(1 << 31) + 1


def test_eq_past_the_expected_value_is_a_hang_with_its_hint() -> None:
    w = make(3)
    sig = w.alloc_window(4, "signal")

    def adder(ep: Endpoint) -> None:
        ep.notify(sig, 0, (1,), (0,), 1, "atomic_add", f"k.py:{ep.rank}")

    def waiter(ep: Endpoint) -> None:
        ep.wait(sig, (1,), (0,), 1, "eq", "k.py:9")  # two adders: the cell reaches 2, passing 1

    first, both = threading.Event(), threading.Event()

    def late_waiter(ep: Endpoint) -> None:
        both.wait(TIMEOUT)  # both adds are in before the wait starts
        waiter(ep)

    def add_first(ep: Endpoint) -> None:
        adder(ep)
        first.set()

    def add_second(ep: Endpoint) -> None:
        first.wait(TIMEOUT)
        adder(ep)
        both.set()

    res = run_world(w, {0: late_waiter, 1: add_first, 2: add_second})
    assert isinstance(res[0], CommHangError)
    assert (
        "it holds 2; notified by rank 1 (AtomicAdd 1 at k.py:1), rank 2 (AtomicAdd 1 at k.py:2) - it is past "
        "the expected value and counters only grow: WaitCmp.Eq never holds again, wait with WaitCmp.Ge"
        in str(res[0])
    )
