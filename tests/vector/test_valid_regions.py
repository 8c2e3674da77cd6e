"""The valid region of a tensor view reaches the tiles loaded from it (issue 22 item 7: "a tile whose
valid region is smaller than its shape computes only the valid region"; PyPTO's tensor.slice /
tile.load: "the tile's valid region is the source's valid region, shifted by offsets and cut to the
tile"). Before this, `pl.load` of a `pl.slice(..., valid_shape=)` view read the whole window: a
row sum counted elements the device never loads, and the store wrote them back.

Each case: the tile type's valid shape (the IR fact), the numbers against numpy, and the refusals
with their messages."""

from __future__ import annotations

import numpy as np
import pytest

from nzjit import CompileError, pl

X = (np.arange(16 * 64, dtype=np.float32).reshape(16, 64) % 23) - 11


@pl.kernel
def sliced_rows_summed(x: pl.Tensor[[16, 64], pl.FP32], y: pl.InOut[pl.Tensor[[16, 64], pl.FP32]]):
    v = pl.slice(x, [16, 64], [0, 0], valid_shape=[12, 40])
    t = pl.load(v, [0, 0], [16, 64])
    pl.store(pl.row_expand_sub(t, pl.row_sum(t)), [0, 0], y)


@pl.kernel
def slice_of_slice(x: pl.Tensor[[16, 64], pl.FP32], y: pl.InOut[pl.Tensor[[16, 64], pl.FP32]]):
    v = pl.slice(x, [16, 64], [0, 0], valid_shape=[12, 40])
    w = pl.slice(v, [8, 32], [4, 16])  # inherits rows 4..11 and columns 16..39: [8, 24]
    pl.store(pl.neg(pl.load(w, [0, 0], [8, 32])), [4, 16], y)


@pl.kernel
def load_narrower_and_wider(x: pl.Tensor[[16, 64], pl.FP32], y: pl.InOut[pl.Tensor[[16, 64], pl.FP32]]):
    v = pl.slice(x, [16, 64], [0, 0], valid_shape=[12, 40])
    a = pl.load(v, [8, 0], [8, 64])  # the region under the window: [4, 40]
    b = pl.load(v, [0, 0], [8, 64], valid_shape=[4, 64])  # its own valid_shape narrows: [4, 40]
    pl.store(a, [8, 0], y)
    pl.store(pl.mul(b, 2.0), [0, 0], y)


@pl.kernel
def run_time_region(
    x: pl.Tensor[[16, 64], pl.FP32], y: pl.InOut[pl.Tensor[[16, 64], pl.FP32]], n: pl.Scalar[pl.INDEX]
):
    v = pl.tensor.set_validshape(x, 16, n)
    w = v[0:8, 8:40]  # columns 8 .. min(n, 40) - 1 valid
    pl.store(pl.add(pl.load(w, [0, 0], [8, 32]), 100.0), [0, 8], y)


def _ir(kernel, *args) -> str:  # noqa: ANN001
    return str(kernel.lower(*args).ir("trace"))


def test_a_load_of_a_sliced_view_computes_and_stores_the_region_only() -> None:
    y = np.full_like(X, 7)
    sliced_rows_summed(X, y)
    ref = np.full_like(X, 7)
    v = X[:12, :40]
    ref[:12, :40] = v - v.sum(axis=1, keepdims=True)  # the sum of the valid columns only
    np.testing.assert_allclose(y, ref, rtol=1e-6)
    assert "f32[16,64]@Vec<valid 12,40> = tile.load" in _ir(sliced_rows_summed, X, y)


def test_a_slice_of_a_slice_inherits_the_region_shifted_and_cut() -> None:
    y = np.full_like(X, 7)
    slice_of_slice(X, y)
    ref = np.full_like(X, 7)
    ref[4:12, 16:40] = -X[4:12, 16:40]
    np.testing.assert_array_equal(y, ref)
    assert "f32[8,32]@Vec<valid 8,24> = tile.load" in _ir(slice_of_slice, X, y)


def test_a_load_takes_the_region_under_its_window_and_never_widens_it() -> None:
    y = np.full_like(X, 7)
    load_narrower_and_wider(X, y)
    ref = np.full_like(X, 7)
    ref[8:12, :40] = X[8:12, :40]
    ref[:4, :40] = 2 * X[:4, :40]
    np.testing.assert_array_equal(y, ref)
    ir = _ir(load_narrower_and_wider, X, y)
    assert ir.count("f32[8,64]@Vec<valid 4,40> = tile.load") == 2


@pytest.mark.parametrize("n", [64, 40, 20, 9])
def test_a_run_time_region_is_cut_to_the_window_at_run_time(n: int) -> None:
    y = np.full_like(X, 7)
    run_time_region(X, y, n)
    ref = np.full_like(X, 7)
    hi = min(n, 40)
    ref[:8, 8:hi] = X[:8, 8:hi] + 100
    np.testing.assert_array_equal(y, ref)


def test_a_whole_view_without_a_region_loads_as_before() -> None:
    @pl.kernel
    def plain(x: pl.Tensor[[16, 64], pl.FP32], y: pl.Out[pl.Tensor[[16, 64], pl.FP32]]):
        pl.store(pl.load(pl.slice(x, [16, 64], [0, 0]), [0, 0], [16, 64]), [0, 0], y)

    np.testing.assert_array_equal(plain(X), X)
    assert "f32[16,64]@Vec = tile.load" in _ir(plain, X, np.zeros_like(X))


def test_a_load_outside_the_region_is_refused() -> None:
    @pl.kernel
    def outside(x: pl.Tensor[[16, 64], pl.FP32], y: pl.Out[pl.Tensor[[16, 64], pl.FP32]]):
        v = pl.slice(x, [16, 64], [0, 0], valid_shape=[12, 40])
        pl.store(pl.load(v, [0, 48], [16, 16]), [0, 0], y)

    with pytest.raises(
        CompileError, match=r"pl.load window \[48, 64\) on axis 1 lies outside the valid region"
    ):
        outside.lower(X, np.zeros_like(X))


def test_a_reshape_of_a_view_with_a_region_is_refused() -> None:
    @pl.kernel
    def reshaped(x: pl.Tensor[[16, 64], pl.FP32], y: pl.Out[pl.Tensor[[16, 64], pl.FP32]]):
        v = pl.slice(x, [16, 64], [0, 0], valid_shape=[12, 40])
        pl.store(pl.load(pl.reshape(v, [32, 32]), [0, 0], [16, 32]), [0, 0], y)

    with pytest.raises(CompileError, match=r"pl.reshape of a tensor view with a valid region \[12, 40\]"):
        reshaped.lower(X, np.zeros_like(X))


def test_indexing_an_axis_whose_region_is_known_at_run_time_only_is_refused() -> None:
    @pl.kernel
    def indexed(
        x: pl.Tensor[[16, 64], pl.FP32], y: pl.Out[pl.Tensor[[16, 64], pl.FP32]], n: pl.Scalar[pl.INDEX]
    ):
        v = pl.tensor.set_validshape(x, n, 64)
        pl.store(pl.load(v[3:4, :], [0, 0], [1, 64]), [0, 0], y)  # a window: allowed
        pl.store(pl.load(pl.reshape(v[3], [1, 64]), [0, 0], [1, 64]), [1, 0], y)

    with pytest.raises(
        CompileError, match="indexing axis 0 of a view whose valid extent there is known only"
    ):
        indexed.lower(X, np.zeros_like(X), 8)
