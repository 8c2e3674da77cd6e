"""Staged loops: the iterator behind pl.range / pl.pipeline / pl.spmd, traced once (twice when a
carry that starts as a Python number is read), and the loop equation with its carries."""

from __future__ import annotations

import dis
import functools
import numbers
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from types import CodeType, FrameType
from typing import Any

import numpy as np

from ..core import dtypes as dt
from ..core.ir import Atom, Graph, Literal, Var
from ..core.types import ScalarType
from ..errors import CompileError, Source
from ..prims import for_p
from . import frames
from .bind import bind, defining_eqn, lift, to_atom
from .frames import TraceFrame, TraceState, current_state
from .tracer import Tracer

_MISSING = object()

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


_LOADS = {
    "LOAD_FAST",
    "LOAD_FAST_CHECK",
    "LOAD_FAST_AND_CLEAR",
    "LOAD_FAST_LOAD_FAST",
    "LOAD_NAME",
    "LOAD_DEREF",
    "LOAD_CLASSDEREF",
    "LOAD_CLOSURE",
}
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


def name_hints(local_vars: dict[str, Any]) -> None:
    """Name each unnamed traced value after the local variable that holds it (the printer's names)."""
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


def staged_loop(
    kind: str,
    start: Any,
    stop: Any,
    step: Any,
    stage: int | None,
    source: Source | None,
    init_values: tuple[Any, ...] | None = None,
) -> Iterator[Any]:
    """The iterator behind pl.range / pl.pipeline / pl.spmd: one trip, traced once. With
    `init_values` (PyPTO's explicit carries) it yields `(i, (carry, ...))` and the body ends with
    `pl.yield_(...)`, whose values are the next trip's carries and, after the loop, its results."""
    st = current_state()
    if st.pending is not None:
        raise st.pending
    kframe: FrameType = sys._getframe(1)  # the frame running the `for` statement
    loop = _Loop(kind, [], stage, source, kframe, _body_code(kframe), dict(kframe.f_locals))
    name_hints(loop.before)
    for x in (start, stop, step):
        b = to_atom(x, st.top)
        if not (isinstance(b.type, ScalarType) and b.type.dtype.is_int):
            raise CompileError(f"loop bounds must be integers, got {b.type}", source)
        loop.bounds.append(b)
    if isinstance(loop.bounds[2], Literal) and loop.bounds[2].value <= 0:
        raise CompileError(f"loop step must be positive, got {loop.bounds[2].value}", source)
    inits = None if init_values is None else _explicit_inits(st, loop, init_values)
    redo: dict[str, tuple[Var, Tracer]] = {}  # carry parameter and the handle each name holds
    for _trip in range(len(loop.before) + 2):  # each extra trip adds a name, so this terminates
        body, iv_tracer = _open_body(st, loop)
        for p, handle in redo.values():
            handle.var, handle.frame = p, body  # the name stands for its carry in this trip
        explicit = None if inits is None else Explicit(inits, [Var(a.type) for a in inits])
        body.explicit = explicit
        try:
            yield (
                iv_tracer
                if explicit is None
                else (iv_tracer, tuple(Tracer(p, body) for p in explicit.params))
            )
        except GeneratorExit:
            _record_early_exit(st, body, loop)
            raise
        if st.branches:  # an `if` arm that runs to the end of the trip ends with it
            frames.branch_handler.close_above(st, body)
        after = dict(kframe.f_locals)
        if explicit is not None:
            _check_yield(loop, explicit)
            after = {n: v for n, v in after.items() if not explicit.owns(v) and v is not iv_tracer}
        carries = _carries(body, iv_tracer, loop, after)
        if _needs_another_trip(carries, loop, redo):
            redo = _another_trip(st, body, carries, loop, redo)
            continue
        _close_loop(st, body, carries, loop, {name: p for name, (p, _) in redo.items()}, explicit)
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
        "and always runs its full trip count",
        src,
        help="compute the trip count up front, or clamp the work with pl.min / pl.max",
    )


def _same_python_value(a: Any, b: Any) -> bool:
    try:
        return bool(a is b or (type(a) is type(b) and a == b))
    except Exception:
        return False


def _is_number(x: Any) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool | np.bool_)


