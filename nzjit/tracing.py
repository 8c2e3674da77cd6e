"""Tracing: tracer objects stage a Python kernel into a Graph, once (never parsing its source).

A `Tracer` is a mutable handle on a Var of a trace frame. Every staged loop opens a child frame;
values of enclosing frames used in a body are captured as explicit body inputs (closure
conversion), so a loop-carried value is only a change of one operand list. Which names a loop
rebinds is read, read-only, from the kernel frame's locals when the loop opens and closes; the
`for` statement's bytecode (read, never rewritten) names the body line of a refusal and tells
whether a carry that starts as a Python number was read, in which case the body is traced a second
time with the name standing for the carry (see "loops" below). After tracing, carries and captures
a loop neither reads nor returns to a reader are dropped (`prune`).
"""

from __future__ import annotations

import dis
import functools
import numbers
import re
import sys
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from types import CodeType, FrameType
from typing import Any

import numpy as np

from runtime.memory import CAPACITIES, HW_NAMES

from .core import dtypes as dt
from .core.dce import prune
from .core.ir import Atom, Eqn, Graph, Literal, Var
from .core.primitives import Primitive, for_p
from .core.types import Mem, ScalarType, TensorType, TileType, Type
from .errors import CompileError, Source, source_of, user_frame, user_source

_MISSING = object()

#: issue 28: the one-armed `if` on a traced BOOL (language/branch.py sets it; tracing never imports it)
branch_handler: Any = None


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
        """True when `other` is this frame or nested inside it (a value of this frame is visible there)."""
        f: TraceFrame | None = other
        while f is not None:
            if f is self:
                return True
            f = f.parent
        return False


class TraceState:
    """The trace of one kernel on this thread: the open frames (innermost last), a pending refusal and the
    user frames that bound ops."""

    def __init__(self, target: str = "A2A3") -> None:
        self.target = target  # on-chip capacities are checked at bind time
        self.frames: list[TraceFrame] = []
        self.pending: CompileError | None = None  # a break/return seen inside a staged loop
        self.user_frames: dict[int, FrameType] = {}  # kernel (and helper) frames that bound ops
        self.branches: list[Any] = []  # issue 28: open arms of staged one-armed `if`s (language/branch.py)

    @property
    def top(self) -> TraceFrame:
        """The innermost open frame: where new equations are staged."""
        return self.frames[-1]


_local = threading.local()


def current_state() -> TraceState:
    """The trace in progress on this thread; CompileError outside a `@pl.kernel` trace."""
    st = getattr(_local, "state", None)
    if st is None:
        raise CompileError("this operation is only available while tracing a @pl.kernel", user_source())
    return st


def in_trace() -> bool:
    """True while a `@pl.kernel` is being traced on this thread."""
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
        """The IR type of the traced value."""
        return self.var.type

    @property
    def shape(self) -> tuple[Any, ...]:
        """The tensor or tile shape; `()` for a scalar."""
        t = self.var.type
        if isinstance(t, TensorType | TileType):
            return tuple(t.shape)
        return ()

    @property
    def dtype(self) -> dt.DType:
        """The element dtype."""
        return self.var.type.dtype  # type: ignore[union-attr]

    def __repr__(self) -> str:
        return f"Tracer<{self.var.hint or '_'}:{self.var.type}>"

    # -- refusals: Python needs a concrete value here
    def __bool__(self) -> bool:
        if branch_handler is not None and isinstance(self.var.type, ScalarType) and self.var.type.dtype is dt.BOOL:
            return bool(branch_handler.open_if(self))  # issue 28: a one-armed `if` is staged
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

    def _unsupported(self, *_: Any) -> Any:
        raise CompileError("this operator is not part of the kernel language's scalar arithmetic "
                           "(`+ - * // %`, comparisons, pl.min / pl.max)", user_source(),
                           help="use // for (floor) division")

    __truediv__ = __rtruediv__ = __pow__ = __rpow__ = __lshift__ = __rshift__ = _unsupported
    __and__ = __rand__ = __or__ = __ror__ = __xor__ = __invert__ = _unsupported

    def __pos__(self) -> Tracer:
        return self

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
        made = defining_eqn(t)
        where = f" (defined at {made.source}," if made is not None and made.source else " ("
        where += f" inside the loop at {t.frame.source})" if t.frame.source else " inside a loop)"
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
    return literal(x, dtype)


