"""PTO emitters of the vector primitives (nzjit/prims/vector.py), registered into `pto_rules`, with
pto-isa's instruction names: `pto.tadds`, `pto.tmuls`, `pto.tdiv`, `pto.trowmax`, `pto.trowexpandsub`,
`pto.tcolexpandmul`, `pto.tcvt {rmode}`, `pto.texpands`, `pto.tfillpad`, and the cross-core
`pto.tpush_to_aiv` / `pto.tpop_from_aic` pair an A2/A3 Acc -> Vec move lowers to.

A `[R, 1]` tile (a row reduction's result, a row broadcast's operand) is the one-column DN tile
pto-isa's TROW* instructions write: `blayout=col_major`.
"""

from __future__ import annotations

from typing import Any

from ...core.dtypes import INDEX
from ...core.ir import Eqn
from ...core.types import Mem, TensorType, TileType, static_dim
from ...prims import vector as VP
from ..pto_types import TILE_LAYOUTS, TileLayout
from .emitter import Emitter, Tile, pto_rules

_DN = TileLayout("col_major", "none_box", 512)
_INSTR = {
    "tile.sort32": "pto.tsort32",
    "tile.gather": "pto.tgather",
    "tile.div": "pto.tdiv",
    "tile.minimum": "pto.tmin",
    "tile.adds": "pto.tadds",
    "tile.subs": "pto.tsubs",
    "tile.muls": "pto.tmuls",
    "tile.divs": "pto.tdivs",
    "tile.maximums": "pto.tmaxs",
    "tile.minimums": "pto.tmins",
    "tile.lrelu": "pto.tlrelu",
    "tile.fillpad": "pto.tfillpad",
}
#: PTOAS's precision attribute of the ops PyPTO gives `high_precision=` (its tile.div / log / recip
#: codegen); rsqrt's high-precision form is the tmp-tile overload instead.
_PRECISION_ATTR = {"div": "div_precision", "log": "log_precision", "recip": "recip_precision"}
_ROUND = {
    "none": "CAST_NONE",
    "rint": "CAST_RINT",
    "round": "CAST_ROUND",
    "floor": "CAST_FLOOR",
    "ceil": "CAST_CEIL",
    "trunc": "CAST_TRUNC",
    "odd": "CAST_ODD",
}


def _alloc(em: Emitter, e: Eqn, valid_from: Tile | None = None) -> Tile:
    t = e.outputs[0].type
    assert isinstance(t, TileType)
    nd = em.alloc(e.outputs[0], valid=valid_from.valid if valid_from is not None else None)
    if not (t.memory is Mem.Vec and len(t.shape) == 2 and t.shape[1] == 1 and t.shape[0] > 1):
        return nd
    out = Tile(nd.ssa, nd.type, _DN, nd.valid)  # the DN column a row reduction writes
    em.lines[-1] = em.lines[-1].replace(nd.spelled, out.spelled)
    em.env[e.outputs[0]] = out
    return out


def operands(em: Emitter, e: Eqn) -> tuple[list[str], list[str], Tile | None]:
    """The SSA names and types of `e`'s operands (tiles, and scalars as values of their dtype), and
    its first tile operand."""
    names, types = [], []
    first: Tile | None = None
    for a in e.inputs:
        v = em.env.get(a) if not hasattr(a, "value") else None
        if isinstance(v, Tile):
            first = first or v
            names.append(v.ssa)
            types.append(v.spelled)
        else:
            names.append(em.value(a))
            types.append(a.type.dtype.short)
    return names, types, first


def _instr(em: Emitter, e: Eqn, op: str, attrs: str = "") -> None:
    """`op ins(tiles and scalars : types) outs(%dst : type)`; scalars as SSA values of their dtype."""
    names, types, first = operands(em, e)
    out = _alloc(em, e, first)
    em.line(f"{op} ins({', '.join(names)} : {', '.join(types)}) outs({out.ssa} : {out.spelled}){attrs}")


def _named(em: Emitter, e: Eqn) -> None:
    name = e.primitive.name
    if e.primitive in VP.REDUCE.values() and name.startswith("tile.row") and len(e.inputs) == 1:
        _row_reduce_with_scratch(em, e)
        return
    if name == "tile.rsqrt" and e.params.get("high_precision"):
        _rsqrt_high_precision(em, e)
        return
    short = name.split(".")[1]
    precision = ""
    if short in _PRECISION_ATTR and e.params.get("high_precision"):
        precision = f" {{precisionType = #pto<{_PRECISION_ATTR[short]} high_precision>}}"
    _instr(em, e, _INSTR.get(name) or "pto.t" + short.replace("_", ""), precision)


