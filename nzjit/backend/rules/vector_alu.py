"""Rules of the vector unit's ALU (nzjit/prims/vector.py): tile <op> tile beyond the ufunc table
of rules/vector.py (`tile.div`, `tile.minimum`), tile <op> scalar, unary math, TLRELU, TCVT,
row / column reductions and broadcasts, tile creation, TEXPANDS and TFILLPAD.

Each rule is a `VecOp` (vector_lanes.py): the runtime's Vec instruction (runtime.vector) on real
bytes, so capacity, alignment and dtype refusals are the device's, as the reference impl and as
the all-lanes batch form built from the same call. Results carry the valid region of their
sources (only that region is computed).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from runtime import TileBuf
from runtime import vector as V
from runtime import vector_prep as VR

from ...core.ir import Eqn
from ...core.types import Mem, ScalarType, TileType
from ...prims import vector as VP
from ..rule import Rule, register
from ..steps import alloc
from .vector_lanes import VecOp, impl_of, lanes_of, out_type

#: The runtime op of each ALU primitive.
_BINARY_OP = {
    "tile.div": "div",
    "tile.minimum": "min",
    "tile.adds": "add",
    "tile.subs": "sub",
    "tile.muls": "mul",
    "tile.divs": "div",
    "tile.maximums": "max",
    "tile.minimums": "min",
}
_EXPAND_OP = {
    "": "expand",
    "_add": "add",
    "_sub": "sub",
    "_mul": "mul",
    "_div": "div",
    "_max": "max",
    "_min": "min",
}


def like(ctx: Any, e: Eqn, src: TileBuf) -> TileBuf:
    """The result tile of `e`, with the valid region of `src` (a `[R, 1]` one is DN: steps.alloc)."""
    return alloc(ctx, out_type(e), (src.valid_row, src.valid_col))


def target_of(ctx: Any) -> str:
    """The target of the running kernel's device (the vector unit's dtype tables depend on it)."""
    return ctx.onchip.target


def scalar_operand(e: Eqn, i: int, value: Any) -> Any:
    """Scalar operand `i` as a value of its declared dtype (a pl.Scalar[pl.FP16] holds an fp16)."""
    t = e.inputs[i].type
    d = t.dtype.np_dtype if isinstance(t, ScalarType) else None
    return value if d is None or not t.dtype.is_float else np.asarray(value).astype(d)[()]


def _like_first(e: Eqn, ins: list[Any]) -> tuple[int | None, int | None]:
    return ins[0].valid_row, ins[0].valid_col


def whole(e: Eqn, ins: list[Any]) -> tuple[int | None, int | None]:
    """The result's valid shape is its type's static one (steps.alloc)."""
    return None, None


def _vec_rule(prims: tuple[Any, ...], op: VecOp) -> None:
    register(prims, Rule(impl_of(op), batch=lanes_of(op)))


def _binary(e: Eqn, out: TileBuf, ins: list[Any], target: str, scratch: Any) -> None:
    V.binary(_BINARY_OP[e.primitive.name], out, ins[0], ins[1], target)


def _binary_scalar(e: Eqn, out: TileBuf, ins: list[Any], target: str, scratch: Any) -> None:
    V.binary_scalar(_BINARY_OP[e.primitive.name], out, ins[0], scalar_operand(e, 1, ins[1]), target)


def _unary(e: Eqn, out: TileBuf, ins: list[Any], target: str, scratch: Any) -> None:
    V.unary(e.primitive.name.split(".")[1], out, ins[0], target, bool(e.params.get("high_precision")))


def _lrelu(e: Eqn, out: TileBuf, ins: list[Any], target: str, scratch: Any) -> None:
    V.lrelu(out, ins[0], scalar_operand(e, 1, ins[1]), target)


def _cvt(e: Eqn, out: TileBuf, ins: list[Any], target: str, scratch: Any) -> None:
    V.cvt(out, ins[0], e.params["mode"], target)


# The prepared forms (runtime.vector_prep) of the same calls, for lane-batched steps: `specs` are
# the stacked operands (a scalar's value at prepare time only; the step passes each call's own).
def _binary_prep(e: Eqn, specs: list[Any], out: Any, scr: Any, target: str, lanes: int) -> Any:
    return VR.prepare("binary", out, specs[0], specs[1], target=target, op=_BINARY_OP[e.primitive.name])


def _binary_scalar_prep(e: Eqn, specs: list[Any], out: Any, scr: Any, target: str, lanes: int) -> Any:
    p = VR.prepare("binary_scalar", out, specs[0], target=target, op=_BINARY_OP[e.primitive.name])
    return lambda o, x, s: p(o, x, scalar_operand(e, 1, s))


def _unary_prep(e: Eqn, specs: list[Any], out: Any, scr: Any, target: str, lanes: int) -> Any:
    op, hp = e.primitive.name.split(".")[1], bool(e.params.get("high_precision"))
    return VR.prepare("unary", out, specs[0], target=target, op=op, high_precision=hp)


def _cvt_prep(e: Eqn, specs: list[Any], out: Any, scr: Any, target: str, lanes: int) -> Any:
    return VR.prepare("cvt", out, specs[0], target=target, mode=e.params["mode"])


_vec_rule(tuple(VP.BINARY.values()), VecOp(_binary, _like_first, prepare=_binary_prep))
_vec_rule(tuple(VP.BINARY_SCALAR.values()), VecOp(_binary_scalar, _like_first, prepare=_binary_scalar_prep))
_vec_rule(tuple(VP.UNARY.values()), VecOp(_unary, _like_first, prepare=_unary_prep))
_vec_rule((VP.lrelu_p,), VecOp(_lrelu, _like_first))
_vec_rule((VP.cvt_p,), VecOp(_cvt, _like_first, prepare=_cvt_prep))


# ------------------------------------------------------------------------ reductions / broadcasts
def _reduce_kind(e: Eqn) -> tuple[str, str]:
    return _kind_of(e.primitive.name)


@functools.cache
def _kind_of(name: str) -> tuple[str, str]:
    """("row" / "col", op) of a reduction's primitive name (parsed once: it runs every step)."""
    kind, op = name.split(".")[1].split("_")
    return kind, op


