"""The converted float operands of mads read straight from GM, kept while their bytes stay the same
(issue 22 item 10: a fused expert's resident weights are converted again on every call).

Exact by construction: an entry keeps the converted operand *and a copy of the source bytes it was
converted from* (it was converted from that copy), and is handed out only when the view's bytes
now compare equal to the copy, byte for byte (`runtime.widen.same_bytes`: memcmp, so a NaN is its
bits). No hash and no write tracking: a weight written in place between calls, one byte of it,
fails the comparison and is converted again. The key (the view's address, shape, strides, dtype
and the float type) only finds the entry to compare with; a freed tensor whose address is reused
is compared like any other.

Entries are never changed once made (a new one replaces a stale one), so one cache serves every
thread - the caller, the helper converting a mad's other lanes, ranks side by side - behind a lock
held only for the dictionary: a thread may be multiplying an entry's operand while another
replaces it. Handed-out operands are read-only.

What it costs: a hit reads the view and the copy (2x the source bytes) where a conversion reads
the view and writes the float operand (1 + 4/itemsize x); a miss copies the source and converts
into fresh memory. So a key is admitted only the second time it is seen, a key found stale twice
(an activation at a fixed address, new bytes every call) is never admitted again, operands beyond
`MAX_BYTES` are not kept, and the entries are bounded by `CACHE_BYTES` - evicting only entries not
used in the last `IDLE` look-ups, so operands cycling through more than the budget keep the ones
admitted first instead of replacing each other on every call.

**Off by default (`ENABLED`): measured, it does not pay on this host (AMD EPYC, KVM).** A hit is
cheaper than the conversion it replaces (the fused expert's int8 Right 7-10 us against 25-27 us,
its fp16 Right 16 us against 89 us), but the converted operand, 2-4x its source's bytes, has left
the core's L2 by the next call, and BLAS reading it from there took ~100 us longer per mad than
reading the one just converted (the conversion's writes leave it in L2): the expert's call +8%
with the cache, +1-3% with only its fp16 or only its int8 operands kept; the bf16 decode kernel,
whose operands stream through memory, 1.8x (docs/performance.md, session 14)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import numpy as np

from runtime.widen import address, same_bytes

#: Bytes of entries kept (the source copies and the converted operands), for the process.
CACHE_BYTES = 64 << 20
#: Source bytes of the largest operand kept (a chunk of a large mad: 16 lanes of 128 x 256 bf16).
MAX_BYTES = 1 << 20
#: Source bytes of the smallest operand kept: below, the look-up costs what the conversion does.
MIN_BYTES = 4 << 10
#: An entry may be evicted for a new one once this many look-ups passed without using it.
IDLE = 4096
#: Stale comparisons after which a key is never admitted again (bytes that change every call).
STALE_LIMIT = 2
#: Is the cache used? Off: it measured slower (see the module's note); tests switch it on.
ENABLED = False

#: ((u0, address, shape, strides) per view, source dtype, float type, operand shape)
_Key = tuple[
    tuple[tuple[int, int, tuple[int, ...], tuple[int, ...]], ...], np.dtype, np.dtype, tuple[int, ...]
]


class _Entry:
    """A converted operand, and the source bytes it was converted from: per view, ``(order,
    saved)``, `saved` the copy of ``view.transpose(order)`` (in GM's order)."""

    __slots__ = ("saved", "converted", "nbytes", "used")

    def __init__(
        self, saved: list[tuple[tuple[int, ...], np.ndarray]], converted: np.ndarray, used: int
    ) -> None:
        self.saved, self.converted, self.used = saved, converted, used
        self.nbytes = sum(c.nbytes for _, c in saved) + converted.nbytes


class ConversionCache:
    """Converted operands by source view, within `budget` bytes (see the module's note)."""

    def __init__(self, budget: int = CACHE_BYTES) -> None:
        self.budget = budget
        self.entries: OrderedDict[_Key, _Entry] = OrderedDict()  # least recently used first
        self.nbytes = 0
        self.lookups = 0
        self.seen: OrderedDict[_Key, int] = OrderedDict()  # keys seen (the last 4096): stale counts
        self.lock = threading.Lock()
        self.hits = self.misses = 0  # for tests and measurements

    def converted(
        self,
        views: list[tuple[int, np.ndarray]],
        shape: tuple[int, ...],
        ft: np.dtype,
        convert: Callable[[np.ndarray, np.ndarray], None],
    ) -> np.ndarray | None:
        """The operand `convert` makes of the GM views `views`, ``(u0, view)`` for images u0.. of
        a (U, ...) float `ft` operand of `shape` (each view converted into its images' part, as
        ``convert(out[u0:u0 + len(view)].reshape(view.shape), view)``): read-only, from the cache
        when every view's bytes are an entry's; None when not cached - the caller converts into
        its own buffer."""
        nbytes = sum(v.nbytes for _, v in views)
        if not MIN_BYTES <= nbytes <= MAX_BYTES:
            return None
        key: _Key = (
            tuple((u0, address(v), v.shape, v.strides) for u0, v in views),
            views[0][1].dtype,
            ft,
            shape,
        )
        with self.lock:
            self.lookups += 1
            e = self.entries.get(key)
            if e is not None:
                self.entries.move_to_end(key)
                e.used = self.lookups
        if e is not None:
            if all(same_bytes(v.transpose(order), saved) for (_, v), (order, saved) in zip(views, e.saved)):
                self.hits += 1
                return e.converted
        self.misses += 1
        with self.lock:
            if e is not None and self.entries.get(key) is e:  # stale: dropped, the key seen again
                del self.entries[key]
                self.nbytes -= e.nbytes
                self._note(key, 1)
                return None
            if key not in self.seen:  # the first time: noted, not kept (a one-off operand)
                self._note(key, 0)
                return None
            if self.seen[key] >= STALE_LIMIT:
                return None
            size = nbytes + int(np.prod(shape)) * ft.itemsize
            if not self._room(size):
                return None
        out = np.empty(shape, ft)
        copies = []
        for u0, v in views:
            # the copy in GM's order (axes by falling stride): one run per contiguous stretch of
            # GM, so a hit compares long runs, not the view's 32-byte lines in the mad's order
            order = tuple(sorted(range(v.ndim), key=lambda a: -v.strides[a] if v.shape[a] > 1 else 0))
            src = v.transpose(order)
            saved = np.empty(src.shape, v.dtype)
            same_bytes(src, saved, copy=True)
            # from the copy: the result is the saved bytes' by construction
            convert(out[u0 : u0 + len(v)].reshape(v.shape), saved.transpose(np.argsort(order)))
            copies.append((order, saved))
        out.flags.writeable = False
        with self.lock:
            old = self.entries.pop(key, None)
            if old is not None:
                self.nbytes -= old.nbytes
            if self.nbytes + size <= self.budget:
                self.entries[key] = _Entry(copies, out, self.lookups)
                self.nbytes += size
        return out

    def _note(self, key: _Key, stale: int) -> None:
        """Remember `key` as seen (its stale count raised by `stale`), among at most 4096 keys."""
        self.seen[key] = self.seen.pop(key, 0) + stale
        if len(self.seen) > 4096:
            self.seen.popitem(last=False)

    def _room(self, size: int) -> bool:
        """Make room for `size` bytes by evicting idle entries, least recently used first; False
        when there is none (the operand is then not kept)."""
        if size > self.budget:
            return False
        for key in list(self.entries):
            if self.nbytes + size <= self.budget:
                break
            e = self.entries[key]
            if self.lookups - e.used < IDLE:
                break  # the rest were used more recently still
            del self.entries[key]
            self.nbytes -= e.nbytes
        return self.nbytes + size <= self.budget

    def clear(self) -> None:
        """Drop every entry and every key seen (tests; or to hand the memory back)."""
        with self.lock:
            self.entries.clear()
            self.seen.clear()
            self.nbytes = 0


#: The process's cache (every thread's: see the module's note).
CACHE = ConversionCache()


def cached(
    views: list[tuple[int, np.ndarray]],
    shape: tuple[int, ...],
    ft: Any,
    convert: Callable[[np.ndarray, np.ndarray], None],
) -> np.ndarray | None:
    """`CACHE.converted` when the cache is on (`ENABLED`), else None."""
    if not ENABLED:
        return None
    return CACHE.converted(views, shape, np.dtype(ft), convert)
