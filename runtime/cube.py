"""Cube-side instructions: TMOV / TEXTRACT between on-chip tiles, and TMATMUL (``mad``).

TMATMUL reproduces the two A2/A3 defects of hardware-model.md §6:

* ``m == 1`` is forced to 16: ``mad`` computes 16 rows from whatever Left holds in rows 1..15.
* ``mad`` has no destination-stride operand: it lays C out in L0C with a column-block pitch of
  ``ceil16(m)*16`` elements, not ``Acc.Rows*16`` (pto-isa#253, pypto#2470).  A store that reads
  the tile as declared (pitch ``Rows``) then sees blocks 1.. at the wrong place.

int8 x int8 is exact (int32, wrapping); fp16 / bf16 / fp32 inputs are multiplied in float32
(the hardware summation order is undocumented).  One ``np.matmul`` per instruction.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from .convert import check_acc_pair, fixpipe_convert
from .dma import ceil16, pto_assert, static_check, write_in_order
from .dtypes import FRACTAL_ROWS, c0_of
from .errors import DeviceError
from .tile import TileBuf

__all__ = ["tmov", "tmatmul", "MATMUL_DTYPES"]

_F16, _BF16 = np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)
_F32, _I8, _I32 = np.dtype(np.float32), np.dtype(np.int8), np.dtype(np.int32)
#: Allowed (C, A, B) dtype triples of TMATMUL on A2/A3 [MM].
MATMUL_DTYPES = frozenset({(_I32, _I8, _I8), (_F32, _F16, _F16), (_F32, _F32, _F32), (_F32, _BF16, _BF16)})
#: Every partial sum of k int8 products is an integer of magnitude <= k * 128 * 128; a float
#: format holds all such integers exactly (whatever the BLAS summation order) below 2**mantissa.
_F32_EXACT_K = 2**24 // (128 * 128)
_F64_EXACT_K = 2**53 // (128 * 128)

_MOVES = {("Mat", "Left"), ("Mat", "Right"), ("Acc", "Vec"), ("Vec", "Vec"), ("Vec", "Mat")}


def tmov(
    dst: TileBuf,
    src: TileBuf,
    row_off: int = 0,
    col_off: int = 0,
    *,
    transpose: bool = False,
    relu: bool = False,
) -> None:
    """Copy a window of ``src``'s logical matrix into all of ``dst`` (in ``dst``'s layout).

    Mat -> Left / Right is TEXTRACT: the window starts at (row_off, col_off), which must sit on
    the source's fractal grid (multiples of 16 rows / c0 columns).  With ``transpose`` the
    window is ``dst.cols x dst.rows`` and lands transposed -- how an NZ ``[N, K]`` weight
    becomes the Right operand of ``x @ w.T`` (its bytes already are Zn of ``w.T``).
    Acc -> Vec goes through the fixpipe (fp32 -> fp16 / bf16 conversion, optional ReLU); every
    other move keeps the dtype.
    """
    dst._live()
    src._live()
    static_check(
        (src.space, dst.space) in _MOVES,
        lambda: f"TMOV {src.space} -> {dst.space} is not supported; allowed {sorted(_MOVES)}",
    )
    nrows, ncols = (dst.cols, dst.rows) if transpose else (dst.rows, dst.cols)
    if src.space == "Mat":
        c0 = c0_of(src.dtype)
        if row_off % FRACTAL_ROWS or col_off % c0:
            raise DeviceError(
                f"TEXTRACT offset ({row_off}, {col_off}) must be a multiple of "
                f"(16, c0 = {c0}) (the source fractal grid)"
            )
    if src.space == "Acc":
        check_acc_pair(src.dtype, dst.dtype)
    else:
        static_check(
            src.dtype.itemsize == dst.dtype.itemsize and src.dtype == dst.dtype,
            lambda: f"TMOV {src.dtype.name} -> {dst.dtype.name} changes the dtype",
        )
        static_check(not relu, lambda: "relu exists on the fixpipe (Acc -> Vec) path only")
    win = src.window(row_off, col_off, nrows, ncols)
    if src.space == "Acc":
        win = fixpipe_convert(win, dst.dtype, relu)
    dst.set_logical(win.T if transpose else win)


def _operands(acc: TileBuf, left: TileBuf, right: TileBuf) -> None:
    for t, space, layout in ((acc, "Acc", "ACC"), (left, "Left", "ZZ"), (right, "Right", "ZN")):
        t._live()
        if t.space != space or t.layout != layout:
            static_check(False, f"TMATMUL operand must be a {space} {layout} tile, got {t!r}")
    triple = (acc.dtype, left.dtype, right.dtype)
    static_check(
        triple in MATMUL_DTYPES,
        lambda: (
            f"TMATMUL dtypes (C, A, B) = ({', '.join(d.name for d in triple)}) not in the allowed triples"
        ),
    )


def _product(a: np.ndarray, b: np.ndarray, k: int) -> np.ndarray:
    """A @ B in the accumulator's arithmetic: exact int32 (wrapping) or float32."""
    if a.dtype == _I8:
        for limit, ft in ((_F32_EXACT_K, np.float32), (_F64_EXACT_K, np.float64)):
            if k <= limit:  # provably exact in this float format: use BLAS
                return np.matmul(a.astype(ft), b.astype(ft)).astype(np.int64)
        return np.matmul(a.astype(np.int64), b.astype(np.int64))
    return np.matmul(a.astype(np.float32), b.astype(np.float32))


