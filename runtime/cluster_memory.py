"""The GM of several ranks seen through one address space, for one launch that runs the same kernel
on every rank at once (issue 25 item 4: nzjit's rank-batched launches, backend/rank_batch.py).

Rank i's GM address ``a`` is the address ``(i << RANK_SHIFT) | a`` here. Every access is handed to
that rank's own `GlobalMemory`, with its own checks: an access outside the rank's allocations, or
one whose bytes would reach into another rank's space, is a `DeviceError` exactly as on the rank
itself. So each rank keeps its own memory - no rank can reach another's bytes, nothing is copied
between them - while a lane-batched step addresses the lanes of every rank as one array of
addresses. Nothing is allocated or freed through this view: the ranks place their arguments on
their own GM before the launch.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ._strided import byte_span
from .errors import DeviceError
from .memory import GlobalMemory

__all__ = ["RANK_SHIFT", "ClusterMemory", "rank_of_address"]

#: Rank i's bytes start at ``i << RANK_SHIFT``: far above any address one GM hands out (its bump
#: allocator starts at 64 KiB and never reuses an address), and 15 ranks' spaces fit in an int64.
RANK_SHIFT = 48
_LOCAL = (1 << RANK_SHIFT) - 1


def rank_of_address(addr: int) -> int:
    """The rank (its index in the `ClusterMemory`) that owns the address `addr`."""
    return int(addr) >> RANK_SHIFT


class ClusterMemory:
    """The GMs `gms` (rank i = ``gms[i]``) as one byte-addressed memory (module docstring)."""

    is_gm = True  # the DMA model tells GM from a tile by this

    def __init__(self, gms: Sequence[GlobalMemory]) -> None:
        if not 1 <= len(gms) < 1 << (63 - RANK_SHIFT):
            raise ValueError(f"ClusterMemory takes 1 to {(1 << (63 - RANK_SHIFT)) - 1} ranks, got {len(gms)}")
        self.gms = list(gms)

    def address(self, rank: int, addr: int) -> int:
        """The address here of rank `rank`'s GM address `addr`."""
        return (int(rank) << RANK_SHIFT) | int(addr)

    def _gm(self, lo: int, hi: int) -> tuple[GlobalMemory, int]:
        """The GM holding the bytes ``[lo, hi)`` and its base here; DeviceError across ranks."""
        r = lo >> RANK_SHIFT
        if lo < 0 or r >= len(self.gms) or (max(hi, lo + 1) - 1) >> RANK_SHIFT != r:
            raise DeviceError(
                f"GM access to bytes [{lo:#x}, {hi:#x}) is outside every rank's memory "
                "(one access reaches one rank's GM only)"
            )
        return self.gms[r], r << RANK_SHIFT

    def view(self, addr: int, shape: Sequence[int], byte_strides: Sequence[int]) -> np.ndarray:
        """`GlobalMemory.view` on the rank that owns the bytes."""
        addr = int(addr)
        shape, byte_strides = tuple(int(n) for n in shape), tuple(int(s) for s in byte_strides)
        lo, hi = byte_span(addr, shape, byte_strides) if len(shape) == len(byte_strides) else (addr, addr)
        if hi <= lo:
            return self.gms[0].view(addr & _LOCAL, shape, byte_strides)  # empty (or refused) as there
        gm, base = self._gm(lo, hi)
        # the span is known: the rank's checked view without computing it again (a per-lane store
        # takes one view per lane, ~3 us saved of ~8)
        return gm.view_span(addr - base, shape, byte_strides, lo - addr, hi - addr)

    def view_span(
        self, addr: int, shape: tuple[int, ...], byte_strides: tuple[int, ...], lo: int, hi: int
    ) -> np.ndarray:
        """`GlobalMemory.view_span` on the rank that owns the bytes ``[addr + lo, addr + hi)``."""
        gm, base = self._gm(addr + lo, addr + hi)
        return gm.view_span(addr - base, shape, byte_strides, lo, hi)

    def span(self, lo: int, hi: int) -> np.ndarray:
        """`GlobalMemory.span` on the rank that owns the bytes."""
        gm, base = self._gm(lo, hi)
        return gm.span(lo - base, hi - base)

    def read(self, addr: int, nbytes: int) -> np.ndarray:
        """`GlobalMemory.read` on the rank that owns the bytes."""
        gm, base = self._gm(int(addr), int(addr) + int(nbytes))
        return gm.read(int(addr) - base, nbytes)

    def read_into(self, addr: int, out: np.ndarray) -> None:
        """`GlobalMemory.read_into` on the rank that owns the bytes."""
        gm, base = self._gm(int(addr), int(addr) + out.nbytes)
        gm.read_into(int(addr) - base, out)

    def write(self, addr: int, data: bytes | bytearray | memoryview | np.ndarray) -> None:
        """`GlobalMemory.write` on the rank that owns the bytes."""
        n = data.nbytes if isinstance(data, np.ndarray) else memoryview(data).nbytes
        gm, base = self._gm(int(addr), int(addr) + n)
        gm.write(int(addr) - base, data)

    def is_live(self, addr: int) -> bool:
        """`GlobalMemory.is_live` on the rank that owns the address."""
        r = int(addr) >> RANK_SHIFT
        return 0 <= r < len(self.gms) and self.gms[r].is_live(int(addr) & _LOCAL)

    def alloc(self, nbytes: int, zero: bool = False) -> int:
        """Refused: a rank-batched launch allocates nothing in GM (its caller runs the ranks one by
        one then, each allocating on its own GM)."""
        raise DeviceError("a launch over several ranks' memory allocates no GM (run the ranks one by one)")

    def upload(self, host: np.ndarray) -> int:
        """Refused, as `alloc`."""
        return self.alloc(host.nbytes)

    def free(self, addr: int) -> None:
        """Refused, as `alloc`."""
        raise DeviceError("a launch over several ranks' memory frees no GM (run the ranks one by one)")
