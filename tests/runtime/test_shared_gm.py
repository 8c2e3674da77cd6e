"""GM in shared memory (runtime/shared_gm.py, issue 25 item 4): a `Cluster`'s GM bytes live in one
process-wide shared arena so that a forked rank process reaches them in place; the driver's
allocation table reaches the rank process as a journal (`GlobalMemory.take_journal` / `mirror`);
any other fork gets a private copy, as before shared memory."""

from __future__ import annotations

import gc
import os
import sys
import warnings

import numpy as np
import pytest

import runtime
from runtime import memory, shared_gm
from runtime.memory import GlobalMemory

pytestmark = pytest.mark.skipif(
    not (sys.platform.startswith("linux") and shared_gm.available()), reason="shared GM is Linux only"
)


def _fork() -> int:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # 3.12+: fork with threads alive
        return os.fork()


def _exit_status(pid: int) -> int:
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def test_a_cluster_gm_is_shared_and_a_lone_worker_is_not():
    assert all(w.gm.shared for w in runtime.Cluster(2).workers)
    assert not runtime.Worker(0).gm.shared and not GlobalMemory().shared


def test_shared_allocations_live_in_the_arena_and_hold_the_uploaded_bytes():
    gm = GlobalMemory(shared=True)
    host = np.arange(1000, dtype=np.int32)
    base = gm.upload(host)
    assert shared_gm.offset_of(gm._find(base).data) is not None
    np.testing.assert_array_equal(gm.read(base, host.nbytes).view(np.int32), host)
    zero = gm.alloc(300, zero=True)
    poison = gm.alloc(300)
    assert (gm.read(zero, 300) == 0).all() and (gm.read(poison, 300) == memory.POISON_BYTE).all()
    assert gm.uploads == 1 and gm.upload_bytes == host.nbytes


def test_a_range_nothing_holds_is_reused_by_the_next_take_of_its_size():
    a = shared_gm.take(5000)
    at = shared_gm.offset_of(a)
    assert at is not None and at % os.sysconf("SC_PAGE_SIZE") == 0
    b = shared_gm.take(5000)  # `a` still held: another range
    assert shared_gm.offset_of(b) != at
    del a
    gc.collect()
    c = shared_gm.take(5000)
    assert shared_gm.offset_of(c) == at  # the same pages, rounded size 8 KiB
    assert shared_gm.offset_of(np.zeros(10, np.uint8)) is None  # private memory is not in it


def test_a_mirrored_gm_sees_the_drivers_allocations_and_frees_and_allocates_its_own_apart():
    driver = GlobalMemory(shared=True)
    kept = driver.upload(np.full(64, 5, np.uint8))
    copy = GlobalMemory(shared=True)  # stands for a rank process's copy of `driver` at the fork
    copy.mirror([("alloc", kept, 64, shared_gm.offset_of(driver._find(kept).data))])
    assert driver.take_journal() == []  # recorded from the first take on
    late = driver.upload(np.arange(256, dtype=np.uint8))
    gone = driver.alloc(128, zero=True)
    driver.free(gone)
    events = driver.take_journal()
    assert [e[0] for e in events] == ["alloc", "alloc", "free"] and events[2] == ("free", gone)
    freed_here: list[int] = []
    copy.free_hooks.append(freed_here.append)
    copy.mirror(events)
    np.testing.assert_array_equal(copy.read(late, 256), np.arange(256, dtype=np.uint8))  # the same bytes
    copy.write(late, np.full(256, 9, np.uint8))
    assert (driver.read(late, 256) == 9).all()  # ... in place, no copy
    assert freed_here == [gone]  # the free hooks ran (the race and provenance checkers forget it)
    with pytest.raises(runtime.DeviceError, match="was freed \\(use after free\\)"):
        copy.read(gone, 8)
    with pytest.raises(runtime.DeviceError, match="outside every allocation"):
        copy.read(late + 250, 16)
    # what the copy allocates itself (a kernel's scratch) is private, at addresses the driver
    # never hands out, and the driver's later allocations still land in their place
    own = copy.alloc(1 << 17, zero=True)
    assert own >= memory._PROCESS_BASE and shared_gm.offset_of(copy._find(own).data) is None
    copy.write(own, np.full(16, 4, np.uint8))
    newer = driver.upload(np.full(64, 6, np.uint8))
    copy.mirror(driver.take_journal())
    assert (copy.read(newer, 64) == 6).all() and (copy.read(own, 16) == 4).all()
    assert copy._bases == sorted(copy._bases)
    copy.free(own)
    assert copy._pool_bytes == 0  # a rank process keeps no freed buffer
    with pytest.raises(runtime.DeviceError, match="was freed \\(use after free\\)"):
        copy.read(own, 8)
    assert shared_gm.take(64) is not None  # the driver (this process) still takes arena ranges


