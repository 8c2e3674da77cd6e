"""An `if` on a traced value, staged as `cond` equations (issue 28 one-armed, issue 23 if/else).

    for k in pl.range(n):
        if pl.cast(k, pl.INT32) != me:        # a traced BOOL: one-armed
            acc = pl.add(acc, ...)            # a rebound name keeps its old value otherwise
        if k0 == 0:                           # two arms binding the same names with the same types
            acc = pl.matmul(a, b)
        else:
            acc = pl.matmul_acc(acc, a, b)

Python calls `Tracer.__bool__` for the `if`; this module answers True, so the `then` arm is traced
into a child frame. The `if`'s bytecode (read, never rewritten) gives the offset where the arm
ends. A one-armed `if` is closed at the first traced operation past it (or when the enclosing
staged loop's trip or the kernel ends). For an `if` with an `else`, Python would never run the
`else` arm, so a line-trace function is set on the kernel frame while the `if` is open (only
then): at the first line past the `then` arm it closes that arm, puts the names the arm rebound
back to their values before the `if`, and moves the frame to the first line of the `else` arm
(the `f_lineno` jump a debugger makes); at the first line past the `else` arm it binds the two
arms and writes the results into the names. The two arms are two `cond` equations on one
predicate, the second `negate`d: the `then` arm's results are the `else` arm's initial carries,
which is the value before the `if` whenever the `else` arm runs.

`while` / `and` / `or` / `not` / a conditional expression on a traced value stay refused.
Tracing calls this module through `frames.branch_handler` (set below): tracing never imports it.
"""

from __future__ import annotations

import linecache
import re
import sys
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from ..core import dtypes as dt
from ..core.ir import Atom, Eqn, Graph, Var
from ..core.types import ScalarType, TileType
from ..errors import CompileError, Source, source_of, user_frame
from ..prims.control import cond_p
from ..prims.vector import create_p
from ..tracing import frames as F
from ..tracing.bind import bind, lift, literal, to_atom
from ..tracing.frames import TraceFrame, TraceState, current_state
from ..tracing.loops import MISSING, instructions, name_hints, same_python_value
from ..tracing.tracer import Tracer

_JUMPS_IF_FALSE = ("POP_JUMP_FORWARD_IF_FALSE", "POP_JUMP_BACKWARD_IF_FALSE", "POP_JUMP_IF_FALSE")
_ELSE = re.compile(r"\s*(else\s*:|elif\b)")


@dataclass
class _Branch:
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

    def done(self) -> bool:
        """True once the kernel frame has left the arm being traced."""
        at = self.kframe.f_lasti
        if self.phase == "then":
            assert self.else_at is not None
            return not self.jump_at < at < self.else_at
        lo = self.else_at if self.phase == "else" else self.jump_at
        assert lo is not None
        return at >= self.join or at < lo


def _refuse(src: Source | None) -> CompileError:
    return CompileError(
        "a Python `if`/`while`/`and`/`or` on a traced value cannot be staged: the kernel is "
        "traced once, so the branch would be fixed at trace time",
        src,
        help="compute both sides, or use pl.min / pl.max",
    )


def _has_else(kframe: FrameType, if_line: int, else_line: int) -> bool:
    """True when the source line just before the `else` arm's first line is its `else:` / `elif`
    (an arm ending in `continue` jumps back to the loop head the same way)."""
    file = kframe.f_code.co_filename
    for line in range(else_line, if_line, -1):
        text = linecache.getline(file, line)
        if _ELSE.match(text):
            return True
        if line < else_line and text.strip() and not text.strip().startswith("#"):
            return False
    return False


def open_if(t: Tracer) -> bool:
    """`bool(t)` for the `if` statement being executed: open its arm; True (trace the `then` arm)."""
    kframe = user_frame()
    src = source_of(kframe) if kframe is not None else None
    if kframe is None:
        raise _refuse(src)
    ins = instructions(kframe.f_code)
    i = next((j for j, x in enumerate(ins) if x.offset == kframe.f_lasti), None)
    if i is None or ins[i].opname not in _JUMPS_IF_FALSE or not isinstance(ins[i].argval, int):
        raise _refuse(src)  # `while` re-tests at the bottom, `or` jumps if true, `not` / `x and y` as values
    target = ins[i].argval
    st = current_state()
    if target <= ins[i].offset:  # the arm runs to the end of the loop body: it ends with the trip
        return _open(
            st,
            _Branch(
                TraceFrame(st.top, src), kframe, ins[i].offset, float("inf"), t, dict(kframe.f_locals), src
            ),
        )
    k = next(j for j, x in enumerate(ins) if x.offset >= target)
    if any(
        x.opname.startswith("POP_JUMP")
        and isinstance(x.argval, int)
        and ins[i].offset < x.argval < target
        and x.offset > x.argval
        for x in ins[i + 1 : k]
    ):
        raise _refuse(src)  # a `while`: its body jumps back into itself
    prev = ins[k - 1]
    leaves = prev.opname == "RETURN_VALUE" or (
        prev.opname.startswith("JUMP")
        and isinstance(prev.argval, int)
        and not ins[i].offset <= prev.argval < target
    )
    if not leaves:
        return _open(
            st, _Branch(TraceFrame(st.top, src), kframe, ins[i].offset, target, t, dict(kframe.f_locals), src)
        )
    if_pos, else_pos = ins[i].positions, ins[k].positions
    if_line = if_pos.lineno if if_pos is not None else None
    else_line = else_pos.lineno if else_pos is not None else None
    if (
        if_line is None
        or else_line is None
        or else_line <= if_line
        or not _has_else(kframe, if_line, else_line)
    ):
        if else_line is not None and if_line is not None and else_line == if_line:
            raise _refuse(src)  # `a if p else b`: a conditional expression
        raise CompileError(
            "an `if` arm ending in `continue` on a traced value is not staged",
            src,
            help="drop the `continue`: put the rest of the loop body in an `else` arm",
        )
    if prev.opname == "RETURN_VALUE":
        raise CompileError(
            "an `if`/`else` on a traced value that ends the kernel (or helper) function is not "
            "staged: its `then` arm returns, so tracing never reaches the `else` arm",
            src,
            help="put the statement that follows it (or `pass`) after the `if`/`else`",
        )
    join = prev.argval if prev.opname == "JUMP_FORWARD" or prev.argval > target else float("inf")
    br = _Branch(
        TraceFrame(st.top, src),
        kframe,
        ins[i].offset,
        join,
        t,
        dict(kframe.f_locals),
        src,
        else_at=target,
        else_line=else_line,
        phase="then",
    )
    _install(st, kframe)
    return _open(st, br)


