"""`pl.set_validshape(tile, valid_rows, valid_cols)` (issue 23 item 5, PyPTO's name): the tile's bytes
with another valid region, static or from a scalar; the vector unit then computes that region only
(a TMOV into a tile allocated with the new extents in the PTO text). Refusals name the fix."""

from __future__ import annotations

import numpy as np
import pytest

import runtime
from nzjit import CompileError, pl

rng = np.random.default_rng(2)


@pl.kernel
def narrow(x: pl.Tensor[[16, 64], pl.FP32], n: pl.Scalar[pl.INDEX], y: pl.Out[pl.Tensor[[16, 64], pl.FP32]]):
    t = pl.load(x, [0, 0], [16, 64])
    u = pl.set_validshape(t, 8, n)
    pl.store(pl.tile.fillpad(pl.add(u, 1.0), pl.PadValue.zero), [0, 0], y)


def test_a_narrowed_tile_computes_its_valid_region_only():
    x = rng.standard_normal((16, 64)).astype(np.float32)
    low = narrow.lower(x, 32, np.zeros_like(x))
    (e,) = [e for e in low.ir().eqns if e.primitive.name == "tile.set_validshape"]
    assert e.params["static"] == (8, None) and str(e.outputs[0].type) == "f32[16,64]@Vec<valid 8,?>"
    text = low.pto()
    assert "%u = pto.alloc_tile valid_col = %n :" in text and "pto.tmov ins(%t :" in text
    for n in (32, 64, 8):
        ref = np.zeros_like(x)
        ref[:8, :n] = x[:8, :n] + 1
        assert np.array_equal(narrow(x, n), ref)
    with pytest.raises(runtime.DispatchError, match=r"pl.set_validshape to 8x65 outside the tile's 16x64"):
        narrow(x, 65)


def test_refusals():
    def lower(body):
        @pl.kernel
        def k(x: pl.Tensor[[16, 64], pl.FP32], y: pl.Out[pl.Tensor[[16, 64], pl.FP32]]):
            body(x, y)

        return k.lower(np.zeros((16, 64), np.float32), np.zeros((16, 64), np.float32))

    with pytest.raises(
        CompileError,
        match=r"pl.set_validshape of f32\[16,64\]@Vec to \[17, 64\]: a valid extent lies "
        r"in 1 .. 16",
    ):
        lower(lambda x, y: pl.set_validshape(pl.load(x, [0, 0], [16, 64]), 17, 64))
    with pytest.raises(CompileError, match=r"a valid extent is an int or an integer scalar, got 2.5"):
        lower(lambda x, y: pl.set_validshape(pl.load(x, [0, 0], [16, 64]), 2.5, 64))
    # issue 23 item 5: pl.tensor.set_validshape is built (tests/vector/test_tensor_forms.py)
    with pytest.raises(CompileError, match=r"pl.tile.set_validshape takes a tile, got a tensor") as ei:
        lower(lambda x, y: pl.tile.set_validshape(x, 4, 64))
    assert "help: pl.tensor.set_validshape(x, rows, cols) (or pl.set_validshape) for a tensor" in str(
        ei.value
    )
