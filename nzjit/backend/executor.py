"""Walks a graph and issues runtime instructions.

Every graph (the kernel and each loop body) is compiled once into a `Plan`: values live in the
slots of a flat list (literals pre-placed), each equation is a pre-bound step closure (its impl
specialised on the equation's static parameters, see `fast.py`), and the values whose last use
is an equation are freed right after it. Plans are cached per graph object, so a cached kernel
call compiles nothing. SPMD lanes run with their own block index, loops run their trips; the
lanes of an SPMD body and the trips of a carry-free loop run batched when that is exact
(`batched.py`, falling back to one by one).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from runtime import GlobalMemory, OnChip, TileBuf
from runtime.cube import TileWindow
from runtime.dispatch import check_trips

from ..core import primitives as P
from ..core.ir import Eqn, Graph, Literal, Var
from ..errors import InternalError
from .impl import impl_rules
from .values import TransposedTile

StepFn = Callable[["Ctx", list[Any]], None]

#: Specialised step closures and TEXTRACT-into-mad windows (False: every equation through its
#: generic `impl_rules` entry; tests compare the two byte for byte). Changing it needs
#: `clear_plans()`.
FAST = True
#: Run the lanes of an SPMD body, and the trips of a carry-free loop, batched when that is exact
#: (batched.py); else one by one.
BATCH_SPMD = True


@dataclass
class Step:
    """One equation of a plan: `run(ctx, env)` reads its inputs from the slots `ins`, writes its
    results to `outs` and frees the values of `free` (their last use is this equation)."""

    eqn: Eqn
    fn: Any  # the generic impl (None for loops)
    free_after: tuple[Var, ...]  # values whose last use is this equation
    consumed: frozenset[int]  # input positions whose value dies here (in-place update allowed)
    ins: tuple[int, ...] = ()
    outs: tuple[int, ...] = ()
    free: tuple[int, ...] = ()
    run: Any = None
    window: bool = False  # a TEXTRACT whose only reader is the next mad (runtime.cube.TileWindow)


@dataclass
class Plan:
    """A graph compiled once for running: slot template (literals pre-placed), parameter / output slots and
    the pre-bound step closures `runs`."""

    graph: Graph
    steps: list[Step]
    n_slots: int = 0
    template: list[Any] = field(default_factory=list)
    param_slots: tuple[int, ...] = ()
    out_slots: tuple[int, ...] = ()
    runs: tuple[Any, ...] = ()
    slot_of: dict[Var, int] = field(default_factory=dict)


@dataclass
class Ctx:
    """Run-time state of one kernel call on one rank: GM, on-chip accounting, dynamic dims, the current SPMD
    lane and the step being run."""

    gm: GlobalMemory
    onchip: OnChip
    dims: dict[str, int]
    block_idx: int = 0
    block_num: int = 1
    plans: dict[int, Plan] = field(default_factory=dict)
    step: Step | None = None

    def consumes(self, e: Eqn, i: int) -> bool:
        """True when input `i` of the running step dies there, so the impl may update it in place."""
        return self.step is not None and i in self.step.consumed


# ------------------------------------------------------------------------------------ planning
def _liveness(g: Graph, n_owned_params: int) -> tuple[dict[int, list[Var]], set[Var]]:
    """Last uses: a value dies after the last equation that reads it (a transposed view keeps its
    source alive). Only the trailing `n_owned_params` params (loop carries) are owned by `g`:
    kernel arguments and captured values belong to the caller."""
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
    return free, keep


def slot_allocator() -> tuple[Any, list[Any], dict[Var, int]]:
    """`slot(atom) -> index` into an environment list: one slot per value, a pre-filled slot per
    literal; returns (slot, the environment template, value -> slot)."""
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

    return slot, template, slot_of


def make_plan(g: Graph, n_owned_params: int) -> Plan:
    """Compile `g` into a `Plan`: one slot per value, one step per equation, frees after each value's last use
    (only the trailing `n_owned_params` params are owned by `g`)."""
    from .fast import make_step

    free, _ = _liveness(g, n_owned_params)
    slot, template, slot_of = slot_allocator()

    param_slots = tuple(slot(p) for p in g.params)
    lazy = _window_extracts(g, free) if FAST else set()
    steps = []
    for i, e in enumerate(g.eqns):
        fn = impl_rules.get(e.primitive)
        if fn is None and e.primitive is not P.for_p:
            raise InternalError(f"no backend implementation for {e.primitive.name}")
        dying = set(free.get(i, ()))
        consumed = frozenset(j for j, a in enumerate(e.inputs) if isinstance(a, Var) and a in dying
                             and sum(1 for b in e.inputs if b is a) == 1)
        ins = tuple(slot(a) for a in e.inputs)
        outs = tuple(slot(v) for v in e.outputs)
        fr, dead = _dying_inputs_and_dead_results(e, free.get(i, ()))
        st = Step(e, fn, fr, consumed, ins, outs, tuple(slot_of[v] for v in fr), window=i in lazy)
        st.run = make_step(st)
        if dead:
            st.run = _then_free(st.run, tuple(slot_of[v] for v in dead))
        steps.append(st)
    out_slots = tuple(slot(a) for a in g.outputs)
    runs = tuple(s.run for s in steps)
    # a carry the body never reads (a tile reloaded under its old name) dies on entry: holding it
    # through the trip would keep two tiles alive, and leak one per trip
    read = {a for e in g.eqns for a in e.inputs if isinstance(a, Var)} | set(g.outputs)
    unread = tuple(slot_of[p] for p in g.params[len(g.params) - n_owned_params:] if p not in read)
    if unread:
        from .fast_core import _release

        runs = ((lambda ctx, env: _release(ctx, env, unread, ())), *runs)
    return Plan(g, steps, len(template), template, param_slots, out_slots, runs, slot_of)


def _dying_inputs_and_dead_results(e: Eqn, dying: Sequence[Var]) -> tuple[tuple[Var, ...], tuple[Var, ...]]:
    """Split the values dying at `e` into its inputs read for the last time - a step keeps one it
    returns (updated in place) - and its results that nobody reads, which are freed at once."""
    outs = set(e.outputs)
    return tuple(v for v in dying if v not in outs), tuple(v for v in dying if v in outs)


def _then_free(run: Any, dead: tuple[int, ...]) -> Any:
    """`run`, then free the tiles of the `dead` result slots (a result nobody reads is still
    allocated by its instruction, and must not stay charged to the on-chip capacity)."""
    from .fast_core import _release

    def run_then_free(ctx: Ctx, env: list[Any]) -> None:
        run(ctx, env)
        _release(ctx, env, dead, ())

    return run_then_free


_MADS = (P.tile_mad_p, P.tile_mad_acc_p)


def _window_extracts(g: Graph, free: dict[int, list[Var]]) -> set[int]:
    """Extracts fused into the mad that follows them: their Left / Right result is read by that
    mad only (the next equation, or the one after a second such extract) and dies there. The
    values dying at the extract (its source) are freed after the mad instead, so the source the
    mad reads stays intact; only Left / Right / Acc tiles are allocated in between, so on-chip
    accounting and capacity refusals are those of the unfused sequence. Returns the step indices."""
    uses: dict[Var, list[int]] = {}
    for i, e in enumerate(g.eqns):
        for a in e.inputs:
            if isinstance(a, Var):
                uses.setdefault(a, []).append(i)
    outputs = {a for a in g.outputs if isinstance(a, Var)}
    default = impl_rules.get(P.tile_extract_p)
    out: set[int] = set()
    from .fast import _DEFAULT_IMPLS

    for j, e in enumerate(g.eqns):
        if e.primitive not in _MADS or impl_rules.get(e.primitive) is not _DEFAULT_IMPLS.get(e.primitive):
            continue
        group: list[int] = []
        i = j - 1
        while i >= 0 and j - i <= 2:
            x = g.eqns[i]
            if x.primitive is not P.tile_extract_p or impl_rules.get(x.primitive) is not default:
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


_PLANS: weakref.WeakKeyDictionary[Graph, dict[int, Plan]] = weakref.WeakKeyDictionary()


def clear_plans() -> None:
    """Drop every cached plan (needed after changing `FAST` or the impl rules)."""
    _PLANS.clear()


def plan_of(g: Graph, n_owned_params: int = 0) -> Plan:
    """The cached plan of `g` (plans hold no run-time state: one per graph and ownership)."""
    per = _PLANS.get(g)
    if per is None:
        per = _PLANS[g] = {}
    plan = per.get(n_owned_params)
    if plan is None:
        plan = per[n_owned_params] = make_plan(g, n_owned_params)
    return plan


# ------------------------------------------------------------------------------------ running
def free_value(ctx: Ctx, val: Any) -> None:
    """Free `val` if it is a live tile allocated from this call's on-chip accounting (other values own no
    on-chip bytes)."""
    if (type(val) is TileBuf or type(val) is TileWindow) and not val.freed and val._owner is ctx.onchip:
        ctx.onchip.free_tile(val)


_free = free_value


def run_plan(ctx: Ctx, plan: Plan, args: list[Any] | tuple[Any, ...]) -> list[Any]:
    """Run `plan` on `args` in `ctx`; returns the values of its output slots."""
    env = plan.template.copy()
    for s, a in zip(plan.param_slots, args):
        env[s] = a
    for run in plan.runs:
        run(ctx, env)
    return [env[s] for s in plan.out_slots]


def run_graph(ctx: Ctx, g: Graph, args: list[Any], n_owned_params: int = 0) -> list[Any]:
    """Run `g` on `args` (kernel arguments: TensorVals and ints). Floating-point overflow and
    invalid operations are silent, as on the device (inf / nan results, no numpy warnings)."""
    plan = plan_of(g, n_owned_params)
    with np.errstate(over="ignore", invalid="ignore"):
        return run_plan(ctx, plan, args)


def _copy_tile(ctx: Ctx, t: Any) -> Any:
    if not isinstance(t, TileBuf):
        return t
    c = ctx.onchip.alloc_tile(t.space, t.rows, t.cols, t.dtype, layout=t.layout, valid_row=t.valid_row,
                              valid_col=t.valid_col)
    c.data[:] = t.data
    return c


def run_loop(ctx: Ctx, e: Eqn, ins: list[Any], consumed: frozenset[int] | None = None) -> list[Any]:
    """Run a `for` equation: SPMD lanes with their block index, range / pipeline trips threading the carries
    (batched when exact); returns the final carries."""
    nb, nc, nk = e.params["arity"]
    start, stop, step = (int(x) for x in ins[:3])
    captured = ins[nb : nb + nc]
    carries = list(ins[nb + nc :])
    if consumed is None:
        st = ctx.step
        assert st is not None
        consumed = st.consumed
    # a carry's initial value is updated in place by the body: copy it if it is read afterwards
    carries = [c if (nb + nc + i) in consumed else _copy_tile(ctx, c) for i, c in enumerate(carries)]
    body: Graph = e.params["body"]
    check_trips(len(range(start, stop, step)), e.source)  # issue-24 hook: a clear refusal, no empty MemoryError
    if e.params["kind"] == "spmd":
        saved = (ctx.block_idx, ctx.block_num)
        n = max(0, stop - start)
        try:
            if FAST and BATCH_SPMD and n > 1:
                from .batched import try_run_spmd

                if try_run_spmd(ctx, body, range(start, stop, step), n, captured):
                    return []
            plan = plan_of(body, 0)
            for lane in range(start, stop, step):
                ctx.block_idx, ctx.block_num = lane, n
                run_plan(ctx, plan, [lane, *captured])
        finally:
            ctx.block_idx, ctx.block_num = saved
        return []
    trips = range(start, stop, step)
    if FAST and BATCH_SPMD and nk == 0 and len(trips) > 1:  # independent trips: batched when exact
        from .batched import try_run_spmd

        if try_run_spmd(ctx, body, trips, len(trips), captured, spmd=False):
            return carries
    plan = plan_of(body, nk)
    if nk == 0:
        _run_trips(ctx, plan, trips, captured)
        return carries
    for i in trips:
        carries = run_plan(ctx, plan, [i, *captured, *carries])
    return carries


def _run_trips(ctx: Ctx, plan: Plan, trips: range, captured: list[Any]) -> None:
    """`run_plan` of each trip of a carry-free loop: the captured values are placed once, each
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


__all__ = ["Ctx", "run_graph", "run_plan", "plan_of", "TransposedTile"]
