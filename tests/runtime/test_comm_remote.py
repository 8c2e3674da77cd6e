"""runtime.comm_remote: a comm world hosted apart from its ranks (issue 28 on RayCluster), here with
host and ranks in one process: each rank's window is its own Worker's memory, the host holds the
world's replica, and the two meet only in `WorldHost.call` (the messages a RayCluster sends)."""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable

import numpy as np
import pytest

import runtime
from runtime import comm_collectives as coll
from runtime.comm import CommHangError, CommRaceError, CommWorld, UnwrittenWindowReadWarning
from runtime.comm_remote import RankLink, WorldHost

TIMEOUT = 20.0
WINDOWS = [("data", 32, 4), ("signal", 8, 1)]  # (name, bytes per rank, grain)


def run_linked(
    n: int, fns: dict[int, Callable[[RankLink], object]]
) -> tuple[dict[int, object], list[RankLink]]:
    """Each rank in its own thread with its own worker and a link to one host; every thread must end."""
    host = WorldHost(dict(enumerate(runtime.Cluster(n).workers)), WINDOWS, timeout=TIMEOUT, active=list(fns))
    own = runtime.Cluster(n).workers  # the ranks' memory: not the host's replica
    links = [
        RankLink(
            r,
            n,
            [
                (name, own[r].alloc_tensor((nb,), np.uint8, init=np.zeros(nb, np.uint8)))
                for name, nb, _ in WINDOWS
            ],
            host.call,
        )
        for r in range(n)
    ]
    results: dict[int, object] = {}

    def body(r: int) -> None:
        link = links[r]
        link.start()
        try:
            results[r] = fns[r](link)
            late = link.finish(None)
            if late is not None:
                results[r] = late
        except BaseException as e:  # collected for the assertions
            link.finish(e)
            results[r] = e

    threads = [threading.Thread(target=body, args=(r,), daemon=True) for r in fns]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT)
        assert not t.is_alive(), "a rank thread hung"
    return results, links


def store(link: RankLink, index: int, data: np.ndarray) -> None:
    """The rank's kernel storing into its own window (plain memory: no message)."""
    link.windows[index].memory()[: data.nbytes] = data.reshape(-1).view(np.uint8)


X = np.arange(1, 9, dtype=np.float32)


def test_a_store_reaches_the_peer_only_through_notify_and_wait() -> None:
    def r0(ep: RankLink) -> None:
        store(ep, 0, X)
        ep.notify(ep.windows[1], 1, (2, 1), (0, 0), 1, "set", "k.py:3")

    def r1(ep: RankLink) -> np.ndarray:
        ep.wait(ep.windows[1], (2, 1), (0, 0), 1, "ge", "k.py:9")
        assert ep.windows[1].memory()[:4].view(np.int32)[0] == 1  # the cell, in the rank's own memory
        return ep.remote_load(ep.windows[0], 0, (1, 8), np.float32, (0, 0), (1, 8), "k.py:10")

    res, links = run_linked(2, {0: r0, 1: r1})
    np.testing.assert_array_equal(res[1], X.reshape(1, 8))
    assert not links[1].windows[0].memory().any()  # rank 1's own data window: nobody wrote it


def test_a_remote_store_lands_in_the_peer_s_memory_after_its_wait() -> None:
    def r0(ep: RankLink) -> None:
        ep.remote_store(ep.windows[0], 1, (1, 8), (0, 0), X.reshape(1, 8), False, "k.py:4")
        ep.notify(ep.windows[1], 1, (2, 1), (0, 0), 1, "set", "k.py:5")

    def r1(ep: RankLink) -> np.ndarray:
        ep.wait(ep.windows[1], (2, 1), (0, 0), 1, "ge", "k.py:9")
        return ep.windows[0].memory().view(np.float32).copy()

    res, _ = run_linked(2, {0: r0, 1: r1})
    np.testing.assert_array_equal(res[1], X)


