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

An `if` that ends the kernel: each arm ends with the function's return, where no line event
comes, so the `then` arm returns from the kernel and `replay_returned` calls the kernel again,
jumping at its first line to the `else` arm (`trailing`). A helper ending in an `if` is refused.

`while` / `and` / `or` / `not` / a conditional expression on a traced value stay refused.
Tracing calls this module through `frames.branch_handler` (set below): tracing never imports it.
"""

from __future__ import annotations

import linecache
import re
import sys
import warnings
from collections.abc import Sequence
from types import FrameType
from typing import Any

from ..errors import CompileError, Source, source_of, user_frame
from ..tracing import frames as F
from ..tracing.frames import TraceFrame, TraceState, current_state
from ..tracing.loops import MISSING, instructions, name_hints
from ..tracing.tracer import Tracer
from .branch_arms import Branch, close_above, close_done, close_one, close_two

_JUMPS_IF_FALSE = ("POP_JUMP_FORWARD_IF_FALSE", "POP_JUMP_BACKWARD_IF_FALSE", "POP_JUMP_IF_FALSE")
_ELSE = re.compile(r"\s*(else\s*:|elif\b)")
_JUMPS_IF_TRUE = ("POP_JUMP_FORWARD_IF_TRUE", "POP_JUMP_IF_TRUE")
_TESTS = ("TO_BOOL", "COMPARE_OP")
_RETURNS = ("RETURN_VALUE", "RETURN_CONST")  # RETURN_CONST: Python 3.12+


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


def _line(x: Any) -> int | None:
    return x.positions.lineno if x.positions is not None else None


def _bare_return(ins: Sequence[Any], k: int) -> bool:
    """True when instruction `k` starts the function's implicit `return None` (nothing before it)."""
    x = ins[k]
    if x.opname == "RETURN_CONST":
        return x.argval is None
    return (
        x.opname == "LOAD_CONST"
        and x.argval is None
        and k + 1 < len(ins)
        and ins[k + 1].opname == "RETURN_VALUE"
    )


def _check_kernel_frame(st: TraceState, kframe: FrameType, src: Source | None) -> None:
    """An `if` whose arms end with the function's return is staged in the kernel function only:
    the `else` arm is traced by calling the kernel again (`replay_returned`); a helper cannot be."""
    if kframe.f_code is not st.kernel_code:
        raise CompileError(
            "an `if` on a traced value that ends a helper function is not staged: Python compiles "
            "the helper's implicit `return` into the `then` arm, so the helper returns before "
            "tracing reaches the `else` arm (or the code after a one-armed `if`)",
            src,
            help="put a statement after the `if` in the helper (`pass` is enough), or inline the "
            "helper into the kernel",
        )