def _reduce_valid(e: Eqn, ins: list[Any]) -> tuple[int | None, int | None]:
    return (ins[0].valid_row, 1) if _reduce_kind(e)[0] == "row" else (1, ins[0].valid_col)


def reduce_scratch(e: Eqn, src_cols: int, target: str) -> TileType | None:
    """TROW* on A2/A3 without a tmp operand: the compiler supplies a scratch tile of the source's
    rows and `src_cols` columns, live while the instruction runs (the memory plan charges it too)."""
    if (
        e.primitive not in VP.REDUCE.values()
        or _reduce_kind(e)[0] != "row"
        or len(e.inputs) > 1
        or target != "A2A3"
    ):
        return None
    t = out_type(e)
    return TileType(t.shape[:1] + (src_cols,), t.dtype, t.memory)


def _reduce_scratch(e: Eqn, ins: list[Any], target: str) -> TileType | None:
    return reduce_scratch(e, ins[0].cols, target)


def _reduce(e: Eqn, out: TileBuf, ins: list[Any], target: str, scratch: Any) -> None:
    kind, op = _reduce_kind(e)
    src = ins[0]
    if kind == "row":
        V.row_reduce(op, out, src, ins[1] if len(ins) > 1 else scratch, target)
    else:
        V.col_reduce(op, out, src, target)


def _expand(e: Eqn, out: TileBuf, ins: list[Any], target: str, scratch: Any) -> None:
    a, v = ins
    row, op = _expand_of(e.primitive.name)
    (V.row_expand if row else V.col_expand)(op, out, None if op == "expand" else a, v, target)


@functools.cache
def _expand_of(name: str) -> tuple[bool, str]:
    """(a row broadcast?, runtime op) of a TROWEXPAND* / TCOLEXPAND* primitive name (parsed once)."""
    name = name.split(".")[1]
    return name[:3] == "row", _EXPAND_OP[name[len("row_expand") :]]


def _col_expand_lanes(e: Eqn, out: TileBuf, ins: list[Any], target: str, scratch: Any, lanes: int) -> None:
    """A column broadcast of `lanes` lanes' images stacked along the rows, each lane its own column."""
    a, v = ins
    op = _EXPAND_OP[e.primitive.name.split(".")[1][len("col_expand") :]]
    V.col_expand(op, out, None if op == "expand" else a, v, target, lanes)


def _reduce_prep(e: Eqn, specs: list[Any], out: Any, scr: Any, target: str, lanes: int) -> Any:
    kind, op = _reduce_kind(e)
    if kind != "row":
        return None
    tmp = specs[1] if len(specs) > 1 else scr
    return VR.prepare("row_reduce", out, specs[0], tmp, target=target, op=op)


def _expand_prep(e: Eqn, specs: list[Any], out: Any, scr: Any, target: str, lanes: int) -> Any:
    row, op = _expand_of(e.primitive.name)
    a = None if op == "expand" else specs[0]
    if row:
        return VR.prepare("row_expand", out, a, specs[1], target=target, op=op)
    return VR.prepare("col_expand", out, a, specs[1], target=target, op=op, lanes=lanes)


for _p in VP.REDUCE.values():  # a row reduction is row-local, a column one is not
    _vec_rule(
        (_p,),
        VecOp(_reduce, _reduce_valid, _p.name.startswith("tile.row"), _reduce_scratch, prepare=_reduce_prep),
    )
for _p in VP.EXPAND.values():
    row = _p.name.startswith("tile.row")
    lanes = None if row else _col_expand_lanes
    _vec_rule((_p,), VecOp(_expand, _like_first, row, lanes_compute=lanes, prepare=_expand_prep))


# ---------------------------------------------------------------------------- creation / fills
def _create(e: Eqn, out: TileBuf, ins: list[Any], target: str, scratch: Any) -> None:
    """An uninitialised tile: nothing to compute (a VecOp, so an SPMD body that makes its `tmp` with
    pl.create_tile still runs lane-batched: one zeroed image for every lane, as alloc_tile's bytes)."""


def _full(e: Eqn, out: TileBuf, ins: list[Any], target: str, scratch: Any) -> None:
    V.expands(out, scalar_operand(e, 0, ins[0]))


def _fillpad(e: Eqn, out: TileBuf, ins: list[Any], target: str, scratch: Any) -> None:
    V.fillpad(out, ins[0], e.params["pad"])


_CREATE = VecOp(_create, whole)
register(
    (VP.create_p,),
    Rule(
        impl_of(_CREATE),
        batch=lambda st: lanes_of(_CREATE)(st) if out_type(st.eqn).memory is Mem.Vec else None,
    ),
)  # a Mat / Acc tile: no lane image
_vec_rule((VP.full_p,), VecOp(_full, whole))
_vec_rule((VP.fillpad_p,), VecOp(_fillpad, whole))
