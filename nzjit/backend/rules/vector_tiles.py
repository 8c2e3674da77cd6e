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
from .vector_alu import scalar_operand
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


@rule(VP.move_fixpipe_p, batch=lane_pipe.batch_move_fixpipe)
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


def by_eqn(pick: Any) -> Any:
    """A batch form whose VecOp depends on the equation (`pick(e) -> VecOp`)."""
    return lambda st: lanes_of(pick(st.eqn))(st)


def _slice_valid(e: Eqn, ins: list[Any]) -> tuple[int | None, int | None]:
    src = ins[0]
    r0, c0 = e.params["offsets"]
    rows, cols = e.params["shape"]
    return max(0, min(rows, src.valid_row - r0)), max(0, min(cols, src.valid_col - c0))


def _slice(e: Eqn, out: TileBuf, ins: list[Any], target: str, scratch: Any) -> None:
    V.extract(out, ins[0], *e.params["offsets"])


_SLICE = VecOp(_slice, _slice_valid, row_local=False)  # a window of rows: once per lane image
register((VP.tile_slice_p,), Rule(impl_of(_SLICE), batch=lanes_of(_SLICE)))


def _assemble_batch(e: Eqn, out: TileBuf, ins: list[Any], target: str, scratch: Any) -> None:
    """TINSERT into a copy of dst (the batch form's result is a fresh image, or dst's own when dst
    dies here: the copy onto itself is then a no-op)."""
    dst, src = ins
    if out.data is not dst.data:
        out.data[...] = dst.data
    V.insert(out, src, *e.params["offsets"])


def _assemble_valid(e: Eqn, ins: list[Any]) -> tuple[int | None, int | None]:
    return ins[0].valid_row, ins[0].valid_col


@rule(VP.tile_assemble_p, batch=lanes_of(VecOp(_assemble_batch, _assemble_valid, row_local=False)))
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


def _ci(e: Eqn, out: TileBuf, ins: list[Any], target: str, scratch: Any) -> None:
    VS.tci(out, int(ins[0]), bool(e.params.get("descending")))


_CI = VecOp(_ci, _whole)  # no tile operand: one image for every lane (a lane-uniform start)
register((VP.ci_p,), Rule(impl_of(_CI), batch=lanes_of(_CI)))


def _sort32(e: Eqn, out: TileBuf, ins: list[Any], target: str, scratch: Any) -> None:
    VS.tsort32(out, ins[0], ins[1])


def _sort32_valid(e: Eqn, ins: list[Any]) -> tuple[int | None, int | None]:
    src = ins[0]
    return src.valid_row, src.valid_col * VS.pair_elems(src.dtype)


_SORT32 = VecOp(_sort32, _sort32_valid)  # each row's blocks on their own: row-local
register((VP.sort32_p,), Rule(impl_of(_SORT32), batch=lanes_of(_SORT32)))


def _mrgsort2(e: Eqn, out: TileBuf, ins: list[Any], target: str, scratch: Any) -> None:
    VS.tmrgsort_lists(out, ins[:-1], ins[-1], bool(e.params.get("exhausted")), target)


def _mrgsort2_valid(e: Eqn, ins: list[Any]) -> tuple[int | None, int | None]:
    return 1, sum(x.valid_col for x in ins[:-1])


_MRGSORT2 = VecOp(_mrgsort2, _mrgsort2_valid, row_local=False)  # one-row lists: never stacked
register((VP.mrgsort2_p,), Rule(impl_of(_MRGSORT2), batch=lanes_of(_MRGSORT2)))


def _mrgsort(e: Eqn, out: TileBuf, ins: list[Any], target: str, scratch: Any) -> None:
    VS.tmrgsort(out, ins[0], e.params["block_len"])


def _like_first(e: Eqn, ins: list[Any]) -> tuple[int | None, int | None]:
    return ins[0].valid_row, ins[0].valid_col


_MRGSORT = VecOp(_mrgsort, _like_first, row_local=False)  # one-row lists: never stacked
register((VP.mrgsort_p,), Rule(impl_of(_MRGSORT), batch=lanes_of(_MRGSORT)))


def _gather_mask(e: Eqn, out: TileBuf, ins: list[Any], target: str, scratch: Any) -> None:
    VS.gather_mask(out, ins[0], e.params["pattern"])


def _gather_mask_valid(e: Eqn, ins: list[Any]) -> tuple[int | None, int | None]:
    src = ins[0]
    start, stride = VS.MASK_PATTERNS[e.params["pattern"]]
    return src.valid_row, len(range(start, src.valid_col, stride))


_GATHER_MASK = VecOp(_gather_mask, _gather_mask_valid)  # positions within each row: row-local
register((VP.gather_mask_p,), Rule(impl_of(_GATHER_MASK), batch=lanes_of(_GATHER_MASK)))


def _gather(e: Eqn, out: TileBuf, ins: list[Any], target: str, scratch: Any) -> None:
    VS.gather(out, ins[0], ins[1], bool(e.params.get("rowwise", True)))


def _gather_valid(e: Eqn, ins: list[Any]) -> tuple[int | None, int | None]:
    return ins[1].valid_row, ins[1].valid_col


#: the row-wise form reads its own row only; the flat form indexes the whole tile: once per image
_GATHER = {rw: VecOp(_gather, _gather_valid, row_local=rw) for rw in (True, False)}
register(
    (VP.gather_p,),
    Rule(impl_of(_GATHER[True]), batch=by_eqn(lambda e: _GATHER[bool(e.params.get("rowwise", True))])),
)
