"""The state of one lane-batched attempt (see batched.py) and the helpers its steps share: the
fallback signals, lane-uniform values, per-lane GM addresses."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from runtime import GmView, TileBuf
from runtime.spans import byte_span

from .lane_values import LaneTile


class Fallback(Exception):
    """The batched attempt cannot reproduce the per-lane result: run the lanes one by one."""


class LaneDependent(Fallback):
    """A value one batched step needs the same in every lane (a trip count, a valid shape, a tile
    offset) differs between the lanes of a group: smaller groups may agree."""


class LaneState:
    """One batched attempt: lanes, deferred stores, byte ranges loaded and stored."""

    def __init__(self, ctx: Any, n: int, spmd: bool, record: bool = False) -> None:
        self.ctx, self.n, self.spmd = ctx, n, spmd
        self.alloc_bytes = 0  # bytes `empty` gave out in this lane group (sizes the next group)
        self.lanes = np.zeros(0, np.int64)
        self.L = self.base = 0
        self.group_loads = 0  # index in `loaded` of the current group's first load
        self.stores: list[tuple[Any, np.ndarray, Callable[[int], TileBuf]]] = []
        self.loaded: list[tuple[np.ndarray, int, int]] = []  # (addresses, lo, hi) relative spans
        self.stored: list[tuple[np.ndarray, int, int]] = []
        self.pinned: set[int] = set()  # ids of images and sums a deferred store still reads
        self.notes: list[tuple[Any, ...]] = []  # logged accesses for the lane-race log (lane_log.py)
        self.bufs: dict[tuple[object, ...], np.ndarray] = {}
        self.owned: dict[int, np.ndarray] = {}  # the buffers this attempt holds, by id
        #: while recording a replay (lane_replay.py): the buffer work of the steps, in order, as
        #: ``(fn, args)``; the attempt then owns its buffers alone (a spare store of its own),
        #: since a kept replay writes them again on later calls
        self.rec: list[tuple[Callable[..., Any], tuple[Any, ...]]] | None = [] if record else None
        self.recording = record
        #: a recorded call made another `do` call inside it: the replay would repeat the outer
        #: call only (a lazy tile it materialised stays materialised), so it is not kept
        self.nested = False
        self.fresh_bytes = 0  # bytes of the buffers this attempt allocated anew (a replay's memory)
        # this thread's spares: a helper thread allocating for it takes from here
        self.spares = _Spares() if record else _spares()
        #: set by batched._run_lanes: the deferred stores per lane group, and the attempt's on-chip
        #: live bytes at its end and its own peak (what a replay commits and charges)
        self.groups: list[list[tuple[Any, np.ndarray, Callable[[int], TileBuf]]]] = []
        self.live_after: dict[str, int] = {}
        self.own_peak: dict[str, int] = {}

    def do(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)``: work on lane buffers (a kernel, a copy, a fill), kept in order while a
        replay is being recorded. A replayable step (`replays`) writes its buffers only through
        this (or `zeros` / `copy`, which use it), and decides nothing from their bytes: its
        decisions depend on the attempt's signature (lane_replay.py) alone."""
        rec = self.rec
        if rec is None:
            if self.recording:
                self.nested = True
            return fn(*args)
        rec.append((fn, args))
        self.rec = None  # what `fn` does is repeated by repeating it: nothing inside is recorded
        try:
            return fn(*args)
        finally:
            self.rec = rec

    def empty(self, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        """An uninitialised buffer for a lane value of this group, counted in `alloc_bytes`."""
        a = self._take(shape, dtype)
        self.alloc_bytes += a.nbytes
        return a

    def _take(self, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        """A buffer a freed image or an earlier attempt left, when one has the shape: fresh memory
        costs a page fault per 4 KiB on first touch (microseconds each in a VM), on every call of a
        kernel, since these buffers are large enough for glibc to map them anew each time."""
        a = self.spares.take(shape, dtype)
        if a is None:
            a = np.empty(shape, dtype)
            self.fresh_bytes += a.nbytes
        self.owned[id(a)] = a
        return a

    def copy(self, a: np.ndarray) -> np.ndarray:
        """A copy of `a` in a buffer from `empty`."""
        c = self.empty(a.shape, a.dtype)
        self.do(np.copyto, c, a)
        return c

    def recycle(self) -> None:
        """Keep this attempt's buffers for the next one (within `SPARE_BYTES` per thread). Called
        when the attempt is over - its stores applied or abandoned - so nothing reads them again."""
        for a in self.owned.values():
            self.spares.give(a)
        self.owned.clear()
        self.bufs.clear()

    def reserve(self, g: Any) -> None:
        """Charge one tile of geometry `g` to its on-chip space (one lane's accounting is every lane's)."""
        self.ctx.onchip.reserve(g.space, g.nbytes)

    def scratch(self, shape: tuple[int, ...], dtype: Any, tag: str = "") -> np.ndarray:
        """A buffer reused for the whole batch (no fresh pages per instruction); `tag` keeps buffers
        of the same shape that are live together apart."""
        key = (shape, dtype if isinstance(dtype, np.dtype) else np.dtype(dtype), tag)
        b = self.bufs.get(key)
        if b is None:
            b = self.bufs[key] = self._take(shape, dtype)  # the attempt's, not a group's: uncounted
        return b

    def zeros(self, n: int, nbytes: int, zero: bool = True) -> np.ndarray:
        """`n` tile images of `nbytes` (uint8) from `empty`, zeroed unless `zero` is False (the
        caller fills every byte)."""
        a = self.empty((n, nbytes), np.uint8)
        if zero:
            self.do(a.fill, 0)
        return a

    def adopt(self, x: LaneTile) -> np.ndarray | None:
        """The images of `x`, a tile that dies at this step, for the step's result to be written over
        in place (a result of the same geometry that writes every byte of every image: the bytes
        are those of a fresh result, without fresh, cache-cold memory); None when they are not this
        attempt's own buffer or a deferred store still reads them."""
        d = x.held
        if d is None or id(d) in self.pinned or self.owned.get(id(d)) is not d:
            return None
        x.disown()
        return d

    def release(self, v: Any) -> None:
        """Free lane value `v` on chip; its images serve the next `empty` unless a deferred store
        reads them."""
        if not v.freed:
            v.freed = True
            g = v.g
            self.ctx.onchip.release(g.space, g.nbytes)
            if type(v) is LaneTile:
                held = v.held
                if held is not None and id(held) not in self.pinned:
                    a = self.owned.pop(id(held), None)
                    if a is not None:
                        self.spares.give(a)


#: Bytes of batch buffers kept per thread between attempts (`LaneState.recycle`).
SPARE_BYTES = 64 << 20


class _Spares:
    """The batch buffers one thread keeps between its attempts, by (shape, dtype), within
    `SPARE_BYTES`.  An attempt's helper thread (`runtime.threads.Ahead`) takes from the store of
    the attempt's thread while that thread may too: hence the lock."""

    def __init__(self) -> None:
        self.lists: dict[tuple[tuple[int, ...], np.dtype], list[np.ndarray]] = {}
        self.nbytes = 0
        self.lock = threading.Lock()

    def take(self, shape: tuple[int, ...], dtype: Any) -> np.ndarray | None:
        # keyed by the dtype object itself (equal dtypes hash alike): `dtype.str` builds a string
        key = (
            shape if type(shape) is tuple else tuple(shape),
            dtype if isinstance(dtype, np.dtype) else np.dtype(dtype),
        )
        with self.lock:
            spare = self.lists.get(key)
            if not spare:
                return None
            a = spare.pop()
            self.nbytes -= a.nbytes
            return a

    def give(self, a: np.ndarray) -> None:
        n = a.nbytes
        with self.lock:
            if self.nbytes + n <= SPARE_BYTES:
                self.lists.setdefault((a.shape, a.dtype), []).append(a)
                self.nbytes += n


_THREAD = threading.local()


def _spares() -> _Spares:
    """The calling thread's store of spare buffers."""
    spares = getattr(_THREAD, "spares", None)
    if spares is None:
        spares = _THREAD.spares = _Spares()
    return spares


def uniform(x: Any) -> int:
    """A lane-uniform int (an int, or an array whose lanes agree), else Fallback."""
    if isinstance(x, np.ndarray):
        v = x[0]
        if not (x == v).all():
            raise LaneDependent("lane-dependent value where one value is needed")
        return int(v)
    return int(x)


def lanes_of(x: Any, L: int) -> np.ndarray:
    """`x` as an int64 array over the `L` lanes (a lane-uniform int repeated)."""
    if isinstance(x, np.ndarray):
        return x
    return np.full(L, int(x), dtype=np.int64)


def addresses(src: Any, offs: list[Any], L: int, sizes: Any) -> np.ndarray | int:
    """Element offset sum(o*s) added to the base address(es): an int if lane-uniform. A negative
    or out-of-bounds window falls back to the per-lane path, which refuses it with the lane.

    The lane-uniform part is summed in Python ints and each lane-dependent offset scaled to bytes
    once, so a slice of the lane index costs two small numpy operations (it ran five, ~14 us of
    a 4-lane slice step)."""
    const = 0
    lane: Any = None  # the lane-dependent byte offsets
    E = src.dtype.itemsize
    for o, s, n, d in zip(offs, src.strides, sizes, src.shape):
        if type(o) is np.ndarray:
            if len(o) <= SMALL_LANES:  # a few lanes: Python's min / max of a list beat numpy's calls
                ol = o.tolist()
                lo, hi = min(ol), max(ol)
            else:
                lo, hi = o.min(), o.max()
            if lo < 0 or hi > d - n:
                raise Fallback("window out of bounds")
            term = o * (s * E)
            lane = term if lane is None else lane + term
        else:
            if o < 0 or o + n > d:
                raise Fallback("window out of bounds")
            const += int(o) * s
    base = src.addr
    if lane is None:
        if type(base) is np.ndarray:
            return (base + const * E).astype(np.int64, copy=False)
        return int(base + const * E)
    addr = lane + (base + const * E)
    return addr if addr.dtype == np.int64 else addr.astype(np.int64)


def iota(n: int) -> np.ndarray:
    """``np.arange(n)`` (int64) as one shared read-only array per `n`: lane -> image maps that are
    the identity (lanes with images of their own, in order) are then one object, which a step
    compares with `is` (`np.array_equal` of two costs ~4 us, per operand and step)."""
    a = _IOTA.get(n)
    if a is None:
        a = np.arange(n, dtype=np.int64)
        a.flags.writeable = False
        if len(_IOTA) < 4096:
            _IOTA[n] = a
    return a


_IOTA: dict[int, np.ndarray] = {}


def distinct(addr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(addr, return_inverse=True)``, without its sort when the lanes' addresses are
    already in order (the common case: lanes in order, consecutive lanes sharing a window)."""
    if len(addr) <= SMALL_LANES:  # a few lanes: one pass over a list beats numpy's calls
        a = addr.tolist()
        if all(x < y for x, y in zip(a, a[1:])):  # lanes load distinct windows, in order
            return addr, iota(len(a))
        if a.count(a[0]) == len(a):  # one window for every lane (a lane-uniform address)
            return addr[:1], np.zeros(len(a), dtype=np.int64)
    step = addr[1:] - addr[:-1]
    if (step > 0).all():  # lanes load distinct windows, in order
        return addr, iota(len(addr))
    if (step >= 0).all():  # runs of equal addresses share one image
        first = np.empty(len(addr), dtype=bool)
        first[0] = True
        np.not_equal(step, 0, out=first[1:])
        return addr[first], np.cumsum(first) - 1
    return np.unique(addr, return_inverse=True)


#: Up to this many lanes `distinct` checks the common orders on a list (~2 us for 16 lanes,
#: against ~10 us of numpy calls).
SMALL_LANES = 64


def view_span(view: GmView) -> tuple[int, int]:
    """The byte range ``[lo, hi)`` of `view` relative to its address (at least one element)."""
    E = view.dtype.itemsize
    lo, hi = byte_span(0, view.shape, tuple(s * E for s in view.strides))
    return lo, max(hi, lo + E)


Step = Callable[[LaneState, list[Any]], None]


def replays(step: Step) -> Step:
    """Mark the lane step `step` replayable: it writes lane buffers only through `LaneState.do`
    (or `zeros` / `copy`) and decides nothing from their bytes, so a recording of its buffer work
    repeats it exactly for the same attempt signature (lane_replay.py). A plan whose lane steps
    are all marked is replayed; one unmarked step keeps the whole plan on the stepping path."""
    step.replays = True  # type: ignore[attr-defined]
    return step
