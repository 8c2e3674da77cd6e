"""The arms of a staged `if` (language/branch.py opens them): the `Branch` record, and closing an
arm into `cond` equations: a one-armed `if` (`close_one`, its rebound names are the carries) and an
if/else (`close_two`, two `cond`s on one predicate, the second `negate`d)."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from ..core import dtypes as dt
from ..core.ir import Atom, Eqn, Graph, Var
from ..core.types import ScalarType, TileType
from ..errors import CompileError, Source
from ..prims.control import cond_p
from ..prims.vector import create_p
from ..tracing.bind import bind, lift, literal, to_atom
from ..tracing.frames import TraceFrame, TraceState
from ..tracing.loops import MISSING, name_hints, same_python_value
from ..tracing.tracer import Tracer


@dataclass
class Branch:
    """One open staged `if`: its arm's frame, where its arms start and end, and the names before it."""

    frame: TraceFrame  # the arm being traced
    kframe: FrameType
    jump_at: int  # offset of the conditional jump
    join: float  # offset where the arm ends (inf: the end of the enclosing loop's trip)
    pred: Tracer
    before: dict[str, Any]
    source: Source | None
    else_at: int | None = None  # two arms: offset of the `else` arm's first instruction
    else_line: int = 0
    phase: str = "one"  # "one" (one-armed), "then" or "else"
    then_frame: TraceFrame | None = None
    then_after: dict[str, Any] = field(default_factory=dict)
    trailing: bool = False  # the kernel's last statement: each arm ends with the function's return
    then_end: int | None = None  # offset of the copy of the statement after the if/else (3.12+)

    def done(self) -> bool:
        """True once the kernel frame has left the arm being traced."""
        at = self.kframe.f_lasti
        if self.phase == "then":
            assert self.else_at is not None
            return not self.jump_at < at < self.else_at or (self.then_end is not None and at >= self.then_end)
        lo = self.else_at if self.phase == "else" else self.jump_at
        assert lo is not None
        return at >= self.join or at < lo


def close_done(st: TraceState) -> None:
    """Close every innermost open one-armed `if` the kernel has left (called before a traced
    operation); an if/else closes on its line event, where the names can be rebound."""
    while st.branches and st.branches[-1].phase == "one" and st.branches[-1].done():
        close_one(st, st.branches.pop())


def close_above(st: TraceState, frame: TraceFrame) -> None:
    """Close the arms opened inside `frame` (its loop trip, or the kernel, ends here)."""
    while st.branches and st.branches[-1].frame is not frame and frame.is_ancestor_of(st.branches[-1].frame):
        br = st.branches.pop()
        if br.phase == "then":
            raise CompileError(
                "the `then` arm of a staged `if`/`else` ran to the end of the loop body without "
                "reaching its `else` arm",
                br.source,
            )
        if br.phase == "one":
            close_one(st, br)
        else:
            close_two(st, br, dict(br.kframe.f_locals))


def _traced_change(br: Branch, name: str, old: Any, new: Any, arm: TraceFrame) -> bool:
    """True when `name` (old -> new) is a carry of `arm`; refuses a Python value that changes."""
    if new is old:
        return False
    if isinstance(new, Tracer):
        if new.frame.closed and new.frame is not arm:
            return False  # a dead value of a loop inside the arm
        return not (old is MISSING or (isinstance(old, Tracer) and old.frame.closed))
    if old is not MISSING and not same_python_value(old, new):
        raise CompileError(
            f"the Python value '{name}' changes inside the staged `if`: {old!r} -> {new!r}; "
            "the arm is traced once whatever the condition",
            br.source,
            help="make it a traced value, or move it out of the `if`",
        )
    return False


def _carries(br: Branch) -> list[tuple[str, Any, Tracer]]:
    after = dict(br.kframe.f_locals)
    name_hints(after)
    out: list[tuple[str, Any, Tracer]] = []
    seen: set[int] = set()
    for name, new in after.items():
        old = br.before.get(name, MISSING)
        if not _traced_change(br, name, old, new, br.frame) or id(new) in seen:
            continue
        if not isinstance(old, Tracer):
            raise CompileError(
                f"'{name}' is rebound inside the staged `if` from {type(old).__name__} "
                f"{old!r} to a traced value; the implicit else would keep a Python value",
                br.source,
                help=f"make '{name}' a traced value before the `if`",
            )
        if new.frame is not br.frame:
            raise CompileError(
                f"'{name}' is rebound inside the staged `if` to a value defined before it; "
                "this cannot be staged",
                br.source,
                help="assign a value computed inside the `if`",
            )
        seen.add(id(new))
        out.append((name, old, new))
    return out


def _arm_graph(
    arm: TraceFrame, inits: list[Atom], news: list[Any], names: list[str], name: str
) -> tuple[Graph, list[Var]]:
    """The body of one arm's `cond`: params `[pred, *captured, *carries]`, outputs the new values
    (a name the arm leaves alone passes its carry through). Returns it with the captured outer vars."""
    params: list[Var] = []
    outs: list[Atom] = []
    for init, new, n in zip(inits, news, names):
        p = arm.captured.pop(init, None) if isinstance(init, Var) else None
        p = p or Var(init.type)
        p.hint = n
        params.append(p)
        outs.append(p if new is None else lift(new, arm))
    captured = list(arm.captured.keys())
    return Graph(
        [Var(ScalarType(dt.BOOL), "cond"), *arm.captured.values(), *params], arm.eqns, outs, name=name
    ), captured


def _bind_cond(
    st: TraceState, br: Branch, captured: list[Var], inits: list[Any], graph: Graph, negate: bool
) -> list[Tracer]:
    outer, st.branches = st.branches, []  # the enclosing arms close after this one, not inside its bind
    try:
        params: dict[str, Any] = {"body": graph, "negate": True} if negate else {"body": graph}
        return bind(cond_p, [[br.pred], captured, inits], params, br.source, dtype=dt.INDEX)
    finally:
        st.branches = outer


