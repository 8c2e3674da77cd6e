"""Global memory (GM) as real bytes, and on-chip buffer capacities.

GM is a set of allocations, each its own ``np.uint8`` array at a 512-byte-aligned address from
a bump allocator.  Addresses are never reused, so a stale pointer into a freed tensor can never
alias a newer one: every access through a freed or foreign address is refused with
:class:`DeviceError` instead of silently reading someone else's data.  Instruction models get
strided uint8 views (:meth:`GlobalMemory.view`), so a wrong address or stride computed by a
compiler pass yields the wrong bytes exactly as on the device, as long as it stays inside one
allocation.

:class:`OnChip` accounts the on-chip spaces of one AI core against the capacities of
hardware-model.md §7, so a kernel that would not fit on the device is refused here too.
"""

from __future__ import annotations

import bisect
import itertools
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import shared_gm
from ._strided import byte_span, strided_bytes
from .cube import TileWindow
from .errors import DeviceError
from .tile import TileBuf, _geometry

_new_tile = object.__new__

__all__ = ["GlobalMemory", "OnChip", "CAPACITIES", "HW_NAMES", "GM_ALIGN"]

#: Allocation alignment in GM (bytes).  512 B = one fractal, also keeps every 32-B block aligned.
GM_ALIGN = 512
#: The byte fresh GM holds (``GlobalMemory.alloc``; `Worker.alloc_tensor` without ``init``, an
#: omitted Out): all ones, NaN in every float format and -1 in every signed integer.
POISON_BYTE = 0xFF
#: Freed GM buffers of at least this size are kept (up to _GM_POOL_BYTES) for reuse.
_GM_POOL_MIN = 64 << 10
_GM_POOL_BYTES = 512 << 20
#: GM events kept for the rank processes between two of their calls (`GlobalMemory.take_journal`).
JOURNAL_MAX = 100_000
#: First address handed out; small addresses stay unmapped so a null-ish pointer faults.
_GM_BASE = 0x10000
#: First address of a rank process's own allocations (a kernel's GM scratch, its pipe slots):
#: above any the driver reaches, below a ClusterMemory rank's 48-bit range.
_PROCESS_BASE = 1 << 47

_K = 1024
#: Capacities in bytes per target and space (hardware-model.md §7, pto-isa buffer_limits.hpp).
CAPACITIES: dict[str, dict[str, int]] = {
    "A2A3": {
        "Vec": 192 * _K,
        "Mat": 512 * _K,
        "Left": 64 * _K,
        "Right": 64 * _K,
        "Acc": 128 * _K,
        "Bias": 1 * _K,
        "FBuf": 2 * _K,
    },
    "A5": {
        "Vec": 256 * _K,
        "Mat": 512 * _K,
        "Left": 64 * _K,
        "Right": 64 * _K,
        "Acc": 256 * _K,
        "Bias": 4 * _K,
        "FBuf": 4 * _K,
    },
}
#: Freed tile images kept per size for reuse by :meth:`OnChip.alloc_tile`.
_POOL_DEPTH = 8
_FREED = np.zeros(0, dtype=np.uint8)
_FREED.flags.writeable = False
#: Hardware names used in messages, so a capacity error reads like the pto-isa one.
HW_NAMES = {"Vec": "UB", "Mat": "L1", "Left": "L0A", "Right": "L0B", "Acc": "L0C", "Bias": "BT", "FBuf": "FB"}


def poison_array(shape: Sequence[int], dtype: np.dtype | type) -> np.ndarray:
    """A host array holding what fresh device memory holds: every byte `POISON_BYTE` (NaN for a
    float dtype, -1 for a signed integer) - e.g. the reference's view of an omitted Out."""
    dt = np.dtype(dtype)
    n = int(np.prod(shape, dtype=np.int64))
    return np.full(n * dt.itemsize, POISON_BYTE, np.uint8).view(dt).reshape(tuple(shape))


@dataclass
class _Allocation:
    base: int
    nbytes: int
    data: np.ndarray | None  # None once freed (the address range stays retired)


