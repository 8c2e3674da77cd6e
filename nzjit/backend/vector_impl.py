"""Reference implementations of the vector primitives (nzjit/prims/vector.py), registered into
`impl_rules`: each allocates its result tile in the unified buffer and runs the runtime's Vec
instruction (runtime.vector) on real bytes, so capacity, alignment and dtype refusals are the
device's. Results carry the valid region of their sources (only that region is computed)."""

from __future__ import annotations

from typing import Any

import numpy as np

import runtime
from runtime import TileBuf
from runtime import vector as V
from runtime import vector_sort as VS
from runtime.crosscore import dequant_fp16, pipe_of

from ..core.ir import Eqn
from ..core.types import ScalarType, TileType
from ..prims import vector as VP
from .impl import alloc, impl_rules, static_valid

#: The runtime op of each ALU primitive.
_BINARY_OP = {"tile.div": "div", "tile.minimum": "min", "tile.adds": "add", "tile.subs": "sub",
              "tile.muls": "mul", "tile.divs": "div", "tile.maximums": "max", "tile.minimums": "min"}
_EXPAND_OP = {"": "expand", "_add": "add", "_sub": "sub", "_mul": "mul", "_div": "div", "_max": "max",
              "_min": "min"}


def _out_type(e: Eqn) -> TileType:
    t = e.outputs[0].type
    assert isinstance(t, TileType)
    return t


def vec_alloc(ctx: Any, t: TileType, valid: tuple[int, int] | None = None) -> TileBuf:
    """A Vec tile of type `t` charged to the unified buffer; a `[R, 1]` tile is the one-column DN
    layout a row reduction writes."""
    rows, cols = t.shape
    vr, vc = valid if valid is not None else static_valid(t)
    layout = "DN" if cols == 1 and rows > 1 else None
    return ctx.onchip.alloc_tile(t.memory.value, rows, cols, t.dtype.np_dtype, layout=layout, valid_row=vr,
                                 valid_col=vc)


def _like(ctx: Any, e: Eqn, src: TileBuf) -> TileBuf:
    return vec_alloc(ctx, _out_type(e), (src.valid_row, src.valid_col))


def _target(ctx: Any) -> str:
    return ctx.onchip.target


def _scalar(e: Eqn, i: int, value: Any) -> Any:
    """Scalar operand `i` as a value of its declared dtype (a pl.Scalar[pl.FP16] holds an fp16)."""
    t = e.inputs[i].type
    d = t.dtype.np_dtype if isinstance(t, ScalarType) else None
    return value if d is None or not t.dtype.is_float else np.asarray(value).astype(d)[()]


