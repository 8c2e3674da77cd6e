"""Running a `for` equation: SPMD lanes with their block index, range / pipeline trips threading
their carries, and both batched (all lanes or trips at once, batched.py) when the body's plan has
lane steps and the options allow it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from runtime import TileBuf
from runtime.dispatch import check_trips

from ..core.ir import Eqn
from . import batched
from .double_buffers import held_bytes, prefetch_buffers
from .lane_log import LANE_LOG, open_log, restore, snapshot


def copy_tile(ctx: Any, t: Any) -> Any:
    """A fresh on-chip copy of tile `t` (any other value is returned as is)."""
    if not isinstance(t, TileBuf):
        return t
    c = ctx.onchip.alloc_tile(
        t.space, t.rows, t.cols, t.dtype, layout=t.layout, valid_row=t.valid_row, valid_col=t.valid_col
    )
    c.data[:] = t.data
    return c


def run_loop(
    ctx: Any, e: Eqn, ins: list[Any], consumed: frozenset[int], body_plan: Callable[[int], Any]
) -> list[Any]:
    """Run the loop `e` on its input values `ins` (`consumed`: the input positions that die here);
    `body_plan(n_owned)` is the body's plan. Returns the final carries."""
    nb, nc, nk = e.params["arity"]
    start, stop, step = (int(x) for x in ins[:3])
    captured = ins[nb : nb + nc]
    # a carry's initial value is updated in place by the body: copy it if it is read afterwards
    carries = [c if (nb + nc + i) in consumed else copy_tile(ctx, c) for i, c in enumerate(ins[nb + nc :])]
    check_trips(
        len(range(start, stop, step)), e.source
    )  # issue 24 item 9: a clear refusal, no empty MemoryError
    options = ctx.options
    batch = options.fast and options.batch
    if e.params["kind"] == "spmd":
        saved = (ctx.block_idx, ctx.block_num, ctx.lane_log, ctx.lane)
        n = max(0, stop - start)
        # issue 24 item 2: a launch whose accesses the compiler could not prove race-free logs them
        # (lane_log.py); a launch inside a logged lane belongs to that lane (and is not batched)
        nested = ctx.lane_log is not None
        # (inline, not lane_log.launch_logged: a proven launch pays one dict lookup per launch)
        log = open_log(n) if not nested and n > 1 and e.params.get(LANE_LOG) is not False else None
        saved_bytes = []
        if log is not None:
            ctx.lane_log = log
            saved_bytes = snapshot(ctx, e, captured)
        try:
            plan = body_plan(0)
            if (
                batch
                and n > 1
                and not nested
                and batched.try_run_spmd(ctx, plan, range(start, stop, step), n, captured)
            ):
                return []
            ctx.take_pending()  # lane by lane, each lane's stores land as it runs
            for lane in range(start, stop, step):
                ctx.block_idx, ctx.block_num = lane, n
                if log is not None:
                    ctx.lane = lane
                plan.run(ctx, [lane, *captured])
            if log is not None:
                log.check()  # before the call returns: its outputs are restored on a race
        except BaseException:
            restore(ctx, saved_bytes)  # the tensors this launch wrote hold their bytes again
            raise
        finally:
            ctx.block_idx, ctx.block_num, ctx.lane_log, ctx.lane = saved
        return []
    trips = range(start, stop, step)
    prefetch = prefetch_buffers(e) if len(trips) >= 2 else []
    if prefetch:  # a pipeline's extra stage buffers, held while it runs (double_buffers.py)
        held: list[tuple[str, int]] = []
        try:
            for space, nbytes in held_bytes(prefetch):
                ctx.onchip.reserve(space, nbytes)
                held.append((space, nbytes))
            return _run_trips_or_carries(ctx, e, trips, captured, carries, body_plan, nk, batch)
        finally:
            for space, n in held:
                ctx.onchip.release(space, n)
    return _run_trips_or_carries(ctx, e, trips, captured, carries, body_plan, nk, batch)


def _run_trips_or_carries(
    ctx: Any,
    e: Eqn,
    trips: range,
    captured: list[Any],
    carries: list[Any],
    body_plan: Callable[[int], Any],
    nk: int,
    batch: bool,
) -> list[Any]:
    """The trips of a range / pipeline loop: batched when independent and exact, else one by one."""
    plan = body_plan(nk)
    if batch and nk == 0 and len(trips) > 1:  # independent trips: batched when exact
        if batched.try_run_spmd(ctx, plan, trips, len(trips), captured, spmd=False):
            return carries
    ctx.take_pending()  # trip by trip, each trip's stores land as it runs
    if nk == 0:
        _run_trips(ctx, plan, trips, captured)
        return carries
    for i in trips:
        carries = plan.run(ctx, [i, *captured, *carries])
    return carries


def _run_trips(ctx: Any, plan: Any, trips: range, captured: list[Any]) -> None:
    """`plan.run` of each trip of a carry-free loop: the captured values are placed once, each
    trip copies that environment and sets its induction variable."""
    env0 = plan.template.copy()
    iv, *cap_slots = plan.param_slots
    for s, a in zip(cap_slots, captured):
        env0[s] = a
    runs = plan.runs
    for i in trips:
        env = env0.copy()
        env[iv] = i
        for run in runs:
            run(ctx, env)
