"""Trace frames and the trace in progress: the equations of the graph under construction (the
kernel, or one loop body), the open frames of this thread's trace, and its pending refusal."""

from __future__ import annotations

import threading
from types import FrameType
from typing import Any

from ..core.ir import Eqn, Var
from ..errors import CompileError, Source, user_source


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
        self.explicit: Any = None  # a loop body's explicit carries (loops.Explicit: pl.range init_values)

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
        self.branches: list[Any] = []  # open arms of staged `if`s, innermost last (language/branch.py)
        self.kernel_code: Any = None  # the kernel function's code object (its frame is the kernel's)
        #: tensor views with a valid region (pl.tensor.set_validshape): tensor-level ops load only it
        self.valid_regions: dict[Var, tuple[Any, ...]] = {}

    @property
    def top(self) -> TraceFrame:
        """The innermost open frame: where new equations are staged."""
        return self.frames[-1]


_local = threading.local()

#: The staged `if` on a traced BOOL (nzjit/language/branch.py sets it; tracing never imports it):
#: `open_if(tracer)`, `close_done(state)`, `close_above(state, frame)`, `finish(state)`,
#: `replay_returned(state, call)`.
branch_handler: Any = None


def current_state() -> TraceState:
    """The trace in progress on this thread; CompileError outside a `@pl.kernel` trace."""
    st = getattr(_local, "state", None)
    if st is None:
        raise CompileError("this operation is only available while tracing a @pl.kernel", user_source())
    return st


def in_trace() -> bool:
    """True while a `@pl.kernel` is being traced on this thread."""
    return getattr(_local, "state", None) is not None


def active_state() -> TraceState | None:
    """The trace in progress on this thread, or None (for callbacks that may outlive it)."""
    return getattr(_local, "state", None)


def set_state(st: TraceState | None) -> None:
    """Start (`st`) or end (`None`) the trace of this thread (`trace` does, around the kernel's run)."""
    _local.state = st
