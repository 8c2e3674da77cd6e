"""PTO emitters of the memory primitives: tensor windows and views (folded into partition views),
`pto.tload` / `pto.tstore`, `pto.tmov`, and the transpose view of a tile."""

from __future__ import annotations

from typing import Any

from ... import prims as P
from ...core.ir import Eqn, Graph
from ...core.types import TensorType, TileType
from ...errors import InternalError
from ..pto_types import Dim, pointer_type, tile_rows_cols
from .emitter import Emitter, Tile, View, instr, pto_rules, rule, unlowered

pto_rules[P.tensor_assign_p] = unlowered("ConvertTensorToTileOps")


@rule(P.tensor_slice_p)
def _slice(em: Emitter, e: Eqn) -> None:
    """A window of a view: no text, its offsets are folded into later partition views."""
    v = em.view(e.inputs[0])
    offsets = [em.index(a) for a in e.operands("offsets")]
    zero = [0] * len(offsets)
    offs, _ = em.root_window(v, offsets, zero)
    drop = set(e.params.get("drop", ()))
    axes = tuple(a for j, a in enumerate(v.axes) if j not in drop)
    em.env[e.outputs[0]] = View(v.ssa, v.name, v.type, v.ptr, v.strides, tuple(offs), axes)


@rule(P.tensor_reshape_p, P.tensor_view_p, P.tensor_reinterpret_view_p)
def _reshape(em: Emitter, e: Eqn) -> None:
    """A new shape over the same bytes: a new make_tensor_view of the (offset) base pointer."""
    v = em.view(e.inputs[0])
    out = e.outputs[0]
    t = out.type
    assert isinstance(t, TensorType)
    ptr = _offset_pointer(em, v)
    if t.dtype is not v.type.dtype:
        cast = em.names.fresh(f"{v.name}_ptr")
        em.line(f"{cast} = pto.castptr {ptr} : {pointer_type(v.type.dtype)} -> {pointer_type(t.dtype)}")
        ptr = cast
    em.env[out] = em.make_view(ptr, out.hint or v.name, t)


def _offset_pointer(em: Emitter, v: View) -> str:
    """The base pointer of a sliced view: `%arg` plus the element offset of its window."""
    linear: Dim = 0
    for o, s in zip(v.offsets, v.strides):
        linear = em.binop("addi", linear, em.binop("muli", o, s, f"{v.name}_eoff"), f"{v.name}_eoff")
    if linear == 0:
        return v.ptr
    out = em.names.fresh(f"{v.name}_ptr")
    em.line(f"{out} = pto.addptr {v.ptr}, {em.operand(linear)} : {pointer_type(v.type.dtype)}")
    return out


def _element(em: Emitter, e: Eqn, n: int) -> tuple[View, str, str]:
    """The view, the base pointer and the flat element offset (SSA) of a scalar access whose first
    `n` operands after the tensor are its indices (PyPTO's `ptr[offset]` form)."""
    v = em.view(e.inputs[0])
    idx = [em.index(a) for a in e.inputs[1 : 1 + n]]
    offs, _ = em.root_window(v, idx, [1] * len(idx))
    linear: Dim = 0
    for o, s in zip(offs, v.strides):
        linear = em.binop("addi", linear, em.binop("muli", o, s, f"{v.name}_eoff"), f"{v.name}_eoff")
    return v, v.ptr, em.operand(linear)


@rule(P.tensor_read_p)
def _read(em: Emitter, e: Eqn) -> None:
    """`%x = pto.load_scalar %ptr[%off] : !pto.ptr<T> -> T`."""
    v, ptr, off = _element(em, e, len(e.inputs) - 1)
    out = em.define(e.outputs[0])
    em.line(f"{out} = pto.load_scalar {ptr}[{off}] : {pointer_type(v.type.dtype)} -> {v.type.dtype.short}")


@rule(P.tensor_write_p)
def _write(em: Emitter, e: Eqn) -> None:
    """`pto.store_scalar %x, %ptr[%off] : !pto.ptr<T>, T`; the result is the same view."""
    v, ptr, off = _element(em, e, len(e.inputs) - 2)
    em.line(
        f"pto.store_scalar {em.value(e.inputs[-1])}, {ptr}[{off}] : {pointer_type(v.type.dtype)}, "
        f"{v.type.dtype.short}"
    )
    em.alias(e.outputs[0], e.inputs[0])


