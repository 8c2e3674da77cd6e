"""Byte-range arithmetic for strided views (shared by GM, tiles and the DMA model)."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["byte_span", "overlaps_itself"]


def byte_span(addr: int, shape: Sequence[int], strides: Sequence[int]) -> tuple[int, int]:
    """Half-open byte range ``[lo, hi)`` touched by a uint8 strided view based at ``addr``.

    Empty views touch nothing and return ``(addr, addr)``.
    """
    if any(n <= 0 for n in shape):
        return addr, addr
    lo = addr + sum(min(0, (n - 1) * s) for n, s in zip(shape, strides))
    hi = addr + sum(max(0, (n - 1) * s) for n, s in zip(shape, strides)) + 1
    return lo, hi


def overlaps_itself(shape: Sequence[int], strides: Sequence[int], itemsize: int = 1) -> bool:
    """Conservative test: may two distinct indices of this view hit the same byte?

    Sorting axes by |stride|, each stride must clear the full extent of the inner axes.  Used to
    decide whether a vectorised write reproduces the hardware's in-order burst semantics (it
    does whenever no byte is written twice).
    """
    dims = sorted((abs(s), n) for n, s in zip(shape, strides) if n > 1)
    extent = itemsize
    for stride, n in dims:
        if stride < extent:
            return True
        extent = stride * (n - 1) + extent
    return False
