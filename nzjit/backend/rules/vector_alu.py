"""Rules of the vector unit's ALU (nzjit/prims/vector.py): tile <op> tile beyond the ufunc table
of rules/vector.py (`tile.div`, `tile.minimum`), tile <op> scalar, unary math, TLRELU, TCVT,
row / column reductions and broadcasts, tile creation, TEXPANDS and TFILLPAD.

Each impl allocates its result in the unified buffer and runs the runtime's Vec instruction
(runtime.vector) on real bytes, so capacity, alignment and dtype refusals are the device's.
Results carry the valid region of their sources (only that region is computed).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from runtime import TileBuf
from runtime import vector as V

from ...core.ir import Eqn
from ...core.types import ScalarType, TileType
from ...prims import vector as VP
from ..rule import rule
from ..steps import alloc

#: The runtime op of each ALU primitive.
_BINARY_OP = {"tile.div": "div", "tile.minimum": "min", "tile.adds": "add", "tile.subs": "sub",
              "tile.muls": "mul", "tile.divs": "div", "tile.maximums": "max", "tile.minimums": "min"}
_EXPAND_OP = {"": "expand", "_add": "add", "_sub": "sub", "_mul": "mul", "_div": "div", "_max": "max",
              "_min": "min"}


def out_type(e: Eqn) -> TileType:
    """The tile type of `e`'s result."""
    t = e.outputs[0].type
    assert isinstance(t, TileType)
    return t


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


@rule(*VP.BINARY.values())
def _binary(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    a, b = ins
    out = like(ctx, e, a)
    V.binary(_BINARY_OP[e.primitive.name], out, a, b, target_of(ctx))
    return [out]


@rule(*VP.BINARY_SCALAR.values())
def _binary_scalar(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    a, s = ins
    out = like(ctx, e, a)
    V.binary_scalar(_BINARY_OP[e.primitive.name], out, a, scalar_operand(e, 1, s), target_of(ctx))
    return [out]


@rule(*VP.UNARY.values())
def _unary(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    out = like(ctx, e, ins[0])
    V.unary(e.primitive.name.split(".")[1], out, ins[0], target_of(ctx))
    return [out]


@rule(VP.lrelu_p)
def _lrelu(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    out = like(ctx, e, ins[0])
    V.lrelu(out, ins[0], scalar_operand(e, 1, ins[1]), target_of(ctx))
    return [out]


@rule(VP.cvt_p)
def _cvt(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    out = like(ctx, e, ins[0])
    V.cvt(out, ins[0], e.params["mode"], target_of(ctx))
    return [out]


@rule(*VP.REDUCE.values())
def _reduce(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    src = ins[0]
    tmp = ins[1] if len(ins) > 1 else None
    kind, op = e.primitive.name.split(".")[1].split("_")
    if kind == "row":
        out = alloc(ctx, out_type(e), (src.valid_row, 1))
        scratch = tmp
        if scratch is None and target_of(ctx) == "A2A3":  # the compiler supplies the scratch tile
            scratch = alloc(ctx, TileType(out_type(e).shape[:1] + (src.cols,), out_type(e).dtype,
                                              out_type(e).memory))
        try:
            V.row_reduce(op, out, src, scratch, target_of(ctx))
        finally:
            if scratch is not None and scratch is not tmp:
                ctx.onchip.free_tile(scratch)
    else:
        out = alloc(ctx, out_type(e), (1, src.valid_col))
        V.col_reduce(op, out, src, target_of(ctx))
    return [out]


@rule(*VP.EXPAND.values())
def _expand(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    a, v = ins
    name = e.primitive.name.split(".")[1]
    kind, suffix = name[:3], name[len("row_expand"):]
    out = like(ctx, e, a)
    fn = V.row_expand if kind == "row" else V.col_expand
    op = _EXPAND_OP[suffix]
    fn(op, out, None if op == "expand" else a, v, target_of(ctx))
    return [out]


@rule(VP.create_p)
def _create(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    return [alloc(ctx, out_type(e))]


@rule(VP.full_p)
def _full(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    out = alloc(ctx, out_type(e))
    V.expands(out, scalar_operand(e, 0, ins[0]))
    return [out]


@rule(VP.fillpad_p)
def _fillpad(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    out = alloc(ctx, out_type(e))
    V.fillpad(out, ins[0], e.params["pad"])
    return [out]