def close_one(st: TraceState, br: Branch) -> None:
    """Bind a one-armed `if` as a `cond` whose carries are the names its arm rebound."""
    if st.top is not br.frame:
        raise CompileError("a staged `if` was closed out of order", br.source)
    arm, parent = br.frame, br.frame.parent
    assert parent is not None
    carries = _carries(br)
    inits = []
    for name, old, new in carries:
        init = to_atom(old, parent)
        if init.type != new.var.type:
            raise CompileError(
                f"'{name}' changes type inside the staged `if`: {init.type} before it, "
                f"{new.var.type} in the arm; the implicit else keeps the old value",
                br.source,
                help="make both the same type (or pl.cast the new value)",
            )
        inits.append(init)
    graph, captured = _arm_graph(arm, inits, [n for _, _, n in carries], [c[0] for c in carries], "if_body")
    st.frames.pop()
    arm.closed = True
    res = _bind_cond(st, br, captured, inits, graph, negate=False)
    for (name, _old, new), r in zip(carries, res):
        r.var.hint = name
        new.var, new.frame = r.var, r.frame  # the name now holds the `if`'s result


def close_two(st: TraceState, br: Branch, locs: dict[str, Any]) -> None:
    """Bind both arms of an if/else and write the results into the names `locs` (the kernel
    frame's locals, written back by the interpreter after the line-trace call)."""
    then, arm = br.then_frame, br.frame
    if st.top is not arm or then is None:
        raise CompileError("a staged `if` was closed out of order", br.source)
    parent = arm.parent
    assert parent is not None
    else_after = dict(locs)
    name_hints(else_after)
    names: list[str] = []
    for name in [*br.then_after, *(n for n in else_after if n not in br.then_after)]:
        old = br.before.get(name, MISSING)
        t_new, e_new = br.then_after.get(name, old), else_after.get(name, old)
        in_then = _traced_change(br, name, old, t_new, then)
        in_else = _traced_change(br, name, old, e_new, arm)
        if (
            in_then
            or in_else
            or (
                old is MISSING
                and isinstance(t_new, Tracer)
                and isinstance(e_new, Tracer)
                and t_new.frame is then
                and e_new.frame is arm
            )
        ):
            names.append(name)
    inits: list[Any] = []
    for name in names:
        old = br.before.get(name, MISSING)
        t_new, e_new = br.then_after.get(name, old), else_after.get(name, old)
        types = {x.var.type for x in (t_new, e_new) if isinstance(x, Tracer)}
        if len(types) != 1:
            raise CompileError(
                f"'{name}' has different types in the two arms of the staged `if`: "
                f"{t_new.var.type} (then) and {e_new.var.type} (else)",
                br.source,
                help="make both arms bind the same shape, dtype and memory (or pl.cast one)",
            )
        (ty,) = types
        for x in (t_new, e_new, old):
            if x is not MISSING and not isinstance(x, Tracer):
                raise CompileError(
                    f"'{name}' is a {type(x).__name__} in one arm of the staged `if` and a "
                    "traced value in the other; both arms must bind traced values of one type",
                    br.source,
                    help=f"make '{name}' a traced value in both arms",
                )
        init: Atom
        if old is MISSING:
            if isinstance(ty, TileType):  # both arms bind it (PyPTO's phi): the start value is never read
                init = _placeholder_tile(parent, ty, br.source)
            elif not isinstance(ty, ScalarType):
                raise CompileError(
                    f"'{name}' is first bound inside the staged `if`/`else` to a {ty}; a tensor "
                    "needs a value before the `if`",
                    br.source,
                    help=f"bind '{name}' before the `if`",
                )
            else:
                init = literal(0, ty.dtype)
        else:
            init = to_atom(old, parent, ty.dtype if isinstance(ty, ScalarType) else dt.INDEX)
        if init.type != ty:
            raise CompileError(
                f"'{name}' changes type inside the staged `if`: {init.type} before it, {ty} in "
                "an arm; an arm that keeps the old value keeps its type",
                br.source,
                help="make both the same type (or pl.cast the new value)",
            )
        inits.append(init)

    def arm_news(after: dict[str, Any], frame: TraceFrame) -> list[Any]:
        news = []
        for name in names:
            old = br.before.get(name, MISSING)
            new = after.get(name, old)
            news.append(None if new is old or not isinstance(new, Tracer) else new)
        return news

    g_then, cap_then = _arm_graph(then, inits, arm_news(br.then_after, then), names, "then_body")
    g_else, cap_else = _arm_graph(arm, inits, arm_news(else_after, arm), names, "else_body")
    st.frames.pop()
    arm.closed = True
    res = _bind_cond(st, br, cap_then, inits, g_then, negate=False)
    for name, r in zip(names, res):
        r.var.hint = name
    res = _bind_cond(st, br, cap_else, list(res), g_else, negate=True)
    for name, r in zip(names, res):
        r.var.hint = name
        locs[name] = r


def _placeholder_tile(parent: TraceFrame, ty: TileType, source: Source | None) -> Var:
    """The start value of a tile both arms of an if/else bind first: an uninitialised `tile.create`
    of its type in the enclosing frame. The `then` arm's `cond` passes it through only when the
    predicate is false, and then the `else` arm's `cond` replaces it: its bytes are never read."""
    v = Var(ty)
    params = {"shape": ty.shape, "dtype": ty.dtype, "memory": ty.memory, "arity": ()}
    e = Eqn(create_p, (), (v,), params, source)
    parent.eqns.append(e)
    parent.defs[v] = e
    return v