def bind(prim: Primitive, groups: Sequence[Sequence[Any]], params: dict[str, Any] | None = None,
         source: Source | None = None, dtype: dt.DType = dt.INDEX) -> list[Tracer]:
    """Stage one equation in the current frame; the type rule runs now, so errors name this line."""
    st = current_state()
    if st.pending is not None:
        raise st.pending
    if st.branches:  # issue 28: close the `if` arms the kernel has left before staging past them
        branch_handler.close_done(st)
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
        raise CompileError(f"tile {t} needs {t.nbytes} bytes ({t.nbytes / 1024:g} KiB) but the {t.memory.value} "
                           f"buffer ({hw}) holds {cap // 1024} KiB on {target}", src,
                           help="load a smaller window and loop over the rest")


def defining_eqn(t: Tracer) -> Eqn | None:
    """The equation that made `t` in its frame; None for a parameter or captured value."""
    return t.frame.defs.get(t.var)


# -------------------------------------------------------------------------------------- loops
#
# A staged loop is a generator: Python runs the body once per item it yields. It yields one
# induction variable, and when Python asks for the next item the body's frame is closed and the
# loop equation is bound. Which names the body rebinds comes from the kernel frame's locals before
# and after (read-only). The bytecode of the `for` statement (read-only, never rewritten) says which
# names the body reads and on which line it assigns them: that names the offending line in
# diagnostics, and tells whether the body read a carried name that started as a Python number.
# Such a body folded the number into its equations, so it is traced a second time with the name
# standing for the carry (the tracer it holds is re-pointed): the only case with two trips.


@dataclass(frozen=True)
class _BodyCode:
    """What the bytecode of one `for` statement says about its body."""

    target: str | None  # the loop variable
    loads: frozenset[str]  # names the body reads
    stores: dict[str, int]  # name -> first line of the body that assigns it


_LOADS = {"LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_FAST_AND_CLEAR", "LOAD_FAST_LOAD_FAST", "LOAD_NAME",
          "LOAD_DEREF", "LOAD_CLASSDEREF", "LOAD_CLOSURE"}
_STORES = {"STORE_FAST", "STORE_FAST_STORE_FAST", "STORE_NAME", "STORE_DEREF"}


@functools.lru_cache(maxsize=512)
def _instructions(code: CodeType) -> tuple[dis.Instruction, ...]:
    return tuple(dis.get_instructions(code))


def _body_code(kframe: FrameType) -> _BodyCode | None:
    """The body of the `for` statement `kframe` is starting (None when it is not a plain `for`)."""
    try:
        ins = _instructions(kframe.f_code)
        i = next(j for j, x in enumerate(ins) if x.offset == kframe.f_lasti)
    except (StopIteration, TypeError, ValueError):
        return None
    if ins[i].opname != "FOR_ITER" or not isinstance(ins[i].argval, int):
        return None
    end = ins[i].argval
    target = ins[i + 1].argval if ins[i + 1].opname in ("STORE_FAST", "STORE_NAME", "STORE_DEREF") else None
    loads: set[str] = set()
    stores: dict[str, int] = {}
    for x in ins[i + 1 :]:
        if x.offset >= end:
            break
        names = x.argval if isinstance(x.argval, tuple) else (x.argval,)
        if x.opname in _LOADS:
            loads.update(n for n in names if isinstance(n, str))
        elif x.opname in _STORES and x.offset != ins[i + 1].offset:
            line = x.positions.lineno if x.positions is not None else None
            for n in names:
                if isinstance(n, str) and line is not None:
                    stores.setdefault(n, line)
    return _BodyCode(target if isinstance(target, str) else None, frozenset(loads), stores)