def open_if(t: Tracer) -> bool:
    """`bool(t)` for the `if` statement being executed: open its arm; True (trace the `then` arm)."""
    kframe = user_frame()
    src = source_of(kframe) if kframe is not None else None
    if kframe is None:
        raise _refuse(src)
    ins = instructions(kframe.f_code)
    i = next((j for j, x in enumerate(ins) if x.offset == kframe.f_lasti), None)
    if i is not None and ins[i].opname in _TESTS and i + 1 < len(ins):
        i += 1  # Python 3.13 calls `bool()` in TO_BOOL (or a COMPARE_OP's bool form) before the jump
    st = current_state()
    if (
        i is not None
        and ins[i].opname in _JUMPS_IF_TRUE
        and i + 1 < len(ins)
        and ins[i + 1].opname == "JUMP_BACKWARD"
        and isinstance(ins[i].argval, int)
        and ins[i].argval > ins[i].offset
    ):  # Python 3.12+: a one-armed `if` that ends a loop body skips its arm by jumping back
        return _open(
            st,
            Branch(
                TraceFrame(st.top, src), kframe, ins[i].offset, float("inf"), t, dict(kframe.f_locals), src
            ),
        )
    if (
        i is None
        or ins[i].opname not in _JUMPS_IF_FALSE
        or not isinstance(ins[i].argval, int)
        or any(x.opname == "COPY" for x in ins[max(i - 2, 0) : i])  # 3.12+: `x = a and b`
    ):
        raise _refuse(src)  # `while` re-tests at the bottom, `or` jumps if true, `not` / `x and y` as values
    target = ins[i].argval
    if target <= ins[i].offset:  # the arm runs to the end of the loop body: it ends with the trip
        return _open(
            st,
            Branch(
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
    if prev.opname in _RETURNS and _bare_return(ins, k):  # a one-armed `if` that ends the function
        _check_kernel_frame(st, kframe, src)
        return _open(
            st,
            Branch(
                TraceFrame(st.top, src), kframe, ins[i].offset, float("inf"), t, dict(kframe.f_locals), src
            ),
        )
    leaves = prev.opname in _RETURNS or (
        prev.opname.startswith("JUMP")
        and isinstance(prev.argval, int)
        and not ins[i].offset <= prev.argval < target
    )
    if not leaves:
        return _open(
            st, Branch(TraceFrame(st.top, src), kframe, ins[i].offset, target, t, dict(kframe.f_locals), src)
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
    trailing, then_end = False, None
    join: float
    exit_line = _line(prev)
    if prev.opname in _RETURNS and exit_line is not None and exit_line > else_line:
        # Python 3.12+ copies a short statement after the if/else (`return acc`, `pass`) into each
        # arm: its line event in the `then` arm ends that arm, in the `else` arm it is the join
        j = k - 1
        while j > i + 1 and _line(ins[j - 1]) == exit_line:
            j -= 1
        then_end = ins[j].offset
        join = float(next(x.offset for x in ins[k:] if _line(x) == exit_line))
    elif prev.opname in _RETURNS:
        _check_kernel_frame(st, kframe, src)
        trailing, join = True, float("inf")
    else:
        join = prev.argval if prev.opname == "JUMP_FORWARD" or prev.argval > target else float("inf")
    br = Branch(
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
        trailing=trailing,
        then_end=then_end,
    )
    _install(st, kframe)
    return _open(st, br)


def _open(st: TraceState, br: Branch) -> bool:
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

        def on_call(frame: FrameType, event: str, arg: Any) -> Any:
            br = _REPLAYS.get(id(st))
            if br is not None and event == "call" and frame.f_code is br.kframe.f_code:
                return _on_replay_start
            return old(frame, event, arg) if old is not None else None  # type: ignore[arg-type]  # event names are str here

        sys.settrace(on_call)
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
                    if br.trailing:  # the kernel returns from the `then` arm: `replay_returned` goes on
                        br.then_after = dict(locs)
                        name_hints(br.then_after)
                        br.phase = "returned"
                    break  # (else a raise leaves the trace)
                _switch_to_else(st, br, kframe, locs)
                return _on_line
            st.branches.pop()
            if br.phase == "one":
                close_one(st, br)
            else:
                close_two(st, br, locs)
    return _on_line if _two_armed_open(st, kframe) else None


def _switch_to_else(st: TraceState, br: Branch, kframe: FrameType, locs: dict[str, Any]) -> None:
    """Close the `then` arm, restore the names it rebound (in `locs`, the frame's locals), and jump
    to the `else` arm."""
    if st.top is not br.frame:
        raise CompileError("a staged `if` was closed out of order", br.source)
    br.then_after = dict(locs)
    name_hints(br.then_after)
    for name in list(locs):
        if name not in br.before:
            _unbind(locs, name)
        elif locs[name] is not br.before[name]:
            locs[name] = br.before[name]
    for name, old in br.before.items():
        if name not in locs:
            locs[name] = old
    _begin_else(st, br)
    _jump(kframe, br.else_line)


def _unbind(locs: Any, name: str) -> None:
    """Unbind a name the `then` arm bound first. Python 3.12 writes a deleted local back as None
    (with a RuntimeWarning) and 3.13's frame-locals proxy cannot delete one: there it is set to
    None, which the merge of the two arms reads as "not bound" (not a traced value)."""
    if sys.version_info >= (3, 12):
        locs[name] = None
    else:
        del locs[name]


def _jump(kframe: FrameType, line: int) -> None:
    """Move `kframe` to `line` (from its line-trace call, as a debugger does)."""
    with warnings.catch_warnings():
        # Python 3.12 writes the rebound names back after the trace call: until then they look unbound
        warnings.filterwarnings("ignore", "assigning None to", RuntimeWarning)
        kframe.f_lineno = line  # type: ignore[misc]  # typeshed declares it read-only


def _begin_else(st: TraceState, br: Branch) -> None:
    """Close the `then` arm's frame and open the `else` arm's."""
    if st.top is not br.frame:
        raise CompileError("a staged `if` was closed out of order", br.source)
    st.frames.pop()
    br.frame.closed = True
    br.then_frame, br.frame, br.phase = br.frame, TraceFrame(st.top, br.source), "else"
    br.frame.kind = "else"
    st.frames.append(br.frame)


# ------------------------------------------------------------------------ an if/else that ends the kernel
_REPLAYS: dict[int, Branch] = {}  # id(TraceState) -> the if/else whose `else` arm the next kernel call runs


def replay_returned(st: TraceState, call: Any) -> None:
    """The kernel returned from the `then` arm of its last statement, an if/else (Python puts the
    function's `return` in each arm, and a trace function may move the frame only at a 'line'
    event, which never comes between the arm's end and that return). Trace the `else` arm by
    calling the kernel again (`call()`): at the new frame's first line, its names are set to
    their values before the `if` and the frame jumps to the `else` arm's first line, so the rest
    of the body (before the `if`) is not run twice. Its return closes both arms."""
    while st.branches and st.branches[-1].phase == "returned":
        br = st.branches[-1]
        _begin_else(st, br)
        _REPLAYS[id(st)] = br
        try:
            call()
        finally:
            _REPLAYS.pop(id(st), None)


def _on_replay_start(kframe: FrameType, event: str, arg: Any) -> Any:
    """The first line of the kernel's replay: rebind the names and jump to the `else` arm."""
    st = F.active_state()
    br = _REPLAYS.pop(id(st), None) if st is not None else None
    if event != "line" or st is None or br is None:
        return None
    old = br.kframe
    for b in st.branches:  # the arms still open in the kernel now close on the new frame's events
        if b.kframe is old:
            b.kframe = kframe
    locs = kframe.f_locals
    for name, value in br.before.items():
        locs[name] = value
    _jump(kframe, br.else_line)
    return _on_line


def finish(st: TraceState) -> None:
    """The trace ends: restore the global trace function (and close arms that ran to the end)."""
    old = _TRACES.pop(id(st), MISSING)
    if old is not MISSING:
        sys.settrace(old)
    for br in st.branches:
        if br.phase != "one":
            br.kframe.f_trace = None


class _Handler:
    open_if = staticmethod(open_if)
    replay_returned = staticmethod(replay_returned)
    close_done = staticmethod(close_done)
    close_above = staticmethod(close_above)
    finish = staticmethod(finish)


F.branch_handler = _Handler()
