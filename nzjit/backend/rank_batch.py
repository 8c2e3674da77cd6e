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
from . import rank_processes
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
    its own; or the groups in processes of their own (rank_processes.py); or as one group, with or
    without the helper threads converting the next operands."""
    processes = rank_processes.usable([rk.worker for rk in ranks])
    key = (
        tuple(id(ln.plan.graph) for ln in ranks[0].launches),
        len(ranks),
        runtime.threads.THREADS,
        processes,
    )
    mode = mode_for(key, processes)
    start = time.perf_counter()
    failed: dict[int, BaseException] = {}
    n = max(1, min(runtime.threads.THREADS, len(ranks))) if mode in ("groups", "processes") else 1
    cuts = [len(ranks) * g // n for g in range(n + 1)]
    groups = [list(ranks[a:b]) for a, b in zip(cuts, cuts[1:])]
    got = None
    if mode == "processes":
        with runtime.threads.ranks_running(runtime.threads.THREADS):  # a process per core
            got = rank_processes.run_groups(groups, _run_group, run_launches)
        if got is None:  # not sendable now (another call holds the processes, a value that
            mode = "alone"  # does not pickle): in this process, with nothing run yet
    if got is not None:
        failed = got
    elif mode == "groups" and n > 1:
        runtime.threads.side_by_side([functools.partial(_run_group, g, failed) for g in groups])
    elif mode == "alone":  # every thread counted busy: `Ahead` computes on this thread
        with runtime.threads.ranks_running(runtime.threads.THREADS):
            failed = _run_group(ranks)
    else:  # the helpers may convert operands meanwhile (threads.Ahead)
        failed = _run_group(ranks)
    if failed:
        r = min(failed)
        runtime.dispatch.raise_for_rank(r, failed[r])
    if mode != "processes" or rank_processes.settled():  # new processes' first calls: no samples
        timed(key, mode, time.perf_counter() - start, processes)


#: How the ranks of a program run (issue 25 item 4). "groups": one group of ranks per thread, side
#: by side; "one": one group, the helpers converting the next operands (threads.Ahead); "alone":
#: one group and no helper; "processes": one group per thread as in "groups", every group but the
#: first in a rank process of its own (rank_processes.py), so the groups no longer share one
#: interpreter lock. Which is fastest depends on the host and on the program's work per step -
#: tp_moe on a 2-core EPYC took 18-22 ms "alone", 26-29 ms "groups" or "one" (its steps are short
#: and the threads mostly hand the interpreter lock to each other) and 11-13 ms "processes"; a
#: program of large products gains from the helper. Every mode writes the same bytes (a rank's
#: lanes get the bytes of its own launch however the ranks are grouped, a helper moves work, not
#: results, and a rank process writes the rank's own shared GM), so the first calls of a program
#: time each mode `TRIALS` times (the first calls of new rank processes do not count: they pay
#: the fork and the first touch of shared pages, `rank_processes.settled`) and the later calls
#: take the fastest - for `RETRY_AFTER` calls,
#: then the modes are timed again (the host's load, and so the fastest mode, changes over a long
#: run). `FORCE` (tests, benchmarks) fixes the mode.
MODES = ("groups", "one", "alone", "processes")
TRIALS = 3  # the fastest of 3: a 2-vCPU VM's minutes differ by 30% and more
RETRY_AFTER = 1000
FORCE: str | None = None
_times: dict[Any, dict[str, list[float]]] = {}
_chosen: dict[Any, str] = {}
_since: dict[Any, int] = {}  # calls in the chosen mode since it was chosen
#: Programs remembered at most (a new one past this forgets the oldest).
MAX_PROGRAMS = 256


def modes(processes: bool) -> tuple[str, ...]:
    """The modes a program may take: every one of `MODES`, or all but "processes" when the ranks
    cannot run in rank processes (rank_processes.usable)."""
    return MODES if processes else tuple(m for m in MODES if m != "processes")


def mode_for(key: Any, processes: bool = False) -> str:
    """The mode of the next call of program `key`: `FORCE`, the chosen one, or the next trial
    (the `modes(processes)` in turn until each has run `TRIALS` times). A forced "processes" that
    cannot run now runs "alone" (its one-process counterpart)."""
    if FORCE is not None:
        return FORCE if FORCE in modes(processes) else "alone"
    chosen = _chosen.get(key)
    if chosen is not None:
        return chosen
    seen = _times.get(key, {})
    return min(modes(processes), key=lambda m: len(seen.get(m, ())))  # the least tried, in MODES order


def timed(key: Any, mode: str, seconds: float, processes: bool = False) -> None:
    """Record a trial call's wall time; once each of `modes(processes)` has its `TRIALS`, choose
    the fastest (for `RETRY_AFTER` calls). `key` tells the two sets of modes apart (run_together
    puts `processes` in it), so a program never waits for trials of a mode it cannot take."""
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
    candidates = modes(processes)
    if all(len(seen.get(m, ())) >= TRIALS for m in candidates):
        if len(_chosen) >= MAX_PROGRAMS:
            _since.pop(old := next(iter(_chosen)), None)
            del _chosen[old]
        _chosen[key] = min(candidates, key=lambda m: min(seen[m]))
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
    return run_launches(ranks, failed)


def run_launches(ranks: Sequence[Any], failed: dict[int, BaseException]) -> dict[int, BaseException]:
    """The launches of a group of ranks, call by call: each call placed on every rank that has not
    failed, then one rank-batched launch where exact, else rank by rank (also the loop of a rank
    process, rank_processes.py)."""
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
