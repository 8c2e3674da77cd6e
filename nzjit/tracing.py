"""Tracing: tracer objects stage a Python kernel into a Graph, once (never parsing its source).

A `Tracer` is a mutable handle on a Var of a trace frame. Every staged loop opens a child frame;
values of enclosing frames used in a body are captured as explicit body inputs (closure
conversion), so a loop-carried value is only a change of one operand list. Which names a loop
rebinds is read, read-only, from the kernel frame's locals when the loop opens and closes.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator, Sequence
from types import FrameType
from typing import Any

from .core import dtypes as dt
from .core.ir import Atom, Eqn, Graph, Literal, Var
from .core.primitives import Primitive, for_p
from .core.types import ScalarType, TensorType, TileType, Type
from .errors import CompileError, Source, user_source
from .passes.rewrite import dce

_MISSING = object()


class TraceFrame:
    """The equations of one graph under construction (the kernel, or one loop body)."""

    def __init__(self, parent: TraceFrame | None, source: Source | None = None) -> None:
        self.parent = parent
        self.eqns: list[Eqn] = []
        self.params: list[Var] = []
        self.captured: dict[Var, Var] = {}  # var of the parent frame -> body input
        self.defs: dict[Var, Eqn] = {}
        self.closed = False
        self.source = source
        self.kind: str | None = None

    def is_ancestor_of(self, other: TraceFrame) -> bool:
        f: TraceFrame | None = other
        while f is not None:
            if f is self:
                return True
            f = f.parent
        return False


class TraceState:
    def __init__(self) -> None:
        self.frames: list[TraceFrame] = []
        self.pending: CompileError | None = None  # a break/return seen inside a staged loop

    @property
    def top(self) -> TraceFrame:
        return self.frames[-1]


_local = threading.local()


def current_state() -> TraceState:
    st = getattr(_local, "state", None)
    if st is None:
        raise CompileError("this operation is only available while tracing a @pl.kernel", user_source())
    return st


def in_trace() -> bool:
    return getattr(_local, "state", None) is not None


class Tracer:
    """A traced value. Operators stage primitives; Python control flow on it is refused."""

    __slots__ = ("var", "frame", "__weakref__")

    def __init__(self, var: Var, frame: TraceFrame) -> None:
        self.var = var
        self.frame = frame

    # -- introspection
    @property
    def type(self) -> Type:
        return self.var.type

    @property
    def shape(self) -> tuple[Any, ...]:
        t = self.var.type
        if isinstance(t, TensorType | TileType):
            return tuple(t.shape)
        return ()

    @property
    def dtype(self) -> dt.DType:
        return self.var.type.dtype  # type: ignore[union-attr]

    def __repr__(self) -> str:
        return f"Tracer<{self.var.hint or '_'}:{self.var.type}>"

    # -- refusals: Python needs a concrete value here
    def __bool__(self) -> bool:
        raise CompileError("a Python `if`/`while`/`and`/`or` on a traced value cannot be staged: the "
                           "kernel is traced once, so the branch would be fixed at trace time",
                           user_source(), help="compute both sides, or use pl.min / pl.max")

    def __index__(self) -> int:
        raise CompileError("a traced value is used where Python needs a concrete int (e.g. a plain "
                           "`range` bound or list index)", user_source(),
                           help="use pl.range(...) for a loop over traced bounds")

    __int__ = __index__

    def __iter__(self) -> Iterator[Any]:
        raise CompileError("a traced value cannot be iterated in Python", user_source(),
                           help="loop with pl.range / pl.pipeline / pl.spmd")

    # -- scalar arithmetic
    def _bin(self, name: str, other: Any, reverse: bool = False) -> Tracer:
        from .language import ops

        return ops.scalar_binary(name, other, self) if reverse else ops.scalar_binary(name, self, other)

    def __add__(self, o: Any) -> Any:
        return self._tile_or_scalar("add", o)

    def __radd__(self, o: Any) -> Any:
        return self._bin("add", o, True)

    def __sub__(self, o: Any) -> Any:
        return self._tile_or_scalar("sub", o)

    def __rsub__(self, o: Any) -> Any:
        return self._bin("sub", o, True)

    def __mul__(self, o: Any) -> Any:
        return self._tile_or_scalar("mul", o)

    def __rmul__(self, o: Any) -> Any:
        return self._bin("mul", o, True)

    def __floordiv__(self, o: Any) -> Any:
        return self._bin("floordiv", o)

    def __rfloordiv__(self, o: Any) -> Any:
        return self._bin("floordiv", o, True)

    def __mod__(self, o: Any) -> Any:
        return self._bin("mod", o)

    def __rmod__(self, o: Any) -> Any:
        return self._bin("mod", o, True)

    def __neg__(self) -> Any:
        return self._bin("sub", 0, True)

    def __lt__(self, o: Any) -> Any:
        return self._bin("lt", o)

    def __le__(self, o: Any) -> Any:
        return self._bin("le", o)

    def __gt__(self, o: Any) -> Any:
        return self._bin("gt", o)

    def __ge__(self, o: Any) -> Any:
        return self._bin("ge", o)

    def __eq__(self, o: Any) -> Any:  # type: ignore[override]
        return self._bin("eq", o)

    def __ne__(self, o: Any) -> Any:  # type: ignore[override]
        return self._bin("ne", o)

    __hash__ = object.__hash__

    def _tile_or_scalar(self, name: str, o: Any) -> Any:
        from .language import ops

        if isinstance(self.var.type, TileType):
            return ops.elementwise(name, self, o)
        return self._bin(name, o)

    # -- tensor indexing
    def __getitem__(self, key: Any) -> Tracer:
        from .language import ops

        return ops.getitem(self, key)

    def __setitem__(self, key: Any, value: Any) -> None:
        from .language import ops

        ops.setitem(self, key, value)


# ------------------------------------------------------------------------------------ binding
def lift(t: Tracer, frame: TraceFrame) -> Var:
    """The Var standing for tracer `t` inside `frame`, capturing it through enclosing loop bodies."""
    if t.frame is frame:
        return t.var
    if t.frame.closed or not t.frame.is_ancestor_of(frame):
        where = f" (defined inside the loop at {t.frame.source})" if t.frame.source else ""
        raise CompileError(f"value '{t.var.hint or t.var.type}'{where} is used outside the loop that "
                           "defined it", user_source(),
                           help="assign it to a name before the loop so that the loop carries it")
    assert frame.parent is not None
    outer = lift(t, frame.parent)
    inner = frame.captured.get(outer)
    if inner is None:
        inner = Var(outer.type, outer.hint)
        frame.captured[outer] = inner
    return inner


def literal(value: Any, dtype: dt.DType = dt.INDEX) -> Literal:
    if isinstance(value, bool):
        return Literal(value, ScalarType(dt.BOOL))
    if isinstance(value, int):
        return Literal(dtype.wrap(value), ScalarType(dtype))
    if isinstance(value, float):
        return Literal(value, ScalarType(dtype if dtype.is_float else dt.FP32))
    raise CompileError(f"cannot use {type(value).__name__} {value!r} as a kernel value", user_source())


def to_atom(x: Any, frame: TraceFrame, dtype: dt.DType = dt.INDEX) -> Atom:
    if isinstance(x, Tracer):
        return lift(x, frame)
    if isinstance(x, Var | Literal):
        return x
    return literal(x, dtype)


def bind(prim: Primitive, groups: Sequence[Sequence[Any]], params: dict[str, Any] | None = None,
         source: Source | None = None, dtype: dt.DType = dt.INDEX) -> list[Tracer]:
    """Stage one equation in the current frame; the type rule runs now, so errors name this line."""
    st = current_state()
    if st.pending is not None:
        raise st.pending
    frame = st.top
    src = source or user_source()
    inputs = tuple(to_atom(x, frame, dtype) for grp in groups for x in grp)
    params = dict(params or {})
    params["arity"] = tuple(len(g) for g in groups)
    try:
        out_types = prim.type_rule(*(a.type for a in inputs), **params)
    except CompileError as e:
        if e.source is None:
            raise CompileError(e.raw_message, src, rule=e.rule, help=e.help) from None
        raise
    outs = tuple(Var(t) for t in out_types)
    eqn = Eqn(prim, inputs, outs, params, src)
    frame.eqns.append(eqn)
    for v in outs:
        frame.defs[v] = eqn
    return [Tracer(v, frame) for v in outs]


def defining_eqn(t: Tracer) -> Eqn | None:
    return t.frame.defs.get(t.var)


# -------------------------------------------------------------------------------------- loops
def _name_hints(local_vars: dict[str, Any]) -> None:
    for name, val in local_vars.items():
        if isinstance(val, Tracer) and val.var.hint is None and not name.startswith("_"):
            val.var.hint = name


def staged_loop(kind: str, start: Any, stop: Any, step: Any, stage: int | None,
                source: Source | None) -> Iterator[Tracer]:
    """The iterator behind pl.range / pl.pipeline / pl.spmd: one trip, traced once."""
    st = current_state()
    if st.pending is not None:
        raise st.pending
    kframe: FrameType = sys._getframe(1)  # the frame running the `for` statement
    before = dict(kframe.f_locals)
    _name_hints(before)
    parent = st.top
    bounds = [to_atom(x, parent) for x in (start, stop, step)]
    for b in bounds:
        if not (isinstance(b.type, ScalarType) and b.type.dtype.is_int):
            raise CompileError(f"loop bounds must be integers, got {b.type}", source)
    if isinstance(bounds[2], Literal) and bounds[2].value <= 0:
        raise CompileError(f"loop step must be positive, got {bounds[2].value}", source)
    body = TraceFrame(parent, source)
    body.kind = kind
    iv = Var(ScalarType(dt.INDEX))
    body.params = [iv]
    iv_tracer = Tracer(iv, body)
    st.frames.append(body)
    try:
        yield iv_tracer
    except GeneratorExit:
        if st.top is body and st.pending is None:
            line = kframe.f_lineno
            text = (Source(kframe.f_code.co_filename, line).text or "").strip()
            word = "return" if text.startswith("return") else "break"
            st.pending = CompileError(
                f"`{word}` at line {line} leaves the staged loop {kind} early; a staged loop is traced "
                "once and always runs its full trip count", source,
                help="compute the trip count up front, or guard the work with pl.min / pl.max")
        raise
    _close_loop(st, body, iv_tracer, kind, bounds, stage, source, before, dict(kframe.f_locals))


def _same_python_value(a: Any, b: Any) -> bool:
    try:
        return bool(a is b or (type(a) is type(b) and a == b))
    except Exception:
        return False


def _close_loop(st: TraceState, body: TraceFrame, iv_tracer: Tracer, kind: str, bounds: list[Atom],
                stage: int | None, source: Source | None, before: dict[str, Any],
                after: dict[str, Any]) -> None:
    if st.top is not body:
        raise CompileError("staged loops closed out of order", source)
    parent = body.parent
    assert parent is not None
    _name_hints(after)
    if iv_tracer.var.hint is None:
        iv_tracer.var.hint = next((n for n, v in after.items() if v is iv_tracer), None)
    carries: list[tuple[str, Any, Tracer]] = []
    seen: set[int] = set()
    for name, new in after.items():
        old = before.get(name, _MISSING)
        if new is old or new is iv_tracer:
            continue
        if isinstance(new, Tracer):
            if new.frame.closed and new.frame is not body:
                continue  # a dead value of an inner loop (e.g. its induction variable)
            if old is _MISSING or (isinstance(old, Tracer) and old.frame.closed):
                continue  # defined in the body, dead after it
            if id(new) in seen:
                continue
            if not isinstance(old, Tracer | int | float) or isinstance(old, bool):
                raise CompileError(f"'{name}' is rebound inside the staged loop from {type(old).__name__} "
                                   "to a traced value; only traced values and numbers can be carried",
                                   source)
            seen.add(id(new))
            carries.append((name, old, new))
        elif old is not _MISSING and not _same_python_value(old, new):
            raise CompileError(f"the Python value '{name}' changes inside the staged loop ({old!r} -> "
                               f"{new!r}); the body is traced once, so the change would happen once",
                               source, help="make it a traced value (computed from the loop index) or "
                               "a plain `range` loop, which unrolls")
    if carries and kind == "spmd":
        raise CompileError(f"'{carries[0][0]}' is rebound inside pl.spmd: lanes run in parallel and "
                           "cannot carry values", source)
    inits: list[Atom] = []
    carry_params: list[Var] = []
    outs: list[Atom] = []
    for name, old, new in carries:
        init = to_atom(old, parent, new.var.type.dtype if isinstance(new.var.type, ScalarType) else dt.INDEX)
        inits.append(init)
        p = body.captured.pop(init, None) if isinstance(init, Var) else None
        if p is None:
            p = Var(init.type)
        p.hint = name
        carry_params.append(p)
        outs.append(lift(new, body))
    captured_outer = list(body.captured.keys())
    graph = Graph([body.params[0], *body.captured.values(), *carry_params], body.eqns, outs)
    st.frames.pop()
    body.closed = True
    params: dict[str, Any] = {"kind": kind, "body": graph}
    if stage is not None:
        params["stage"] = stage
    res = bind(for_p, [bounds, captured_outer, inits], params, source)
    for (name, _old, new), r in zip(carries, res):
        r.var.hint = name
        new.var, new.frame = r.var, r.frame  # the name now holds the loop's result


# ------------------------------------------------------------------------------------ tracing
def trace(fn: Any, param_types: Sequence[Type], param_names: Sequence[str], name: str) -> Graph:
    """Run `fn` once on tracers and return the staged Graph."""
    if in_trace():
        raise CompileError("a kernel cannot be traced inside another kernel's trace", user_source())
    st = TraceState()
    root = TraceFrame(None)
    root.params = [Var(t, n) for t, n in zip(param_types, param_names)]
    st.frames.append(root)
    _local.state = st
    try:
        fn(*(Tracer(v, root) for v in root.params))
        if st.pending is not None:
            raise st.pending
        if len(st.frames) != 1:
            raise CompileError("a staged loop was left open", st.top.source)
    finally:
        _local.state = None
    return dce(Graph(root.params, root.eqns, [], name=name))
