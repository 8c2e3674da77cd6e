"""Tracing one kernel: run the Python function once on tracers of its parameters and return the
staged Graph, its values named after the kernel's variables."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..core.ir import Graph, Var
from ..core.types import Type
from ..errors import CompileError, user_source
from ..passes.dce import prune
from . import frames
from .frames import TraceFrame, TraceState, in_trace, set_state
from .loops import name_hints
from .tracer import Tracer


def trace(
    fn: Any, param_types: Sequence[Type], param_names: Sequence[str], name: str, target: str = "A2A3"
) -> Graph:
    """Run `fn` once on tracers and return the staged Graph (dead carries and values dropped)."""
    if in_trace():
        raise CompileError("a kernel cannot be traced inside another kernel's trace", user_source())
    st = TraceState(target)
    root = TraceFrame(None)
    root.params = [Var(t, n) for t, n in zip(param_types, param_names)]
    st.frames.append(root)
    set_state(st)
    st.kernel_code = getattr(fn, "__code__", None)
    args = [Tracer(v, root) for v in root.params]
    try:
        fn(*args)
        if st.branches:  # an if/else that ends the kernel: its `else` arm is traced by a second call
            frames.branch_handler.replay_returned(st, lambda: fn(*args))
        if st.branches:  # an `if` arm that runs to the end of the kernel
            frames.branch_handler.close_above(st, root)
        if st.pending is not None:
            raise st.pending
        if len(st.frames) != 1:
            raise CompileError("a staged loop was left open", st.top.source)
        code = getattr(fn, "__code__", None)  # the kernel's own names first, then its helpers'
        for f in sorted(st.user_frames.values(), key=lambda f: f.f_code is not code):
            name_hints(f.f_locals)
    finally:
        if frames.branch_handler is not None:
            frames.branch_handler.finish(st)
        set_state(None)
        st.user_frames.clear()
    return Graph(root.params, prune(root.eqns, []), [], name=name)
