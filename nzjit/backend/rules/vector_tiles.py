"""Rules of the vector unit's tile movement (nzjit/prims/vector.py): the cross-core pipe of a mixed
cube + vector kernel (`tpush_to_aiv` / `tpop_from_aic` and back, runtime.crosscore), A5's direct
Acc -> Vec move, tile windows (TEXTRACT / TINSERT), tile reshapes, and the top-k pieces (TCI,
TSORT32, TMRGSORT, TGATHER; runtime.vector_sort).
"""

from __future__ import annotations

from typing import Any

import numpy as np

import runtime
from runtime import TileBuf
from runtime import vector as V
from runtime import vector_sort as VS
from runtime.crosscore import dequant_fp16, pipe_of, vector_quant_scale

from ...core.ir import Eqn
from ...prims import vector as VP
from .. import lane_pipe
from ..rule import Rule, register, rule
from ..steps import alloc
from ..values import TensorVal
from .vector_alu import like, scalar_operand
from .vector_alu import whole as _whole
from .vector_lanes import VecOp, impl_of, lanes_of, out_type


def _fixpipe_scale(ctx: Any, e: Eqn, ins: list[Any]) -> float | np.ndarray | None:
    """The dequant scale operand of an Acc -> Vec move: one float (DEQF16), or the per-channel
    scales of the valid columns read from their GM tensor (VDEQF16), or None."""
    if len(ins) < 2:
        return None
    s = ins[1]
    if isinstance(s, TensorVal):
        return s.read(ctx.gm).reshape(-1)[: ins[0].valid_col].astype(np.float32)
    return float(scalar_operand(e, 1, s))


@rule(VP.tpush_to_aiv_p, batch=lane_pipe.batch_push_acc)
def _tpush_to_aiv(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    scale = _fixpipe_scale(ctx, e, ins)
    return [pipe_of(ctx.gm).push_acc(ins[0], e.params["dtype"].np_dtype, bool(e.params.get("relu")), scale)]


@rule(VP.tpush_to_aic_p, batch=lane_pipe.batch_push_vec)
def _tpush_to_aic(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    return [pipe_of(ctx.gm).push_vec(ins[0])]


@rule(VP.tpop_from_aic_p, batch=lane_pipe.batch_pop)
def _tpop_from_aic(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    slot = ins[0]
    out = alloc(ctx, out_type(e), slot.shape)
    pipe_of(ctx.gm).pop(slot, out)
    return [out]


@rule(VP.tpop_from_aiv_p, batch=lane_pipe.batch_pop)
def _tpop_from_aiv(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    slot = ins[0]
    t = out_type(e)
    out = ctx.onchip.alloc_tile(
        "Mat", t.shape[0], t.shape[1], t.dtype.np_dtype, valid_row=slot.shape[0], valid_col=slot.shape[1]
    )
    pipe_of(ctx.gm).pop(slot, out)
    return [out]


@rule(VP.move_fixpipe_p)
def _move_fixpipe(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    acc: TileBuf = ins[0]
    out = alloc(ctx, out_type(e), (acc.valid_row, acc.valid_col))
    scale = _fixpipe_scale(ctx, e, ins)
    if scale is not None:  # DEQF16 / VDEQF16: the fixpipe's dequantisation
        per = vector_quant_scale(scale) if isinstance(scale, np.ndarray) else scale
        V.valid_region(out)[...] = dequant_fp16(
            acc.logical()[: acc.valid_row, : acc.valid_col], per, bool(e.params.get("relu"))
        )
        return [out]
    runtime.isa.tmov(out, acc, relu=bool(e.params.get("relu")))
    return [out]


@rule(VP.tile_slice_p)
def _slice(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    src: TileBuf = ins[0]
    r0, c0 = e.params["offsets"]
    rows, cols = e.params["shape"]
    vr, vc = max(0, min(rows, src.valid_row - r0)), max(0, min(cols, src.valid_col - c0))
    out = alloc(ctx, out_type(e), (vr, vc))
    V.extract(out, src, r0, c0)
    return [out]


@rule(VP.tile_assemble_p)
def _assemble(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    dst, src = ins
    if not ctx.consumes(e, 0):  # the old tile is still read later: TINSERT into a copy
        copy = alloc(ctx, out_type(e), (dst.valid_row, dst.valid_col))
        copy.data[...] = dst.data
        dst = copy
    V.insert(dst, src, *e.params["offsets"])
    return [dst]


def _reshape(e: Eqn, out: TileBuf, ins: list[Any], target: str, scratch: Any) -> None:
    V.reshape(out, ins[0])


# TRESHAPE re-reads the bytes with another shape: not row-local (a [R, 1] column becomes a row),
# so its batch form runs once per image
register(
    VP.tile_reshape_p,
    Rule(
        impl_of(VecOp(_reshape, _whole, row_local=False)),
        batch=lanes_of(VecOp(_reshape, _whole, row_local=False)),
    ),
)


@rule(VP.ci_p)
def _ci(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    out = alloc(ctx, out_type(e))
    VS.tci(out, int(ins[0]), bool(e.params.get("descending")))
    return [out]


@rule(VP.sort32_p)
def _sort32(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    src, idx = ins
    out = alloc(ctx, out_type(e), (src.valid_row, src.valid_col * VS.pair_elems(src.dtype)))
    VS.tsort32(out, src, idx)
    return [out]


def _mrgsort2(e: Eqn, out: TileBuf, ins: list[Any], target: str, scratch: Any) -> None:
    VS.tmrgsort_lists(out, ins[:-1], ins[-1], bool(e.params.get("exhausted")))


def _mrgsort2_valid(e: Eqn, ins: list[Any]) -> tuple[int | None, int | None]:
    return 1, sum(x.valid_col for x in ins[:-1])


_MRGSORT2 = VecOp(_mrgsort2, _mrgsort2_valid, row_local=False)  # one-row lists: never stacked
register((VP.mrgsort2_p,), Rule(impl_of(_MRGSORT2), batch=lanes_of(_MRGSORT2)))


@rule(VP.mrgsort_p)
def _mrgsort(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    out = like(ctx, e, ins[0])
    VS.tmrgsort(out, ins[0], e.params["block_len"])
    return [out]


@rule(VP.gather_mask_p)
def _gather_mask(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    src = ins[0]
    start, stride = VS.MASK_PATTERNS[e.params["pattern"]]
    out = alloc(ctx, out_type(e), (src.valid_row, len(range(start, src.valid_col, stride))))
    VS.gather_mask(out, src, e.params["pattern"])
    return [out]


@rule(VP.gather_p)
def _gather(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    src, idx = ins
    out = alloc(ctx, out_type(e), (idx.valid_row, idx.valid_col))
    VS.gather(out, src, idx, bool(e.params.get("rowwise", True)))
    return [out]
