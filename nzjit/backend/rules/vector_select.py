"""Rules of the vector unit's compare and select (nzjit/prims/select.py): TCMP / TCMPS write a
packed predicate mask, TSEL / TSELS choose with it (runtime.vector_select); `pl.set_validshape`
gives a tile's bytes another valid region.

Each is a `VecOp` (vector_lanes.py): one instruction call as the reference impl and as the
all-lanes batch form. All four are row-local (a mask row is its source row's predicates), so the
lanes' images stack along the rows. A select written without `tmp` gets the A2/A3 scratch tile
from the compiler (a UINT8 [1, 32], PyPTO's size), live while the instruction runs.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import runtime
from runtime import TileBuf
from runtime import vector_select as VS
from runtime import vector_trans as RT

from ...core.ir import Eqn
from ...core.types import TileType
from ...prims import select as SP
from ..rule import Rule, register
from .vector_alu import scalar_operand
from .vector_lanes import VecOp, impl_of, lanes_of


def _mask_valid(e: Eqn, ins: list[Any]) -> tuple[int | None, int | None]:
    return ins[0].valid_row, VS.mask_cols(ins[0].valid_col)


def _src_valid(e: Eqn, ins: list[Any]) -> tuple[int | None, int | None]:
    return ins[1].valid_row, ins[1].valid_col


def _has_tmp(e: Eqn) -> bool:
    return len(e.inputs) == 4  # sel: mask, lhs, rhs[, tmp]; sels: mask, src[, tmp], scalar


def sel_scratch(e: Eqn, target: str) -> TileType | None:
    """The compiler's tmp of a select written without one (A2/A3 only), or TTRANS's tmp: live while
    the instruction runs (the memory plan charges it as the rule allocates it)."""
    if e.primitive is SP.tile_transpose_p:
        src = e.inputs[0].type
        assert isinstance(src, TileType)
        return SP.trans_tmp(src)
    if e.primitive not in (SP.sel_p, SP.sels_p) or _has_tmp(e) or target != "A2A3":
        return None
    return SP.SEL_TMP


def _scratch(e: Eqn, ins: list[Any], target: str) -> TileType | None:
    return sel_scratch(e, target)


def _cmp(e: Eqn, out: TileBuf, ins: list[Any], target: str, scratch: Any) -> None:
    VS.tcmp(out, ins[0], ins[1], e.params["mode"], target)


def _cmps(e: Eqn, out: TileBuf, ins: list[Any], target: str, scratch: Any) -> None:
    VS.tcmps(out, ins[0], scalar_operand(e, 1, ins[1]), e.params["mode"], target)


def _sel(e: Eqn, out: TileBuf, ins: list[Any], target: str, scratch: Any) -> None:
    VS.tsel(out, ins[0], ins[1], ins[2], ins[3] if len(ins) > 3 else scratch, target)


def _sels(e: Eqn, out: TileBuf, ins: list[Any], target: str, scratch: Any) -> None:
    tmp = ins[2] if len(ins) > 3 else scratch
    VS.tsels(out, ins[0], ins[1], tmp, scalar_operand(e, len(ins) - 1, ins[-1]), target)


def _set_valid(e: Eqn, ins: list[Any]) -> tuple[int | None, int | None]:
    static = e.params["static"]
    dyn = iter(ins[1:])
    vr, vc = (int(next(dyn)) if s is None else s for s in static)
    if not (0 < vr <= ins[0].rows and 0 < vc <= ins[0].cols):
        raise runtime.DispatchError(
            f"{e.source}: pl.set_validshape to {vr}x{vc} outside the tile's "
            f"{ins[0].rows}x{ins[0].cols}; the call is refused (nothing is written back)"
        )
    return vr, vc


def _copy_bytes(e: Eqn, out: TileBuf, ins: list[Any], target: str, scratch: Any) -> None:
    """The same bytes under the new valid region (a TMOV of the whole tile: see codegen/pto/select.py)."""
    np.copyto(out.data, ins[0].data)


def _trans_valid(e: Eqn, ins: list[Any]) -> tuple[int | None, int | None]:
    return ins[0].valid_col, ins[0].valid_row


def _trans(e: Eqn, out: TileBuf, ins: list[Any], target: str, scratch: Any) -> None:
    RT.ttrans(out, ins[0], scratch)


for _prim, _op in (
    (SP.set_validshape_p, VecOp(_copy_bytes, _set_valid)),
    (SP.tile_transpose_p, VecOp(_trans, _trans_valid, False, _scratch)),
    (SP.cmp_p, VecOp(_cmp, _mask_valid)),
    (SP.cmps_p, VecOp(_cmps, _mask_valid)),
    (SP.sel_p, VecOp(_sel, _src_valid, True, _scratch)),
    (SP.sels_p, VecOp(_sels, _src_valid, True, _scratch)),
):
    register((_prim,), Rule(impl_of(_op), batch=lanes_of(_op)))