@dataclass
class _Loop:
    """One staged loop while it is traced."""

    kind: str
    bounds: list[Atom]
    stage: int | None
    source: Source | None
    kframe: FrameType
    code: _BodyCode | None
    before: dict[str, Any]

    @property
    def name(self) -> str:
        return f"pl.{self.kind}"

    @property
    def where(self) -> str:
        return f"line {self.source.line}" if self.source is not None else "its line"

    def line_of(self, name: str, fallback: Tracer | None = None) -> Source | None:
        """The body line assigning `name` (else the line that made `fallback`, else the loop's)."""
        if self.code is not None and name in self.code.stores:
            return Source(self.kframe.f_code.co_filename, self.code.stores[name])
        if fallback is not None:
            e = defining_eqn(fallback)
            if e is not None and e.source is not None:
                return e.source
        return self.source

    def reads(self, name: str) -> bool:
        return self.code is None or name in self.code.loads

    def trips_at_least_one(self) -> bool:
        lo, hi, _ = self.bounds
        return isinstance(lo, Literal) and isinstance(hi, Literal) and hi.value > lo.value


Carry = tuple[str, Any, Tracer]  # (name, value before the loop, value after one trip)


def _name_hints(local_vars: dict[str, Any]) -> None:
    for name, val in local_vars.items():
        if isinstance(val, Tracer) and val.var.hint is None and not name.startswith("_"):
            val.var.hint = name


def _open_body(st: TraceState, loop: _Loop) -> tuple[TraceFrame, Tracer]:
    body = TraceFrame(st.top, loop.source)
    body.kind = loop.kind
    iv = Var(ScalarType(dt.INDEX), loop.code.target if loop.code is not None else None)
    body.params = [iv]
    st.frames.append(body)
    return body, Tracer(iv, body)


def staged_loop(kind: str, start: Any, stop: Any, step: Any, stage: int | None,
                source: Source | None) -> Iterator[Tracer]:
    """The iterator behind pl.range / pl.pipeline / pl.spmd: one trip, traced once."""
    st = current_state()
    if st.pending is not None:
        raise st.pending
    kframe: FrameType = sys._getframe(1)  # the frame running the `for` statement
    loop = _Loop(kind, [], stage, source, kframe, _body_code(kframe), dict(kframe.f_locals))
    _name_hints(loop.before)
    for x in (start, stop, step):
        b = to_atom(x, st.top)
        if not (isinstance(b.type, ScalarType) and b.type.dtype.is_int):
            raise CompileError(f"loop bounds must be integers, got {b.type}", source)
        loop.bounds.append(b)
    if isinstance(loop.bounds[2], Literal) and loop.bounds[2].value <= 0:
        raise CompileError(f"loop step must be positive, got {loop.bounds[2].value}", source)
    redo: dict[str, tuple[Var, Tracer]] = {}  # carry parameter and the handle each name holds
    for _trip in range(len(loop.before) + 2):  # each extra trip adds a name, so this terminates
        body, iv_tracer = _open_body(st, loop)
        for p, handle in redo.values():
            handle.var, handle.frame = p, body  # the name stands for its carry in this trip
        try:
            yield iv_tracer
        except GeneratorExit:
            _record_early_exit(st, body, loop)
            raise
        if st.branches:  # issue 28: an `if` arm that runs to the end of the trip ends with it
            branch_handler.close_above(st, body)
        carries = _carries(body, iv_tracer, loop, dict(kframe.f_locals))
        if _needs_another_trip(carries, loop, redo):
            redo = _another_trip(st, body, carries, loop, redo)
            continue
        _close_loop(st, body, carries, loop, {name: p for name, (p, _) in redo.items()})
        return
    raise CompileError(f"the body of the staged loop {loop.name} does not settle on its carries", source)