def test_a_mirror_refuses_an_allocation_outside_the_arena_and_an_unknown_free():
    copy = GlobalMemory(shared=True)
    with pytest.raises(runtime.DeviceError, match="is not in shared memory"):
        copy.mirror([("alloc", 0x10000, 64, None)])
    with pytest.raises(runtime.DeviceError, match="unknown here"):
        copy.mirror([("free", 0x999000)])


def test_the_journal_stops_past_its_limit(monkeypatch):
    monkeypatch.setattr(memory, "JOURNAL_MAX", 3)
    gm = GlobalMemory(shared=True)
    gm.take_journal()
    for _ in range(3):
        gm.alloc(8)
    assert gm.journal is not None and len(gm.journal) == 3
    gm.alloc(8)  # the fourth: nothing grows any more; the rank processes are forked again
    assert gm.journal is None
    assert gm.take_journal() == [] and gm.journal == []  # and a new fork records from here


def test_a_private_gm_journals_nothing_until_asked():
    gm = GlobalMemory(shared=True)
    gm.alloc(8)
    assert gm.journal is None  # no rank process mirrors it: no events kept


def test_a_fork_outside_shared_fork_gets_a_private_copy_of_device_memory():
    # a user's os.fork (or multiprocessing's) must not write into the parent's tensors
    gm = GlobalMemory(shared=True)
    base = gm.upload(np.full(4096, 1, np.uint8))
    pid = _fork()
    if pid == 0:  # the child: its copy holds the parent's bytes; its writes stay its own
        ok = (gm.read(base, 4096) == 1).all()
        gm.write(base, np.full(4096, 2, np.uint8))
        ok = ok and (gm.read(base, 4096) == 2).all()
        os._exit(0 if ok else 1)
    assert _exit_status(pid) == 0
    assert (gm.read(base, 4096) == 1).all()


def test_a_fork_inside_shared_fork_shares_the_bytes():
    gm = GlobalMemory(shared=True)
    base = gm.upload(np.full(4096, 1, np.uint8))
    with shared_gm.shared_fork():
        pid = _fork()
    if pid == 0:
        gm.write(base, np.full(4096, 3, np.uint8))
        # the arena's ranges are the driver's to hand out: none taken here
        os._exit(0 if shared_gm.take(64) is None else 1)
    assert _exit_status(pid) == 0
    assert (gm.read(base, 4096) == 3).all()  # the child wrote the parent's bytes


def test_a_private_copy_keeps_every_held_range_and_skips_the_free_ones():
    gm = GlobalMemory(shared=True)
    keep = [gm.upload(np.full(5000 + i, i + 1, np.uint8)) for i in range(3)]
    gone = shared_gm.take(8000)  # a range given back before the fork: nothing to copy
    del gone
    gc.collect()
    arena = shared_gm._arena
    held = arena.held()
    assert all(lo < hi for lo, hi in held) and all(b[1] <= c[0] for b, c in zip(held, held[1:]))
    for base in keep:
        at = shared_gm.offset_of(gm._find(base).data)
        assert any(lo <= at and at + 5000 <= hi for lo, hi in held)
    pid = _fork()
    if pid == 0:
        ok = all((gm.read(b, 5000 + i) == i + 1).all() for i, b in enumerate(keep))
        os._exit(0 if ok else 1)
    assert _exit_status(pid) == 0
