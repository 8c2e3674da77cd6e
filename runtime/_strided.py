"""Byte-range arithmetic for strided views (shared by GM, tiles and the DMA model)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["byte_span", "overlaps_itself", "strided_bytes"]


def byte_span(addr: int, shape: Sequence[int], strides: Sequence[int]) -> tuple[int, int]:
    """Half-open byte range ``[lo, hi)`` touched by a uint8 strided view based at ``addr``.

    Empty views touch nothing and return ``(addr, addr)``.
    """
    lo = hi = addr
    for n, s in zip(shape, strides):
        if n <= 0:
            return addr, addr
        d = (n - 1) * s
        if d < 0:
            lo += d
        else:
            hi += d
    return lo, hi + 1


def strided_bytes(
    base: np.ndarray, offset: int, shape: tuple[int, ...], strides: tuple[int, ...]
) -> np.ndarray:
    """Writable uint8 view ``base[offset + sum(i*stride)]``; the caller has bounds-checked it.

    The ``np.ndarray`` constructor is used instead of ``as_strided`` because it is a single C
    call (instruction models issue several views per instruction, so this is on the hot path).
    """
    return np.ndarray(shape, dtype=np.uint8, buffer=base, offset=offset, strides=strides)


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
