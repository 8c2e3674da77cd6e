"""Binding: a traced operation becomes one equation of the innermost frame, its operands lifted
into that frame (a value of an enclosing frame is captured through every loop body between:
closure conversion), its type rule run at once so that an error names the kernel line."""

from __future__ import annotations

import functools
import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np

from runtime.memory import CAPACITIES, HW_NAMES

from ..core import dtypes as dt
from ..core.ir import Atom, Eqn, Literal, Var
from ..core.primitives import Primitive
from ..core.types import DynDim, Mem, ScalarType, TileType, Type
from ..errors import CompileError, Source, source_of, user_frame, user_source
from . import frames
from .frames import TraceFrame, current_state
from .tracer import Tracer


def lift(t: Tracer, frame: TraceFrame) -> Var:
    """The Var standing for tracer `t` inside `frame`, capturing it through enclosing loop bodies."""
    if t.frame is frame:
        return t.var
    if t.frame.closed or not t.frame.is_ancestor_of(frame):
        made = defining_eqn(t)
        where = f" (defined at {made.source}," if made is not None and made.source else " ("
        where += f" inside the loop at {t.frame.source})" if t.frame.source else " inside a loop)"
        raise CompileError(
            f"value '{t.var.hint or t.var.type}'{where} is used outside the loop that defined it",
            user_source(),
            help="assign it to a name before the loop so that the loop carries it",
        )
    assert frame.parent is not None
    outer = lift(t, frame.parent)
    inner = frame.captured.get(outer)
    if inner is None:
        inner = Var(outer.type, outer.hint)
        frame.captured[outer] = inner
    return inner


@functools.lru_cache(maxsize=4096)
def _int_literal(value: int, dtype: dt.DType) -> Literal:
    return Literal(dtype.wrap(value), ScalarType(dtype))


def literal(value: Any, dtype: dt.DType = dt.INDEX) -> Literal:
    """A Python constant as an IR literal: ints wrap to `dtype`, bools are BOOL, reals a float dtype; anything
    else is refused."""
    if type(value) is int:  # the common case, without the ABC checks below
        return _int_literal(value, dtype)
    if isinstance(value, bool | np.bool_):
        return Literal(bool(value), ScalarType(dt.BOOL))
    if isinstance(value, numbers.Integral):
        return Literal(dtype.wrap(int(value)), ScalarType(dtype))
    if isinstance(value, numbers.Real):
        return Literal(float(value), ScalarType(dtype if dtype.is_float else dt.FP32))
    raise CompileError(f"cannot use {type(value).__name__} {value!r} as a kernel value", user_source())


def to_atom(x: Any, frame: TraceFrame, dtype: dt.DType = dt.INDEX) -> Atom:
    """`x` as an operand of `frame`: a tracer's Var (captured into nested loop frames), or a literal."""
    if type(x) is Tracer:
        return x.var if x.frame is frame else lift(x, frame)
    if type(x) is int:
        return _int_literal(x, dtype)
    if isinstance(x, Tracer):
        return lift(x, frame)
    if isinstance(x, Var | Literal):
        return x
    if isinstance(x, DynDim):  # a pl.dynamic dimension used as a value: its pl.tensor.dim
        return to_atom(DynDim.kernel_value(x), frame, dtype)
    return literal(x, dtype)


def bind(
    prim: Primitive,
    groups: Sequence[Sequence[Any]],
    params: dict[str, Any] | None = None,
    source: Source | None = None,
    dtype: dt.DType = dt.INDEX,
) -> list[Tracer]:
    """Stage one equation in the current frame; the type rule runs now, so errors name this line."""
    st = current_state()
    if st.pending is not None:
        raise st.pending
    if st.branches:  # close the one-armed `if`s the kernel has left before staging past them
        frames.branch_handler.close_done(st)
    frame = st.top
    src = source
    if src is None:
        uf = user_frame()
        src = None if uf is None else source_of(uf)
        if uf is not None and id(uf) not in st.user_frames:
            st.user_frames[id(uf)] = uf  # its locals name the values at the end of tracing
    inputs = tuple([to_atom(x, frame, dtype) for grp in groups for x in grp])
    params = {**params, "arity": tuple(map(len, groups))} if params else {"arity": tuple(map(len, groups))}
    try:
        out_types = prim.type_rule(*[a.type for a in inputs], **params)
    except CompileError as e:
        if e.source is None:
            raise CompileError(e.raw_message, src, rule=e.rule, help=e.help) from None
        raise
    for t in out_types:
        if type(t) is TileType and t.memory is Mem.Vec:
            _check_capacity(t, st.target, src)
    outs = tuple([Var(t) for t in out_types])
    eqn = Eqn(prim, inputs, outs, params, src)
    frame.eqns.append(eqn)
    for v in outs:
        frame.defs[v] = eqn
    return [Tracer(v, frame) for v in outs]


def _check_capacity(t: Type, target: str, src: Source | None) -> None:
    """A Vec tile larger than the vector buffer (UB) can never be placed. (An Acc tile may still be
    split into L0C-sized blocks by AutoTileMatmulL0, which checks it; a Mat tile over L1 is refused
    by the device when it is allocated.)"""
    if not isinstance(t, TileType) or t.memory is not Mem.Vec:
        return
    cap = CAPACITIES[target][t.memory.value]
    if t.nbytes > cap:
        hw = HW_NAMES[t.memory.value]
        raise CompileError(
            f"tile {t} needs {t.nbytes} bytes ({t.nbytes / 1024:g} KiB) but the {t.memory.value} "
            f"buffer ({hw}) holds {cap // 1024} KiB on {target}",
            src,
            help="load a smaller window and loop over the rest",
        )


def defining_eqn(t: Tracer) -> Eqn | None:
    """The equation that made `t` in its frame; None for a parameter or captured value."""
    return t.frame.defs.get(t.var)
