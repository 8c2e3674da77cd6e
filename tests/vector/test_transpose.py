"""`pl.transpose(tile, 0, 1)` of a Vec tile (issue 23 item 5; pto-isa TTRANS): the [C, R] copy over
the source's valid region, with the compiler's tmp tile of TTRANS's documented size (charged by the
memory plan as the simulator allocates it). Tensors and other axes are refused with the fix."""

from __future__ import annotations

import numpy as np
import pytest

from nzjit import CompileError, pl
from tests.backend.test_memory_plan import planned, runtime_peak

rng = np.random.default_rng(8)


@pytest.mark.parametrize("dtype,np_dtype", [(pl.FP32, np.float32), (pl.FP16, np.float16), (pl.INT8, np.int8)])
def test_transpose_of_a_vec_tile(dtype, np_dtype):
    @pl.kernel
    def k(x: pl.Tensor[[32, 64], dtype], y: pl.Out[pl.Tensor[[64, 32], dtype]]):
        pl.store(pl.transpose(pl.load(x, [0, 0], [32, 64]), 1, 0), [0, 0], y)

    x = (rng.standard_normal((32, 64)) * 20).astype(np_dtype)
    low = k.lower(x, np.zeros((64, 32), np_dtype))
    (e,) = [e for e in low.ir().eqns if e.primitive.name == "tile.transpose"]
    assert str(e.outputs[0].type) == f"{dtype.short}[64,32]@Vec"
    assert "pto.ttrans ins(" in low.pto()
    assert np.array_equal(k(x), x.T)
    args = (x, np.zeros((64, 32), np_dtype))
    tile = 32 * 64 * np.dtype(np_dtype).itemsize
    stride = 32 if np.dtype(np_dtype).itemsize == 1 else 16
    tmp = 64 * (-(-32 // stride) * stride) * np.dtype(np_dtype).itemsize
    assert planned(k, args) == runtime_peak(k, args) == {"Vec": 2 * tile + tmp}


def test_refusals():
    def lower(body):
        @pl.kernel
        def k(x: pl.Tensor[[8, 64], pl.FP32], y: pl.Out[pl.Tensor[[64, 8], pl.FP32]]):
            body(x, y)

        return k.lower(np.zeros((8, 64), np.float32), np.zeros((64, 8), np.float32))

    # issue 23 item 5: pl.transpose / pl.tensor.transpose of a tensor is built (tests/vector/test_tensor_forms.py)
    with pytest.raises(CompileError, match=r"pl.tile.transpose takes a Vec tile, got a tensor") as ei:
        lower(lambda x, y: pl.tile.transpose(x, 0, 1))
    assert "help: pl.tensor.transpose(x, 0, 1) (or pl.transpose) for a tensor" in str(ei.value)
    with pytest.raises(CompileError, match=r"pl.transpose of a 2-D tile swaps axes 0 and 1, got 0, 0"):
        lower(lambda x, y: pl.transpose(pl.load(x, [0, 0], [8, 64]), 0, 0))

    @pl.kernel
    def odd(x: pl.Tensor[[4, 64], pl.FP32], y: pl.Out[pl.Tensor[[64, 4], pl.FP32]]):
        pl.transpose(pl.load(x, [0, 0], [4, 64]), 0, 1)

    with pytest.raises(
        CompileError,
        match=r"pl.transpose of f32\[4,64\]@Vec: the result's rows are the source's 4 rows "
        r"of pl.FP32, 16 bytes, and a Vec row is whole 32-byte blocks",
    ) as ei:
        odd.lower(np.zeros((4, 64), np.float32), np.zeros((64, 4), np.float32))
    assert "help: make the source's row count a multiple of 8" in str(ei.value)
