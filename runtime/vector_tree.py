"""The rounded binary-tree sum of TROWSUM / TCOLSUM (runtime/vector.py's `reduce_values`).

pto-isa's vcgadd / vcadd reduce as a binary tree, rounded to the tile dtype at every level: level
by level, element i + the element half a level on (an odd level's last element carried on). Rows
of float32 compute values (fp32 tiles, fp16 / bf16 widened) whose reduced axis is contiguous take
the compiled loop (runtime/_lines.c `tree_sum`): the same float adds in the same pairs, the same
round-to-nearest-even to fp16 / bf16 per level, so the same bits; numpy's level-by-level adds on
views of one buffer copy their operands (its overlap test cannot prove the halves apart), about
3x the time. `tree_levels` is numpy's form: the fallback without a compiler, for column sums and
integer sums, and for a row whose sum is NaN (which payload two NaN operands give is the ufunc's).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from .native import lines as _native  # None where runtime/_lines.c was not built

__all__ = ["tree_sum", "tree_levels", "compute_dtype"]

F16, F32, BF16 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(ml_dtypes.bfloat16)


def compute_dtype(d: np.dtype) -> np.dtype:
    """The dtype the vector unit computes a tile dtype in: fp16 / bf16 in fp32, rounded once per
    instruction (runtime/vector.py's module docstring), others in their own."""
    return F32 if d in (F16, BF16) else d


def tree_sum(x: np.ndarray, axis: int, dtype: np.dtype) -> np.ndarray:
    """Sum along `axis` as a binary tree, rounding to `dtype` at each level (vcgadd / vcadd): level
    by level, element i + the element half a level on (an odd level's last element carried on).
    float32 rows (the reduced axis contiguous: TROWSUM) take the compiled loop (runtime/_lines.c
    `tree_sum`: the same adds, without numpy's copies of overlapping halves); anything else, and
    a row whose sum is NaN (the payload two NaN operands give is the ufunc's), numpy's levels."""
    c = compute_dtype(dtype)  # fp16 / bf16 sums are fp32 adds
    x = x.astype(c, copy=False)
    if axis != -1 and axis != x.ndim - 1:
        x = np.moveaxis(x, axis, -1)
    rounding = _TREE_ROUNDING.get(dtype)
    if _native is not None and rounding is not None and x.shape[-1] > 1 and x.strides[-1] == c.itemsize:
        rows: np.ndarray | None = x.view()
        try:
            rows.shape = (-1, x.shape[-1])  # type: ignore[union-attr]  # no copy: refused when it would need one
        except AttributeError:
            rows = None
        if rows is not None:
            out = np.empty(rows.shape[0], c)
            if _native.tree_sum(rows, out, rounding):
                nan = np.flatnonzero(np.isnan(out))
                out[nan] = tree_levels(rows[nan], dtype)
            return out.reshape(x.shape[:-1])
    return tree_levels(x, dtype)


#: The rounding code of `tree_sum` per tile dtype (float32 sums: fp32 none, fp16 / bf16 per level).
_TREE_ROUNDING = {F32: 0, F16: 1, BF16: 2}


def tree_levels(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """numpy's form of `tree_sum` along the last axis of `x` (already in the compute dtype): level by
    level in one buffer of half the length (the sums written over the terms they replace)."""
    c = x.dtype
    n = x.shape[-1]
    if n <= 1:
        return x[..., 0].copy()
    half = n // 2
    buf = np.empty(x.shape[:-1] + (half + n % 2,), c)
    src = x
    while n > 1:
        half, odd = n // 2, n % 2
        np.add(src[..., :half], src[..., half : 2 * half], out=buf[..., :half])
        if c != dtype:  # fp16: every level rounds to the tile dtype
            buf[..., :half] = buf[..., :half].astype(dtype)
        if odd:
            buf[..., half] = src[..., 2 * half]
        src, n = buf, half + odd
    return buf[..., 0].copy()
