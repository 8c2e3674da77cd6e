"""Host-side NZ packing: logical arrays <-> bytes in NZ fractal order (NZ-5, NZ-8).

An NZ tensor keeps its *logical* shape; only the byte order changes.  Element ``(b, r, c)``
lives at flat element offset ``b*C*R + (c//c0)*R*c0 + r*c0 + c%c0`` (NZ-8): column blocks of
``c0`` elements (one 32-byte C0 line per row) outermost, all rows of a block inside.  That is a
pure axis swap of ``[B, R, C/c0, c0] -> [B, C/c0, R, c0]``, so packing is one strided copy.

Speed: the swap moves whole 32-byte C0 lines, so the copy is done on a 32-byte void dtype
(one ``memcpy`` of 32 B per element instead of 32 one-byte moves), in cache-sized chunks: a
naive single copy walks the source 32 bytes at a time with a whole-row stride and thrashes the
cache once a plane exceeds L2.  Chunk count is bounded by ``nbytes / _CHUNK_BYTES`` (never per
row or per fractal).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from .dtypes import C0_BYTES, FRACTAL_ROWS, c0_of, itemsize_bits

__all__ = ["nz_blocked_shape", "pack_nz", "unpack_nz"]

#: Source bytes moved per np.copyto call: half of a 1 MiB L2, so source and destination fit.
_CHUNK_BYTES = 256 << 10
_LINE = np.dtype(f"V{C0_BYTES}")


def _check_nz_plane(shape: Sequence[int], dtype: np.dtype) -> tuple[int, int, int, int]:
    """Validate an NZ logical shape; return (batch, R, C, c0).  ValueError names the rule."""
    dt = np.dtype(dtype)
    if itemsize_bits(dt) < 8:
        raise ValueError(
            f"NZ-33: sub-byte dtype {dt.name} is not supported for NZ; keep the tensor ND or widen it to int8"
        )
    c0 = c0_of(dt)
    shape = tuple(int(d) for d in shape)
    if len(shape) < 2:
        raise ValueError(
            f"NZ-8: an NZ tensor needs rank >= 2 (the last two axes are the fractal plane), "
            f"got shape {shape}; reshape it to [..., R, C]"
        )
    R, C = shape[-2], shape[-1]
    if R % FRACTAL_ROWS:
        raise ValueError(
            f"NZ-8: rows R = {R} of shape {shape} must be a multiple of 16 (a partial fractal "
            f"has no NZ representation); pad R to {math.ceil(R / 16) * 16}"
        )
    if C % c0:
        raise ValueError(
            f"NZ-8: columns C = {C} of shape {shape} must be a multiple of c0 = {c0} for "
            f"{dt.name} (a partial C0 line has no NZ representation); pad C to "
            f"{math.ceil(C / c0) * c0}"
        )
    batch = math.prod(shape[:-2]) if len(shape) > 2 else 1
    return batch, R, C, c0


def nz_blocked_shape(shape: Sequence[int], dtype: np.dtype | type) -> tuple[int, int, int, int, int]:
    """Blocked rank-5 form ``(B, C/c0, R/16, 16, c0)`` of a logical NZ shape (NZ-5, NZ-6, NZ-28).

    Rank 2 gets a materialised batch of 1; rank > 3 folds all leading axes into the batch slot
    (the NZ GlobalTensor has one).  Row-major strides over this shape are the NZ strides (NZ-7).
    """
    batch, R, C, c0 = _check_nz_plane(shape, np.dtype(dtype))
    return (batch, C // c0, R // FRACTAL_ROWS, FRACTAL_ROWS, c0)


def _swap_lines(dst: np.ndarray, src: np.ndarray) -> None:
    """Copy ``src[b, i, j]`` to ``dst[b, j, i]`` for 32-byte void lines, cache-blocked on i.

    ``dst`` has shape (B, J, I) and ``src`` (B, I, J), both C-contiguous views of 32-byte lines.
    """
    B, n_i, n_j = src.shape
    plane = n_i * n_j * C0_BYTES
    if plane <= _CHUNK_BYTES:
        step = max(1, _CHUNK_BYTES // max(plane, 1))
        for b in range(0, B, step):
            np.copyto(dst[b : b + step], src[b : b + step].swapaxes(1, 2))
        return
    rows = max(FRACTAL_ROWS, _CHUNK_BYTES // (n_j * C0_BYTES))
    for b in range(B):
        for i in range(0, n_i, rows):
            np.copyto(dst[b, :, i : i + rows], src[b, i : i + rows].T)


def _as_lines(a: np.ndarray, d0: int, d1: int) -> np.ndarray:
    """View a C-contiguous array as (B, d0, d1) 32-byte lines."""
    return a.reshape(-1).view(np.uint8).view(_LINE).reshape(-1, d0, d1)


def _transcode(a: np.ndarray, to_nz: bool, out: np.ndarray | None = None) -> np.ndarray:
    a = np.asarray(a)
    _, R, C, c0 = _check_nz_plane(a.shape, a.dtype)
    if out is None:
        out = np.empty(a.shape, dtype=a.dtype)
    elif (
        out.shape != a.shape or out.dtype != a.dtype or not out.flags.c_contiguous or not out.flags.writeable
    ):
        raise ValueError(
            f"out must be a writable C-contiguous {a.dtype.name} array of shape "
            f"{a.shape}, got {out.dtype.name} {out.shape}"
        )
    elif np.shares_memory(a, out):
        raise ValueError("out must not overlap the input (NZ packing is not an in-place permutation)")
    if out.size == 0:
        return out
    K = C // c0
    if a.flags.c_contiguous:
        src = _as_lines(a, R, K) if to_nz else _as_lines(a, K, R)
        dst = _as_lines(out, K, R) if to_nz else _as_lines(out, R, K)
        _swap_lines(dst, src)
        return out
    # Arbitrary strides: splitting the last axis is always a view, so one typed copy suffices.
    lead = a.shape[:-2]
    if to_nz:
        np.copyto(out.reshape(*lead, K, R, c0), np.swapaxes(a.reshape(*lead, R, K, c0), -3, -2))
    else:
        np.copyto(out.reshape(*lead, R, K, c0), np.swapaxes(a.reshape(*lead, K, R, c0), -3, -2))
    return out


def pack_nz(a: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Return a C-contiguous copy of logical ``a`` whose bytes are in NZ order (NZ-8).

    Same shape and dtype as ``a``: the NZ annotation is a statement about byte order, the
    logical shape is kept (NZ-1, NZ-32).  Leading axes are packed plane by plane.  ``out``
    (same shape and dtype, C-contiguous, not overlapping ``a``) receives the result instead of
    a new array -- e.g. a buffer that is reused, so no fresh pages are faulted in.
    """
    return _transcode(a, True, out)


def unpack_nz(a: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Inverse of :func:`pack_nz`: decode NZ-ordered bytes back to a row-major logical array."""
    return _transcode(a, False, out)
