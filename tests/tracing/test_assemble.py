"""`pl.assemble(target, source, offset)` (issue 23 item 4, PyPTO's unified op): into a tensor, a
tile is a store and a computed tensor (a matmul result) an assignment; into a tile it is
pl.tile.assemble (TINSERT). The updated target is returned; refusals name the fix."""

from __future__ import annotations

import numpy as np
import pytest

from nzjit import CompileError, pl

rng = np.random.default_rng(9)


@pl.kernel
def three_parts(
    a: pl.Tensor[[16, 64], pl.FP16],
    b: pl.Tensor[[64, 64], pl.FP16],
    x: pl.Tensor[[16, 64], pl.FP32],
    c: pl.Out[pl.Tensor[[48, 64], pl.FP32]],
):
    c = pl.assemble(c, pl.matmul(a, b), [0, 0])  # a matmul result: an assignment
    c = pl.assemble(c, pl.load(x, [0, 0], [16, 64]), [16, 0])  # a tile: a store
    t = pl.full([16, 64], dtype=pl.FP32, value=2.0)
    t = pl.assemble(t, pl.full([16, 32], dtype=pl.FP32, value=5.0), [0, 32])  # tile into tile: TINSERT
    pl.tensor.assemble(c, t, [32, 0])


def test_assemble_into_tensors_and_tiles():
    a = rng.integers(-3, 4, (16, 64)).astype(np.float16)
    b = rng.integers(-3, 4, (64, 64)).astype(np.float16)
    x = rng.standard_normal((16, 64)).astype(np.float32)
    low = three_parts.lower(a, b, x, np.zeros((48, 64), np.float32))
    traced = [e.primitive.name for e in low.ir("trace").eqns]
    assert (
        traced.count("tensor.assign") == 1 and traced.count("tile.store") == 2 and "tile.assemble" in traced
    )
    assert "pto.tinsert" in low.pto()
    t = np.full((16, 64), 2, np.float32)
    t[:, 32:] = 5
    ref = np.concatenate([a.astype(np.float32) @ b.astype(np.float32), x, t])
    assert np.array_equal(three_parts(a, b, x), ref)


def test_refusals():
    def lower(body):
        @pl.kernel
        def k(x: pl.Tensor[[16, 64], pl.FP32], y: pl.Out[pl.Tensor[[16, 64], pl.FP32]]):
            body(x, y)

        return k.lower(np.zeros((16, 64), np.float32), np.zeros((16, 64), np.float32))

    with pytest.raises(CompileError, match=r"pl.assemble into a rank-2 tensor takes 2 offsets, got 1"):
        lower(lambda x, y: pl.assemble(y, pl.load(x, [0, 0], [16, 64]), [0]))
    with pytest.raises(CompileError, match=r"pl.assemble\(atomic='add'\) is not built") as ei:
        lower(lambda x, y: pl.assemble(y, pl.load(x, [0, 0], [16, 64]), [0, 0], atomic="add"))
    assert "help: accumulate in an Acc tile" in str(ei.value)
    with pytest.raises(CompileError, match=r"pl.assemble writes a tile or a computed tensor, got 3"):
        lower(lambda x, y: pl.assemble(y, 3, [0, 0]))
    with pytest.raises(CompileError, match=r"pl.assemble writes into a tensor or a tile, got 3"):
        lower(lambda x, y: pl.assemble(3, x, [0, 0]))
