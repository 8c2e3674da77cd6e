"""The plan compiler: `Graph -> Plan`, written once.

A plan is a graph compiled for running: values live in the slots of a flat list (literals
pre-placed), each equation is one step - its rule's `specialize` form when the options allow
and the rule has one, else the generic step through its reference `impl` - and the values whose
last use is an equation are released right after it (a result nobody reads right after its
instruction). When every equation's rule also has a `batch` form (and the options allow
batching), the plan carries the lane-batched steps too: lane batching is a property of the plan,
decided here, once, and so is whether its lane-batched attempts may be recorded and replayed
(every lane step marked `lane_state.replays`; lane_replay.py). Plans hold no run-time state
beyond their steps' replay memos and those recorded attempts (`replays`), and are cached
per (graph, ownership, options) in one cache: the graph is its weak key, so a plan lives as long
as its graph.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .. import prims as P
from ..core.ir import Graph, Literal, Var
from ..errors import InternalError
from ..passes.pipe_buffers import pipe_buffers
from . import rules as _rules  # noqa: F401 - registers every rule
from .batched import with_frees
from .lane_log import logging_run
from .options import Options
from .rule import Run, Step, rule_of
from .steps import generic_run, release


@dataclass
class Plan:
    """A compiled graph: slot template (literals pre-placed), parameter / output slots, the
    per-trip step closures `runs` and, when the whole graph batches, the lane steps `lanes`."""

    steps: list[Step]
    template: list[Any]
    param_slots: tuple[int, ...]
    out_slots: tuple[int, ...]
    runs: tuple[Run, ...]
    lanes: tuple[Any, ...] | None = None
    #: batched attempts that fell back in a row (after `batched.MAX_FAILS` none is tried again)
    lane_fails: int = 0
    #: the steps that note their GM window in a launch's lane-race log (lane_log.py): a load or
    #: store (tile or scalar) the compiler did not prove race-free; a proven one runs unwrapped
    logged: tuple[int, ...] = ()
    #: the graph (nested bodies included) runs a cube product: a launch of it runs BLAS on one
    #: thread (executor.run_graph), since on some CPUs a product's bits depend on BLAS's threads
    multiplies: bool = False
    #: the on-chip slot buffers the graph's cross-core pipe holds for the whole launch (a split
    #: mixed kernel, passes/pipe_buffers.py): reserved around a launch of it (executor.run_graph)
    reserved: tuple[Any, ...] = ()
    #: the graph (nested bodies included) creates a GM scratch tensor (`tensor.create`): a launch
    #: of it frees the kernel's scratch tensors when it ends (executor.run_launch)
    creates: bool = False
    #: nothing to set up or end around a launch (no pipe buffers, no scratch, no product): a
    #: launch of it is the plan's run alone (executor.run_launch), decided once here
    plain: bool = field(init=False, default=True)
    #: every lane step is marked `lane_state.replays`: batched attempts of the plan are recorded
    #: once per call signature and replayed (lane_replay.py); `replays` holds them, by signature
    replayable: bool = False
    replays: dict[Any, Any] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self.plain = not (self.reserved or self.creates or self.multiplies)

    def run(self, ctx: Any, args: Sequence[Any]) -> list[Any]:
        """Run the plan on `args` in `ctx`; returns the values of its output slots."""
        env = self.template.copy()
        for s, a in zip(self.param_slots, args):
            env[s] = a
        for run in self.runs:
            run(ctx, env)
        return [env[s] for s in self.out_slots]


# ------------------------------------------------------------------------------- liveness
def _no_step(s: Any, env: list[Any]) -> None:
    """A lane step that does nothing (with_frees adds the releases around it)."""


def liveness(g: Graph, n_owned_params: int) -> dict[int, list[Var]]:
    """Last uses: a value dies after the last equation that reads it (a transposed view keeps its
    source alive). Only the trailing `n_owned_params` params (loop carries) are owned by `g`:
    kernel arguments and captured values belong to the caller. Returns step -> dying values."""
    last: dict[Var, int] = {}
    for i, e in enumerate(g.eqns):
        for a in e.inputs:
            if isinstance(a, Var):
                last[a] = i
    keep = {a for a in g.outputs if isinstance(a, Var)}
    for i in range(len(g.eqns) - 1, -1, -1):
        e = g.eqns[i]
        if e.primitive is P.tile_transpose_view_p and isinstance(e.inputs[0], Var):
            src, view = e.inputs[0], e.outputs[0]
            last[src] = max(last.get(src, i), last.get(view, i))
            if view in keep:
                keep.add(src)
    n_params = len(g.params)
    keep.update(g.params[: n_params - n_owned_params])
    free: dict[int, list[Var]] = {}
    for v, i in last.items():
        if v not in keep:
            free.setdefault(i, []).append(v)
    for i, e in enumerate(g.eqns):
        for out in e.outputs:  # a result nobody reads dies at once
            if out not in last and out not in keep:
                free.setdefault(i, []).append(out)
    return free


_MADS = (P.tile_mad_p, P.tile_mad_acc_p, P.tile_mad_bias_p)  # a bias row's TMOV comes before the extracts
_ACCESSES = (P.tile_load_p, P.tile_store_p, P.tensor_read_p, P.tensor_write_p)  # GM accesses a lane logs


def window_extracts(g: Graph, free: dict[int, list[Var]]) -> set[int]:
    """Extracts fused into the mad that follows them: their Left / Right result is read by that
    mad only (the next equation, or the one after a second such extract) and dies there. The
    values dying at the extract (its source) are freed after the mad instead, so the source the
    mad reads stays intact; only Left / Right / Acc tiles are allocated in between, so on-chip
    accounting and capacity refusals are those of the unfused sequence. Only rules with their
    fast forms fuse (a replaced impl does not). Returns the step indices; updates `free`."""
    uses: dict[Var, list[int]] = {}
    for i, e in enumerate(g.eqns):
        for a in e.inputs:
            if isinstance(a, Var):
                uses.setdefault(a, []).append(i)
    outputs = {a for a in g.outputs if isinstance(a, Var)}
    out: set[int] = set()
    if not _fast(P.tile_extract_p):
        return out
    for j, e in enumerate(g.eqns):
        if e.primitive not in _MADS or not _fast(e.primitive):
            continue
        group: list[int] = []
        i = j - 1
        while i >= 0 and j - i <= 2:
            x = g.eqns[i]
            if x.primitive is not P.tile_extract_p:
                break
            v = x.outputs[0]
            if v in outputs or uses.get(v) != [j] or v not in free.get(j, []):
                break
            group.append(i)
            i -= 1
        for i in group:
            dying = free.pop(i, [])
            free.setdefault(j, [])[:0] = dying  # freed after the mad, before its own dead values
            out.add(i)
    return out


def _fast(p: P.Primitive) -> bool:
    r = rule_of(p)
    return r is not None and r.specialize is not None


# -------------------------------------------------------------------------------- building
def build_plan(g: Graph, n_owned_params: int, options: Options, in_launch: bool = False) -> Plan:
    """Compile `g` (only the trailing `n_owned_params` params are owned by it) under `options`;
    `in_launch`: `g` runs inside a pl.spmd launch (a body of it, or nested deeper), so its GM
    accesses the compiler did not prove race-free note their windows in the launch's log."""
    free = liveness(g, n_owned_params)
    windows = window_extracts(g, free) if options.fast else set()
    slot_of: dict[Var, int] = {}
    template: list[Any] = []

    def slot(a: Any) -> int:
        if isinstance(a, Literal):
            template.append(a.value)
            return len(template) - 1
        s = slot_of.get(a)
        if s is None:
            s = slot_of[a] = len(template)
            template.append(None)
        return s

    param_slots = tuple(slot(p) for p in g.params)
    steps: list[Step] = []
    runs: list[Run] = []
    logged: list[int] = []
    lanes: list[Any] | None = [] if options.fast and options.batch else None
    for i, e in enumerate(g.eqns):
        r = rule_of(e.primitive)
        if r is None:
            raise InternalError(f"no backend rule for {e.primitive.name}")
        dying = free.get(i, ())
        dying_set = set(dying)
        consumed = frozenset(
            j
            for j, a in enumerate(e.inputs)
            if isinstance(a, Var) and a in dying_set and sum(1 for b in e.inputs if b is a) == 1
        )
        ins = tuple(slot(a) for a in e.inputs)
        outs = tuple(slot(v) for v in e.outputs)
        results = set(e.outputs)
        read_last = tuple(v for v in dying if v not in results)  # a step keeps one it returns
        dead = tuple(slot_of[v] for v in dying if v in results)  # results nobody reads
        inner = in_launch or e.params.get("kind") == "spmd"  # a loop body's plan: inside a launch?

        def body_plan(body: Graph, n_owned: int, inner: bool = inner) -> Plan:
            return plan_of(body, n_owned, options, inner)

        st = Step(
            e,
            r.impl,
            read_last,
            consumed,
            ins,
            outs,
            tuple(slot_of[v] for v in read_last),
            window=i in windows,
            options=options,
            plan_of=body_plan,
        )
        st.generic = generic_run(st)
        run = r.specialize(st) if options.fast and r.specialize is not None else None
        run = run or st.generic
        if in_launch and e.primitive in _ACCESSES:  # outside every launch no lane can race
            wrapped = logging_run(st, run)
            if wrapped is not run:
                logged.append(i)
                run = wrapped
        runs.append(_then_free(run, dead) if dead else run)
        if lanes is not None:
            lane = r.batch(st) if r.batch is not None else None
            if lane is None:
                lanes = None
            else:
                lanes.append((lane, st.free, outs, dead))
        steps.append(st)
    out_slots = tuple(slot(a) for a in g.outputs)
    # a carry the body never reads (a tile reloaded under its old name) dies on entry: holding it
    # through the trip would keep two tiles alive, and leak one per trip
    read = {a for e in g.eqns for a in e.inputs if isinstance(a, Var)} | set(g.outputs)
    unread = tuple(slot_of[p] for p in g.params[len(g.params) - n_owned_params :] if p not in read)
    if unread:
        runs.insert(0, lambda ctx, env: release(ctx, env, unread, ()))
    replayable = lanes is not None and all(getattr(x[0], "replays", False) for x in lanes)
    lane_steps = None if lanes is None else tuple(with_frees(*x) for x in lanes)
    if unread and lane_steps is not None:  # the same on the batched path: its on-chip peak is the trip's
        lane_steps = (with_frees(_no_step, unread, ()), *lane_steps)
    return Plan(
        steps,
        template,
        param_slots,
        out_slots,
        tuple(runs),
        lane_steps,
        logged=tuple(logged),
        multiplies=multiplies(g),
        reserved=tuple(pipe_buffers(g)),
        creates=any(e.primitive is P.tensor_create_p for e in g.walk()),
        replayable=replayable,
    )


