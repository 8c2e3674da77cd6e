"""Host-side NZ packing: logical arrays <-> bytes in NZ fractal order (NZ-5, NZ-8).

An NZ tensor keeps its *logical* shape; only the byte order changes.  Element ``(b, r, c)``
lives at flat element offset ``b*C*R + (c//c0)*R*c0 + r*c0 + c%c0`` (NZ-8): column blocks of
``c0`` elements (one 32-byte C0 line per row) outermost, all rows of a block inside.  That is a
pure axis swap of ``[B, R, C/c0, c0] -> [B, C/c0, R, c0]``, so packing is one strided copy.

Speed: the swap moves whole 32-byte C0 lines (``_swap_lines``), in one of two ways.
- Compiled (``runtime._lines``, built from runtime/_lines.c by setup.py where a C compiler is
  found): bands of 8 source rows, each band's lines written out as 256-byte runs, every cache
  line fetched once.  About the bandwidth of ``np.copyto`` on two threads (0.60-1.23x in the
  README's table), 0.50-0.76x on one.
- numpy (the fallback; the same bytes): numpy can move these lines only one per element of a
  strided copy or a gather, and its per-element dispatch, not the memory, bounds it: ~0.45x of
  ``np.copyto`` for an 8 MiB plane held in cache, where the same loop compiled reaches ~0.75x.
  The Python loop runs once per MiB at most, never per row or per fractal.
  - Gathered: ``np.take`` through a cached permutation (one call over all planes on one
    thread) writes the output in order and reads the lines scattered.  Used while the scattered
    reads hit the cache: planes of up to ``_PACK_GATHER_LINES`` lines (1 MiB) when packing,
    ``_UNPACK_GATHER_LINES`` (8 MiB) when unpacking.
  - Tiled: 1 MiB of lines per copy, ``_PACK_TILE`` (256 rows x 128 lines) when packing,
    ``_UNPACK_TILE`` (512 x 64) when unpacking.  Inside a tile the logical side moves in runs
    of its lines (4 or 2 KiB), the NZ side in runs of its rows (8 or 16 KiB), so both sides
    stream.  numpy's copy runs along the output's runs, reading one line from each of the
    other side's: 256 logical rows when packing, 64 NZ column blocks when unpacking.  A gather
    over a plane larger than the cache walks a column of lines through every row instead, at a
    stride that is often a multiple of 4 KiB (every line in the same few cache sets).

Threads: a call moving at least ``_PARALLEL_BYTES`` is cut into ``runtime.threads.THREADS``
parts that write disjoint lines of the output (whole planes; ranges of bands, or of a gathered
plane's output lines, of every plane; runs of tiles) and run at once (`runtime.threads.run`);
the compiled swap and numpy release the GIL while they copy, and one core alone moves
scattered lines at well under the memory's bandwidth.

Measured, numpy's copies, against ``np.copyto`` of the same bytes (benchmarks/bench_pack_nz.py;
medians of five fresh processes, which differ by up to 0.1x among themselves):
- larger planes, tiled vs gathered: int8[4096, 4096] 0.46 / 0.42x vs 0.28 / 0.30x (pack /
  unpack), float32[4096, 4096] 0.47 / 0.44x vs 0.31 / 0.32x, bf16[4096, 2048] 0.58 / 0.41x vs
  0.30 / 0.32x;
- packing a bf16[2048, 2048] plane (8 MiB), tiled vs gathered: 0.42-0.48x vs 0.35x;
- unpacking planes that stay in cache, gathered vs tiled: int8[8, 2048, 2048] 0.75x vs 0.56x,
  bf16[2048, 2048] 0.48x vs 0.37-0.44x.
(Those are one-thread figures; the README's table has the numpy copies' two-thread figures.)
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence

import numpy as np

from . import threads
from .dtypes import C0_BYTES, FRACTAL_ROWS, c0_of, itemsize_bits
from .layout_marks import NzArray, is_nz, mark_nz, plain
from .native import lines as _native  # the compiled line swap; None where not built: numpy copies

__all__ = ["nz_blocked_shape", "pack_nz", "unpack_nz", "as_nz"]

#: A tile: (logical rows, C0 lines of a row), 1 MiB of lines.  A plane shorter than a tile on
#: one axis gets a tile as long on the other (the same 1 MiB, fewer copies).  Medians of five
#: processes, 256 x 128 vs 512 x 64: packing bf16[2048, 2048] 0.39 / 0.30x (one thread) and
#: 0.52 / 0.48x (two), float32[4096, 4096] 0.60 / 0.38x and 0.74 / 0.64x; unpacking
#: float32[4096, 4096] 0.29 / 0.54x and 0.37 / 0.72x (128 NZ column blocks per output run
#: are too many).
_PACK_TILE = (256, 128)
_UNPACK_TILE = (512, 64)
#: Planes of at most this many lines are gathered whole (1 MiB when packing, 8 MiB unpacking).
_PACK_GATHER_LINES = 1 << 15
_UNPACK_GATHER_LINES = 1 << 18
_LINE = np.dtype(f"V{C0_BYTES}")
#: Below this a hand-off to the pool (~50-100 us here) costs about what the second thread saves.
_PARALLEL_BYTES = 4 << 20


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


def _tile_shape(n_rows: int, n_lines: int, tile: tuple[int, int]) -> tuple[int, int]:
    """(rows, lines) of one copy: `tile`, clipped to the plane and grown along the axis the
    plane is long on, so that every copy moves about one tile."""
    tile_rows, tile_lines = tile
    budget = tile_rows * tile_lines
    lines = min(n_lines, tile_lines)
    rows = min(n_rows, max(tile_rows, budget // lines))
    return rows, min(n_lines, max(lines, budget // rows))


@functools.lru_cache(maxsize=8)
def _plane_permutation(n_i: int, n_j: int) -> np.ndarray:
    """Source line ``i * n_j + j`` of output line ``(j, i)``: the swap of an (n_i, n_j) plane of
    lines (read-only; at most ``_UNPACK_GATHER_LINES`` indices, 2 MiB)."""
    perm = (np.arange(n_i, dtype=np.intp) * n_j + np.arange(n_j, dtype=np.intp)[:, None]).reshape(-1)
    perm.flags.writeable = False
    return perm


def _swap_lines(logical: np.ndarray, nz: np.ndarray, to_nz: bool) -> None:
    """Copy between ``logical[b, r, j]`` and ``nz[b, j, r]`` (32-byte void lines, both
    C-contiguous): into ``nz`` when packing, into ``logical`` when unpacking."""
    n = threads.THREADS if logical.nbytes >= _PARALLEL_BYTES else 1
    if _native is not None:
        src, dst = (logical, nz) if to_nz else (nz, logical)
        threads.run(_native_parts(src, dst, n))
    else:
        threads.run(_parts(logical, nz, to_nz, n))


def _native_parts(src: np.ndarray, dst: np.ndarray, n: int) -> list[Callable[[], None]]:
    """``dst[b, j, i] = src[b, i, j]`` by the compiled loop, as at most `n` parts that write
    disjoint lines: ranges of planes, or with fewer planes than parts, ranges of source rows
    (whole bands of the loop's ``BAND`` rows) of every plane."""
    B, n_i, n_j = src.shape
    assert _native is not None
    swap = _native.swap
    if B >= n:
        return [
            functools.partial(swap, src[b0:b1], dst[b0:b1], b1 - b0, n_i, n_j, 0, n_i)
            for b0, b1 in _split(B, n)
        ]
    band = _native.BAND
    bands = -(-n_i // band)
    return [
        functools.partial(swap, src, dst, B, n_i, n_j, lo * band, min(hi * band, n_i))
        for lo, hi in _split(bands, n)
    ]


def _parts(logical: np.ndarray, nz: np.ndarray, to_nz: bool, n: int) -> list[Callable[[], None]]:
    """The swap as at most `n` parts of about equal size that write disjoint lines of the
    output, so that they may run on `n` threads at once."""
    B, R, J = logical.shape
    if R * J <= (_PACK_GATHER_LINES if to_nz else _UNPACK_GATHER_LINES):
        # ``mode="wrap"`` is the identity on these in-range indices and skips numpy's per-index
        # bounds-error path (measured ~3x faster).
        src, dst, n_i, n_j = (logical, nz, R, J) if to_nz else (nz, logical, J, R)
        perm = _plane_permutation(n_i, n_j)
        src2, dst2 = src.reshape(B, -1), dst.reshape(B, -1)
        if B >= n:  # whole planes per part
            return [
                functools.partial(np.take, src2[b0:b1], perm, axis=1, out=dst2[b0:b1], mode="wrap")
                for b0, b1 in _split(B, n)
            ]
        # few planes: each part gathers one range of output lines of every plane (a range of
        # a plane is contiguous, as np.take's out= must be to be written in place)
        return [functools.partial(_gather_range, src2, dst2, perm, lo, hi) for lo, hi in _split(perm.size, n)]
    rb, jb = _tile_shape(R, J, _PACK_TILE if to_nz else _UNPACK_TILE)
    tiles = [(b, r, j) for b in range(B) for r in range(0, R, rb) for j in range(0, J, jb)]
    return [
        functools.partial(_copy_tiles, logical, nz, to_nz, rb, jb, tiles[t0:t1])
        for t0, t1 in _split(len(tiles), n)
    ]


def _split(size: int, n: int) -> list[tuple[int, int]]:
    """``[lo, hi)`` bounds of ``min(n, size)`` nearly equal, non-empty parts of ``range(size)``
    (one empty part when `size` is 0)."""
    n = max(1, min(n, size))
    return [(size * k // n, size * (k + 1) // n) for k in range(n)]


def _gather_range(src: np.ndarray, dst: np.ndarray, perm: np.ndarray, lo: int, hi: int) -> None:
    for b in range(src.shape[0]):
        np.take(src[b], perm[lo:hi], out=dst[b, lo:hi], mode="wrap")


def _copy_tiles(
    logical: np.ndarray, nz: np.ndarray, to_nz: bool, rb: int, jb: int, tiles: list[tuple[int, int, int]]
) -> None:
    for b, r, j in tiles:
        lg = logical[b, r : r + rb, j : j + jb]
        nt = nz[b, j : j + jb, r : r + rb].T
        if to_nz:
            np.copyto(nt, lg)
        else:
            np.copyto(lg, nt)


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
        logical, nz = (a, out) if to_nz else (out, a)
        _swap_lines(_as_lines(logical, R, K), _as_lines(nz, K, R), to_nz)
        return out
    # Arbitrary strides: splitting the last axis is always a view, so one typed copy suffices.
    lead = a.shape[:-2]
    if to_nz:
        np.copyto(out.reshape(*lead, K, R, c0), np.swapaxes(a.reshape(*lead, R, K, c0), -3, -2))
    else:
        np.copyto(out.reshape(*lead, R, K, c0), np.swapaxes(a.reshape(*lead, K, R, c0), -3, -2))
    return out


def pack_nz(a: np.ndarray, out: np.ndarray | None = None) -> NzArray:
    """Return a C-contiguous copy of logical ``a`` whose bytes are in NZ order (NZ-8), marked NZ
    (a `runtime.layout_marks.NzArray`, which a kernel's NZ parameter requires).

    Same shape and dtype as ``a``: the NZ annotation is a statement about byte order, the
    logical shape is kept (NZ-1, NZ-32).  Leading axes are packed plane by plane.  ``out``
    (same shape and dtype, C-contiguous, not overlapping ``a``) receives the result instead of
    a new array -- e.g. a buffer that is reused, so no fresh pages are faulted in. An ``out``
    that is an NzArray (an earlier ``pack_nz`` result) is returned itself, marked; a plain
    ``out`` gets a marked view of its memory returned (``out`` itself stays unmarked).  An array already marked NZ is refused (packing it again would
    scramble it): ValueError "already NZ".
    """
    if is_nz(a):
        raise ValueError(
            f"pack_nz: the array {a.dtype.name}{list(a.shape)} is already NZ (pack_nz output or as_nz); "
            "packing it again scrambles it: pass it as it is"
        )
    packed = _transcode(plain(a), True, None if out is None else plain(out))
    if isinstance(out, NzArray):  # a marked buffer reused (or an unmarked NzArray): marked in place
        out._nz = True
        return out
    return mark_nz(packed)


def unpack_nz(a: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Inverse of :func:`pack_nz`: decode NZ-ordered bytes back to a row-major logical array
    (a plain, unmarked array)."""
    return _transcode(plain(a), False, None if out is None else plain(out))


def as_nz(a: np.ndarray) -> NzArray:
    """Declare that the bytes of ``a`` are already in NZ order, without copying: e.g. a weight
    read back from a file that ``pack_nz`` wrote. ``a`` must be C-contiguous with a valid NZ
    logical shape (rows a multiple of 16, columns of c0; ValueError naming the rule). A marked
    array is returned as it is. The result is a marked view of the same memory."""
    if not isinstance(a, np.ndarray):
        raise TypeError(f"as_nz expects a numpy array, got {type(a).__name__}")
    if is_nz(a):
        return a  # type: ignore[return-value]
    if not a.flags.c_contiguous:
        raise ValueError(f"as_nz needs C-contiguous bytes (the NZ image in order), got strides {a.strides}")
    _check_nz_plane(a.shape, a.dtype)
    return mark_nz(a)
