"""Ranks that run the same program, run as one (issue 25 item 4): each kernel call of the program
is ONE lane-batched launch over the lanes of every rank, instead of one launch per rank on threads
of its own.

Why: ranks as threads share one interpreter lock. A rank of examples/tp_moe.py holds it for about
half of its CPU time (the backend's Python steps; numpy releases it only inside its copies, casts
and BLAS), so four of them on two cores wait for each other's Python instead of computing, and
their steps (the same steps, on other bytes) are paid four times. A rank-batched launch pays each
step once, for a 4x wider numpy call, and keeps the second core for the helper threads that convert
the next operands while BLAS multiplies (runtime/threads.py).

When: every rank runs the same kernels in the same order with the same dims, scalars and argument
geometries (tensor-parallel and expert-parallel programs with stacked weights do), each kernel is
one `pl.spmd` loop over its parameters that the compiler proved race-free across lanes, and the
program has no communication (those run as threads of a comm world, comm_run.py).

Semantics are the per-rank ones:
- memory: every rank keeps its own GM; the launch sees the ranks' GMs side by side
  (`runtime.cluster_memory.ClusterMemory`), every access is checked by the rank that owns it, and
  lane i of rank r addresses rank r's arguments (a LaneTensor over the ranks' lanes);
- bytes: lane batching gives every lane the bytes of its per-lane run (batched.py), and each rank's
  lanes are the lanes of its own launch;
- errors: a batched attempt writes nothing when it cannot be exact (batched.py); then that call
  runs rank by rank, where a refusal or a device error is raised as on threads: each rank stops at
  its first error, the others run on, and the lowest failing rank's error is raised
  ("rank r: ..."); the caller restores every output (call.run_program).
"""

from __future__ import annotations

import functools
import time
import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np

import runtime
from runtime.blas import one_thread
from runtime.cluster_memory import ClusterMemory

from ..core.ir import Graph, Literal
from .batched import try_run_spmd
from .executor import Ctx
from .lane_log import LANE_LOG
from .lane_values import LaneTensor
from .launch import launch_onchip, recycle_onchip
from .plan import plan_of
from .values import TensorVal

__all__ = ["MODES", "mode_for", "run_together", "same_program", "spmd_launch"]

_SPMD: weakref.WeakKeyDictionary[Graph, Any] = weakref.WeakKeyDictionary()  # per graph: its launch or None


def spmd_launch(g: Graph) -> tuple[Any, range, list[int]] | None:
    """(the loop's body, its lanes, the graph parameter each captured value is) when the kernel
    graph `g` is one proven race-free `pl.spmd` loop over its parameters, else None."""
    if g in _SPMD:
        return _SPMD[g]
    found = _SPMD[g] = _spmd_launch_of(g)
    return found


def _spmd_launch_of(g: Graph) -> tuple[Any, range, list[int]] | None:
    if len(g.eqns) != 1 or g.outputs:
        return None
    (e,) = g.eqns
    if e.primitive.name != "for" or e.params.get("kind") != "spmd" or e.params.get(LANE_LOG) is not False:
        return None
    nb, nc, nk = e.params["arity"]
    bounds = [b for b in e.inputs[:nb] if isinstance(b, Literal)]
    if nk or e.outputs or nb != 3 or len(bounds) != 3:
        return None
    lanes = range(*(int(b.value) for b in bounds))
    params = {id(p): i for i, p in enumerate(g.params)}
    captured = [params.get(id(v), -1) for v in e.inputs[nb : nb + nc]]
    if len(lanes) < 1 or min(captured, default=0) < 0:
        return None
    return e.params["body"], lanes, captured


def same_program(ranks: Sequence[Any]) -> bool:
    """Do the ranks (call.RankPlan) run the same kernels, in the same order, with the same dims
    and options, each one rank-batchable (`spmd_launch`)? Argument geometries and scalars are
    compared when the arguments are placed (`launch_together`)."""
    if len(ranks) < 2 or len({rk.worker.target for rk in ranks}) != 1:
        return False
    first = ranks[0].launches
    if any(len(rk.launches) != len(first) for rk in ranks):
        return False
    for i, ln in enumerate(first):
        p = ln.plan
        if not (p.options.fast and p.options.batch and p.options.rank_batch) or spmd_launch(p.graph) is None:
            return False
        for rk in ranks[1:]:
            q = rk.launches[i].plan
            if q.graph is not p.graph or q.options != p.options or q.dims != p.dims:
                return False
    return True


