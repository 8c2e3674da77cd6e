"""Rules of the scalar family: integer / index arithmetic (wrapping at the declared width, NZ-17;
floor division and modulo, NZ-19), comparisons and conversions."""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import numpy as np

import runtime

from ... import prims as P
from ...core import dtypes as D
from ...core.ir import Eqn
from ...core.types import ScalarType
from ..lane_state import Fallback, LaneState, replays
from ..rule import Rule, Run, Step, register, rule

# operator functions (C calls) rather than lambdas: the interpreter calls these once per scalar step
SCALAR_OPS: dict[str, Callable[[int, int], int]] = {
    "add": operator.add,
    "sub": operator.sub,
    "mul": operator.mul,
    "floordiv": operator.floordiv,  # Python // and % are floor division / modulo (NZ-19)
    "mod": operator.mod,
    "min": min,
    "max": max,
}
COMPARE_OPS: dict[str, Callable[[int, int], bool]] = {
    "lt": operator.lt,
    "le": operator.le,
    "gt": operator.gt,
    "ge": operator.ge,
    "eq": operator.eq,
    "ne": operator.ne,
}
# the lane-batched forms: numpy int64 arrays over lanes (min / max elementwise)
_LANE_OPS: dict[str, Callable[[Any, Any], Any]] = {
    "add": operator.add,
    "sub": operator.sub,
    "mul": operator.mul,
    "floordiv": operator.floordiv,
    "mod": operator.mod,
    "min": np.minimum,
    "max": np.maximum,
}


# ------------------------------------------------------------------------------ binary ops
def _scalar(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    a, b = ins
    t = e.outputs[0].type
    assert isinstance(t, ScalarType)
    if e.primitive.name in ("floordiv", "mod") and b == 0:
        raise runtime.DeviceError(f"{e.source}: integer {e.primitive.name} by zero")
    return [t.dtype.wrap(SCALAR_OPS[e.primitive.name](a, b))]  # wraps at the declared width (NZ-17)


def _int_range(t: Any) -> tuple[int, int] | None:
    dt = t.dtype
    if not dt.is_int:
        return None
    if dt.is_signed:
        return -(1 << (dt.bits - 1)), 1 << (dt.bits - 1)
    return 0, 1 << dt.bits


def _specialize_scalar(st: Step) -> Run | None:
    e = st.eqn
    t = e.outputs[0].type
    if not isinstance(t, ScalarType) or len(st.ins) != 2:
        return None
    name = e.primitive.name
    op = SCALAR_OPS[name]
    a, b = st.ins
    (o,) = st.outs
    rng = _int_range(t)
    wrap = t.dtype.wrap
    lo, hi = rng if rng is not None else (None, 0)  # hi is read only where lo is not None
    if name in ("floordiv", "mod"):

        def run_div(ctx: Any, env: list[Any]) -> None:
            x, y = env[a], env[b]
            if y == 0:
                raise runtime.DeviceError(f"{e.source}: integer {name} by zero")
            v = op(x, y)
            env[o] = v if lo is None or lo <= v < hi else wrap(v)

        return run_div

    if lo is None:

        def run_float(ctx: Any, env: list[Any]) -> None:
            env[o] = op(env[a], env[b])

        return run_float

    def run(ctx: Any, env: list[Any]) -> None:
        v = op(env[a], env[b])
        env[o] = v if lo <= v < hi else wrap(v)

    return run


def _batch_scalar(st: Step) -> Any:
    e = st.eqn
    t = e.outputs[0].type
    if not isinstance(t, ScalarType) or t.dtype not in (D.INDEX, D.INT64):
        return None  # numpy int64 arithmetic wraps like a 64-bit scalar, nothing narrower
    name = e.primitive.name
    a, b = st.ins
    (o,) = st.outs
    wrap = t.dtype.wrap
    op = _LANE_OPS.get(name)
    if op is None:
        return None
    checked = name in ("floordiv", "mod")

    def run(s: LaneState, env: list[Any]) -> None:
        x, y = env[a], env[b]
        if not isinstance(x, np.ndarray) and not isinstance(y, np.ndarray):
            if checked and y == 0:
                raise Fallback("division by zero")
            env[o] = wrap(min(x, y) if name == "min" else max(x, y) if name == "max" else op(x, y))
            return
        if checked and (y == 0 if not isinstance(y, np.ndarray) else (y == 0).any()):
            raise Fallback("division by zero")
        # int64 overflow wraps silently: try_run_spmd runs every step under errstate(over="ignore")
        env[o] = np.asarray(
            op(
                np.int64(x) if not isinstance(x, np.ndarray) else x,
                np.int64(y) if not isinstance(y, np.ndarray) else y,
            ),
            dtype=np.int64,
        )

    return replays(run)  # index arithmetic on lane values: no buffer work


register(tuple(P.SCALAR_BINARY.values()), Rule(_scalar, _specialize_scalar, _batch_scalar))


# ----------------------------------------------------------------------------- comparisons
def _compare(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    return [COMPARE_OPS[e.primitive.name](*ins)]


def _specialize_compare(st: Step) -> Run | None:
    op = COMPARE_OPS[st.eqn.primitive.name]
    a, b = st.ins
    (o,) = st.outs

    def run(ctx: Any, env: list[Any]) -> None:
        env[o] = op(env[a], env[b])

    return run


_LANE_COMPARE = {
    "lt": np.less,
    "le": np.less_equal,
    "gt": np.greater,
    "ge": np.greater_equal,
    "eq": np.equal,
    "ne": np.not_equal,
}


def _batch_compare(st: Step) -> Any:
    """A comparison over lanes (a staged `if`'s predicate in a batched body): int64 lane arrays
    compare exactly; a float operand keeps the per-lane path (int64 -> float64 could round)."""
    e = st.eqn
    if any(not isinstance(a.type, ScalarType) or a.type.dtype.is_float for a in e.inputs):
        return None
    op, py = _LANE_COMPARE[e.primitive.name], COMPARE_OPS[e.primitive.name]
    a, b = st.ins
    (o,) = st.outs

    def run(s: LaneState, env: list[Any]) -> None:
        x, y = env[a], env[b]
        if not isinstance(x, np.ndarray) and not isinstance(y, np.ndarray):
            env[o] = py(x, y)
            return
        env[o] = op(x, y)

    return replays(run)


register(tuple(P.COMPARE.values()), Rule(_compare, _specialize_compare, _batch_compare))


# --------------------------------------------------------------------------- dynamic dimensions
def _specialize_dim(st: Step) -> Run | None:
    name = st.eqn.params["name"]
    (o,) = st.outs

    def run(ctx: Any, env: list[Any]) -> None:
        env[o] = ctx.dims[name]

    return run


def _batch_dim(st: Step) -> Any:
    name = st.eqn.params["name"]
    (o,) = st.outs

    def run(s: LaneState, env: list[Any]) -> None:
        env[o] = s.ctx.dims[name]  # one call's dimension: the same in every lane

    return replays(run)  # the dims: part of a replay's signature


@rule(P.tensor_dim_p, specialize=_specialize_dim, batch=_batch_dim)
def _dim(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    return [ctx.dims[e.params["name"]]]


# ------------------------------------------------------------------------------ conversion
def _specialize_convert(st: Step) -> Run | None:
    wrap = st.eqn.params["dtype"].wrap
    (a,) = st.ins
    (o,) = st.outs

    def run(ctx: Any, env: list[Any]) -> None:
        env[o] = wrap(int(env[a]))

    return run


@rule(P.convert_p, specialize=_specialize_convert)
def _convert(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    return [e.params["dtype"].wrap(int(ins[0]))]
