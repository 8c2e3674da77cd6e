"""A one-armed `if` on a traced value, staged as a `cond` equation (issue 28).

    for k in pl.range(n):
        if pl.cast(k, pl.INT32) != me:        # a traced BOOL
            pld.system.notify(...)            # side effects happen only when it holds
            acc = pl.add(acc, ...)            # a rebound name keeps its old value otherwise

Python calls `Tracer.__bool__` for the `if`; this module answers True, so the arm is traced once,
into a child frame. The `if`'s bytecode (read, never rewritten) gives the offset where the arm
ends; the branch is closed at the first traced operation past it (or when the enclosing staged
loop's trip or the kernel ends). Names the arm rebinds become the carries of the `cond`, as a
loop's do (the tracer a name holds is re-pointed to the result). An `if` with an `else`, and
`while` / `and` / `or` / `not` on a traced value, stay refused.

The tracing package calls this module through `tracing.frames.branch_handler` (set below): tracing
never imports it. The `cond` rules: nzjit/prims/control.py (type), nzjit/backend/rules/control.py
(run), nzjit/codegen/pto/control.py (`scf.if`).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import FrameType
from typing import Any

from .. import tracing as T
from ..core import dtypes as dt
from ..core.ir import Graph, Var
from ..core.types import ScalarType
from ..errors import CompileError, Source, source_of, user_frame
from ..prims import cond_p
from ..tracing import frames

# the loop tracer's bytecode reading and carry helpers, shared by the arm of an `if`
from ..tracing.loops import _MISSING, _instructions, _same_python_value, name_hints

_JUMPS_IF_FALSE = ("POP_JUMP_FORWARD_IF_FALSE", "POP_JUMP_BACKWARD_IF_FALSE", "POP_JUMP_IF_FALSE")


@dataclass
class _Branch:
    frame: T.TraceFrame
    kframe: FrameType
    jump_at: int  # offset of the conditional jump
    join: float  # offset where the arm ends (inf: the end of the enclosing loop's trip)
    pred: T.Tracer
    before: dict[str, Any]
    source: Source | None
    returns: frozenset[int] = frozenset()  # offsets of the `return`s inside the arm (a helper's last `if`)

    def done(self) -> bool:
        """True once the kernel (or helper) frame has left the arm, or returned from inside it."""
        at = self.kframe.f_lasti
        return at >= self.join or at < self.jump_at or at in self.returns


def _refuse(src: Source | None) -> CompileError:
    return CompileError("a Python `if`/`while`/`and`/`or` on a traced value cannot be staged: the kernel is "
                        "traced once, so the branch would be fixed at trace time", src,
                        help="compute both sides, or use pl.min / pl.max")


def _only_returns_none(ins: tuple, k: int) -> bool:
    """The code at index `k` is the function's implicit `return None`."""
    ops = [(x.opname, x.argval) for x in ins[k : k + 2]]
    return ops[:1] == [("RETURN_CONST", None)] or ops == [("LOAD_CONST", None), ("RETURN_VALUE", None)]


def _check_arm_exits(ins: tuple, i: int, k: int, src: Source | None) -> None:
    """The arm `ins[i + 1 : k]` must run to its end: a `return` (unless nothing follows the `if`), `break` or
    `continue` inside it would skip, at trace time, the code after the `if`."""
    lo, hi = ins[i].offset, ins[k].offset
    for j in range(i + 1, k):
        x = ins[j]
        leaves = x.opname.startswith(("RETURN_VALUE", "RETURN_CONST")) and not _only_returns_none(ins, k)
        # (a jump as the arm's last instruction is the caller's check: an else, or a continue)
        if j < k - 1 and ("JUMP" in x.opname or x.opname == "FOR_ITER") and isinstance(x.argval, int):
            leaves = leaves or not lo <= x.argval <= hi
        if leaves:
            raise CompileError("a `return`, `break` or `continue` inside a staged `if` on a traced value cannot be "
                               "staged: the arm is traced once and must run to its end", src,
                               help="compute the condition into the work instead (pl.min / pl.max), or move the "
                               "exit out of the `if`")


