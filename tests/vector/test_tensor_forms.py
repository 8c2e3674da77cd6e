"""The tensor forms `pl.tensor.set_validshape` and `pl.tensor.transpose` (issue 23 item 5; PyPTO's
signatures `set_validshape(tensor, valid_rows, valid_cols)` and `transpose(tensor, axis1, axis2,
valid_shape=None)`), and the `pl.set_validshape` / `pl.transpose` names dispatching on a tensor.

set_validshape moves no data: it is a whole-tensor view with a valid region, which a tensor-level
op loads alone (the tile's valid shape), so the op computes and its store writes that region;
transpose is the Vec transpose (TTRANS) of the tensor loaded into Vec."""

from __future__ import annotations

import numpy as np
import pytest

import nzjit
from nzjit import CompileError, pl

X = np.arange(16 * 64, dtype=np.float32).reshape(16, 64) - 300


@pl.kernel
def doubled_region(
    x: pl.Tensor[[16, 64], pl.FP32], y: pl.InOut[pl.Tensor[[16, 64], pl.FP32]], n: pl.Scalar[pl.INDEX]
):
    v = pl.tensor.set_validshape(x, 8, n)  # rows static, columns a run-time scalar
    pl.store(pl.add(v, v), [0, 0], y)


@pl.kernel
def dispatched(x: pl.Tensor[[16, 64], pl.FP32], y: pl.InOut[pl.Tensor[[16, 64], pl.FP32]]):
    v = pl.set_validshape(x, 4, 32)  # pl.set_validshape of a tensor is the tensor form
    pl.store(pl.neg(v), [0, 0], y)


@pl.kernel
def transposed(x: pl.Tensor[[8, 64], pl.FP32], y: pl.Out[pl.Tensor[[64, 8], pl.FP32]]):
    pl.store(pl.tensor.transpose(x, 0, 1), [0, 0], y)


@pl.kernel
def transposed_region(x: pl.Tensor[[16, 64], pl.FP32], y: pl.InOut[pl.Tensor[[64, 16], pl.FP32]]):
    t = pl.transpose(pl.tensor.set_validshape(x, 8, 32), 0, 1)  # the valid 8x32 region -> 32x8
    pl.store(t, [0, 0], y)


@pl.kernel
def transposed_with_valid_shape(x: pl.Tensor[[8, 64], pl.FP32], y: pl.InOut[pl.Tensor[[64, 8], pl.FP32]]):
    pl.store(pl.tensor.transpose(x, 1, 0, valid_shape=[16, 8]), [0, 0], y)


@pytest.mark.parametrize("n", [64, 32, 1])
def test_set_validshape_computes_and_stores_the_region_only(n: int) -> None:
    y = np.full_like(X, 7)
    doubled_region(X, y, n)
    ref = np.full_like(X, 7)
    ref[:8, :n] = 2 * X[:8, :n]
    np.testing.assert_array_equal(y, ref)


def test_set_validshape_is_a_view_with_valid_operands_and_a_partitioned_load() -> None:
    low = doubled_region.lower(X, X.copy(), 32)
    ir = str(low.ir("trace"))
    assert "v:f32[16,64] = tensor.slice[shape=(16, 64)] x 0 0 8 n" in ir
    text = low.pto()
    assert "%x_pview = pto.partition_view %x_view, offsets = [%c0, %c0], sizes = [%c8, %n]" in text
    assert "v_row=8, v_col=?" in text
    nzjit.check_ptoas(text)


def test_pl_set_validshape_of_a_tensor_dispatches_to_the_tensor_form() -> None:
    y = np.full_like(X, 7)
    dispatched(X, y)
    ref = np.full_like(X, 7)
    ref[:4, :32] = -X[:4, :32]
    np.testing.assert_array_equal(y, ref)


def test_tensor_transpose_equals_numpy() -> None:
    x = X[:8]
    np.testing.assert_array_equal(transposed(x), x.T)
    assert "pto.ttrans" in transposed.lower(x, np.zeros((64, 8), np.float32)).pto()


def test_transpose_of_a_valid_region_transposes_the_region() -> None:
    y = np.full((64, 16), 7, np.float32)
    transposed_region(X, y)
    ref = np.full((64, 16), 7, np.float32)
    ref[:32, :8] = X[:8, :32].T
    np.testing.assert_array_equal(y, ref)


def test_transpose_valid_shape_is_the_results_valid_region() -> None:
    x = X[:8]
    y = np.full((64, 8), 7, np.float32)
    transposed_with_valid_shape(x, y)
    ref = np.full((64, 8), 7, np.float32)
    ref[:16] = x.T[:16]
    np.testing.assert_array_equal(y, ref)


def _refusal(body, shape=(16, 64)):
    @pl.kernel
    def k(x: pl.Tensor[list(shape), pl.FP32], y: pl.Out[pl.Tensor[[16, 64], pl.FP32]]):
        body(x, y)

    with pytest.raises(CompileError) as ei:
        k.lower()
    return ei.value


def test_refusals_name_the_rule_and_the_fix() -> None:
    err = _refusal(lambda x, y: pl.tensor.set_validshape(x, 17, 64))
    assert "pl.tensor.set_validshape: valid rows 17 must be an int in [0, 16] or an integer scalar" in str(
        err
    )
    err = _refusal(lambda x, y: pl.tensor.set_validshape(x, 4, 2.5))
    assert "valid cols 2.5 must be an int in [0, 64]" in str(err)
    err = _refusal(lambda x, y: pl.tensor.set_validshape(x, 1, 1), shape=(2, 8, 64))
    assert "pl.tensor.set_validshape needs a static 2-D tensor, got f32[2,8,64]" in str(err)
    assert err.help == "slice a static 2-D window first (pl.slice(x, [R, C], [r0, c0]))"
    err = _refusal(lambda x, y: pl.tensor.set_validshape(pl.load(x, [0, 0], [16, 64]), 1, 1))
    assert (
        "pl.tensor.set_validshape takes a tensor" in str(err)
        and err.help == "pl.tile.set_validshape of a tile"
    )
    err = _refusal(lambda x, y: pl.tensor.transpose(pl.load(x, [0, 0], [16, 64]), 0, 1))
    assert "pl.tensor.transpose takes a tensor" in str(err)
    err = _refusal(lambda x, y: pl.tensor.transpose(x, 0, 0))
    assert "pl.transpose of a 2-D tile swaps axes 0 and 1, got 0, 0" in str(err)
    err = _refusal(lambda x, y: pl.tensor.transpose(x, 0, 1, valid_shape=[4]))
    assert "pl.tensor.transpose: valid_shape has 2 extents, got [4]" in str(err)