def _rsqrt_high_precision(em: Emitter, e: Eqn) -> None:
    """TRSQRT's high-precision overload takes a tmp tile (on A2/A3 one 32-byte block that holds the
    1.0 it divides: TSQRT then TDIV); without it the instruction is the approximate vrsqrt."""
    src = em.tile(e.inputs[0])
    block = TileType((1, 32 // src.type.dtype.itemsize), src.type.dtype, Mem.Vec)
    tmp = Tile(em.names.fresh("tmp", "t"), block, TILE_LAYOUTS[Mem.Vec], None)
    em.line(f"{tmp.ssa} = pto.alloc_tile : {tmp.spelled}")
    out = _alloc(em, e, src)
    em.line(
        f"pto.trsqrt ins({src.ssa}, {tmp.ssa} : {src.spelled}, {tmp.spelled}) outs({out.ssa} : {out.spelled})"
    )


def _row_reduce_with_scratch(em: Emitter, e: Eqn) -> None:
    """A2/A3's TROW* take a scratch tile: a reduction written without `tmp` gets one of the
    source's shape (pto-isa's documented safe size)."""
    src = em.tile(e.inputs[0])
    tmp = Tile(em.names.fresh("tmp", "t"), src.type, src.layout, src.valid)
    em.line(f"{tmp.ssa} = pto.alloc_tile : {tmp.spelled}")
    out = _alloc(em, e, src)
    op = "pto.t" + e.primitive.name.split(".")[1].replace("_", "")
    em.line(f"{op} ins({src.ssa}, {tmp.ssa} : {src.spelled}, {tmp.spelled}) outs({out.ssa} : {out.spelled})")


def _cvt(em: Emitter, e: Eqn) -> None:
    _instr(em, e, "pto.tcvt", f" {{rmode = #pto<round_mode {_ROUND[e.params['mode']]}>}}")


def _create(em: Emitter, e: Eqn) -> None:
    _alloc(em, e)


def _full(em: Emitter, e: Eqn) -> None:
    value = em.value(e.inputs[0])
    out = _alloc(em, e)
    d = e.inputs[0].type.dtype.short
    em.line(f"pto.texpands ins({value} : {d}) outs({out.ssa} : {out.spelled})")


def _fillpad(em: Emitter, e: Eqn) -> None:
    _instr(em, e, "pto.tfillpad", f" {{pad_value = #pto<pad_value {e.params['pad']}>}}")


def _scale_operand(em: Emitter, a: Any) -> tuple[str, str]:
    """A dequant scale operand: a scalar (DEQF16), or the per-channel scales' tensor as a partition
    view of its one row (VDEQF16: the fixpipe reads them through its buffer)."""
    if isinstance(a.type, TensorType):
        n = static_dim(a.type.shape[-1])  # one scale per column of a static Acc tile
        return em.partition(em.view(a), [0] * a.type.rank, [*([1] * (a.type.rank - 1)), n])
    return em.value(a), a.type.dtype.short


def _tpush(direction: str):
    def emit(em: Emitter, e: Eqn) -> None:
        src = em.tile(e.inputs[0])
        scale = [_scale_operand(em, a) for a in e.inputs[1:]]
        names = ", ".join([src.ssa, *(s for s, _ in scale)])
        types = ", ".join([src.spelled, *(t for _, t in scale)])
        mode = VP.quant_mode(tuple(a.type for a in e.inputs[1:]))
        quant = f", pre_quant = #pto<quant_mode {mode}>" if mode else ""
        em.line(f"pto.tpush_to_{direction} ins({names} : {types}) {{split = 0{quant}}}")
        em.env[e.outputs[0]] = src  # the slot stands for the pushed tile until its pop

    return emit


def _tpop(direction: str):
    def emit(em: Emitter, e: Eqn) -> None:
        t = e.outputs[0].type
        assert isinstance(t, TileType)
        ssa = em.names.fresh(e.outputs[0].hint, "t")
        tile = Tile(ssa, t, TILE_LAYOUTS[t.memory], None)
        em.line(f"{ssa} = pto.tpop_from_{direction} {{split = 0}} -> {tile.spelled}")
        em.line(f"pto.tfree_from_{direction} {{split = 0}}")
        em.env[e.outputs[0]] = tile

    return emit


def _move_fixpipe(em: Emitter, e: Eqn) -> None:
    mode = " {acc_to_vec_mode = #pto<acc_to_vec_mode SingleModeVec0>}"
    if VP.quant_mode(tuple(a.type for a in e.inputs[1:])) != "VDEQF16":
        _instr(em, e, "pto.tmov", mode)
        return
    src = em.tile(e.inputs[0])  # TMOV_FP: the vector-quant move, its scales read through the fixpipe
    fp, fp_type = _scale_operand(em, e.inputs[1])
    out = _alloc(em, e, src)
    em.line(
        f"pto.tmov.fp ins({src.ssa}, {fp} : {src.spelled}, {fp_type}) outs({out.ssa} : {out.spelled}){mode}"
    )


def _slice(em: Emitter, e: Eqn) -> None:
    src = em.tile(e.inputs[0])
    r0, c0 = (em.const(x, INDEX) for x in e.params["offsets"])
    out = _alloc(em, e)
    em.line(
        f"pto.textract ins({src.ssa}, {r0}, {c0} : {src.spelled}, index, index) outs({out.ssa} : {out.spelled})"
    )


def _assemble(em: Emitter, e: Eqn) -> None:
    """TINSERT writes its destination in place: the old tile may still be read after this line, so
    the update goes into a copy (pto.tmov Vec -> Vec)."""
    dst, src = em.tile(e.inputs[0]), em.tile(e.inputs[1])
    r0, c0 = (em.const(x, INDEX) for x in e.params["offsets"])
    out = _alloc(em, e, dst)
    em.line(f"pto.tmov ins({dst.ssa} : {dst.spelled}) outs({out.ssa} : {out.spelled})")
    em.line(
        f"pto.tinsert ins({src.ssa}, {r0}, {c0} : {src.spelled}, index, index) outs({out.ssa} : {out.spelled})"
    )


def _reshape(em: Emitter, e: Eqn) -> None:
    """No data moves: the same UB bytes under another shape."""
    src = em.tile(e.inputs[0])
    t = e.outputs[0].type
    assert isinstance(t, TileType)
    layout = _DN if t.shape[1] == 1 and t.shape[0] > 1 else TILE_LAYOUTS[Mem.Vec]
    tile = Tile(em.names.fresh(e.outputs[0].hint, "t"), t, layout, None)
    em.line(f"{tile.ssa} = pto.treshape {src.ssa} : {src.spelled} -> {tile.spelled}")
    em.env[e.outputs[0]] = tile


def _ci(em: Emitter, e: Eqn) -> None:
    start = em.value(e.inputs[0])
    out = _alloc(em, e)
    flag = " {descending = true}" if e.params.get("descending") else ""
    em.line(f"pto.tci ins({start} : {e.inputs[0].type.dtype.short}) outs({out.ssa} : {out.spelled}){flag}")


def _mrgsort2(em: Emitter, e: Eqn) -> None:
    """TMRGSORT format 2: the lists and tmp in, dst and the per-list executed counts out."""
    tiles = [em.tile(a) for a in e.inputs]
    executed = em.names.fresh("executed_vec")
    flag = "true" if e.params.get("exhausted") else "false"
    em.line(f"{executed} = arith.constant dense<0> : vector<4xi16>")
    out = _alloc(em, e, tiles[0])
    em.line(
        f"pto.tmrgsort ins({', '.join(t.ssa for t in tiles)} {{exhausted = {flag}}} : "
        f"{', '.join(t.spelled for t in tiles)}) outs({out.ssa}, {executed} : {out.spelled}, vector<4xi16>)"
    )


def _mrgsort(em: Emitter, e: Eqn) -> None:
    src = em.tile(e.inputs[0])
    bl = em.const(e.params["block_len"], INDEX)
    out = _alloc(em, e, src)
    em.line(f"pto.tmrgsort ins({src.ssa}, {bl} : {src.spelled}, index) outs({out.ssa} : {out.spelled})")


def _gather_mask(em: Emitter, e: Eqn) -> None:
    _instr(em, e, "pto.tgather", f" {{mask_pattern = {e.params['pattern']} : i64}}")


def _register() -> None:
    for p in (
        *VP.BINARY.values(),
        *VP.BINARY_SCALAR.values(),
        *VP.UNARY.values(),
        *VP.REDUCE.values(),
        *VP.EXPAND.values(),
        VP.lrelu_p,
    ):
        pto_rules[p] = _named
    pto_rules.update(
        {
            VP.cvt_p: _cvt,
            VP.create_p: _create,
            VP.full_p: _full,
            VP.fillpad_p: _fillpad,
            VP.tpush_to_aiv_p: _tpush("aiv"),
            VP.tpop_from_aic_p: _tpop("aic"),
            VP.tpush_to_aic_p: _tpush("aic"),
            VP.tpop_from_aiv_p: _tpop("aiv"),
            VP.move_fixpipe_p: _move_fixpipe,
            VP.tile_slice_p: _slice,
            VP.tile_assemble_p: _assemble,
            VP.tile_reshape_p: _reshape,
            VP.ci_p: _ci,
            VP.sort32_p: _named,
            VP.mrgsort_p: _mrgsort,
            VP.mrgsort2_p: _mrgsort2,
            VP.gather_mask_p: _gather_mask,
            VP.gather_p: _named,
        }
    )


_register()