def open_if(t: T.Tracer) -> bool:
    """`bool(t)` for the `if` statement being executed: open its arm; True (trace the arm)."""
    kframe = user_frame()
    src = source_of(kframe) if kframe is not None else None
    if kframe is None:
        raise _refuse(src)
    ins = _instructions(kframe.f_code)
    i = next((j for j, x in enumerate(ins) if x.offset == kframe.f_lasti), None)
    if i is None or ins[i].opname not in _JUMPS_IF_FALSE or not isinstance(ins[i].argval, int):
        raise _refuse(src)  # `while` re-tests at the bottom, `or` jumps if true, `not` / `x and y` as values
    target = ins[i].argval
    if target > ins[i].offset:
        k = next(j for j, x in enumerate(ins) if x.offset >= target)
        if any(x.opname.startswith("POP_JUMP") and isinstance(x.argval, int) and ins[i].offset < x.argval < target
               and x.offset > x.argval for x in ins[i + 1 : k]):
            raise _refuse(src)  # a `while`: its body jumps back into itself
        _check_arm_exits(ins, i, k, src)
        prev = ins[k - 1]
        # the arm ends by jumping away instead of falling through to `target`: an `else` follows (at the end
        # of a loop body the arm jumps back to the loop head), or the arm ends with `continue`
        if (prev.opname.startswith("JUMP") and isinstance(prev.argval, int)
                and not ins[i].offset <= prev.argval < target):
            raise CompileError("an `if` with an `else` (or an arm ending in `continue`) on a traced value is not "
                               "staged; only the one-armed form (an implicit else that keeps every name as it "
                               "was)", src,
                               help="drop the else arm: assign the else value before the `if` and rebind it inside")
        join: float = target
    else:  # the arm runs to the end of the loop body: it ends with the trip
        join = float("inf")
    st = T.current_state()
    arm = T.TraceFrame(st.top, src)
    arm.kind = "if"
    st.frames.append(arm)
    end = join if join != float("inf") else ins[-1].offset + 1
    returns = frozenset(x.offset for x in ins if ins[i].offset < x.offset < end
                        and x.opname.startswith(("RETURN_VALUE", "RETURN_CONST")))
    st.branches.append(_Branch(arm, kframe, ins[i].offset, join, t, dict(kframe.f_locals), src, returns))
    return True


def close_done(st: T.TraceState) -> None:
    """Close every innermost open arm the kernel has left (called before a traced operation)."""
    while st.branches and st.branches[-1].done():
        _close(st, st.branches.pop())


def close_above(st: T.TraceState, frame: T.TraceFrame) -> None:
    """Close the arms opened inside `frame` (its loop trip, or the kernel, ends here)."""
    while st.branches and st.branches[-1].frame is not frame and frame.is_ancestor_of(st.branches[-1].frame):
        _close(st, st.branches.pop())


def _carries(br: _Branch) -> list[tuple[str, Any, T.Tracer]]:
    after = dict(br.kframe.f_locals)
    name_hints(after)
    out: list[tuple[str, Any, T.Tracer]] = []
    seen: set[int] = set()
    for name, new in after.items():
        old = br.before.get(name, _MISSING)
        if new is old:
            continue
        if isinstance(new, T.Tracer):
            if new.frame.closed and new.frame is not br.frame:
                continue  # a dead value of a loop inside the arm
            if old is _MISSING or (isinstance(old, T.Tracer) and old.frame.closed):
                continue  # defined in the arm, dead after it
            if id(new) in seen:
                continue
            if not isinstance(old, T.Tracer):
                raise CompileError(f"'{name}' is rebound inside the staged `if` from {type(old).__name__} "
                                   f"{old!r} to a traced value; the implicit else would keep a Python value",
                                   br.source, help=f"make '{name}' a traced value before the `if`")
            if new.frame is not br.frame:
                raise CompileError(f"'{name}' is rebound inside the staged `if` to a value defined before it; "
                                   "this cannot be staged", br.source,
                                   help="assign a value computed inside the `if`")
            seen.add(id(new))
            out.append((name, old, new))
        elif old is not _MISSING and not _same_python_value(old, new):
            raise CompileError(f"the Python value '{name}' changes inside the staged `if`: {old!r} -> {new!r}; "
                               "the arm is traced once whatever the condition", br.source,
                               help="make it a traced value, or move it out of the `if`")
    return out


def _close(st: T.TraceState, br: _Branch) -> None:
    if st.top is not br.frame:
        raise CompileError("a staged `if` was closed out of order", br.source)
    arm, parent = br.frame, br.frame.parent
    assert parent is not None
    carries = _carries(br)
    inits, params, outs = [], [], []
    for name, old, new in carries:
        init = T.to_atom(old, parent)
        if init.type != new.var.type:
            raise CompileError(f"'{name}' changes type inside the staged `if`: {init.type} before it, "
                               f"{new.var.type} in the arm; the implicit else keeps the old value",
                               br.source, help="make both the same type (or pl.cast the new value)")
        p = arm.captured.pop(init, None) if isinstance(init, Var) else None
        p = p or Var(init.type)
        p.hint = name
        inits.append(init)
        params.append(p)
        outs.append(T.lift(new, arm))
    captured_outer = list(arm.captured.keys())
    graph = Graph([Var(ScalarType(dt.BOOL), "cond"), *arm.captured.values(), *params], arm.eqns, outs,
                  name="if_body")
    st.frames.pop()
    arm.closed = True
    outer, st.branches = st.branches, []  # the enclosing arms close after this one, not inside its bind
    try:
        res = T.bind(cond_p, [[br.pred], captured_outer, inits], {"body": graph}, br.source, dtype=dt.INDEX)
    finally:
        st.branches = outer
    for (name, _old, new), r in zip(carries, res):
        r.var.hint = name
        new.var, new.frame = r.var, r.frame  # the name now holds the `if`'s result


class _Handler:
    open_if = staticmethod(open_if)
    close_done = staticmethod(close_done)
    close_above = staticmethod(close_above)


frames.branch_handler = _Handler()
