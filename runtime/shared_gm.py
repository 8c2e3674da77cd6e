"""GM bytes that a forked process shares: one process-wide arena of shared memory.

Why: the ranks of a cluster can run in processes of their own (the compiler's rank processes,
nzjit/backend/rank_processes.py), one per core, each with an interpreter lock of its own. Such a
process is forked from this one and must read and write the very bytes of its ranks' GM, with no
copy in either direction. A `GlobalMemory(shared=True)` (every `Cluster` rank's) takes the backing
of each allocation from this arena: an anonymous ``MAP_SHARED`` mapping, reserved once (address
space only, ``MAP_NORESERVE``; pages are real only once written), which a forked child inherits
at the same addresses. The driver alone allocates; a rank process mirrors the allocation table
(`GlobalMemory.mirror`) from the events the driver sends it.

A process forked by anyone else (``multiprocessing``'s fork, a user's ``os.fork``) must not share
the parent's device memory: it would write into the parent's tensors. Right after such a fork the
child's arena is made private - the ranges in use copied out, the mapping replaced by private memory
at the same address, the bytes copied back - so its GM behaves exactly as before shared memory:
a copy of the parent's at the fork (`_privatize`). Only `shared_fork` (the rank processes) keeps
the mapping shared.

Ranges are reused by exact size once nothing holds their bytes (the backing array's finalizer,
so a live view - a snapshot, a recorded replay - keeps its range); large ones return their pages
to the system first (``MADV_REMOVE``). Linux only; elsewhere, or when the address space cannot be
reserved, `take` returns None and the GM uses private memory (then its ranks run in one process).
"""

from __future__ import annotations

import ctypes
import mmap
import os
import sys
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np

__all__ = ["available", "take", "offset_of", "view_at", "shared_fork"]

_PAGE = mmap.PAGESIZE
#: Address space reserved, tried in turn (a host that overcommits nothing refuses the large ones).
_RESERVE = (1 << 40, 1 << 36, 1 << 33)
#: Freed ranges at least this large give their pages back to the system.
_RETURN_PAGES = 1 << 20
_MAP_NORESERVE = getattr(mmap, "MAP_NORESERVE", 0x4000)  # Linux's value (x86, arm)


class _Arena:
    def __init__(self, region: mmap.mmap, size: int) -> None:
        self.region, self.size = region, size
        self.whole = np.frombuffer(region, dtype=np.uint8)
        self.base = self.whole.ctypes.data
        self.top = 0  # bytes handed out so far (the high-water mark)
        self.free: dict[int, list[int]] = {}  # page-rounded size -> offsets of free ranges
        self.lock = threading.Lock()

    def take(self, nbytes: int) -> np.ndarray | None:
        size = max(_PAGE, -(-nbytes // _PAGE) * _PAGE)
        with self.lock:
            spare = self.free.get(size)
            if spare:
                offset = spare.pop()
            elif self.top + size <= self.size:
                offset, self.top = self.top, self.top + size
            else:
                return None  # the reserved space is used up: private memory instead
        data = self.whole[offset : offset + nbytes]
        weakref.finalize(data, self._give, offset, size)
        return data

    def held(self) -> list[tuple[int, int]]:
        """The ranges [lo, hi) handed out and not given back, in order. Only right after a fork:
        without the lock, which a thread that does not exist in the child may hold."""
        spare = sorted((at, at + size) for size, ats in self.free.items() for at in ats)
        out, lo = [], 0
        for a, b in spare:
            if a > lo:
                out.append((lo, a))
            lo = b
        if self.top > lo:
            out.append((lo, self.top))
        return out

    def _give(self, offset: int, size: int) -> None:
        """A range nothing holds any more: its pages back to the system (a large one), its
        addresses to the next allocation of the same size."""
        if size >= _RETURN_PAGES:
            try:
                self.region.madvise(mmap.MADV_REMOVE, offset, size)
            except (OSError, ValueError):
                pass  # the pages stay: only memory, never bytes, is at stake
        with self.lock:
            self.free.setdefault(size, []).append(offset)


_arena: _Arena | None = None
_arena_failed = False
_lock = threading.Lock()
_keep_shared = threading.local()  # set while `shared_fork` forks a rank process
_in_rank_process = False  # this process is a rank process (`take` hands out nothing here)


def available() -> bool:
    """Can GM be shared with a forked process here (Linux, address space reserved)?"""
    return _get() is not None


def _get() -> _Arena | None:
    global _arena, _arena_failed
    if _arena is not None or _arena_failed:
        return _arena
    with _lock:
        if _arena is None and not _arena_failed:
            _arena = _reserve()
            _arena_failed = _arena is None
    return _arena


def _reserve() -> _Arena | None:
    if not sys.platform.startswith("linux") or not hasattr(mmap, "MADV_REMOVE"):
        return None
    for size in _RESERVE:
        try:
            region = mmap.mmap(-1, size, flags=mmap.MAP_SHARED | _MAP_NORESERVE)
        except (OSError, ValueError, OverflowError):
            continue
        return _Arena(region, size)
    return None


def take(nbytes: int) -> np.ndarray | None:
    """A uint8 array of `nbytes` in the arena (its old bytes, or zeros), or None (no arena, its
    space used up, or this is a rank process: only the driver hands out the arena's ranges)."""
    a = _get()
    return None if a is None or _in_rank_process else a.take(nbytes)


def offset_of(data: np.ndarray) -> int | None:
    """Where `data` (an array from `take`) starts in the arena; None if it is not in it."""
    a = _arena
    if a is None:
        return None
    at = data.ctypes.data - a.base
    return at if 0 <= at and at + data.size <= a.top else None


def view_at(offset: int, nbytes: int) -> np.ndarray:
    """The arena's bytes [offset, offset + nbytes): a rank process's view of an allocation the
    driver made after the fork."""
    a = _arena
    if a is None or offset < 0 or offset + nbytes > a.size:
        raise RuntimeError("no shared GM arena in this process")
    return a.whole[offset : offset + nbytes]


@contextmanager
def shared_fork() -> Iterator[None]:
    """Fork inside this block to give the child the arena shared (a rank process); every other
    fork gets a private copy."""
    _keep_shared.on = True
    try:
        yield
    finally:
        _keep_shared.on = False


_libc = None


def _privatize() -> None:
    """In a child forked outside `shared_fork`: replace the shared arena by private memory holding
    the same bytes at the same addresses (module docstring)."""
    global _libc, _in_rank_process
    a = _arena
    if a is None:
        return
    if getattr(_keep_shared, "on", False):  # a rank process: the arena shared, its ranges the driver's
        _in_rank_process = True
        return
    saved = [(lo, a.whole[lo:hi].copy()) for lo, hi in a.held()]  # the free ranges hold nothing
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.mmap.restype = ctypes.c_void_p
        _libc.mmap.argtypes = [
            ctypes.c_void_p,
            ctypes.c_size_t,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_long,
        ]
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | _MAP_NORESERVE | 0x10  # MAP_FIXED: the same addresses
    got = _libc.mmap(a.base, a.size, mmap.PROT_READ | mmap.PROT_WRITE, flags, -1, 0)
    if got != a.base:
        os._exit(70)  # the child cannot keep its parent's device memory apart: stop it at once
    for lo, part in saved:
        a.whole[lo : lo + part.size] = part


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_privatize)