def _held(a: _Allocation, lo: int, hi: int) -> np.ndarray:
    """The bytes of a checked allocation, taken once: a `free` on another thread between the check
    and this read either finds this reference (and does not pool the buffer, `GlobalMemory.free`)
    or has already cleared them (then this is a use after free, refused)."""
    data = a.data
    if data is None:
        raise DeviceError(
            f"GM access to bytes [{lo:#x}, {hi:#x}): allocation at {a.base:#x} was freed (use after free)"
        )
    return data


_SERIALS = itertools.count(1)


class GlobalMemory:
    """Byte-addressed GM of one device.

    ``uploads`` / ``upload_bytes`` count host -> GM copies (:meth:`write`), ``downloads`` counts
    GM -> host copies (:meth:`read`); instruction traffic goes through :meth:`view` and is not
    counted.  Tests use ``uploads`` to prove that a resident tensor is not copied again.
    """

    is_gm = True  # how the DMA model tells GM from a tile when it records an instruction

    def __init__(self, shared: bool = False) -> None:
        #: the bytes live in the shared arena (runtime/shared_gm.py), so a forked rank process can
        #: run this GM's kernels; False once an allocation had to take private memory
        self.shared = shared and shared_gm.available()
        #: while a rank process mirrors this GM: the allocations and frees it has not seen yet,
        #: ("alloc", base, nbytes, arena offset) / ("free", base), in order (`mirror`)
        self.journal: list[tuple[Any, ...]] | None = None
        self._mirrored = False  # this is a rank process's copy (`mirror`)
        self._own_next = _PROCESS_BASE  # where a rank process's own allocations go
        self._allocs: list[_Allocation] = []
        self._bases: list[int] = []
        self._next = _GM_BASE
        self._lock = threading.Lock()
        self._last: _Allocation | None = None  # the allocation of the previous access (hot path)
        self._recent: tuple[_Allocation, ...] = ()
        self._pool: dict[int, list[np.ndarray]] = {}
        self._pool_bytes = 0
        self.uploads = 0
        self.upload_bytes = 0
        self.downloads = 0
        #: called with an allocation's base address after it is freed (outside the lock): a
        #: holder of views of its bytes - a compiler's recorded replay - lets them go
        self.free_hooks: list[Callable[[int], None]] = []
        #: a number no other GlobalMemory of this process has (an `id` is reused once its object
        #: is gone, and a new GM hands out the same addresses as an old one)
        self.serial = next(_SERIALS)

    # ------------------------------------------------------------------ allocation
    def alloc(self, nbytes: int, zero: bool = False) -> int:
        """Reserve ``nbytes`` of GM; return its 512-byte-aligned base address.

        Fresh memory holds the poison pattern (every byte `POISON_BYTE`), as a device's memory
        holds whatever was there before: a kernel that reads bytes nobody wrote gets NaN (any
        float format) or -1 (any signed integer), never a plausible zero. ``zero=True`` zeroes it."""
        nbytes = int(nbytes)
        if nbytes < 0:
            raise DeviceError(f"cannot allocate {nbytes} bytes")
        data = self._pooled(nbytes)
        if data is None and zero and not self.shared:
            data = np.zeros(nbytes, dtype=np.uint8)
        else:  # np.full's bytes, without its Python wrapper (a cached call allocates its omitted Outs)
            data = self._fresh(nbytes) if data is None else data
            data.fill(0 if zero else POISON_BYTE)
        return self._map(data)

    def upload(self, host: np.ndarray) -> int:
        """:meth:`alloc` of ``host.nbytes`` then :meth:`write` of ``host``'s bytes (one upload):
        the new allocation is filled by one copy, never zeroed first."""
        src = np.ascontiguousarray(host).reshape(-1).view(np.uint8)
        data = self._pooled(src.size)
        if data is None and not self.shared:
            data = src.copy()  # a fresh owned buffer holding the bytes (the array may be the caller's)
        else:
            data = self._fresh(src.size) if data is None else data
            data[...] = src
        base = self._map(data)
        self.uploads += 1
        self.upload_bytes += src.size
        return base

    def _fresh(self, nbytes: int) -> np.ndarray:
        """New backing bytes (their content undefined): from the shared arena for a shared GM
        (the driver's; a rank process's own allocations are private)."""
        if self.shared and not self._mirrored:
            data = shared_gm.take(nbytes)
            if data is not None:
                return data
            self.shared = False  # the arena is used up: this GM's ranks run in one process now
        return np.empty(nbytes, dtype=np.uint8)

    def _pooled(self, nbytes: int) -> np.ndarray | None:
        """A freed buffer of exactly ``nbytes`` (its old bytes still in it), if one is kept."""
        if self._mirrored:  # a rank process keeps no freed buffer: its allocations are scratch
            return None
        with self._lock:
            pool = self._pool.get(nbytes)
            data = pool.pop() if pool else None
            if data is not None:
                self._pool_bytes -= nbytes
        return data

    def _map(self, data: np.ndarray) -> int:
        """Make ``data`` the bytes of a new allocation at the next aligned address; its base."""
        nbytes = data.size
        with self._lock:
            if self._mirrored:  # a rank process's own: at addresses the driver never hands out
                base = self._own_next
                self._own_next = base + max(1, -(-nbytes // GM_ALIGN)) * GM_ALIGN
            else:
                base = self._next
                self._next = base + max(1, -(-nbytes // GM_ALIGN)) * GM_ALIGN
            a = _Allocation(base, nbytes, data)
            self._insert(a)
            if self.journal is not None:
                self._record(("alloc", base, nbytes, shared_gm.offset_of(data)))
            # a new allocation is about to be accessed (an upload, a call's temporaries): found
            # by `_checked` among the recent ones, not by a search
            self._recent = (a, *self._recent[:3])
        return base

    def free(self, addr: int) -> None:
        """Release the allocation starting at ``addr``; its addresses are never handed out again."""
        with self._lock:
            a = self._find(addr)
            if a is None or a.base != addr:
                raise DeviceError(f"free of GM address {addr:#x}: not the base of an allocation")
            if a.data is None:
                raise DeviceError(f"double free of GM allocation at {addr:#x}")
            # the bytes (not the addresses) are reused: a call's uploads and scratch tensors do
            # not fault in fresh pages every time
            data, a.data = a.data, None
            if self.journal is not None:
                self._record(("free", addr))
            # only a buffer nobody else holds is reused: a live view of it (an in-flight call on
            # another thread, a failed call's rollback snapshot) would otherwise write into the
            # next allocation's bytes. References here: `data` and getrefcount's argument.
            if (
                a.nbytes >= _GM_POOL_MIN
                and not self._mirrored
                and self._pool_bytes + a.nbytes <= _GM_POOL_BYTES
                and sys.getrefcount(data) <= 2
            ):
                self._pool.setdefault(a.nbytes, []).append(data)
                self._pool_bytes += a.nbytes
        for hook in self.free_hooks:
            hook(addr)

    # ------------------------------------------------------------------ rank processes
    def take_journal(self) -> list[tuple[Any, ...]]:
        """The allocations and frees since the last call (and record them from now on)."""
        with self._lock:
            events, self.journal = self.journal or [], []
        return events

    def _record(self, event: tuple[Any, ...]) -> None:
        """Journal `event` (under the lock); past `JOURNAL_MAX` events the journal stops (None):
        rank processes no longer used keep nothing growing, and a later call forks new ones."""
        assert self.journal is not None
        if len(self.journal) >= JOURNAL_MAX:
            self.journal = None
        else:
            self.journal.append(event)

    def _insert(self, a: _Allocation) -> None:
        """Add `a` to the table, kept in address order (under the lock). The driver's addresses
        only grow; in a rank process its own allocations lie above the driver's, which `mirror`
        then inserts below them."""
        if not self._bases or a.base > self._bases[-1]:
            self._allocs.append(a)
            self._bases.append(a.base)
        else:
            i = bisect.bisect_left(self._bases, a.base)
            self._allocs.insert(i, a)
            self._bases.insert(i, a.base)

    def mirror(self, events: Sequence[tuple[Any, ...]]) -> None:
        """In a rank process (forked from the driver, runtime/shared_gm.py): apply the driver's
        allocations and frees since the fork, so that every access is checked against the
        driver's allocation table and reaches the same shared bytes. From the first call on,
        what this GM allocates itself (a kernel's GM scratch, a pipe's slots, freed when its
        launch ends) is private memory at addresses from `_PROCESS_BASE`, which the driver never
        hands out; it keeps no freed buffer."""
        if not self._mirrored:
            self._mirrored, self.journal = True, None
            self._own_next = _PROCESS_BASE
            self._pool.clear()
            self._pool_bytes = 0
        for ev in events:
            if ev[0] == "alloc":
                _, base, nbytes, offset = ev
                if offset is None:
                    raise DeviceError(f"GM allocation at {base:#x} is not in shared memory")
                with self._lock:
                    self._insert(_Allocation(base, nbytes, shared_gm.view_at(offset, nbytes)))
                    self._next = max(self._next, base + max(1, -(-nbytes // GM_ALIGN)) * GM_ALIGN)
            else:
                with self._lock:
                    a = self._find(ev[1])
                    if a is None or a.base != ev[1] or a.data is None:
                        raise DeviceError(f"the driver freed GM at {ev[1]:#x}, unknown here")
                    a.data = None
                for hook in self.free_hooks:
                    hook(ev[1])

    def is_live(self, addr: int) -> bool:
        """True if ``addr`` lies inside an allocation that has not been freed."""
        a = self._last
        if a is None or not a.base <= addr < a.base + max(a.nbytes, 1):
            a = self._find(addr)
        return a is not None and a.data is not None and addr < a.base + max(a.nbytes, 1)

    def base_of(self, addr: int) -> int:
        """The base address of the live allocation holding ``addr``, else DeviceError."""
        a = self._find(addr)
        if a is None or a.data is None or not addr < a.base + max(a.nbytes, 1):
            raise DeviceError(f"GM address {addr:#x} is not in a live allocation")
        return a.base

    @property
    def live_bytes(self) -> int:
        """Total bytes of the allocations not yet freed."""
        return sum(a.nbytes for a in self._allocs if a.data is not None)

    def _find(self, addr: int) -> _Allocation | None:
        i = bisect.bisect_right(self._bases, addr) - 1
        return self._allocs[i] if i >= 0 else None

    # ------------------------------------------------------------------ access
    def view(self, addr: int, shape: Sequence[int], byte_strides: Sequence[int]) -> np.ndarray:
        """Writable uint8 strided view of GM; every touched byte must lie in one live allocation.

        This is the only way instructions reach GM, so out-of-bounds and use-after-free are
        caught at the first access instead of reading foreign memory.
        """
        shape, byte_strides = tuple(int(n) for n in shape), tuple(int(s) for s in byte_strides)
        if len(shape) != len(byte_strides):
            raise DeviceError(f"view shape {shape} and strides {byte_strides} differ in rank")
        lo, hi = byte_span(addr, shape, byte_strides)
        if hi <= lo:
            return np.zeros(shape, dtype=np.uint8)
        a = self._checked(lo, hi)
        return strided_bytes(_held(a, lo, hi), addr - a.base, shape, byte_strides)

    def view_span(
        self, addr: int, shape: tuple[int, ...], byte_strides: tuple[int, ...], lo: int, hi: int
    ) -> np.ndarray:
        """:meth:`view` with ``shape`` / ``byte_strides`` already ints and the touched byte range
        ``[addr + lo, addr + hi)`` precomputed (``byte_span`` relative to ``addr``; non-empty)."""
        a = self._checked(addr + lo, addr + hi)
        data = a.data  # `_held`, inline on this hot path: the bytes taken once, then checked
        if data is None:
            data = _held(a, addr + lo, addr + hi)  # raises: freed meanwhile
        return strided_bytes(data, addr - a.base, shape, byte_strides)

    def span(self, lo: int, hi: int) -> np.ndarray:
        """GM bytes ``[lo, hi)`` (non-empty) as a flat view, checked like :meth:`view_span`: the
        view of a dense transfer, whose bytes are in view order (a slice, no strided view)."""
        a = self._checked(lo, hi)
        data = a.data  # `_held`, inline (see `view_span`)
        if data is None:
            data = _held(a, lo, hi)  # raises: freed meanwhile
        return data[lo - a.base : hi - a.base]

    def _checked(self, lo: int, hi: int) -> _Allocation:  # callers take the bytes with `_held`
        """The live allocation holding ``[lo, hi)`` (remembered in ``_last``), else DeviceError."""
        a = self._last
        if a is None or lo < a.base or hi > a.base + a.nbytes or a.data is None:
            for a in self._recent:  # kernels rotate between a few tensors
                if a.base <= lo and hi <= a.base + a.nbytes and a.data is not None:
                    break
            else:
                a = self._find(lo)
                if a is not None and a.data is not None:
                    self._recent = (a, *self._recent[:3])
            if a is None or hi > a.base + a.nbytes:
                raise DeviceError(
                    f"GM access to bytes [{lo:#x}, {hi:#x}) is outside every allocation"
                    + (f" (nearest: [{a.base:#x}, {a.base + a.nbytes:#x}))" if a is not None else "")
                )
            if a.data is None:
                raise DeviceError(
                    f"GM access to bytes [{lo:#x}, {hi:#x}): allocation at {a.base:#x} was freed (use after free)"
                )
            self._last = a
        return a

    def read(self, addr: int, nbytes: int) -> np.ndarray:
        """Copy ``nbytes`` from GM to the host (counted in ``downloads``)."""
        n = int(nbytes)
        # a non-empty read is one dense range: the checked flat slice, no strided view to build
        out = (self.span(addr, addr + n) if n > 0 else self.view(addr, (n,), (1,))).copy()
        self.downloads += 1
        return out

    def read_into(self, addr: int, out: np.ndarray) -> None:
        """:meth:`read` of ``out.nbytes`` bytes straight into the C-contiguous host array ``out``
        (one download, no intermediate copy)."""
        if not out.flags.c_contiguous:  # reshape would copy: the bytes would land nowhere
            raise DeviceError("read_into needs a C-contiguous host array")
        dst = out.reshape(-1).view(np.uint8)
        if dst.size:  # an empty read checks nothing, as in `read`
            dst[...] = self.span(addr, addr + dst.size)
        self.downloads += 1

    def write(self, addr: int, data: bytes | bytearray | memoryview | np.ndarray) -> None:
        """Copy host bytes into GM (an upload: counted in ``uploads`` / ``upload_bytes``)."""
        if isinstance(data, np.ndarray):
            src = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
        else:
            src = np.frombuffer(memoryview(data).cast("B"), dtype=np.uint8)
        self.view(addr, (src.size,), (1,))[...] = src
        self.uploads += 1
        self.upload_bytes += src.size


class OnChip:
    """Live-byte accounting of one AI core's on-chip spaces against their capacities.

    pto-isa only checks capacity for TASSIGN with a compile-time address [BUF]; a kernel that
    overflows L0C at run time would silently overlap buffers.  The simulator refuses at
    allocation time with a message naming the space, the live bytes and the capacity.
    """

    def __init__(self, target: str = "A2A3") -> None:
        if target not in CAPACITIES:
            raise DeviceError(f"unknown target {target!r}; expected one of {sorted(CAPACITIES)}")
        self.target = target
        self.capacity: dict[str, int] = dict(CAPACITIES[target])
        self.live: dict[str, int] = {s: 0 for s in self.capacity}
        self.peak: dict[str, int] = {s: 0 for s in self.capacity}
        self._lock = threading.Lock()
        # byte images of freed tiles, by size: reused (zero-filled) so that a kernel's loop does
        # not fault in fresh pages for every tile (numpy allocates >= 128 KiB through mmap)
        self._pool: dict[int, list[np.ndarray]] = {}

    def reset(self, keep_bytes: int = 4 << 20) -> bool:
        """Ready this OnChip for another launch, as a new one would be: no peak, and the pool of
        freed tile images (kept to be reused, zero-filled when needed) trimmed to ``keep_bytes``.
        False, and nothing changed, while a tile is still accounted: that launch leaked, the next
        one must not start with less room."""
        with self._lock:
            if any(self.live.values()):
                return False
            for space in self.peak:
                self.peak[space] = 0
            if sum(n * len(images) for n, images in self._pool.items()) > keep_bytes:
                self._pool.clear()  # images of many tile sizes: the rarely reused go
        return True

    def reserve(self, space: str, nbytes: int) -> None:
        """Account ``nbytes`` (rounded up to 32-B alignment) in ``space`` or raise DeviceError."""
        if space not in self.capacity:
            raise DeviceError(f"unknown on-chip space {space!r}; expected one of {sorted(self.capacity)}")
        need = -(-int(nbytes) // 32) * 32
        with self._lock:
            live = self.live[space] + need
            cap = self.capacity[space]
            if live > cap:
                raise DeviceError(
                    f"{space} ({HW_NAMES[space]}) capacity exceeded: {live} bytes live > {cap} "
                    f"bytes on {self.target} (requested {need} bytes with {self.live[space]} "
                    f"already live); use smaller tiles or free tiles earlier"
                )
            self.live[space] = live
            self.peak[space] = max(self.peak[space], live)

    def release(self, space: str, nbytes: int) -> None:
        """Return ``nbytes`` (rounded up to 32-B alignment, as ``reserve`` charged) to ``space``."""
        need = -(-int(nbytes) // 32) * 32
        with self._lock:
            self.live[space] -= need

    def alloc_tile(
        self,
        space: str,
        rows: int,
        cols: int,
        dtype: np.dtype | type,
        *,
        layout: str | None = None,
        valid_row: int | None = None,
        valid_col: int | None = None,
    ) -> TileBuf:
        """Create a zeroed tile in ``space`` and account its bytes (DeviceError on overflow)."""
        return self.alloc_geometry(_geometry(space, dtype, rows, cols, layout), valid_row, valid_col)

    def alloc_geometry(
        self, g: object, valid_row: int | None = None, valid_col: int | None = None, zero: bool = True
    ) -> TileBuf:
        """:meth:`alloc_tile` from a validated geometry (``runtime.tile._geometry``): the hot path.
        ``zero=False``: the caller overwrites every byte before anything reads the tile."""
        space, need = g.space, g.need  # type: ignore[attr-defined]
        live_of = self.live
        with self._lock:
            live = live_of[space] + need
            fits = live <= self.capacity[space]
            if fits:
                live_of[space] = live
                if live > self.peak[space]:
                    self.peak[space] = live
        if not fits:
            self.reserve(space, g.nbytes)  # type: ignore[attr-defined]  # raises with the message
        pool = self._pool.get(g.nbytes)  # type: ignore[attr-defined]
        if pool:
            data = pool.pop()
            if zero:
                data.fill(0)
        else:
            data = np.zeros(g.nbytes, dtype=np.uint8)  # type: ignore[attr-defined]
        tile = _new_tile(TileBuf)
        tile._init(g, valid_row, valid_col, data, self)  # type: ignore[arg-type]
        return tile

    def charge_transient(self, space: str, nbytes: int) -> None:
        """``reserve`` then ``release`` of ``nbytes``: a result allocated while an input of its
        size is still live, the input freed at once (its image reused in place). The capacity
        check and the peak are those of the two calls."""
        need = -(-int(nbytes) // 32) * 32
        with self._lock:
            live = self.live[space] + need
            fits = live <= self.capacity[space]
            if fits and live > self.peak[space]:
                self.peak[space] = live
        if not fits:
            self.reserve(space, nbytes)  # raises with the message (or fits after a concurrent free)
            self.release(space, nbytes)

    def free_tile(self, tile: TileBuf | TileWindow) -> None:
        """Release a tile allocated here; further use of it raises DeviceError."""
        if tile._owner is not self:
            raise DeviceError(f"{tile!r} was not allocated by this OnChip")
        if tile.freed:
            raise DeviceError(f"double free of {tile!r}")
        tile.freed = True
        data: np.ndarray | None
        if type(tile) is TileBuf:
            data = tile._data  # a freed image is never decoded
            tile._data = _FREED  # a freed tile keeps no alias of a buffer that is handed out again
            tile._logical = False
            nbytes = data.nbytes
        else:
            data = tile.data
            nbytes = tile.nbytes if data is None else data.nbytes
        need = -(-nbytes // 32) * 32
        with self._lock:
            self.live[tile.space] -= need
        if data is None:  # a TEXTRACT window (cube.TileWindow) holds no image of its own
            return
        pool = self._pool.get(nbytes)
        if pool is None:
            pool = self._pool[nbytes] = []
        if len(pool) < _POOL_DEPTH:
            pool.append(data)
        if isinstance(tile, TileBuf) and type(tile) is not TileBuf:  # a subclass with a data property
            tile._data = _FREED
            tile._logical = False
