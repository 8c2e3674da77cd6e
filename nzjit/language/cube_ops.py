"""The cube's variants, with PyPTO's names and signatures (`pypto.language.tile`): the bias matmul
(`pl.tile.matmul_bias`, TMATMUL_BIAS), and the one-row forms (`pl.tile.gemv`, `gemv_acc`, `gemv_bias`).

A gemv is the one-row matmul marked `gemv=True`: a `[1, K]` lhs (its Mat tile padded to one 16-row
fractal, as a decode batch's is) through TGEMV (pto-isa docs/isa/TGEMV.md: m = 1 exactly, k = the
Right tile's valid rows, n = its valid columns), where a plain one-row TMATMUL would compute the
whole fractal (m = 1 is forced to 16 on A2/A3, hardware-model.md §6). K and N tails are the operands' valid shapes:
k = the lhs's valid K, n = the rhs's valid N (`pl.load(..., valid_shape=..., clamp=True)`).

The batched matmul (`pl.batch_matmul`, prims/cube_batch.py) multiplies rank-3 Mat tiles batch by
batch; FlattenTileNdTo2D unrolls it into one TMATMUL per batch, as PyPTO does.
"""

from __future__ import annotations

from typing import Any

from .. import prims as P
from ..core.types import TileType
from ..errors import CompileError, user_source
from ..tracing import Tracer, bind

#: PyPTO's `acc_phase` values (tile.gemv*): a scheduling hint for split accumulation. The A2/A3
#: cube model computes the same bits in every phase, so the hint is checked and kept on the IR.
ACC_PHASES = ("unspecified", "partial", "final")


def _tile_operand(x: Any, what: str, name: str) -> TileType:
    if not isinstance(x, Tracer) or not isinstance(x.type, TileType):
        raise CompileError(
            f"{what}: `{name}` must be a tile, got {x!r}",
            user_source(),
            help="load it first: pl.load(x, offsets, shape, target_memory=pl.Mem.Mat)",
        )
    return x.type


def matmul_bias(
    lhs: Tracer, rhs: Tracer, bias: Tracer, b_trans: bool = False, *, _gemv: bool = False
) -> Tracer:
    """`pl.tile.matmul_bias(lhs, rhs, bias)`: `lhs @ rhs + bias` on Mat tiles; `bias` a `[1, N]`
    tile of the accumulator's dtype (FP32, INT32 for INT8 operands), Mat (loaded like the
    operands) or Bias. The cube adds it to every row (TMATMUL_BIAS); a split K adds it once."""
    for x, name in ((lhs, "lhs"), (rhs, "rhs"), (bias, "bias")):
        _tile_operand(x, "pl.tile.matmul_bias", name)
    params: dict[str, Any] = {"b_trans": b_trans}
    if _gemv:
        params["gemv"] = True
    return bind(P.tile_matmul_bias_p, [[lhs], [rhs], [bias]], params)[0]


def _check_gemv(lhs: Any, acc_phase: Any, what: str) -> None:
    t = _tile_operand(lhs, what, "lhs")
    if t.rank != 2 or t.shape[0] != 1:
        raise CompileError(
            f"{what} needs a one-row lhs [1, K], got {t}",
            user_source(),
            help="use pl.matmul for a lhs of several rows",
        )
    if acc_phase not in ACC_PHASES:
        raise CompileError(
            f"{what}: acc_phase must be one of {', '.join(ACC_PHASES)}, got {acc_phase!r}", user_source()
        )


def gemv(lhs: Tracer, rhs: Tracer, acc_phase: str = "unspecified") -> Tracer:
    """`pl.tile.gemv(lhs, rhs)`: `C[1, N] = lhs[1, K] @ rhs[K, N]`, the one-row matmul."""
    _check_gemv(lhs, acc_phase, "pl.tile.gemv")
    _tile_operand(rhs, "pl.tile.gemv", "rhs")
    return bind(P.tile_matmul_p, [[lhs], [rhs]], {"b_trans": False, "out_dtype": None, "gemv": True})[0]


def gemv_acc(acc: Tracer, lhs: Tracer, rhs: Tracer, acc_phase: str = "unspecified") -> Tracer:
    """`pl.tile.gemv_acc(acc, lhs, rhs)`: `acc[1, N] += lhs[1, K] @ rhs[K, N]`."""
    _check_gemv(lhs, acc_phase, "pl.tile.gemv_acc")
    _tile_operand(rhs, "pl.tile.gemv_acc", "rhs")
    return bind(P.tile_matmul_acc_p, [[acc], [lhs], [rhs]], {"b_trans": False, "gemv": True})[0]


def gemv_bias(lhs: Tracer, rhs: Tracer, bias: Tracer, acc_phase: str = "unspecified") -> Tracer:
    """`pl.tile.gemv_bias(lhs, rhs, bias)`: `lhs[1, K] @ rhs[K, N] + bias[1, N]`."""
    _check_gemv(lhs, acc_phase, "pl.tile.gemv_bias")
    return matmul_bias(lhs, rhs, bias, _gemv=True)


def batch_matmul(lhs: Tracer, rhs: Tracer, *, a_trans: bool = False, b_trans: bool = False) -> Tracer:
    """`pl.batch_matmul(lhs, rhs)` (and `pl.tile.batch_matmul`): `[B, M, K] x [B, K, N] -> [B, M, N]`
    on rank-3 Mat tiles, an Acc tile to `pl.store` into a `[B, M, N]` tensor window. A transposed
    operand is PyPTO's `pl.tile.transpose_view(t)`; `a_trans` / `b_trans` are nzjit's shorthand
    for it (as on nzjit's tile-level `pl.matmul`)."""
    for x, name in ((lhs, "lhs"), (rhs, "rhs")):
        _tile_operand(x, "pl.batch_matmul", name)
    for flag, name in ((a_trans, "a_trans"), (b_trans, "b_trans")):
        if not isinstance(flag, bool):
            raise CompileError(f"pl.batch_matmul {name} must be a bool, got {flag!r}", user_source())
    if a_trans:
        lhs = bind(P.tile_transpose_view_p, [[lhs]])[0]
    if b_trans:
        rhs = bind(P.tile_transpose_view_p, [[rhs]])[0]
    return bind(P.tile_batch_matmul_p, [[lhs], [rhs]])[0]


def batch_matmul_acc(
    acc: Tracer, lhs: Tracer, rhs: Tracer, *, a_trans: bool = False, b_trans: bool = False
) -> Tracer:
    """`pl.tile.batch_matmul_acc(acc, lhs, rhs)`: `acc + lhs @ rhs` batch by batch, `acc` the
    `[B, M, N]` product of an earlier `pl.batch_matmul` (a K split written with Python's `range`,
    which tracing unrolls). `a_trans` / `b_trans` as in `batch_matmul`."""
    for x, name in ((acc, "acc"), (lhs, "lhs"), (rhs, "rhs")):
        _tile_operand(x, "pl.tile.batch_matmul_acc", name)
    if a_trans:
        lhs = bind(P.tile_transpose_view_p, [[lhs]])[0]
    if b_trans:
        rhs = bind(P.tile_transpose_view_p, [[rhs]])[0]
    return bind(P.tile_batch_matmul_acc_p, [[acc], [lhs], [rhs]])[0]


__all__ = ["ACC_PHASES", "batch_matmul", "batch_matmul_acc", "gemv", "gemv_acc", "gemv_bias", "matmul_bias"]