def launch_together(plans: Sequence[Any], workers: Sequence[Any], vals: Sequence[list[Any]]) -> bool:
    """Launch the same kernel (`plans`: each rank's convention.LaunchPlan) on every rank's placed
    argument values `vals` as one lane-batched launch; False, with nothing written, when that is
    not exact (the caller runs the ranks one by one)."""
    p = plans[0]
    found = spmd_launch(p.graph)
    if found is None:
        return False
    body, lanes, captured_params = found
    mem = ClusterMemory([w.gm for w in workers])
    n = len(lanes)
    block_num = max(0, lanes.stop - lanes.start)  # as loops.run_loop counts an SPMD launch's blocks
    captured: list[Any] = []
    for i in captured_params:
        v0 = vals[0][i]
        if type(v0) is TensorVal:
            geometry = (v0.dtype, v0.shape, v0.strides, v0.layout)
            rank_vals = [v[i] for v in vals]
            if v0.nz is not None or any(
                type(v) is not TensorVal
                or v.nz is not None
                or (v.dtype, v.shape, v.strides, v.layout) != geometry
                for v in rank_vals
            ):
                return False
            bases = np.array([mem.address(r, v.addr) for r, v in enumerate(rank_vals)], dtype=np.int64)
            captured.append(LaneTensor(np.repeat(bases, n), v0.dtype, v0.shape, v0.strides, v0.layout))
        elif isinstance(v0, bool | int | float) and all(type(v[i]) is type(v0) and v[i] == v0 for v in vals):
            captured.append(v0)
        else:
            return False
    plan = plan_of(body, 0, p.options, False)
    onchip = launch_onchip(workers[0].target)
    ctx = Ctx(mem, onchip, p.dims, p.options)  # type: ignore[arg-type]  # a GM over the ranks' GMs
    fails = plan.lane_fails  # a failed attempt here says nothing about the ranks' own launches
    try:
        with np.errstate(over="ignore", invalid="ignore"):
            every_lane = np.tile(np.asarray(lanes, dtype=np.int64), len(workers))  # rank-major
            ok = try_run_spmd(ctx, plan, every_lane, block_num, captured)
    finally:
        plan.lane_fails = fails
    if ok:
        recycle_onchip(onchip)
    return ok