def tmatmul(
    acc: TileBuf,
    left: TileBuf,
    right: TileBuf,
    accumulate: bool,
    m: int | None = None,
    k: int | None = None,
    n: int | None = None,
    *,
    debug: bool = False,
) -> None:
    """TMATMUL (``accumulate=False``) / TMATMUL_ACC: ``C[i, j] (+)= sum_kk A[i, kk] B[kk, j]``.

    m, k, n default to Left.validRow, Left.validCol, Right.validCol.  C(i, j) is written at L0C
    element ``(j//16)*ceil16(m)*16 + i*16 + j%16`` of the Acc tile -- the pitch defect -- for
    i < m, j < n only (what mad puts in the padding of a fractal is undocumented).
    """
    _operands(acc, left, right)
    m = left.valid_row if m is None else int(m)
    k = left.valid_col if k is None else int(k)
    n = right.valid_col if n is None else int(n)
    for name, v in (("m", m), ("k", k), ("n", n)):
        if v < 1:
            raise DeviceError(f"TMATMUL {name} = {v} must be >= 1")
        if v > 4095:
            pto_assert(False, f"TMATMUL {name} = {v} in [1, 4095]", debug)
    if m == 1:
        m = 16  # non-GEMV mad computes a whole 16-row fractal from stale Left rows 1..15
    if m > left.rows or k > left.cols or k > right.rows or n > right.cols:
        raise DeviceError(
            f"TMATMUL m={m}, k={k}, n={n} exceeds Left {left.rows}x{left.cols} "
            f"or Right {right.rows}x{right.cols}"
        )
    c = _product(left.window(0, 0, m, k), right.window(0, 0, k, n), k)
    m16, E = ceil16(m), acc.dtype.itemsize
    nfull, rem = divmod(n, 16)
    nblk = nfull + (rem > 0)
    view = acc.view(0, (nblk, m, 16 * E), (m16 * 16 * E, 16 * E, 1)).view(acc.dtype)
    if accumulate:
        old = np.ascontiguousarray(view.transpose(1, 0, 2)).reshape(m, nblk * 16)[:, :n]
        c = old.astype(c.dtype) + c
    new = c.astype(acc.dtype)  # int64 -> int32 wraps mod 2**32, like the int32 accumulator
    if nfull:
        write_in_order(view[:nfull], new[:, : nfull * 16].reshape(m, nfull, 16).transpose(1, 0, 2))
    if rem:
        view[nfull, :, :rem] = new[:, nfull * 16 :]