# ================================================================================ tiles
def _load_valid(em: Emitter, e: Eqn, sizes: list[Dim]) -> tuple[Dim, Dim] | None:
    """The tile's valid rows / cols when the load's valid_shape is given (dynamic ones as SSA)."""
    if not e.operands("valid"):
        return None
    if e.params.get("blocked"):  # [1, cols/c0, rows/16, 16, c0] (NZ-12)
        return (
            em.binop("muli", sizes[2], sizes[3], "valid_rows"),
            em.binop("muli", sizes[1], sizes[4], "valid_cols"),
        )
    rows: Dim = 1
    for s in sizes[:-1]:
        rows = em.binop("muli", rows, s, "valid_rows")
    return rows, sizes[-1]


@rule(P.tensor_create_p)
def _scratch(em: Emitter, e: Eqn) -> None:
    """A kernel's GM scratch tensor: its view was made from its workspace argument at the top of
    the function (`scratch_arguments`); the accumulator form never reaches codegen."""
    if not e.params.get("scratch") or e.outputs[0] not in em.env:
        raise InternalError(
            "codegen: 'tensor.create' reached PTO emission; ConvertTensorToTileOps removes it, "
            "so codegen runs on the graph after every pass (Lowered.pto())"
        )


def scratch_arguments(em: Emitter, g: Graph) -> list[str]:
    """One trailing workspace argument per GM scratch tensor of `g` (`pl.create_tensor` in a
    kernel: PyPTO's InCore workspace; the host passes each core its own), its view made here."""
    args = []
    for e in g.walk():
        if e.primitive is P.tensor_create_p and e.params.get("scratch"):
            v = e.outputs[0]
            t = v.type
            assert isinstance(t, TensorType)
            ptr = em.names.fresh(f"{v.hint or 'scratch'}_workspace")
            args.append(f"{ptr}: {pointer_type(t.dtype)}")
            em.env[v] = em.make_view(ptr, v.hint or ptr[1:], t)
    return args


@rule(P.tile_load_p)
def _load(em: Emitter, e: Eqn) -> None:
    v = em.view(e.inputs[0])
    offsets = [em.index(a) for a in e.operands("offsets")]
    valid = e.operands("valid")
    sizes = [em.index(a) for a in valid] if valid else list(e.params["shape"])
    pview, ptype = em.partition(v, offsets, sizes)
    tile = em.alloc(e.outputs[0], valid=_load_valid(em, e, sizes))
    em.line(f"pto.tload ins({pview} : {ptype}) outs({tile.ssa} : {tile.spelled})")


def _store_sizes(em: Emitter, e: Eqn, tile: Tile, rank: int) -> list[Dim]:
    part = e.params.get("nz_partition")
    if part is not None:  # the explicit rank-5 partition of an Acc store into NZ (NZ-20)
        sizes: list[Dim] = [x if isinstance(x, int) else em.index(x) for x in part]
        if e.params.get("nz_dynamic_cols") and tile.valid is not None:
            # dynamic valid columns (NZ-21): the partition's column blocks are validCol / C0
            sizes[1] = em.binop("divui", tile.valid[1], part[4], "col_blocks")
        return sizes
    rows, cols = tile.valid if tile.valid is not None else tile_rows_cols(tile.type)
    return ([1] * max(0, rank - 2) + [rows, cols])[-rank:]


def _attr(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return f"{v} : i64"
    return '"' + str(getattr(v, "value", v)).replace('"', '\\"') + '"'


@rule(P.tile_store_p)
def _store(em: Emitter, e: Eqn) -> None:
    tile = em.tile(e.inputs[0])
    v = em.view(e.inputs[-1])
    offsets = [em.index(a) for a in e.operands("offsets")]
    pview, ptype = em.partition(v, offsets, _store_sizes(em, e, tile, len(v.axes)))
    attrs = e.params.get("attrs") or {}
    extra = " {" + ", ".join(f"{k} = {_attr(x)}" for k, x in sorted(attrs.items())) + "}" if attrs else ""
    em.line(f"pto.tstore ins({tile.ssa} : {tile.spelled}) outs({pview} : {ptype}){extra}")
    em.env[e.outputs[0]] = v


@rule(P.tile_transpose_view_p)
def _transpose_view(em: Emitter, e: Eqn) -> None:
    """No data moves: the same bytes under the transposed layout (NZ [N, K] == ZN [K, N])."""
    src = em.tile(e.inputs[0])
    out_v = e.outputs[0]
    t = out_v.type
    assert isinstance(t, TileType)
    valid = None if src.valid is None else (src.valid[1], src.valid[0])
    tile = Tile(em.names.fresh(out_v.hint, "t"), t, src.layout.transposed(), valid)
    em.line(f"{tile.ssa} = pto.treshape {src.ssa} : {src.spelled} -> {tile.spelled}")
    em.env[out_v] = tile


@rule(P.tile_move_p)
def _move(em: Emitter, e: Eqn) -> None:
    instr(em, e, "pto.tmov", valid_from=em.tile(e.inputs[0]))