def run_together(ranks: Sequence[Any]) -> None:
    """Run the ranks' programs (call.RankPlan, `same_program`) call by call, each call one
    rank-batched launch where exact, else rank by rank; the lowest failing rank's error is raised
    (module docstring). The ranks run in one of the `MODES` (`mode_for`): cut into as many groups
    as the simulator has threads (`runtime.threads.THREADS`), each group batched on a thread of
    its own; or as one group, with or without the helper threads converting the next operands."""
    key = (tuple(id(ln.plan.graph) for ln in ranks[0].launches), len(ranks), runtime.threads.THREADS)
    mode = mode_for(key)
    start = time.perf_counter()
    failed: dict[int, BaseException] = {}
    n = max(1, min(runtime.threads.THREADS, len(ranks))) if mode == "groups" else 1
    if n > 1:
        cuts = [len(ranks) * g // n for g in range(n + 1)]
        groups = [list(ranks[a:b]) for a, b in zip(cuts, cuts[1:])]
        runtime.threads.side_by_side([functools.partial(_run_group, g, failed) for g in groups])
    elif mode == "alone":  # every thread counted busy: `Ahead` computes on this thread
        with runtime.threads.ranks_running(runtime.threads.THREADS):
            failed = _run_group(ranks)
    else:  # the helpers may convert operands meanwhile (threads.Ahead)
        failed = _run_group(ranks)
    if failed:
        r = min(failed)
        runtime.dispatch.raise_for_rank(r, failed[r])
    timed(key, mode, time.perf_counter() - start)


#: How the ranks of a program run (issue 25 item 4). "groups": one group of ranks per thread, side
#: by side; "one": one group, the helpers converting the next operands (threads.Ahead); "alone":
#: one group and no helper. Which is fastest depends on the host and on the program's work per
#: step - tp_moe on a 2-core EPYC took 18-22 ms "alone" and 26-29 ms either other way, since its
#: steps are short and the threads mostly hand the interpreter lock to each other; a program of
#: large products gains from the helper. Every mode writes the same bytes (a rank's lanes get the
#: bytes of its own launch however the ranks are grouped, and a helper moves work, not results),
#: so the first calls of a program time each mode `TRIALS` times and the later calls take the
#: fastest - for `RETRY_AFTER` calls, then the modes are timed again (the host's load, and so
#: the fastest mode, changes over a long run). `FORCE` (tests, benchmarks) fixes the mode.
MODES = ("groups", "one", "alone")
TRIALS = 2
RETRY_AFTER = 1000
FORCE: str | None = None
_times: dict[Any, dict[str, list[float]]] = {}
_chosen: dict[Any, str] = {}
_since: dict[Any, int] = {}  # calls in the chosen mode since it was chosen
#: Programs remembered at most (a new one past this forgets the oldest).
MAX_PROGRAMS = 256


def mode_for(key: Any) -> str:
    """The mode of the next call of program `key`: `FORCE`, the chosen one, or the next trial
    (the modes in turn until each has run `TRIALS` times)."""
    if FORCE is not None:
        return FORCE
    chosen = _chosen.get(key)
    if chosen is not None:
        return chosen
    seen = _times.get(key, {})
    return min(MODES, key=lambda m: len(seen.get(m, ())))  # the least tried, in MODES order


def timed(key: Any, mode: str, seconds: float) -> None:
    """Record a trial call's wall time; once every mode has its `TRIALS`, choose the fastest (for
    `RETRY_AFTER` calls)."""
    if FORCE is not None:
        return
    if key in _chosen:
        n = _since[key] = _since.get(key, 0) + 1
        if n >= RETRY_AFTER:  # time the modes again from the next call
            del _chosen[key]
            del _since[key]
        return
    if key not in _times and len(_times) >= MAX_PROGRAMS:
        del _times[next(iter(_times))]
    seen = _times.setdefault(key, {})
    seen.setdefault(mode, []).append(seconds)
    if all(len(seen.get(m, ())) >= TRIALS for m in MODES):
        if len(_chosen) >= MAX_PROGRAMS:
            _since.pop(old := next(iter(_chosen)), None)
            del _chosen[old]
        _chosen[key] = min(MODES, key=lambda m: min(seen[m]))
        _since[key] = 0
        del _times[key]


def _run_group(
    ranks: Sequence[Any], failed: dict[int, BaseException] | None = None
) -> dict[int, BaseException]:
    """`run_together` of one group of ranks on this thread: each rank's first error, by rank, in
    `failed` (the groups' dict: each writes its own ranks' keys only). Each rank snapshots its
    resident outputs first, here: a rank's snapshot only has to precede its own launches (no
    rank writes another's GM), and the caller's thread, which alone plans and gathers the
    program, has the less to do (docs/performance.md, issue 25 item 4)."""
    failed = {} if failed is None else failed
    for rk in ranks:
        rk.begin()
    with one_thread():
        for i in range(len(ranks[0].launches)):
            placed: list[tuple[Any, list[Any]]] = []
            for rk in ranks:
                if rk.rank in failed:
                    continue
                try:
                    placed.append((rk, rk.place(i)))
                except Exception as e:
                    failed[rk.rank] = e
            if len(placed) > 1 and launch_together(
                [rk.launches[i].plan for rk, _ in placed],
                [rk.worker for rk, _ in placed],
                [v for _, v in placed],
            ):
                continue
            for rk, vals in placed:
                try:
                    rk.launch(i, vals)
                except Exception as e:
                    failed[rk.rank] = e
    return failed