def _record_early_exit(st: TraceState, body: TraceFrame, loop: _Loop) -> None:
    """`break` / `return` closes the generator, and CPython swallows an exception raised here: so
    record it, and raise it at the next traced operation or at the end of tracing."""
    if st.top is not body or st.pending is not None:
        return
    f = loop.kframe
    src = Source(f.f_code.co_filename, f.f_lineno)
    word = "return" if re.match(r"return\b", src.text.strip()) else "break"
    st.pending = CompileError(
        f"`{word}` leaves the staged loop {loop.name} ({loop.where}) early; a staged loop is traced once "
        "and always runs its full trip count", src,
        help="compute the trip count up front, or clamp the work with pl.min / pl.max")


def _same_python_value(a: Any, b: Any) -> bool:
    try:
        return bool(a is b or (type(a) is type(b) and a == b))
    except Exception:
        return False


def _is_number(x: Any) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool | np.bool_)


def _carries(body: TraceFrame, iv_tracer: Tracer, loop: _Loop, after: dict[str, Any]) -> list[Carry]:
    """The names one trip rebound to traced values: the loop's carries. Refuses what cannot be staged."""
    _name_hints(after)
    carries: list[Carry] = []
    seen: set[int] = set()
    for name, new in after.items():
        old = loop.before.get(name, _MISSING)
        if new is old:
            continue
        if new is iv_tracer and (loop.code is None or name == loop.code.target):
            continue  # the loop variable: dead after the loop
        if isinstance(new, Tracer):
            if new.frame.closed and new.frame is not body:
                continue  # a dead value of an inner loop (e.g. its induction variable)
            if old is _MISSING or (isinstance(old, Tracer) and old.frame.closed):
                continue  # defined in the body, dead after it
            if id(new) in seen:
                continue
            if not (isinstance(old, Tracer) or _is_number(old)):
                raise CompileError(f"'{name}' is rebound inside the staged loop {loop.name} ({loop.where}) "
                                   f"from {type(old).__name__} to a traced value; only traced values and "
                                   "numbers can be carried", loop.line_of(name, new))
            seen.add(id(new))
            carries.append((name, old, new))
        elif old is not _MISSING and not _same_python_value(old, new):
            raise CompileError(f"the Python value '{name}' changes inside the staged loop {loop.name} "
                               f"({loop.where}): {old!r} -> {new!r}; the body is traced once, so the change "
                               "would happen once, not once per trip", loop.line_of(name),
                               help="make it a traced value (computed from the loop index), or use a plain "
                               "`range` loop, which unrolls")
    if carries and loop.kind == "spmd":
        name, _, new = carries[0]
        raise CompileError(f"'{name}' is rebound inside pl.spmd ({loop.where}): lanes run in parallel and "
                           "cannot carry values from one lane to the next", loop.line_of(name, new),
                           help="give the value a new name inside the lane, or move the loop that "
                           "carries it inside the pl.spmd body")
    return carries


def _needs_another_trip(carries: list[Carry], loop: _Loop, redo: dict[str, Any]) -> bool:
    """A carry that started as a Python number and that the body read was folded into this trip's
    equations as that number: trace the body again with the name standing for the carry."""
    return any(_is_number(old) and loop.reads(name) and name not in redo for name, old, _ in carries)


def _another_trip(st: TraceState, body: TraceFrame, carries: list[Carry], loop: _Loop,
                  redo: dict[str, tuple[Var, Tracer]]) -> dict[str, tuple[Var, Tracer]]:
    """Drop this trip; in the next one every carry the body reads stands for a carry parameter."""
    st.frames.pop()
    body.closed = True
    nxt: dict[str, tuple[Var, Tracer]] = {}
    for name, _old, new in carries:
        if not loop.reads(name) and name not in redo:
            continue
        if new.frame is not body:
            raise CompileError(f"'{name}' is rebound inside the staged loop {loop.name} ({loop.where}) to a "
                               "value defined outside it, and a carry the body reads started as a Python "
                               "number; this cannot be staged", loop.line_of(name, new),
                               help=f"start '{name}' as a traced value before the loop")
        nxt[name] = (Var(new.var.type, name), new)
    return nxt


