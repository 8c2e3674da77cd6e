"""runtime.cluster_memory: several ranks' GMs as one address space for a rank-batched launch (issue
25 item 4); each access is checked by the rank that owns it, and no access reaches two ranks.
runtime.threads.side_by_side: the rank groups of such launches, each on a thread of its own."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import runtime
from nzjit.backend.lane_gm import arithmetic_runs
from runtime import threads
from runtime.cluster_memory import RANK_SHIFT, ClusterMemory, rank_of_address


@pytest.fixture
def two_ranks():
    workers = [runtime.Worker(r) for r in range(2)]
    tensors = [
        w.alloc_tensor((4, 8), np.int32, init=np.full((4, 8), 10 * (r + 1), np.int32))
        for r, w in enumerate(workers)
    ]
    return workers, tensors, ClusterMemory([w.gm for w in workers])


def test_each_rank_is_its_own_address_range(two_ranks):
    workers, tensors, mem = two_ranks
    a0, a1 = (mem.address(r, t.address) for r, t in enumerate(tensors))
    assert a1 >> RANK_SHIFT == 1 and a0 >> RANK_SHIFT == 0 and rank_of_address(a1) == 1
    assert a1 & ((1 << RANK_SHIFT) - 1) == tensors[1].address  # the rank's own address below
    assert (mem.view(a0, (8, 4), (4, 1)).view(np.int32) == 10).all()
    assert (mem.span(a1, a1 + 128).view(np.int32) == 20).all()
    mem.view_span(a1, (4,), (1,), 0, 4)[...] = 0  # writes land in rank 1's memory only
    assert workers[1].copy_from(tensors[1]).reshape(-1)[0] == 0
    assert (workers[0].copy_from(tensors[0]) == 10).all()
    assert mem.is_live(a0) and mem.is_live(a1) and not mem.is_live(mem.address(2, tensors[0].address))
    assert workers[1].gm.uploads == 1  # the view is no upload: a launch's traffic is not counted


def test_an_access_across_ranks_or_outside_them_is_refused(two_ranks):
    _, tensors, mem = two_ranks
    a0, a1 = (mem.address(r, t.address) for r, t in enumerate(tensors))
    with pytest.raises(runtime.DeviceError, match="outside every rank's memory"):
        mem.view(a0, (2, 4), (a1 - a0, 1))  # one view over two ranks' bytes
    with pytest.raises(runtime.DeviceError, match="outside every rank's memory"):
        mem.span(mem.address(2, tensors[0].address), mem.address(2, tensors[0].address) + 4)  # no rank 2
    with pytest.raises(runtime.DeviceError, match="outside every allocation"):
        mem.view(a1 + 128, (4,), (1,))  # past rank 1's tensor: refused by rank 1's own GM
    with pytest.raises(runtime.DeviceError, match="allocates no GM"):
        mem.alloc(64)
    with pytest.raises(runtime.DeviceError, match="frees no GM"):
        mem.free(a0)


def test_freed_rank_memory_is_refused_through_the_cluster_view(two_ranks):
    workers, tensors, mem = two_ranks
    a1 = mem.address(1, tensors[1].address)
    workers[1].free_tensor(tensors[1])
    with pytest.raises(runtime.DeviceError, match="use after free"):
        mem.view(a1, (4,), (1,))


def test_lane_runs_never_join_two_ranks():
    base = 0x20000
    one_lane_per_rank = np.array([(r << RANK_SHIFT) | base for r in range(4)], np.int64)
    # equally spaced, but each rank's own memory: four runs, never one view over the ranks
    assert arithmetic_runs(one_lane_per_rank) == [(0, 1, 0), (1, 2, 0), (2, 3, 0), (3, 4, 0)]
    two_lanes = np.array([(r << RANK_SHIFT) | (base + 512 * i) for r in range(3) for i in range(2)], np.int64)
    assert arithmetic_runs(two_lanes) == [(0, 2, 512), (2, 4, 512), (4, 6, 512)]
    plain = np.array([base, base + 64, base + 128], np.int64)
    assert arithmetic_runs(plain) == [(0, 3, 64)]  # one GM: as before


def test_side_by_side_runs_every_part_at_once_and_raises_after_all_ended(monkeypatch):
    monkeypatch.setattr(threads, "THREADS", 2)
    barrier = threading.Barrier(2, timeout=30)
    seen: list[tuple[str, bool]] = []
    ended: list[int] = []

    def part(i: int, fail: bool = False):
        def fn():
            barrier.wait()  # both parts must run at once
            seen.append((threading.current_thread().name, threads.helper_available()))
            ended.append(i)
            if fail:
                raise ValueError(f"part {i}")

        return fn

    threads.side_by_side([part(0), part(1)])
    assert len({name for name, _ in seen}) == 2  # two threads
    assert {helped for _, helped in seen} == {False}  # every core is taken: no helper for Ahead
    assert threads.helper_available()  # counted only while the parts run
    with pytest.raises(ValueError, match="part 1"):
        threads.side_by_side([part(0), part(1, fail=True)])
    barrier.reset()
    ended.clear()
    with pytest.raises(ValueError, match="part 0"):
        threads.side_by_side([part(0, fail=True), part(1)])
    assert sorted(ended) == [0, 1]  # the other part ran to its end before the error was raised


def test_side_by_side_on_one_thread_runs_the_parts_in_order(monkeypatch):
    monkeypatch.setattr(threads, "THREADS", 1)
    order: list[int] = []
    threads.side_by_side([lambda: order.append(0), lambda: order.append(1)])
    assert order == [0, 1]
