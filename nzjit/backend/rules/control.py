"""Rules of the control family: `for` loops (range / pipeline / spmd, run by loops.py), the
SPMD lane queries `get_block_idx` / `get_block_num`, and the staged `if` arm `cond`."""

from __future__ import annotations

from typing import Any

from ... import prims as P
from ...core.ir import Eqn
from .. import batched
from ..double_buffers import held_bytes, prefetch_buffers
from ..lane_state import Fallback, LaneState, replays, uniform
from ..lane_values import LANE_VALUES, LaneAcc, LaneTile
from ..loops import copy_tile, run_loop
from ..rule import Run, Step, rule
from ..steps import release


# ------------------------------------------------------------------------------------ loops
def _for(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    st = ctx.step
    body = e.params["body"]
    return run_loop(ctx, e, ins, st.consumed, lambda n_owned: ctx.plan_of(body, n_owned))


def _specialize_for(st: Step) -> Run | None:
    """The loop with its body's plan bound once (the generic impl looks it up per run)."""
    e = st.eqn
    body = e.params["body"]
    nk = e.params["arity"][2]
    assert st.plan_of is not None
    plan = st.plan_of(body, 0 if e.params["kind"] == "spmd" else nk)
    ins, outs, free, consumed = st.ins, st.outs, st.free, st.consumed

    def body_plan(n_owned: int) -> Any:
        return plan

    def run(ctx: Any, env: list[Any]) -> None:
        ctx.step = st
        res = run_loop(ctx, e, [env[i] for i in ins], consumed, body_plan)
        for s, v in zip(outs, res):
            env[s] = v
        if free:
            release(ctx, env, free, res)

    return run


def copy_carries(s: LaneState, vals: list[Any], first: int, consumed: frozenset[int]) -> list[Any]:
    """The carries `vals[first:]` of a loop or `if` in a batched body, a lane tile or accumulator
    copied where the impl copies it (`copy_tile`: a carry the equation does not consume), charged
    the same; a tile window carry cannot be copied here (Fallback)."""
    out = []
    for i, c in enumerate(vals[first:]):
        if (first + i) not in consumed and type(c) in LANE_VALUES:
            if type(c) is LaneAcc:
                s.reserve(c.g)
                c = LaneAcc(c.g, s.copy(c.data), c.valid_row, c.valid_col)
            elif type(c) is LaneTile and not c.freed:
                s.reserve(c.g)
                c = LaneTile(c.g, c.valid_row, c.valid_col, s.copy(c.data), c.row)
            else:
                raise Fallback("carry copy")
        out.append(c)
    return out


def _batch_for(st: Step) -> Any:
    """A `pl.range` / `pl.pipeline` loop inside a batched body: its trips run in order, each for
    all lanes (the body's lane steps); carries that survive the loop are copied first."""
    e = st.eqn
    if e.params["kind"] == "spmd":
        return None
    nb, nc, nk = e.params["arity"]
    assert st.plan_of is not None
    body = st.plan_of(e.params["body"], nk)
    if body.lanes is None:
        return None
    ins, outs, consumed = st.ins, st.outs, st.consumed
    prefetch = prefetch_buffers(e)

    def run(s: LaneState, env: list[Any]) -> None:
        vals = [env[i] for i in ins]
        start, stop, step = (uniform(x) for x in vals[:3])
        captured = vals[nb : nb + nc]
        carries = copy_carries(s, vals, nb + nc, consumed)
        trips = range(start, stop, step)
        # a pipeline's extra stage buffers (double_buffers.py); a fallback restores the accounting
        held = held_bytes(prefetch) if len(trips) >= 2 else []
        for space, nbytes in held:
            s.ctx.onchip.reserve(space, nbytes)
        for i in trips:
            carries = batched.run_lane_plan(s, body, [i, *captured, *carries])
        for space, nbytes in held:
            s.ctx.onchip.release(space, nbytes)
        for slot, v in zip(outs, carries):
            env[slot] = v

    # the trips' bounds are lane-uniform scalars of the signature; the body's steps record
    return replays(run) if body.replayable else run


rule(P.for_p, specialize=_specialize_for, batch=_batch_for)(_for)


# ------------------------------------------------------------------------------ lane queries
def _specialize_block_idx(st: Step) -> Run | None:
    (o,) = st.outs

    def run(ctx: Any, env: list[Any]) -> None:
        env[o] = ctx.block_idx

    return run


def _batch_block_idx(st: Step) -> Any:
    (o,) = st.outs

    def run(s: LaneState, env: list[Any]) -> None:
        env[o] = s.lanes if s.spmd else s.ctx.block_idx

    return replays(run)  # the lanes: part of a replay's signature


@rule(P.get_block_idx_p, specialize=_specialize_block_idx, batch=_batch_block_idx)
def _block_idx(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    return [ctx.block_idx]


def _specialize_block_num(st: Step) -> Run | None:
    (o,) = st.outs

    def run(ctx: Any, env: list[Any]) -> None:
        env[o] = ctx.block_num

    return run


def _batch_block_num(st: Step) -> Any:
    (o,) = st.outs

    def run(s: LaneState, env: list[Any]) -> None:
        env[o] = s.n if s.spmd else s.ctx.block_num

    return replays(run)


@rule(P.get_block_num_p, specialize=_specialize_block_num, batch=_batch_block_num)
def _block_num(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    return [ctx.block_num]


# ------------------------------------------------------------------------------ staged `if`
def _cond(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    """`if pred (!= negate): carries = body(captured, carries)`; returns the carries."""
    nb, nc, nk = e.params["arity"]
    pred, captured = ins[0], ins[nb : nb + nc]
    # a carry the arm updates in place is copied when it is read afterwards (as a loop's initial carry)
    carries = [c if ctx.consumes(e, nb + nc + i) else copy_tile(ctx, c) for i, c in enumerate(ins[nb + nc :])]
    if bool(pred) == bool(e.params.get("negate", False)):
        return carries
    return ctx.plan_of(e.params["body"], nk).run(ctx, [pred, *captured, *carries])


def _batch_cond(st: Step) -> Any:
    """A staged `if` inside a batched body, when its predicate is lane-uniform (a loop index, a
    scalar parameter, a block count): the arm runs once for all lanes, or not at all. A predicate
    that differs between lanes (one computed from get_block_idx) cannot run one arm for every lane:
    LaneDependent, and smaller groups of lanes, or one lane at a time, run it as the impl does.
    Carries are copied as the impl copies them (a carry it does not consume), charged the same."""
    e = st.eqn
    nb, nc, nk = e.params["arity"]
    assert st.plan_of is not None
    body = st.plan_of(e.params["body"], nk)
    if body.lanes is None:
        return None
    ins, outs, consumed = st.ins, st.outs, st.consumed
    negate = bool(e.params.get("negate", False))

    def run(s: LaneState, env: list[Any]) -> None:
        vals = [env[i] for i in ins]
        pred = bool(uniform(vals[0]))
        carries = copy_carries(s, vals, nb + nc, consumed)
        if pred != negate:
            carries = batched.run_lane_plan(s, body, [vals[0], *vals[nb : nb + nc], *carries])
        for slot, v in zip(outs, carries):
            env[slot] = v

    # the predicate is a lane-uniform scalar the signature decides (a value read from GM comes
    # from an unmarked step: no replay then)
    return replays(run) if body.replayable else run


rule(P.cond_p, batch=_batch_cond)(_cond)