def test_collectives_run_on_the_host_and_return_into_each_rank() -> None:
    def rank(r: int) -> Callable[[RankLink], np.ndarray]:
        def go(ep: RankLink) -> np.ndarray:
            store(ep, 0, X * (r + 1))
            coll.allreduce(ep, ep.windows[0], (1, 8), np.float32, "sum", f"k.py:{r}")  # type: ignore[arg-type]
            return ep.windows[0].memory().view(np.float32).copy()

        return go

    res, _ = run_linked(2, {0: rank(0), 1: rank(1)})
    for r in (0, 1):
        np.testing.assert_array_equal(res[r], X * 3)


def _local_hang() -> str:
    w = CommWorld(dict(enumerate(runtime.Cluster(2).workers)), timeout=TIMEOUT)
    sig = w.alloc_window(8, "signal")
    out: dict[int, BaseException] = {}

    def body(r: int) -> None:
        try:
            with w.running(r) as ep:
                ep.wait(sig, (2, 1), (r, 0), 1, "eq", f"k.py:{r}")
        except BaseException as e:
            out[r] = e

    ts = [threading.Thread(target=body, args=(r,)) for r in (0, 1)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(TIMEOUT)
    return str(out[0])


def test_a_hang_is_reported_in_the_words_of_a_local_world() -> None:
    res, _ = run_linked(
        2, {r: (lambda ep, r=r: ep.wait(ep.windows[1], (2, 1), (r, 0), 1, "eq", f"k.py:{r}")) for r in (0, 1)}
    )
    assert isinstance(res[0], CommHangError) and isinstance(res[1], CommHangError)
    assert str(res[0]) == _local_hang()
    assert (
        "  rank 1: waits at k.py:1 for signal[1, 0] of window 'signal' to be == 1 (WaitCmp.Eq); it holds 0; "
        "no rank notified it\n" in str(res[0])
    )


def test_an_unordered_store_and_remote_load_is_a_race_and_an_unwritten_read_warns_in_the_rank() -> None:
    go = threading.Event()

    def r0(ep: RankLink) -> None:
        go.wait(TIMEOUT)  # after rank 1's read: the store is dated at rank 0's finish
        store(ep, 0, X)

    def r1(ep: RankLink) -> object:
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            ep.remote_load(ep.windows[0], 0, (1, 8), np.float32, (0, 0), (1, 8), "k.py:10")
        go.set()
        return [str(w.message) for w in said if w.category is UnwrittenWindowReadWarning]

    res, _ = run_linked(2, {0: r0, 1: r1})
    assert res[1] == [
        "k.py:10: rank 1 remote_loads 32 bytes of window 'data' of rank 0 that no rank has written "
        "since allocation (first: element (0, 0)); it reads the allocation's zeros - check that its "
        "offsets and shape match what the peer stored"
    ]
    assert isinstance(res[0], CommRaceError)
    assert str(res[0]).startswith(
        "communication race on window 'data' of rank 0, byte 0: rank 0's store into "
        "its own window (seen at the end of its kernels) and rank 1's remote_load at k.py:10 "
        "are not ordered"
    )


def test_a_lost_rank_stops_the_ranks_waiting_on_it() -> None:
    host = WorldHost(dict(enumerate(runtime.Cluster(2).workers)), WINDOWS, timeout=TIMEOUT, active=[0, 1])
    own = runtime.Cluster(2).workers[0]
    link = RankLink(
        0,
        2,
        [(name, own.alloc_tensor((nb,), np.uint8, init=np.zeros(nb, np.uint8))) for name, nb, _ in WINDOWS],
        host.call,
    )
    link.start()
    threading.Timer(0.2, host.abort, (1, "rank 1 is lost: its process died")).start()
    with pytest.raises(runtime.DeviceError, match="rank 1 is lost: its process died"):
        link.wait(link.windows[1], (2, 1), (0, 0), 1, "ge", "k.py:1")
