"""Running a graph: the run-time context of one kernel call on one rank, and `run_graph`.

`run_graph(ctx, g, args)` runs the cached plan of `g` under the context's options (plan.py);
loops inside run their bodies' plans (loops.py), batched when exact (batched.py). A mixed kernel's
cross-core pipe slot buffers (passes/pipe_buffers.py) are held on chip for the whole call, as the
split kernel's `pto.reserve_buffer` holds them; its GM scratch tensors (`tensor.create`) are freed
when it returns.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from runtime import GlobalMemory, OnChip
from runtime.blas import one_thread

from ..core.ir import Eqn, Graph
from .options import DEFAULT, Options
from .plan import Plan, clear_plans, plan_of
from .rule import Step
from .steps import free_value
from .values import TransposedTile


@dataclass
class Ctx:
    """Run-time state of one kernel call on one rank: GM, on-chip accounting, dynamic dims, the
    options, the current SPMD lane, the step being run and the launch's lane-race log."""

    gm: GlobalMemory
    onchip: OnChip
    dims: dict[str, int]
    options: Options = DEFAULT
    block_idx: int = 0
    block_num: int = 1
    step: Step | None = None
    #: the open lane-race log of the running pl.spmd launch (lane_log.py) and the lane it is in
    lane_log: Any = None
    lane: int = 0
    #: GM addresses of the kernel's scratch tensors (pl.create_tensor in a kernel), freed at its end
    scratch: list[int] = field(default_factory=list)
    #: snapshots the launch has not taken yet (convention.Rollback.take): `take_pending` runs
    #: them before the first GM write a later failure could leave behind
    pending: list[Any] | None = None

    def take_pending(self) -> None:
        """Take the launch's deferred snapshots now (something is about to write GM)."""
        if self.pending:
            todo, self.pending = self.pending, None
            for take in todo:
                take()

    def consumes(self, e: Eqn, i: int) -> bool:
        """True when input `i` of the running step dies there, so the impl may update it in place."""
        return self.step is not None and i in self.step.consumed

    def plan_of(self, g: Graph, n_owned_params: int = 0) -> Plan:
        """The cached plan of `g` under this call's options (a body run while a launch's lane-race
        log is open: the plan that logs its unproven accesses)."""
        return plan_of(g, n_owned_params, self.options, self.lane_log is not None)


def run_plan(ctx: Ctx, plan: Plan, args: Sequence[Any]) -> list[Any]:
    """Run `plan` on `args` in `ctx`; returns the values of its output slots."""
    return plan.run(ctx, args)


def run_graph(ctx: Ctx, g: Graph, args: Sequence[Any], n_owned_params: int = 0) -> list[Any]:
    """Run `g` on `args` (kernel arguments: TensorVals and ints): the launch of its cached plan
    (`run_launch`)."""
    return run_launch(ctx, plan_of(g, n_owned_params, ctx.options), args)


def run_launch(ctx: Ctx, plan: Plan, args: Sequence[Any]) -> list[Any]:
    """Run the launch of `plan` on `args`. Floating-point overflow and invalid operations are
    silent, as on the device (inf / nan results, no numpy warnings). A `Plan.plain` launch is the
    run alone; else its pipe slot buffers are held around it, its products run on one BLAS thread
    and its GM scratch tensors are freed when it ends."""
    if plan.plain:
        with np.errstate(over="ignore", invalid="ignore"):
            return plan.run(ctx, args)
    pipe = plan.reserved
    for b in pipe:
        ctx.onchip.reserve(b.memory.value, b.nbytes)
    try:
        with np.errstate(over="ignore", invalid="ignore"):
            if plan.multiplies:
                # OpenBLAS's bits depend on its thread count on some CPUs (its Haswell kernels),
                # so every launch multiplies on one BLAS thread: the same bits alone, on ranks,
                # rank-batched
                with one_thread():
                    return plan.run(ctx, args)
            return plan.run(ctx, args)
    finally:
        for b in pipe:
            ctx.onchip.release(b.memory.value, b.nbytes)
        while ctx.scratch:  # the kernel's GM scratch tensors end with it
            ctx.gm.free(ctx.scratch.pop())


__all__ = [
    "Ctx",
    "run_graph",
    "run_launch",
    "run_plan",
    "plan_of",
    "clear_plans",
    "free_value",
    "TransposedTile",
]