def _carries(body: TraceFrame, iv_tracer: Tracer, loop: _Loop, after: dict[str, Any]) -> list[Carry]:
    """The names one trip rebound to traced values: the loop's carries. Refuses what cannot be staged."""
    name_hints(after)
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
                raise CompileError(
                    f"'{name}' is rebound inside the staged loop {loop.name} ({loop.where}) "
                    f"from {type(old).__name__} to a traced value; only traced values and "
                    "numbers can be carried",
                    loop.line_of(name, new),
                )
            seen.add(id(new))
            carries.append((name, old, new))
        elif old is not _MISSING and not _same_python_value(old, new):
            raise CompileError(
                f"the Python value '{name}' changes inside the staged loop {loop.name} "
                f"({loop.where}): {old!r} -> {new!r}; the body is traced once, so the change "
                "would happen once, not once per trip",
                loop.line_of(name),
                help="make it a traced value (computed from the loop index), or use a plain "
                "`range` loop, which unrolls",
            )
    if carries and loop.kind == "spmd":
        name, _, new = carries[0]
        raise CompileError(
            f"'{name}' is rebound inside pl.spmd ({loop.where}): lanes run in parallel and "
            "cannot carry values from one lane to the next",
            loop.line_of(name, new),
            help="give the value a new name inside the lane, or move the loop that "
            "carries it inside the pl.spmd body",
        )
    return carries


def _needs_another_trip(carries: list[Carry], loop: _Loop, redo: dict[str, Any]) -> bool:
    """A carry that started as a Python number and that the body read was folded into this trip's
    equations as that number: trace the body again with the name standing for the carry."""
    return any(_is_number(old) and loop.reads(name) and name not in redo for name, old, _ in carries)


def _another_trip(
    st: TraceState, body: TraceFrame, carries: list[Carry], loop: _Loop, redo: dict[str, tuple[Var, Tracer]]
) -> dict[str, tuple[Var, Tracer]]:
    """Drop this trip; in the next one every carry the body reads stands for a carry parameter."""
    st.frames.pop()
    body.closed = True
    nxt: dict[str, tuple[Var, Tracer]] = {}
    for name, _old, new in carries:
        if not loop.reads(name) and name not in redo:
            continue
        if new.frame is not body:
            raise CompileError(
                f"'{name}' is rebound inside the staged loop {loop.name} ({loop.where}) to a "
                "value defined outside it, and a carry the body reads started as a Python "
                "number; this cannot be staged",
                loop.line_of(name, new),
                help=f"start '{name}' as a traced value before the loop",
            )
        nxt[name] = (Var(new.var.type, name), new)
    return nxt


def _carry_type_error(loop: _Loop, name: str, old: Any, init: Atom, new: Tracer) -> CompileError:
    before = f"the Python number {old!r} ({init.type})" if _is_number(old) else str(init.type)
    return CompileError(
        f"loop-carried value '{name}' changes type: {before} before the staged loop {loop.name} "
        f"({loop.where}), {new.var.type} after one trip; a carry keeps one type",
        loop.line_of(name, new),
        help="make both sides the same type: start it with the same shape, dtype and memory before the "
        "loop, or pl.cast the new value",
    )


def _close_loop(
    st: TraceState,
    body: TraceFrame,
    carries: list[Carry],
    loop: _Loop,
    preset: dict[str, Var],
    explicit: Explicit | None = None,
) -> None:
    if st.top is not body:
        raise CompileError("staged loops closed out of order", loop.source)
    parent = body.parent
    assert parent is not None
    missing = set(preset) - {name for name, _, _ in carries}
    if missing:
        raise CompileError(
            f"the second trace of the staged loop {loop.name} did not rebind "
            f"{sorted(missing)}; the body must do the same on every trace",
            loop.source,
        )
    inits: list[Atom] = [] if explicit is None else list(explicit.inits)
    carry_params: list[Var] = [] if explicit is None else list(explicit.params)
    outs: list[Atom] = []
    if explicit is not None:
        assert explicit.yielded is not None and explicit.handles is not None, "_check_yield runs first"
        outs = [lift(v, body) for v in explicit.yielded]
    n_explicit = len(outs)
    for name, old, new in carries:
        if new.frame is not body and not loop.trips_at_least_one():
            raise CompileError(
                f"'{name}' is rebound inside the staged loop {loop.name} ({loop.where}) to "
                "a value defined before the loop; if the loop runs zero times the name must "
                "keep its old value, which tracing cannot show",
                loop.line_of(name, new),
                help="assign a value computed inside the loop",
            )
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
    graph = Graph(
        [body.params[0], *body.captured.values(), *carry_params], body.eqns, outs, name=f"{loop.kind}_body"
    )
    st.frames.pop()
    body.closed = True
    params: dict[str, Any] = {"kind": loop.kind, "body": graph}
    if loop.stage is not None:
        params["stage"] = loop.stage
    res = bind(for_p, [loop.bounds, captured_outer, inits], params, loop.source)
    if explicit is not None and explicit.handles is not None:
        for handle, r in zip(explicit.handles, res[:n_explicit]):
            handle.var, handle.frame = r.var, r.frame  # what pl.yield_ returned is the loop's result
        res = res[n_explicit:]
    for (name, _old, new), r in zip(carries, res):
        r.var.hint = name
        if new.frame is body:
            new.var, new.frame = r.var, r.frame  # the name now holds the loop's result
        # else the name holds a value from before the loop, which is the result (trips >= 1)


