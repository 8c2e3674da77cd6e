"""runtime.vector_tree's rounded binary-tree sum (TROWSUM / TCOLSUM): the compiled row loop
(runtime/_lines.c tree_sum) gives the bits of numpy's level-by-level form (`tree_levels`) for every
length, dtype, stacked leading axes and special values; rows summing to NaN are redone by numpy;
without the compiled module `tree_sum` is numpy's form; the compiled loop's refusals."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import runtime.vector_tree as V

BF16 = np.dtype(ml_dtypes.bfloat16)
DTYPES = [np.dtype(np.float32), np.dtype(np.float16), BF16]

compiled = pytest.mark.skipif(V._native is None, reason="runtime._lines was not built (no C compiler)")

SPECIALS = [0.0, -0.0, np.inf, -np.inf, np.nan, 65504.0, 65520.0, 6e-8, -3e-5, 1e-40, 3.4e38]


@st.composite
def values(draw):
    """Rows of 1..2048 values of a tile dtype under 1-3 stacked leading axes, widened to float32
    (the compute dtype): random magnitudes (overflowing fp16, subnormals), some special values."""
    dtype = draw(st.sampled_from(DTYPES))
    n = draw(st.one_of(st.integers(1, 70), st.integers(1, 2048)))
    lead = tuple(draw(st.lists(st.integers(1, 4), min_size=0, max_size=2)))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    scale = draw(st.sampled_from([1e-6, 1.0, 300.0, 1e5]))
    with np.errstate(over="ignore"):  # fp16 overflows to inf: a value the sums must carry too
        x = (rng.standard_normal((*lead, max(1, 7 // max(1, len(lead))), n)) * scale).astype(dtype)
    if draw(st.booleans()):  # special values at random places
        flat = x.reshape(-1)
        k = draw(st.integers(1, 6))
        flat[rng.integers(0, flat.size, k)] = rng.choice(SPECIALS, k).astype(dtype)
    return x, dtype


@compiled
@settings(max_examples=300, deadline=None)
@given(values())
def test_compiled_tree_is_numpys_tree_bit_for_bit(case):
    x, dtype = case
    c = np.float32
    with np.errstate(all="ignore"):
        got = V.tree_sum(x, -1, dtype)
        want = V.tree_levels(x.astype(c), dtype)
    assert got.dtype == want.dtype and got.shape == want.shape == x.shape[:-1]
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))  # the same bits, NaNs included


@compiled
@settings(max_examples=100, deadline=None)
@given(values())
def test_compiled_rows_without_nan_match_bit_for_bit(case):
    """The loop itself (not the NaN redo): every row it reports as a number is numpy's bits."""
    x, dtype = case
    rows = np.ascontiguousarray(x.astype(np.float32)).reshape(-1, x.shape[-1])
    out = np.empty(rows.shape[0], np.float32)
    nan = V._native.tree_sum(rows, out, V._TREE_ROUNDING[dtype])
    with np.errstate(all="ignore"):
        want = V.tree_levels(rows, dtype)
    assert nan == int(np.isnan(want).sum())
    ok = ~np.isnan(want)
    assert np.array_equal(out[ok].view(np.uint32), want[ok].view(np.uint32))


@compiled
@settings(max_examples=100, deadline=None)
@given(values())
def test_avx2_loop_is_the_baseline_loop_bit_for_bit(case):
    """runtime/_lines.c compiles the row loop twice (SSE2 baseline, AVX2 chosen at run time): the
    same IEEE adds and roundings in the same pairs, so both give the same bits and NaN count."""
    x, dtype = case
    rows = np.ascontiguousarray(x.astype(np.float32)).reshape(-1, x.shape[-1])
    fast, base = np.empty(rows.shape[0], np.float32), np.empty(rows.shape[0], np.float32)
    with np.errstate(all="ignore"):
        nan_fast = V._native.tree_sum(rows, fast, V._TREE_ROUNDING[dtype])
        nan_base = V._native.tree_sum(rows, base, V._TREE_ROUNDING[dtype], True)
    assert nan_fast == nan_base
    ok = ~np.isnan(base)
    assert np.array_equal(np.isnan(fast), ~ok)
    assert np.array_equal(fast[ok].view(np.uint32), base[ok].view(np.uint32))


@compiled
def test_strided_rows_and_column_sums():
    """Rows of a view with a row stride (a valid region) take the loop; a column sum (the reduced
    axis strided) is numpy's form; both agree with numpy's levels."""
    x = np.random.default_rng(3).standard_normal((16, 1024)).astype(np.float16)
    region = x[:5, :1000]
    for axis in (-1, -2):
        got = V.tree_sum(region, axis, np.dtype(np.float16))
        want = V.tree_levels(np.moveaxis(region.astype(np.float32), axis, -1), np.dtype(np.float16))
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


def test_without_the_compiled_loop_numpy_sums(monkeypatch):
    x = np.random.default_rng(4).standard_normal((3, 4, 37)).astype(np.float32)
    want = V.tree_sum(x, -1, np.dtype(np.float32))
    monkeypatch.setattr(V, "_native", None)
    assert np.array_equal(V.tree_sum(x, -1, np.dtype(np.float32)), want)


@compiled
@pytest.mark.parametrize(
    "src, dst, rounding, match",
    [
        (np.zeros((2, 3), np.float64), np.zeros(2, np.float32), 0, "float32"),
        (np.zeros(6, np.float32), np.zeros(1, np.float32), 0, "2-D"),
        (np.zeros((2, 6), np.float32)[:, ::2], np.zeros(2, np.float32), 0, "contiguous"),
        (np.zeros((2, 3), np.float32), np.zeros(3, np.float32), 0, "one float32 per row"),
        (np.zeros((2, 3), np.float32), np.zeros(2, np.float32), 3, "rounding"),
    ],
)
def test_tree_sum_refusals(src, dst, rounding, match):
    with pytest.raises(ValueError, match=match):
        V._native.tree_sum(src, dst, rounding)


@compiled
def test_tree_sum_refuses_overlap():
    buf = np.zeros((4, 4), np.float32)
    with pytest.raises(ValueError, match="overlap"):
        V._native.tree_sum(buf, buf[0], 0)