def _carry_type_error(loop: _Loop, name: str, old: Any, init: Atom, new: Tracer) -> CompileError:
    before = f"the Python number {old!r} ({init.type})" if _is_number(old) else str(init.type)
    return CompileError(
        f"loop-carried value '{name}' changes type: {before} before the staged loop {loop.name} "
        f"({loop.where}), {new.var.type} after one trip; a carry keeps one type",
        loop.line_of(name, new),
        help="make both sides the same type: start it with the same shape, dtype and memory before the "
        "loop, or pl.cast the new value")


def _close_loop(st: TraceState, body: TraceFrame, carries: list[Carry], loop: _Loop,
                preset: dict[str, Var]) -> None:
    if st.top is not body:
        raise CompileError("staged loops closed out of order", loop.source)
    parent = body.parent
    assert parent is not None
    missing = set(preset) - {name for name, _, _ in carries}
    if missing:
        raise CompileError(f"the second trace of the staged loop {loop.name} did not rebind "
                           f"{sorted(missing)}; the body must do the same on every trace", loop.source)
    inits: list[Atom] = []
    carry_params: list[Var] = []
    outs: list[Atom] = []
    for name, old, new in carries:
        if new.frame is not body and not loop.trips_at_least_one():
            raise CompileError(f"'{name}' is rebound inside the staged loop {loop.name} ({loop.where}) to "
                               "a value defined before the loop; if the loop runs zero times the name must "
                               "keep its old value, which tracing cannot show", loop.line_of(name, new),
                               help="assign a value computed inside the loop")
        new_t = new.var.type
        init = to_atom(old, parent, new_t.dtype if isinstance(new_t, ScalarType) else dt.INDEX)
        if init.type != new_t:
            raise _carry_type_error(loop, name, old, init, new)
        p = preset.get(name)
        if p is None and isinstance(init, Var):
            p = body.captured.pop(init, None)
        if p is None:
            p = Var(init.type)
        p.hint = name
        inits.append(init)
        carry_params.append(p)
        outs.append(lift(new, body))
    captured_outer = list(body.captured.keys())
    graph = Graph([body.params[0], *body.captured.values(), *carry_params], body.eqns, outs,
                  name=f"{loop.kind}_body")
    st.frames.pop()
    body.closed = True
    params: dict[str, Any] = {"kind": loop.kind, "body": graph}
    if loop.stage is not None:
        params["stage"] = loop.stage
    res = bind(for_p, [loop.bounds, captured_outer, inits], params, loop.source)
    for (name, _old, new), r in zip(carries, res):
        r.var.hint = name
        if new.frame is body:
            new.var, new.frame = r.var, r.frame  # the name now holds the loop's result
        # else the name holds a value from before the loop, which is the result (trips >= 1)


# ------------------------------------------------------------------------------------ tracing
def trace(fn: Any, param_types: Sequence[Type], param_names: Sequence[str], name: str,
          target: str = "A2A3") -> Graph:
    """Run `fn` once on tracers and return the staged Graph (dead carries and values dropped)."""
    if in_trace():
        raise CompileError("a kernel cannot be traced inside another kernel's trace", user_source())
    st = TraceState(target)
    root = TraceFrame(None)
    root.params = [Var(t, n) for t, n in zip(param_types, param_names)]
    st.frames.append(root)
    _local.state = st
    try:
        fn(*(Tracer(v, root) for v in root.params))
        if st.branches:  # issue 28: an `if` arm that runs to the end of the kernel
            branch_handler.close_above(st, root)
        if st.pending is not None:
            raise st.pending
        if len(st.frames) != 1:
            raise CompileError("a staged loop was left open", st.top.source)
        code = getattr(fn, "__code__", None)  # the kernel's own names first, then its helpers'
        for f in sorted(st.user_frames.values(), key=lambda f: f.f_code is not code):
            _name_hints(f.f_locals)
    finally:
        _local.state = None
        st.user_frames.clear()
    return Graph(root.params, prune(root.eqns, []), [], name=name)
