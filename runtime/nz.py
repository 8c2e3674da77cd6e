"""Host-side NZ packing: logical arrays <-> bytes in NZ fractal order (NZ-5, NZ-8).

An NZ tensor keeps its *logical* shape; only the byte order changes.  Element ``(b, r, c)``
lives at flat element offset ``b*C*R + (c//c0)*R*c0 + r*c0 + c%c0`` (NZ-8): column blocks of
``c0`` elements (one 32-byte C0 line per row) outermost, all rows of a block inside.  That is a
pure axis swap of ``[B, R, C/c0, c0] -> [B, C/c0, R, c0]``, so packing is one strided copy.

Speed: the swap moves whole 32-byte C0 lines, so it is done on a 32-byte void dtype with
``np.take`` and a precomputed line permutation.  ``take`` copies each 32-byte element with a
fixed-size move (numpy specialises chunk sizes up to 32 bytes), where ``np.copyto`` of the same
swapped view calls ``memmove`` once per line -- 2-3x slower (benchmarks/bench_pack_nz.py).  The
permutation is built once per block shape and cached; a block is at most ``_BLOCK_LINES`` output
lines, so the cached index arrays stay bounded and the call count is ``nbytes / block``, never
per row or per fractal.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import numpy as np

from .dtypes import C0_BYTES, FRACTAL_ROWS, c0_of, itemsize_bits

__all__ = ["nz_blocked_shape", "pack_nz", "unpack_nz"]

#: Output lines per np.take call (16 MiB of bytes).  Smaller blocks measured slower on planes
#: with large strides (0.43x vs 0.54x of np.copyto at 32 KiB line strides); the cached
#: permutation of a full block is 4 MiB, and at most eight are kept.
_BLOCK_LINES = 1 << 19
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


@functools.lru_cache(maxsize=8)
def _block_permutation(n_i: int, n_j: int, jb: int) -> np.ndarray:
    """Source line index of output line ``(j, i)`` for ``j < jb``: ``i * n_j + j`` (read-only)."""
    perm = (np.arange(n_i, dtype=np.intp) * n_j + np.arange(jb, dtype=np.intp)[:, None]).reshape(-1)
    perm.flags.writeable = False
    return perm


def _swap_lines(dst: np.ndarray, src: np.ndarray) -> None:
    """Copy ``src[b, i, j]`` to ``dst[b, j, i]`` for 32-byte void lines.

    ``dst`` has shape (B, J, I) and ``src`` (B, I, J), both C-contiguous.  Output rows ``j`` are
    produced in blocks of ``jb``: block ``j0`` is a contiguous run of ``dst`` and reads
    ``src[b].flat[j0:]`` through the same cached permutation (its largest index,
    ``(I-1)*J + jb-1``, stays inside that suffix because ``j0 + jb <= J``).  ``mode="wrap"`` is
    the identity on these in-range indices and skips numpy's per-index bounds-error path
    (measured ~3x faster).
    """
    B, n_i, n_j = src.shape
    jb = max(1, min(n_j, _BLOCK_LINES // max(n_i, 1)))
    perm = _block_permutation(n_i, n_j, jb)
    flat_src, flat_dst = src.reshape(B, n_i * n_j), dst.reshape(B, n_j * n_i)
    if jb == n_j:  # whole planes: one call over the batch
        np.take(flat_src, perm, axis=1, out=flat_dst, mode="wrap")
        return
    for b in range(B):
        for j0 in range(0, n_j, jb):
            n = min(jb, n_j - j0) * n_i
            np.take(flat_src[b, j0:], perm[:n], out=flat_dst[b, j0 * n_i : j0 * n_i + n], mode="wrap")


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
