"""Lane-batched execution of an SPMD body: every equation runs once for all lanes.

The per-lane semantics is the reference: lane 0 runs the whole body, then lane 1, ... A batched
run gives the same GM bytes when

* the body uses only the primitives below, with 64-bit index scalars, loop bounds and tile
  shapes that are the same in every lane (checked statically and at run time);
* no byte a lane loads is stored by any lane of the body (stores are applied last, lane by lane
  in program order, or as one strided assignment per run of lanes when no byte is written twice,
  so loads must not see them; the sums a deferred store reads are never updated in place);
* no instruction warns (warnings are per lane and per instruction on the reference path).

A group of lanes that disagrees on a value that must be uniform (a trip count, a valid shape: a
ragged last tile) is retried in halves, a bounded number of times. Anything else - an
unsupported primitive, a load / store overlap, a refusal (capacity, bounds, negative offset) -
abandons the attempt before any GM byte is written, and the lanes run one by one (which then
reproduces the refusal exactly).

Values: scalars are ints or int64 arrays over lanes; tensors are `TensorVal` or `LaneTensor`
(one address per lane); tiles are `LaneTile`: the distinct byte images of the lanes (lanes
loading the same window share one image) and the lane -> image map; TEXTRACTs fused into their
mad are `LaneWindow`; accumulators are `LaneAcc` (one logical matrix per lane, as
`runtime.cube.tmatmul` keeps whole-tile accumulators). On-chip accounting is one lane's: every
lane runs the same program, so one lane's allocations and frees are every lane's.

A load that is one plain burst copy filling its tile is not copied: the tile keeps read-only
views of the GM bytes (GM is unchanged while the batch runs) and a mad converts its operands
straight from GM; anything else that needs the bytes materialises them first (the load's copy).

Lanes run in groups: the first of `Options.lane_group` lanes, the next as many as keep the memory a group
allocates (materialised tile images, accumulators; a lazy tile's GM views take none) within
`GROUP_BYTES`. Few groups keep the interpretation cheap. A mad is one stacked np.matmul over the
lanes, which calls the same BLAS routine per lane, on the same operand layouts, as the per-lane
path (the same bits), with its operands converted once per distinct image (lanes that load the
same window share it); a mad runs `lane_cube.MAD_CHUNK` lanes at a time, so the operands it
converts for them are still in cache when BLAS reads them, and its scratch stays bounded; a
helper thread converts the next chunk's operands while BLAS multiplies this one. One
wider BLAS call over lanes that share their Left operand would be faster, but OpenBLAS does not
give bit-identical sums for a wider N, so it is not used.

An attempt whose plan replays (every lane step marked `lane_state.replays`) is recorded on the
second call of its signature (the lanes, the captured tensors' addresses and layouts, scalars by
their bits, dims, options, on-chip and pipe state) and later calls of that signature repeat its
recorded numpy calls on the same buffers, then commit the same stores (`commit`): lane_replay.py.

This file runs the lane steps of a plan (plan.py builds them from each rule's `batch` form, in
the same pass as the per-trip steps; `rules/` holds those forms), applies the deferred stores and
decides the lane groups; the state of an attempt and the fallback signals are in lane_state.py,
the values in lane_values.py, the GM side (burst replays, in-place GM views, the overlap test) in
lane_gm.py, the stacked mad in lane_cube.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import runtime
from runtime import TileBuf

from . import lane_gm, lane_log, lane_replay
from .lane_state import Fallback, LaneDependent, LaneState, Step, iota
from .lane_values import LANE_VALUES, LaneTensor


# ---------------------------------------------------------------------------------- steps
def with_frees(step: Step, free: tuple[int, ...], outs: tuple[int, ...], dead: tuple[int, ...] = ()) -> Step:
    """Run the lane step `step`, then release the lane values dying there (not one it returned:
    in place) and its results nobody reads (`dead`)."""
    if not free and not dead:
        return step
    if len(outs) == 1 and not dead:  # the common step: one result, inputs dying
        (o,) = outs

        def run1(s: LaneState, env: list[Any]) -> None:
            step(s, env)
            r = env[o]
            for slot in free:
                v = env[slot]
                env[slot] = None
                if v is not r and type(v) in LANE_VALUES:
                    s.release(v)

        return run1

    def run(s: LaneState, env: list[Any]) -> None:
        step(s, env)
        res = [env[o] for o in outs]
        for slot in free:
            v = env[slot]
            env[slot] = None
            if type(v) in LANE_VALUES and not any(v is r for r in res):
                s.release(v)
        for slot in dead:
            v = env[slot]
            env[slot] = None
            if type(v) in LANE_VALUES:
                s.release(v)

    return run


def run_lane_plan(s: LaneState, plan: Any, args: list[Any]) -> list[Any]:
    """Run the lane steps of `plan` (a `plan.Plan` whose `lanes` are set) for all lanes at once on
    `args`: the same slot machine as a per-trip run, with the lanes' state in place of the
    context; returns the values of its output slots."""
    env = plan.template.copy()
    for slot, a in zip(plan.param_slots, args):
        env[slot] = a
    for run in plan.lanes:
        run(s, env)
    return [env[slot] for slot in plan.out_slots]


# ---------------------------------------------------------------------------------- running
def try_run_spmd(
    ctx: Any, plan: Any, lanes: range | np.ndarray, n: int, captured: list[Any], spmd: bool = True
) -> bool:
    """Run all `lanes` of an SPMD body's `plan` (or the independent trips of a carry-free loop,
    `spmd=False`: the body's index takes the trip values, the block index stays) batched;
    False (nothing written to GM, on-chip accounting restored) when that cannot be exact - the
    plan has no lane steps, or they fell back `MAX_FAILS` times in a row. A plan whose lane steps
    all replay runs a recorded attempt of the same signature when there is one (lane_replay.py)."""
    if plan.lanes is None or plan.lane_fails >= MAX_FAILS:
        return False
    all_lanes = np.asarray(lanes, dtype=np.int64)
    key = None
    if plan.replayable and ctx.options.replay:
        key = lane_replay.signature(ctx, all_lanes, n, spmd, captured)
        rp = plan.replays.get(key) if key is not None else None
        if rp and key is not None:
            if lane_replay.run(ctx, plan, key, rp, commit):
                plan.lane_fails = 0
                return True
            key = None  # this call steps, and records nothing
        elif key is not None and not lane_replay.wanted(plan, key):
            key = None  # a first sighting: noted, not recorded
    s = LaneState(ctx, n, spmd, record=key is not None)
    kept = False
    try:
        ok = _run_lanes(s, plan, all_lanes, captured)
        kept = ok and key is not None and lane_replay.keep(plan, key, s, captured)
        return ok
    finally:
        if not kept:  # the attempt is over (stores applied or abandoned): its buffers serve the next
            s.recycle()


def _run_lanes(s: LaneState, plan: Any, all_lanes: np.ndarray, captured: list[Any]) -> bool:
    """`try_run_spmd` on the attempt's state `s`: the lane groups, then every lane's stores."""
    ctx = s.ctx
    onchip = ctx.onchip
    live, peak = dict(onchip.live), dict(onchip.peak)
    if s.rec is not None:  # a recording: the attempt's own peak, which its replays charge
        onchip.peak.update(live)
    groups: list[list[tuple[Any, np.ndarray, Callable[[int], TileBuf]]]] = []
    try:
        with np.errstate(over="ignore", invalid="ignore"):
            # lanes in groups: each group's tiles stay cache-sized; stores wait for every group
            first = ctx.options.lane_group
            base, size, splits = 0, first, 0
            while base < len(all_lanes):
                s.lanes = all_lanes[base : base + size]
                s.L, s.base, s.stores, s.alloc_bytes = len(s.lanes), base, [], 0
                group_live, n_loaded, n_stored = dict(onchip.live), len(s.loaded), len(s.stored)
                n_notes, n_rec = len(s.notes), len(s.rec) if s.rec is not None else 0
                s.group_loads = n_loaded
                try:
                    run_lane_plan(s, plan, [s.lanes, *group_values(captured, base, s.L)])
                except LaneDependent:
                    # e.g. a ragged last tile: retry this group's lanes in halves (nothing of the
                    # attempt reached GM - stores wait for every group), a bounded number of times
                    if s.L == 1 or splits >= MAX_SPLITS:
                        raise
                    splits += 1
                    onchip.live.update(group_live)
                    del s.loaded[n_loaded:], s.stored[n_stored:], s.notes[n_notes:]
                    if s.rec is not None:  # the failed group's calls are not part of the replay
                        del s.rec[n_rec:]
                    size = s.L // 2
                    continue
                groups.append(s.stores)
                base += s.L
                per_lane = max(1, s.alloc_bytes // s.L)
                size = int(min(MAX_GROUP, max(first, GROUP_BYTES // per_lane)))
        if lane_gm.overlap(s.loaded, s.stored):
            raise Fallback("a lane loads bytes that the body stores")
    except Exception as e:  # anything unexpected too: the per-lane run is the reference
        if ctx.options.strict and not isinstance(e, (Fallback, runtime.DeviceError, OverflowError)):
            raise
        onchip.live.update(live)
        onchip.peak.update(peak)
        plan.lane_fails += 1  # a body that keeps failing is not retried
        return False
    plan.lane_fails = 0
    if s.rec is not None:
        s.own_peak = dict(onchip.peak)
        lane_replay.raise_peak(onchip.peak, peak)  # the launch's peak: its own and the attempt's
        s.live_after, s.groups = dict(onchip.live), groups
    # the logged accesses into the launch's lane-race log: a race raises before any store lands
    if s.notes:
        lane_log.feed(s, s.notes)
    commit(ctx, groups)
    return True


def commit(ctx: Any, groups: list[list[tuple[Any, np.ndarray, Callable[[int], TileBuf]]]]) -> None:
    """Every lane's deferred stores (`groups`: per lane group, in per-lane program order; loads
    never see them: checked before), as strided assignments where the lanes' bytes are disjoint."""
    gm = ctx.gm
    # the launch's deferred snapshots (Ctx.pending) are needed unless the whole commit is one
    # assignment: it either lands whole, as the last thing the launch does, or not at all
    alone = sum(1 for stores in groups if stores) == 1

    def before(assignments: int) -> None:
        if not alone or assignments != 1:
            ctx.take_pending()

    for stores in groups:
        if not stores:
            continue
        if len(stores) == 1:  # one store per lane: strided assignments if the lanes' bytes are disjoint
            plan_, addr, get = stores[0]
            images = getattr(get, "images", None)
            if images is not None:
                data, row = images
                imgs = (
                    data
                    if len(data) == len(row) and (row is iota(len(row)) or (row == iota(len(row))).all())
                    else data[row]
                )
                if lane_gm.lane_copy(plan_, gm, addr, imgs, False, before):
                    continue
            sums = getattr(get, "sums", None)
            if sums is not None and lane_gm.lane_acc_store(plan_, gm, addr, sums, before):
                continue
        ctx.take_pending()
        for lane in range(len(stores[0][1])):
            for plan_, addr, get in stores:
                plan_.run(gm, int(addr[lane]), get(lane))


def group_values(captured: list[Any], base: int, L: int) -> list[Any]:
    """The captured values as the lanes ``base .. base + L - 1`` of a group see them: a LaneTensor
    given for every lane (the ranks of a rank-batched launch, rank_batch.py) sliced to the group."""
    if not any(type(c) is LaneTensor for c in captured):
        return captured
    return [
        LaneTensor(c.addr[base : base + L], c.dtype, c.shape, c.strides, c.layout)
        if type(c) is LaneTensor
        else c
        for c in captured
    ]


#: After this many fallbacks in a row a body's plan is no longer tried batched.
MAX_FAILS = 3
#: Lane groups split in halves at most this many times per run when their lanes disagree on a
#: value that must be uniform (beyond that the lanes run one by one).
MAX_SPLITS = 16
#: Lanes per batched pass: `Options.lane_group` first, then at least that many and as many as the
#: previous group's allocations per lane allow within GROUP_BYTES (at most MAX_GROUP).
MAX_GROUP = 4096
GROUP_BYTES = 8 << 20
