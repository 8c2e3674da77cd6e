"""`pl.cast(x.shape[0], dtype)` of a `pl.dynamic` axis (issue 23 item 7): the dimension is its value
for the call, an INDEX scalar, so it converts like any integer scalar (found by the tensor_lang
fuzz family, which writes it with pl.write)."""

from __future__ import annotations

import numpy as np
import pytest

from nzjit import pl


@pl.kernel
def rows_of(x: pl.Tensor[[pl.dynamic("R"), 16], pl.FP32], s: pl.Out[pl.Tensor[[2], pl.INT32]]):
    pl.write(s, [0], pl.cast(x.shape[0], pl.INT32))
    pl.write(s, [1], pl.cast(pl.tensor.dim(x, 0), pl.INT32) * 2)


@pytest.mark.parametrize("rows", [8, 48])
def test_cast_of_a_dynamic_dimension_is_its_value(rows: int) -> None:
    out = rows_of(np.zeros((rows, 16), np.float32))
    np.testing.assert_array_equal(out, [rows, 2 * rows])
    ir = str(rows_of.lower(np.zeros((rows, 16), np.float32), np.zeros(2, np.int32)).ir("trace"))
    assert "tensor.dim[axis=0 name=R] x" in ir
