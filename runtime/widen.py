"""bf16 -> float32 widening of a strided view (a mad operand's conversion, nzjit/backend/lane_values.py).

bf16 -> float32 is exact: the float32 bits are the bf16 bits shifted up by 16, for every pattern,
NaNs included. When the view's innermost axis is not contiguous - an ND [K, N] weight read as the
mad's N x K operand, each destination row running down the source's columns - numpy casts one
element per strided step (~1.4 ns an element here); the compiled loop (`runtime._lines.widen_bf16`,
runtime/_lines.c) takes 16 destination columns at a time with their source rows in L1, about 3x
faster. A view whose innermost axis is contiguous - a mad operand gathered from NZ C0 lines, 16
elements a line - is widened in one compiled pass (`runtime._lines.widen_bf16_runs`: ~40% less
time than numpy's shift, which dispatches its inner loop once per line), 8 a step with AVX2 where
the CPU has it, and an NZ operand's rows in bands: a row's 16 runs lie one column block apart,
64 KiB for a 2048-row weight, one L2 set (25-35% less time than row by row). Without the
compiled module (no C compiler at install) numpy's cast writes the same bytes.

fp16 -> float32 is exact too, but numpy converts fp16 one element at a time (~2 ns an element
here: a fused expert's fp16 weights cost more to convert than to multiply). `widen_f16` looks
every element up in a 65536-entry table of numpy's own conversion (`runtime._lines.lookup16`),
so its bits are numpy's by construction, ~5x faster.

A mad operand gathered from NZ C0 lines (int8 or fp16, innermost axis contiguous) is converted
in one compiled pass straight from the strided lines (`widen_lines_f32`, runtime/_lines_widen.c):
no gather into a buffer first. int8 -> float32 is exact; fp16 uses the F16C instruction, exact for every value
but a NaN (it quiets a signalling one, numpy keeps the bits), so a view holding a NaN - or a CPU
without F16C - takes the caller's numpy path instead.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
from numpy.lib.stride_tricks import as_strided

from .native import lines as _native  # None where runtime/_lines.c was not built

__all__ = ["COMPILED", "LINE_DTYPES", "widen_bf16", "widen_f16", "widen_lines_f32"]

#: Are the compiled loops built? (Else `widen_bf16` is numpy's cast: the same bytes, slower.)
COMPILED = _native is not None

_BF16 = np.dtype(ml_dtypes.bfloat16)


def widen_bf16(out: np.ndarray, src: np.ndarray) -> None:
    """``out[...] = src`` for a bf16 view `src` (any strides) and a C-contiguous float32 `out` of
    the same shape: exact, the same bits as ``np.copyto(out, src, casting="unsafe")``."""
    if src.dtype != _BF16 or out.dtype != np.float32 or out.shape != src.shape or not out.flags.c_contiguous:
        raise ValueError(
            f"widen_bf16: a bf16 view and a C-contiguous float32 array of its shape, got "
            f"{src.dtype}{src.shape} -> {out.dtype}{out.shape}"
        )
    if _native is not None and 0 < src.ndim <= _RUN_AXES and src.shape[-1] > 1 and src.strides[-1] == 2:
        # contiguous runs (C0 lines, ND rows): the compiled loop merges the axes itself (no
        # as_strided: ~5-15 us a call in Python)
        _native.widen_bf16_runs(src.view(np.uint16), out.view(np.uint32))
        return
    axes = _merged(src.shape, src.strides, _RUN_AXES)
    if _native is None or axes is None:  # not built, empty, or too many axes: numpy's cast
        np.copyto(out, src, casting="unsafe")
        return
    runs = axes[-1][1] == src.itemsize  # contiguous runs (C0 lines, ND rows), else transposing
    if runs:
        axes = [a for a in axes if a[0] > 1]  # no padding: each axis is a step of the odometer
    else:
        axes = _merged(src.shape, src.strides, 3)
        if axes is None:
            np.copyto(out, src, casting="unsafe")
            return
    shape = tuple(n for n, _ in axes)
    view = as_strided(src.view(np.uint16), shape, tuple(s for _, s in axes))
    (_native.widen_bf16_runs if runs else _native.widen_bf16)(view, out.view(np.uint32).reshape(shape))


_F16_TABLE: np.ndarray | None = None  # numpy's float32 of every fp16 bit pattern, built once


def widen_f16(out: np.ndarray, src: np.ndarray) -> None:
    """``out[...] = src`` for a C-contiguous fp16 `src` and a C-contiguous float32 `out` of its
    shape: the same bits as ``np.copyto(out, src, casting="unsafe")`` (numpy's cast made the table)."""
    global _F16_TABLE
    if (
        src.dtype != np.float16
        or out.dtype != np.float32
        or out.shape != src.shape
        or not out.flags.c_contiguous
        or not src.flags.c_contiguous
    ):
        raise ValueError(
            f"widen_f16: a C-contiguous fp16 array and a C-contiguous float32 array of its shape, got "
            f"{src.dtype}{src.shape} -> {out.dtype}{out.shape}"
        )
    if _native is None or src.size < F16_TABLE_FROM:
        np.copyto(out, src, casting="unsafe")
        return
    table = _F16_TABLE
    if table is None:
        patterns = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
        table = _F16_TABLE = patterns.view(np.float16).astype(np.float32).view(np.uint32)
    _native.lookup16(src.view(np.uint16), out.view(np.uint32), table)


#: The source dtypes `widen_lines_f32` converts (a caller may test them first, before the call).
LINE_DTYPES = (np.dtype(np.int8), np.dtype(np.float16))


def widen_lines_f32(out: np.ndarray, src: np.ndarray) -> bool:
    """``out[...] = src`` for an int8 or fp16 view `src` whose innermost axis is contiguous (any
    other strides) and a C-contiguous float32 `out` of its shape, in one compiled pass; the same
    bits as numpy's cast. False when not done (nothing compiled, another dtype or layout, a NaN
    in an fp16 view, no F16C: `out` may be partly written) - the caller then converts."""
    if _native is None or out.dtype != np.float32 or out.shape != src.shape or not out.flags.c_contiguous:
        return False
    if src.dtype not in LINE_DTYPES:
        return False
    if not 0 < src.ndim <= _RUN_AXES or src.size == 0:
        return False
    if src.shape[-1] > 1 and src.strides[-1] != src.itemsize:  # a transposing read
        return False
    # the compiled loop merges the axes itself: no as_strided here (~5 us a call in Python)
    if src.dtype == np.int8:
        _native.widen_i8_runs(src, out)
        return True
    return bool(_native.widen_f16_runs(src.view(np.uint16), out.view(np.uint32)))


#: Below this many elements numpy's cast is as fast as the call into the table loop.
F16_TABLE_FROM = 1024


#: Axes `_lines.widen_bf16_runs` and the other run loops take (their MAX_DIMS).
_RUN_AXES = 8


def _merged(shape: tuple[int, ...], strides: tuple[int, ...], most: int) -> list[tuple[int, int]] | None:
    """The view as at most `most` (size, byte stride) axes, leading ones padded with size 1: axes
    of size 1 dropped, neighbours merged where the outer stride is the inner one's span; None when
    more remain (numpy's cast then) or the view is empty."""
    if 0 in shape:
        return None
    axes: list[tuple[int, int]] = []
    for n, s in zip(shape, strides):
        if n == 1:
            continue
        if axes and axes[-1][1] == s * n:
            axes[-1] = (axes[-1][0] * n, s)
        else:
            axes.append((n, s))
    if len(axes) > most:
        return None
    return [(1, 0)] * (most - len(axes)) + axes
