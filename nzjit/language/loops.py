"""Staged loops: pl.range / pl.pipeline / pl.spmd. Each is traced once (tracing.staged_loop)."""

from __future__ import annotations

import builtins
from collections.abc import Iterator
from typing import Any

from ..driver.calls import active_program
from ..errors import CompileError, user_source
from ..tracing import Tracer, in_trace, staged_loop


def range(*args: Any, init_values: tuple[Any, ...] | None = None) -> Iterator[Any]:  # noqa: A001 - the kernel language's pl.range
    """pl.range(stop) or pl.range(start, stop, step=1): a sequential staged loop (in a
    kernel, the index is traced; in an orchestration body, a host loop over ints). With PyPTO's
    `init_values=(v, ...)` the loop yields `(i, (carry, ...))` and its body ends with
    `results = pl.yield_(next, ...)`: the explicit carries (language/carries.py)."""
    if not 1 <= len(args) <= 3:
        raise CompileError("pl.range takes (stop), (start, stop) or (start, stop, step)", user_source())
    start, stop, step = (
        (0, args[0], 1) if len(args) == 1 else (args[0], args[1], args[2] if len(args) == 3 else 1)
    )
    if (
        not in_trace() and active_program() is not None
    ):  # issue 28: PyPTO's host `for r in pl.range(pld.world_size())`
        if init_values is not None:
            raise CompileError(
                "init_values is for a staged loop inside a kernel",
                user_source(),
                help="in an orchestration, rebind the name in the loop body",
            )
        return iter(builtins.range(start, stop, step))
    return staged_loop("range", start, stop, step, None, user_source(), init_values)


def pipeline(start: Any, stop: Any, step: Any = 1, stage: int = 2) -> Iterator[Tracer]:
    """pl.pipeline(start, stop, step, stage=2): a loop whose trips overlap with `stage` buffers."""
    if not isinstance(stage, int) or stage < 1:
        raise CompileError(f"pl.pipeline stage must be a positive int, got {stage!r}", user_source())
    return staged_loop("pipeline", start, stop, step, stage, user_source())


def spmd(n: Any) -> Iterator[Tracer]:
    """pl.spmd(n): n parallel lanes; the loop variable is the lane's block index."""
    return staged_loop("spmd", 0, n, 1, None, user_source())