@dataclass
class Explicit:
    """The explicit carries of one trip of a `pl.range(..., init_values=...)` loop: their initial
    values, the body's carry parameters, and what the body's `pl.yield_` gave (`yielded`, the
    values; `handles`, the tracers it returned, which become the loop's results)."""

    inits: list[Atom]
    params: list[Var]
    yielded: list[Tracer] | None = None
    handles: list[Tracer] | None = None
    source: Source | None = None

    def owns(self, v: Any) -> bool:
        """True for a carry parameter's tracer or a handle `pl.yield_` returned (not implicit carries)."""
        if not isinstance(v, Tracer):
            return False
        return v.var in self.params or any(v is h for h in self.handles or ())


def _explicit_inits(st: TraceState, loop: _Loop, values: tuple[Any, ...]) -> list[Atom]:
    if not isinstance(values, tuple | list) or not values:
        raise CompileError(
            f"{loop.name} init_values must be a non-empty tuple of values, got {values!r}",
            loop.source,
            help="for i, (acc,) in pl.range(n, init_values=(acc0,)):",
        )
    if loop.kind == "spmd":
        raise CompileError(
            "pl.spmd lanes run in parallel and carry nothing: init_values is refused", loop.source
        )
    out = []
    for v in values:
        if not (isinstance(v, Tracer) or (_is_number(v) and isinstance(v, numbers.Integral))):
            raise CompileError(
                f"{loop.name} init_values are traced values or ints, got {v!r}",
                loop.source,
                help="make a float start value a pl.Scalar, or a tile with pl.full",
            )
        out.append(to_atom(v, st.top))
    return out


def yield_values(values: tuple[Any, ...], source: Source | None) -> Any:
    """`pl.yield_(*values)` in the body of a loop with init_values: record the next trip's carries
    and return handles that stand for the loop's results. Anywhere else (an `if` arm) the values
    are returned as they are: a staged `if` joins the names its arms bind."""
    st = current_state()
    if st.branches:
        frames.branch_handler.close_done(st)
    explicit: Explicit | None = getattr(st.top, "explicit", None)
    if explicit is None:
        return values[0] if len(values) == 1 else values
    if explicit.yielded is not None:
        raise CompileError(
            "a second pl.yield_ in one loop body; the body ends with one pl.yield_ of its carries", source
        )
    for v in values:
        if not isinstance(v, Tracer):
            raise CompileError(
                f"pl.yield_ of a loop's carries takes traced values, got {v!r}",
                source,
                help="yield the carry itself, or a value computed from it",
            )
    explicit.yielded, explicit.source = list(values), source
    explicit.handles = [Tracer(v.var, v.frame) for v in values]
    return explicit.handles[0] if len(values) == 1 else tuple(explicit.handles)


def _check_yield(loop: _Loop, explicit: Explicit) -> None:
    n = len(explicit.inits)
    if explicit.yielded is None:
        raise CompileError(
            f"the body of {loop.name} with init_values ({loop.where}) does not end with pl.yield_; "
            "the loop would not know its next carries",
            loop.source,
            help=f"end the body with `{', '.join(f'c{k}' for k in range(n))} = pl.yield_(...)`",
        )
    if len(explicit.yielded) != n:
        raise CompileError(
            f"pl.yield_ gives {len(explicit.yielded)} values to {loop.name} with {n} init_values",
            explicit.source,
            help="yield one value per init value, in the same order",
        )
    for k, (init, v) in enumerate(zip(explicit.inits, explicit.yielded)):
        if v.var.type != init.type:
            raise CompileError(
                f"pl.yield_ value {k} is {v.var.type}, init value {k} of {loop.name} is {init.type}; "
                "a carry keeps one type",
                explicit.source,
                help="yield a value of the init value's shape, dtype and memory (or pl.cast it)",
            )


#: Public names of this module's helpers for the staged `if` (nzjit/language/branch.py).
MISSING = _MISSING
instructions = _instructions
same_python_value = _same_python_value