def _open(st: TraceState, br: _Branch) -> bool:
    br.frame.kind = "if"
    st.frames.append(br.frame)
    st.branches.append(br)
    return True


# ------------------------------------------------------------------------ the line trace
_TRACES: dict[int, Any] = {}  # id(TraceState) -> the global trace function before the first if/else


def _install(st: TraceState, kframe: FrameType) -> None:
    """Line events of `kframe` go to `_on_line` (and `sys.settrace` is on) while an if/else is open."""
    if id(st) not in _TRACES:
        old = sys.gettrace()
        _TRACES[id(st)] = old
        sys.settrace(lambda frame, event, arg: old(frame, event, arg) if old is not None else None)
    kframe.f_trace = _on_line
    kframe.f_trace_lines = True


def _two_armed_open(st: TraceState, kframe: FrameType) -> bool:
    return any(b.kframe is kframe and b.phase != "one" for b in st.branches)


def _on_line(kframe: FrameType, event: str, arg: Any) -> Any:
    """The local trace of a kernel frame with an open if/else: switch or close its arms."""
    st = F.active_state()
    if st is None:
        return None
    if event in ("line", "return"):
        # one snapshot per event: each read of `f_locals` re-syncs it from the frame, dropping the
        # names written here (the interpreter writes the snapshot back when this call returns)
        locs = kframe.f_locals
        while st.branches and st.branches[-1].kframe is kframe:
            br = st.branches[-1]
            if not (event == "return" or br.done()):
                break
            if br.phase == "then":
                if event == "return":
                    break  # refused when it was opened; a raise leaves the trace anyway
                _switch_to_else(st, br, kframe, locs)
                return _on_line
            st.branches.pop()
            if br.phase == "one":
                _close_one(st, br)
            else:
                _close_two(st, br, locs)
    return _on_line if _two_armed_open(st, kframe) else None


def _switch_to_else(st: TraceState, br: _Branch, kframe: FrameType, locs: dict[str, Any]) -> None:
    """Close the `then` arm, restore the names it rebound (in `locs`, the frame's locals), and jump
    to the `else` arm."""
    if st.top is not br.frame:
        raise CompileError("a staged `if` was closed out of order", br.source)
    br.then_after = dict(locs)
    name_hints(br.then_after)
    for name in list(locs):
        if name not in br.before:
            del locs[name]
        elif locs[name] is not br.before[name]:
            locs[name] = br.before[name]
    for name, old in br.before.items():
        if name not in locs:
            locs[name] = old
    st.frames.pop()
    br.frame.closed = True
    br.then_frame, br.frame, br.phase = br.frame, TraceFrame(st.top, br.source), "else"
    br.frame.kind = "else"
    st.frames.append(br.frame)
    # a trace function may set f_lineno (the jump to the else arm); typeshed declares it read-only
    kframe.f_lineno = br.else_line  # type: ignore[misc]


def finish(st: TraceState) -> None:
    """The trace ends: restore the global trace function (and close arms that ran to the end)."""
    old = _TRACES.pop(id(st), MISSING)
    if old is not MISSING:
        sys.settrace(old)
    for br in st.branches:
        if br.phase != "one":
            br.kframe.f_trace = None


# ------------------------------------------------------------------------ closing arms
def close_done(st: TraceState) -> None:
    """Close every innermost open one-armed `if` the kernel has left (called before a traced
    operation); an if/else closes on its line event, where the names can be rebound."""
    while st.branches and st.branches[-1].phase == "one" and st.branches[-1].done():
        _close_one(st, st.branches.pop())


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
            _close_one(st, br)
        else:
            _close_two(st, br, dict(br.kframe.f_locals))


def _traced_change(br: _Branch, name: str, old: Any, new: Any, arm: TraceFrame) -> bool:
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


def _carries(br: _Branch) -> list[tuple[str, Any, Tracer]]:
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
    st: TraceState, br: _Branch, captured: list[Var], inits: list[Any], graph: Graph, negate: bool
) -> list[Tracer]:
    outer, st.branches = st.branches, []  # the enclosing arms close after this one, not inside its bind
    try:
        params: dict[str, Any] = {"body": graph, "negate": True} if negate else {"body": graph}
        return bind(cond_p, [[br.pred], captured, inits], params, br.source, dtype=dt.INDEX)
    finally:
        st.branches = outer


def _close_one(st: TraceState, br: _Branch) -> None:
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


def _close_two(st: TraceState, br: _Branch, locs: dict[str, Any]) -> None:
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


class _Handler:
    open_if = staticmethod(open_if)
    close_done = staticmethod(close_done)
    close_above = staticmethod(close_above)
    finish = staticmethod(finish)


F.branch_handler = _Handler()
