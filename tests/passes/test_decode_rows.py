"""AutoTileMatmulL0 on decode batches (a Left operand of M rows, M not a multiple of 16): IR facts.

The ND -> NZ load writes rows 0..M-1 of whole 16-row fractals (hardware-model.md §3), so the Mat
tile is ceil16(M) x K with valid_shape (M, K); TEXTRACT moves whole fractals into a Left tile whose
valid rows stay M; the mad computes m = Left.validRow rows (§6) into an Acc tile of ceil16(M) rows
with valid_shape (M, N), which the store writes. Numbers: tests/e2e/test_decode_matmul.py.
"""

import pytest

from nzjit import pl
from nzjit import prims as P
from nzjit.core import dtypes as D
from nzjit.core.types import Mem, TileType
from nzjit.passes.auto_tile_matmul import decode_rows, left_only_values


def _kernel(M, K=128, N=32, KT=64, dtype=pl.FP16, out=pl.FP32):
    @pl.kernel
    def k(x: pl.Tensor[[M, K], dtype], w: pl.Tensor[[N, K], dtype, pl.NZ], o: pl.Out[pl.Tensor[[M, N], out]]):
        acc = pl.matmul(x[:, 0:KT], w[:, 0:KT], b_trans=True)
        for k0 in pl.pipeline(KT, K, KT):
            acc = pl.matmul_acc(acc, x[:, k0 : k0 + KT], w[:, k0 : k0 + KT], b_trans=True)
        o[:, :] = acc

    return k


def _eqns(g, prim):
    return [e for e in g.walk() if e.primitive is prim]


@pytest.mark.parametrize("M,rows", [(1, 16), (4, 16), (15, 16), (17, 32), (31, 32)])
def test_mat_left_and_acc_tiles_carry_the_valid_rows(M, rows):  # hw §3, §6
    g = _kernel(M).lower().ir(after="AutoTileMatmulL0")
    nd = [e for e in _eqns(g, P.tile_load_p) if e.params.get("window_2d")]
    assert len(nd) == 2  # the first K chunk, and the loop's
    for ld in nd:
        assert ld.params["shape"] == (M, 64)  # the GM window the ND -> NZ load reads: M rows
        assert ld.outputs[0].type == TileType((rows, 64), D.FP16, Mem.Mat, (M, 64))
    lefts = [e.outputs[0].type for e in _eqns(g, P.tile_extract_p) if e.params["memory"] is Mem.Left]
    valid = None if M == rows else (M, 64)
    assert lefts and all(t == TileType((rows, 64), D.FP16, Mem.Left, valid) for t in lefts)
    accs = [e.outputs[0].type for e in _eqns(g, P.tile_mad_p) + _eqns(g, P.tile_mad_acc_p)]
    assert len(accs) == 2
    assert all(t == TileType((rows, 32), D.FP32, Mem.Acc, (M, 32)) for t in accs)
    (loop,) = _eqns(g, P.for_p)
    assert loop.outputs[0].type == accs[0]  # the carried accumulator keeps its valid rows
    (st,) = _eqns(g, P.tile_store_p)
    assert st.inputs[0].type.valid_shape == (M, 32)


def test_whole_fractal_rows_are_unchanged():  # M a multiple of 16: no valid_shape anywhere
    g = _kernel(32).lower().ir(after="AutoTileMatmulL0")
    tiles = [v.type for e in g.walk() for v in e.outputs if isinstance(v.type, TileType)]
    assert tiles and all(t.fully_valid for t in tiles)


def test_decode_rows_only_for_a_partial_last_fractal():
    assert decode_rows(TileType((16, 64), D.FP16, Mem.Mat, (4, 64))) == 4
    assert decode_rows(TileType((32, 64), D.FP16, Mem.Mat, (17, 64))) == 17
    assert decode_rows(TileType((256, 64), D.FP16, Mem.Mat, (32, 64))) is None  # whole fractals (NZ-26)
    assert decode_rows(TileType((32, 64), D.FP16, Mem.Mat, (4, 64))) is None  # not ceil16(4) rows
    assert decode_rows(TileType((16, 64), D.FP16, Mem.Mat, (None, 64))) is None  # dynamic
    assert decode_rows(TileType((16, 64), D.FP16, Mem.Mat)) is None


def test_only_left_operands_are_padded():
    """x is read as a Left operand only (also through the K loop's captures); the weight is Right."""
    g = _kernel(4).lower().ir(after="LegalizeTileCast")
    left = left_only_values(g)
    loads = {e.outputs[0]: e for e in _eqns(g, P.tile_load_p)}
    assert {v for v in left if v in loads} == {v for v, e in loads.items() if e.params.get("window_2d")}
