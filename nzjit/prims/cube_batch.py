"""The batched matmul on rank-3 Mat tiles (`pl.batch_matmul`, PyPTO's `tile.batch_matmul`).

`[B, M, K] x [B, K, N] -> [B, M, N]` Acc, batch by batch; a batch extent of 1 on one side (or a
2-D operand) is broadcast (PyPTO's batch broadcasting). A transposed operand is a `pl.tile.transpose_view` of the
rank-3 tile (its last two axes swapped), as in PyPTO: the op itself carries no transpose flag.
FlattenTileNdTo2D unrolls it into one 2-D `tile.matmul` per batch (passes/batch_matmul_unroll.py),
so the cube never sees a rank-3 tile: pto-isa has no batched TMATMUL.
"""

from __future__ import annotations

from typing import Any

from ..core.primitives import _fail, _matmul_out_dtype, _tile, primitive
from ..core.types import Mem, TileType, Type

#: The help line of every batched-operand refusal that a per-batch pl.matmul avoids.
PER_BATCH_HELP = "or loop over the batch with pl.range and pl.matmul on [1, M, K] windows"


def batch_operand(t: Type, what: str, name: str) -> TileType:
    """A rank-3, static, fully valid Mat tile (the batch_matmul operand rules)."""
    tt = _tile(t, what)
    if tt.memory is not Mem.Mat:
        raise _fail(
            f"{what}: `{name}` must be a Mat tile, got {tt}",
            help="load it with pl.load(x, [b0, 0, 0], [B, M, K], target_memory=pl.Mem.Mat)",
        )
    if tt.rank not in (2, 3):
        raise _fail(
            f"{what} needs rank-3 [B, M, K] x [B, K, N] Mat tiles; `{name}` is {tt}",
            help="fold the leading axes into the batch axis in GM (pl.reshape of the tensor)",
        )
    if not all(isinstance(d, int) for d in tt.shape):
        raise _fail(f"{what}: `{name}` {tt} needs static extents", help=PER_BATCH_HELP)
    if not tt.fully_valid:
        raise _fail(
            f"{what}: `{name}` {tt} has a valid_shape; a batched operand must be fully valid",
            help="pad the operands in GM to whole tiles, " + PER_BATCH_HELP,
        )
    return tt


def batch_dims(t: TileType) -> tuple[int, int, int]:
    """(B, rows, cols) of a batch_matmul operand; a 2-D tile is one batch, broadcast over all."""
    return tuple(t.shape) if t.rank == 3 else (1, *t.shape)  # type: ignore[return-value]


def batch_shape(ta: TileType, tb: TileType, what: str) -> tuple[int, int, int, int]:
    """(B, M, K, N) of `a @ b` on rank-3 tiles: equal batch extents or one of them 1 (broadcast)."""
    if ta.rank == 2 and tb.rank == 2:
        raise _fail(f"{what} needs a rank-3 operand, got {ta} and {tb}", help="use pl.matmul for 2-D tiles")
    (ba, m, k), (bb, kb, n) = batch_dims(ta), batch_dims(tb)
    if ba != bb and 1 not in (ba, bb):
        raise _fail(
            f"{what}: batch extents differ, lhs {list(ta.shape)} and rhs {list(tb.shape)}",
            help="give both operands the same batch extent B (or 1 on one side to broadcast it)",
        )
    if k != kb:
        raise _fail(
            f"{what}: contraction sizes differ, lhs {list(ta.shape)} and rhs {list(tb.shape)} "
            "([B, M, K] x [B, K, N])",
            help="a transposed rhs [B, N, K] is pl.tile.transpose_view(rhs) (or b_trans=True)",
        )
    return max(ba, bb), m, k, n


@primitive("tile.batch_matmul", ("a", "b"))
def tile_batch_matmul_p(a: Type, b: Type, **_: Any) -> list[Type]:
    """`pl.batch_matmul(a, b)`: rank-3 Mat tiles `[B, M, K] x [B, K, N]` -> a `[B, M, N]` Acc tile of
    the accumulator dtype (FP32, INT32 for INT8), one TMATMUL per batch after FlattenTileNdTo2D."""
    what = "pl.batch_matmul"
    ta, tb = batch_operand(a, what, "lhs"), batch_operand(b, what, "rhs")
    bsz, m, _k, n = batch_shape(ta, tb, what)
    return [TileType((bsz, m, n), _matmul_out_dtype(ta.dtype, tb.dtype, None, what), Mem.Acc)]


@primitive("tile.batch_matmul_acc", ("acc", "a", "b"))
def tile_batch_matmul_acc_p(acc: Type, a: Type, b: Type, **_: Any) -> list[Type]:
    """`pl.tile.batch_matmul_acc(acc, a, b)`: `acc + a @ b` batch by batch; `acc` is the `[B, M, N]`
    Acc tile of an earlier batched product (PyPTO: the acc's batch shape is not broadcast)."""
    what = "pl.tile.batch_matmul_acc"
    (want,) = tile_batch_matmul_p.type_rule(a, b)
    assert isinstance(want, TileType)  # the product's rule makes an Acc tile
    tc = _tile(acc, what)
    if tc.shape != want.shape or tc.dtype is not want.dtype or tc.memory is not Mem.Acc:
        raise _fail(
            f"{what}: the accumulator {tc} is not the product's {want}",
            help="accumulate into the [B, M, N] result of pl.batch_matmul of operands of the same shapes",
        )
    return [tc]