def multiplies(g: Graph) -> bool:
    """Whether `g`, nested bodies included, runs a product on the cube (a rule marked
    `multiplies`: a tensor or tile matmul, its accumulating / bias / batched forms, the lowered
    `tile.mad*`): those are the equations whose numpy implementation calls BLAS."""
    for e in g.walk():
        r = rule_of(e.primitive)
        if r is not None and r.multiplies:
            return True
    return False


def _then_free(run: Run, dead: tuple[int, ...]) -> Run:
    """`run`, then free the tiles of the `dead` result slots (a result nobody reads is still
    allocated by its instruction, and must not stay charged to the on-chip capacity)."""

    def run_then_free(ctx: Any, env: list[Any]) -> None:
        run(ctx, env)
        release(ctx, env, dead, ())

    return run_then_free


# ----------------------------------------------------------------------------------- cache
_PLANS: weakref.WeakKeyDictionary[Graph, dict[tuple[int, Options, bool], Plan]] = weakref.WeakKeyDictionary()


def plan_of(g: Graph, n_owned_params: int, options: Options, in_launch: bool = False) -> Plan:
    """The cached plan of `g` under `options` (a plan references its equations, not its graph,
    so the weak key keeps no graph alive); `in_launch` as for `build_plan`."""
    per = _PLANS.get(g)
    if per is None:
        per = _PLANS[g] = {}
    key = (n_owned_params, options, in_launch)
    plan = per.get(key)
    if plan is None:
        plan = per[key] = build_plan(g, n_owned_params, options, in_launch)
    return plan


#: bumped by `clear_plans`: a plan kept outside this cache (convention.LaunchPlan.compiled) is
#: valid while the generation it was taken in is current
GENERATION = [0]


def clear_plans() -> None:
    """Drop every cached plan (after registering a different rule for a primitive)."""
    _PLANS.clear()
    GENERATION[0] += 1


__all__ = [
    "Plan",
    "build_plan",
    "plan_of",
    "clear_plans",
    "GENERATION",
    "liveness",
    "multiplies",
    "window_extracts",
]