def _binary(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    a, b = ins
    out = _like(ctx, e, a)
    V.binary(_BINARY_OP[e.primitive.name], out, a, b, _target(ctx))
    return [out]


def _binary_scalar(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    a, s = ins
    out = _like(ctx, e, a)
    V.binary_scalar(_BINARY_OP[e.primitive.name], out, a, _scalar(e, 1, s), _target(ctx))
    return [out]


def _unary(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    out = _like(ctx, e, ins[0])
    V.unary(e.primitive.name.split(".")[1], out, ins[0], _target(ctx))
    return [out]


def _lrelu(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    out = _like(ctx, e, ins[0])
    V.lrelu(out, ins[0], _scalar(e, 1, ins[1]), _target(ctx))
    return [out]


def _cvt(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    out = _like(ctx, e, ins[0])
    V.cvt(out, ins[0], e.params["mode"], _target(ctx))
    return [out]


def _reduce(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    src = ins[0]
    tmp = ins[1] if len(ins) > 1 else None
    kind, op = e.primitive.name.split(".")[1].split("_")
    if kind == "row":
        out = vec_alloc(ctx, _out_type(e), (src.valid_row, 1))
        scratch = tmp
        if scratch is None and _target(ctx) == "A2A3":  # the compiler supplies the scratch tile
            scratch = vec_alloc(ctx, TileType(_out_type(e).shape[:1] + (src.cols,), _out_type(e).dtype,
                                              _out_type(e).memory))
        try:
            V.row_reduce(op, out, src, scratch, _target(ctx))
        finally:
            if scratch is not None and scratch is not tmp:
                ctx.onchip.free_tile(scratch)
    else:
        out = vec_alloc(ctx, _out_type(e), (1, src.valid_col))
        V.col_reduce(op, out, src, _target(ctx))
    return [out]


def _expand(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    a, v = ins
    name = e.primitive.name.split(".")[1]
    kind, suffix = name[:3], name[len("row_expand"):]
    out = _like(ctx, e, a)
    fn = V.row_expand if kind == "row" else V.col_expand
    op = _EXPAND_OP[suffix]
    fn(op, out, None if op == "expand" else a, v, _target(ctx))
    return [out]


def _create(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    t = _out_type(e)
    if len(t.shape) == 2 and t.memory.value == "Vec":
        return [vec_alloc(ctx, t)]
    return [alloc(ctx, t)]


def _full(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    out = vec_alloc(ctx, _out_type(e))
    V.expands(out, _scalar(e, 0, ins[0]))
    return [out]


def _fillpad(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    out = vec_alloc(ctx, _out_type(e))
    V.fillpad(out, ins[0], e.params["pad"])
    return [out]


def _tpush_to_aiv(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    scale = float(_scalar(e, 1, ins[1])) if len(ins) > 1 else None
    return [pipe_of(ctx.gm).push_acc(ins[0], e.params["dtype"].np_dtype, bool(e.params.get("relu")), scale)]


def _tpush_to_aic(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    return [pipe_of(ctx.gm).push_vec(ins[0])]


def _tpop_from_aic(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    slot = ins[0]
    out = vec_alloc(ctx, _out_type(e), slot.shape)
    pipe_of(ctx.gm).pop(slot, out)
    return [out]


def _tpop_from_aiv(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    slot = ins[0]
    t = _out_type(e)
    out = ctx.onchip.alloc_tile("Mat", t.shape[0], t.shape[1], t.dtype.np_dtype, valid_row=slot.shape[0],
                                valid_col=slot.shape[1])
    pipe_of(ctx.gm).pop(slot, out)
    return [out]


def _move_fixpipe(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    acc: TileBuf = ins[0]
    out = vec_alloc(ctx, _out_type(e), (acc.valid_row, acc.valid_col))
    if len(ins) > 1:  # DEQF16: the fixpipe's scalar dequantisation
        V.valid_region(out)[...] = dequant_fp16(acc.logical()[: acc.valid_row, : acc.valid_col],
                                                float(_scalar(e, 1, ins[1])), bool(e.params.get("relu")))
        return [out]
    runtime.isa.tmov(out, acc, relu=bool(e.params.get("relu")))
    return [out]


def _slice(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    src: TileBuf = ins[0]
    r0, c0 = e.params["offsets"]
    rows, cols = e.params["shape"]
    vr, vc = max(0, min(rows, src.valid_row - r0)), max(0, min(cols, src.valid_col - c0))
    out = vec_alloc(ctx, _out_type(e), (vr, vc))
    V.extract(out, src, r0, c0)
    return [out]


def _assemble(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    dst, src = ins
    if not ctx.consumes(e, 0):  # the old tile is still read later: TINSERT into a copy
        copy = vec_alloc(ctx, _out_type(e), (dst.valid_row, dst.valid_col))
        copy.data[...] = dst.data
        dst = copy
    V.insert(dst, src, *e.params["offsets"])
    return [dst]


def _reshape(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    out = vec_alloc(ctx, _out_type(e))
    V.reshape(out, ins[0])
    return [out]


def _ci(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    out = vec_alloc(ctx, _out_type(e))
    VS.tci(out, int(ins[0]), bool(e.params.get("descending")))
    return [out]


def _sort32(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    src, idx = ins
    out = vec_alloc(ctx, _out_type(e), (src.valid_row, src.valid_col * VS.pair_elems(src.dtype)))
    VS.tsort32(out, src, idx)
    return [out]


def _mrgsort(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    out = _like(ctx, e, ins[0])
    VS.tmrgsort(out, ins[0], e.params["block_len"])
    return [out]


def _gather_mask(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    src = ins[0]
    start, stride = VS.MASK_PATTERNS[e.params["pattern"]]
    out = vec_alloc(ctx, _out_type(e), (src.valid_row, len(range(start, src.valid_col, stride))))
    VS.gather_mask(out, src, e.params["pattern"])
    return [out]


def _gather(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    src, idx = ins
    out = vec_alloc(ctx, _out_type(e), (idx.valid_row, idx.valid_col))
    VS.gather(out, src, idx, bool(e.params.get("rowwise", True)))
    return [out]


def _register() -> None:
    for p in VP.BINARY.values():
        impl_rules[p] = _binary
    for p in VP.BINARY_SCALAR.values():
        impl_rules[p] = _binary_scalar
    for p in VP.UNARY.values():
        impl_rules[p] = _unary
    for p in VP.REDUCE.values():
        impl_rules[p] = _reduce
    for p in VP.EXPAND.values():
        impl_rules[p] = _expand
    impl_rules.update({
        VP.lrelu_p: _lrelu, VP.cvt_p: _cvt, VP.create_p: _create, VP.full_p: _full, VP.fillpad_p: _fillpad,
        VP.tpush_to_aiv_p: _tpush_to_aiv, VP.tpop_from_aic_p: _tpop_from_aic, VP.tpush_to_aic_p: _tpush_to_aic,
        VP.tpop_from_aiv_p: _tpop_from_aiv, VP.move_fixpipe_p: _move_fixpipe, VP.tile_slice_p: _slice,
        VP.tile_assemble_p: _assemble, VP.tile_reshape_p: _reshape, VP.ci_p: _ci, VP.sort32_p: _sort32,
        VP.mrgsort_p: _mrgsort, VP.gather_mask_p: _gather_mask, VP.gather_p: _gather,
    })


_register()
