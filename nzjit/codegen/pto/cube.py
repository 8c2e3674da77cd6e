"""PTO emitters of the cube primitives: `pto.textract` into Left/Right, `pto.tmov` into the bias
table and `pto.tmatmul(.acc/.bias)`. The matmuls before tiling (and the batched matmuls, unrolled by
FlattenTileNdTo2D) never reach codegen (refused as internal errors). A ragged tile's dynamic valid extent is computed in the text: a window's is its
source's past the window's start, clipped to the window (`arith.subi`, `arith.minsi`); a mad's is
its Left's valid rows by its Right's valid columns (TMATMUL m, n)."""

from __future__ import annotations

from ... import prims as P
from ...core.dtypes import INDEX
from ...core.ir import Eqn
from ...core.types import Mem, TileType
from ..pto_types import tile_rows_cols
from .emitter import Dim, Emitter, Tile, pto_rules, rule, unlowered

pto_rules[P.tensor_matmul_p] = pto_rules[P.tensor_matmul_acc_p] = unlowered("ConvertTensorToTileOps")
pto_rules[P.tile_matmul_p] = pto_rules[P.tile_matmul_acc_p] = unlowered("AutoTileMatmulL0")
pto_rules[P.tile_matmul_bias_p] = unlowered("AutoTileMatmulL0")
# the batched matmul is one 2-D matmul per batch after FlattenTileNdTo2D (passes/batch_matmul_unroll.py)
pto_rules[P.tile_batch_matmul_p] = pto_rules[P.tile_batch_matmul_acc_p] = unlowered("FlattenTileNdTo2D")


def _dynamic(t: TileType) -> bool:
    return t.valid_shape is not None and any(v is None for v in t.valid_shape)


def _valid_of(tile: Tile) -> tuple[Dim, Dim]:
    return tile.valid if tile.valid is not None else tile_rows_cols(tile.type)


def _window_valid(em: Emitter, t: TileType, src: Tile, offsets: tuple[Dim, Dim]) -> tuple[Dim, Dim] | None:
    """The valid extents of a TEXTRACT / TMOV window of type `t` (None: the type's static ones)."""
    if not _dynamic(t):
        return None
    out: list[Dim] = []
    for axis, (v, s, o) in enumerate(zip(t.valid_shape, _valid_of(src), offsets)):  # type: ignore[arg-type]
        extent = t.shape[axis]
        if v is not None:
            out.append(v)
        elif isinstance(s, int) and isinstance(o, int):
            out.append(max(0, min(extent, s - o)))
        else:
            d = s
            if o != 0:
                d = em.names.fresh("vpast")
                em.line(f"{d} = arith.subi {em.operand(s)}, {em.operand(o)} : index")
            m = em.names.fresh("vwin")
            em.line(f"{m} = arith.minsi {em.operand(d)}, {em.const(extent, INDEX)} : index")
            out.append(m)
    return out[0], out[1]


def _cube(em: Emitter, e: Eqn, op: str) -> None:
    """`op ins(...) outs(%acc)`; a ragged accumulator's valid extent is its Left's rows by its Right's columns."""
    tiles = [em.tile(a) for a in e.inputs]
    t = e.outputs[0].type
    assert isinstance(t, TileType)
    valid = None
    if _dynamic(t):
        left, right = tiles[-3:-1] if e.primitive is P.tile_mad_bias_p else tiles[-2:]
        valid = (_valid_of(left)[0], _valid_of(right)[1])
    out = em.alloc(e.outputs[0], valid=valid)
    names = ", ".join(x.ssa for x in tiles)
    types = ", ".join(x.spelled for x in tiles)
    em.line(f"{op} ins({names} : {types}) outs({out.ssa} : {out.spelled})")


@rule(P.tile_extract_p)
def _extract(em: Emitter, e: Eqn) -> None:
    src = em.tile(e.inputs[0])
    r0, c0 = (em.index(a) for a in e.operands("offsets"))
    t = e.outputs[0].type
    assert isinstance(t, TileType)
    out = em.alloc(e.outputs[0], valid=_window_valid(em, t, src, (r0, c0)))
    r0s, c0s = em.operand(r0), em.operand(c0)
    if t.memory is Mem.Bias:
        # Mat -> Bias is TMOV (pto-isa TMOV.md: tmov.m2b), of the window at (r0, c0)
        em.line(
            f"pto.tmov ins({src.ssa}, {r0s}, {c0s} : {src.spelled}, index, index) outs({out.ssa} : {out.spelled})"
        )
        return
    flag = " {transpose}" if e.params.get("transpose") else ""
    em.line(
        f"pto.textract ins({src.ssa}, {r0s}, {c0s} : {src.spelled}, index, index) "
        f"outs({out.ssa} : {out.spelled}){flag}"
    )


def _op(e: Eqn, suffix: str) -> str:
    """`pto.tmatmul<suffix>`, or `pto.tgemv<suffix>` for a gemv (pto-isa docs/isa/TGEMV.md)."""
    return ("pto.tgemv" if e.params.get("gemv") else "pto.tmatmul") + suffix


@rule(P.tile_mad_p)
def _mad(em: Emitter, e: Eqn) -> None:
    _cube(em, e, _op(e, ""))


@rule(P.tile_mad_acc_p)
def _mad_acc(em: Emitter, e: Eqn) -> None:
    _cube(em, e, _op(e, ".acc"))


@rule(P.tile_mad_bias_p)
def _mad_bias(em: Emitter, e: Eqn) -> None:
    _cube(em, e, _op(e, ".bias"))
