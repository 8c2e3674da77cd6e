"""PTO emitters of the compare and select primitives (nzjit/prims/select.py), pto-isa's names:
`pto.tcmp` / `pto.tcmps` with `{cmpMode = #pto<cmp MODE>}` (PyPTO's spelling) writing the packed
UINT8 mask, `pto.tsel` / `pto.tsels` reading it with their `tmp` tile (the compiler's [1, 32]
UINT8 scratch when the kernel gave none)."""

from __future__ import annotations

from ...core.ir import Eqn
from ...core.types import Mem, TileType
from ...errors import CompileError
from ...prims import select as SP
from ..pto_types import TILE_LAYOUTS
from .emitter import Emitter, Tile, pto_rules
from .vector import operands


def _cmp(em: Emitter, e: Eqn) -> None:
    names, types, src = operands(em, e)
    assert src is not None
    mask = e.outputs[0].type
    assert isinstance(mask, TileType)
    valid = None
    if src.valid is not None:  # a dynamic valid row count carries over; the packed columns are static
        if isinstance(src.valid[1], str):
            raise CompileError(
                "the PTO text of a compare on a dynamic valid column count is not emitted: "
                "its mask's valid bytes are ceil(cols / 8)",
                e.source,
                help="pl.tile.fillpad the tile first (a fully valid row)",
            )
        valid = (src.valid[0], (mask.valid_shape or mask.shape)[1])
    out = em.alloc(e.outputs[0], valid=valid)  # type: ignore[arg-type]
    mode = e.params["mode"]
    em.line(
        f"{e.primitive.name.replace('tile.', 'pto.t')} ins({', '.join(names)} {{cmpMode = #pto<cmp {mode}>}} : "
        f"{', '.join(types)}) outs({out.ssa} : {out.spelled})"
    )


def _sel(em: Emitter, e: Eqn) -> None:
    names, types, _ = operands(em, e)
    if len(e.inputs) == 3:  # no tmp: the compiler's scratch, after the sources (sel) or the source (sels)
        tmp = Tile(em.names.fresh("tmp", "t"), SP.SEL_TMP, TILE_LAYOUTS[Mem.Vec], None)
        em.line(f"{tmp.ssa} = pto.alloc_tile : {tmp.spelled}")
        at = 3 if e.primitive is SP.sel_p else 2
        names.insert(at, tmp.ssa)
        types.insert(at, tmp.spelled)
    src = em.tile(e.inputs[1])
    out = em.alloc(e.outputs[0], valid=src.valid)
    op = "pto.tsel" if e.primitive is SP.sel_p else "pto.tsels"
    em.line(f"{op} ins({', '.join(names)} : {', '.join(types)}) outs({out.ssa} : {out.spelled})")


def _set_validshape(em: Emitter, e: Eqn) -> None:
    """A new tile with the valid extents, filled by a TMOV of the source: the result is a value of
    its own (PyPTO's `pto.set_validshape` updates the tile in place, which an SSA value cannot)."""
    src = em.tile(e.inputs[0])
    dyn = iter(e.inputs[1:])
    valid = tuple(em.index(next(dyn)) if s is None else s for s in e.params["static"])
    out = em.alloc(e.outputs[0], valid=valid)  # type: ignore[arg-type]
    em.line(f"pto.tmov ins({src.ssa} : {src.spelled}) outs({out.ssa} : {out.spelled})")


def _transpose(em: Emitter, e: Eqn) -> None:
    """`pto.ttrans ins(%src, %tmp : T, T') outs(%dst : T'')` with the compiler's tmp tile."""
    src = em.tile(e.inputs[0])
    tmp_t = SP.trans_tmp(src.type)
    tmp = Tile(em.names.fresh("tmp", "t"), tmp_t, TILE_LAYOUTS[Mem.Vec], None)
    em.line(f"{tmp.ssa} = pto.alloc_tile : {tmp.spelled}")
    valid = None if src.valid is None else (src.valid[1], src.valid[0])
    out = em.alloc(e.outputs[0], valid=valid)
    em.line(
        f"pto.ttrans ins({src.ssa}, {tmp.ssa} : {src.spelled}, {tmp.spelled}) outs({out.ssa} : {out.spelled})"
    )


pto_rules.update(
    {
        SP.cmp_p: _cmp,
        SP.cmps_p: _cmp,
        SP.sel_p: _sel,
        SP.sels_p: _sel,
        SP.set_validshape_p: _set_validshape,
        SP.tile_transpose_p: _transpose,
    }
)
