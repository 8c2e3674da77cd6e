"""A validated program on a RayCluster: checked on the driver, cut per rank, run with a two-phase commit.

1. The driver checks every call exactly as a local run does (backend/call.py `plan_program`: shapes,
   dtypes, layouts, residency, cross-rank writes) and compiles every kernel; a refused program
   sends nothing to any actor.
2. Each rank's share becomes one picklable `RankProgram` (actor.py): its host arguments, the
   lowered graphs it has not seen yet, its launches by handle; the ranks run in parallel, one
   message each.
3. Only when every rank succeeded are host outputs written on the driver and the ranks told to
   `commit`; otherwise the ranks that succeeded `rollback` their resident outputs and the error of
   the lowest failing rank is raised, "rank r: kernel (file:line): ...", as a local run raises it.
   A dead actor is a `runtime.DeviceError` naming the rank.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import ray

from runtime import DispatchError

# the local calling convention's planner and refs: a RayCluster checks a program exactly as a
# local cluster does
from ..backend import call as C
from ..backend import comm_run
from ..backend.comm_instrument import instrument
from ..backend.options import Options
from .actor import Launch, RankProgram, Slot
from .proxy import RankLost, RemoteWorker, fetch
from .windows import ProgramWindows


class GraphTokens:
    """Lowered graphs by token, and which actor has which: a graph is pickled to an actor once."""

    def __init__(self) -> None:
        self._tokens: dict[int, tuple[Any, int]] = {}  # id(graph) -> (graph kept alive, token)
        self._sent: dict[int, set[int]] = {}  # rank -> tokens its actor holds

    def token(self, graph: Any, params: Sequence[Any], rank: int, into: dict[int, Any]) -> int:
        """The token of `graph` (with its kernel's `params`); added to `into` (the graphs to ship)
        if rank's actor lacks it."""
        hit = self._tokens.get(id(graph))
        if hit is None or hit[0] is not graph:
            hit = self._tokens[id(graph)] = (graph, len(self._tokens) + 1)
        sent = self._sent.setdefault(rank, set())
        if hit[1] not in sent:
            into[hit[1]] = (graph, list(params))
        return hit[1]

    def shipped(self, rank: int, tokens: Sequence[int]) -> None:
        """Rank's actor now holds these graphs."""
        self._sent.setdefault(rank, set()).update(tokens)


def rank_program(
    rk: Any, worker: RemoteWorker, tokens: GraphTokens, windows: ProgramWindows | None = None
) -> tuple[RankProgram, list[Any]]:
    """One rank's share of the plan (`rk`: backend/call.py `RankPlan`); also its host outputs (HostRefs,
    in the order of `RankProgram.gather`). With `windows`, its ranks communicate."""
    prog = RankProgram()
    if windows is not None:
        prog.comm = windows.spec(rk.rank)
        prog.frees.extend(h for h, _, _ in prog.comm.windows)
    uploads: dict[tuple[int, int | None], int] = {}  # host array (root, plane) -> handle
    host_outputs: list[Any] = []
    for ln in rk.launches:
        args: list[Any] = []
        for p, a in zip(ln.call.kernel.params, ln.call.args):
            if isinstance(a, C.HostRef):
                h = uploads.get(a.key)
                if h is None:
                    h = uploads[a.key] = worker.reserve()  # uploaded with the program
                    prog.uploads.append(((h, a.shape, a.dtype), None if a.fresh else a.array))
                    prog.frees.append(h)
                if p.is_output and h not in prog.gather:
                    prog.gather.append(h)
                    host_outputs.append(a)
                args.append(Slot(h))
            elif isinstance(a, C.DeviceRef | C.PendingRef):
                t = a.tensor
                assert t is not None  # plan_program placed every intermediate
                slot = Slot(t.address, getattr(t, "offset", 0), tuple(t.shape))
                if isinstance(a, C.PendingRef) and t.address not in prog.frees:
                    prog.frees.append(t.address)  # freed when the program ends
                elif isinstance(a, C.DeviceRef) and p.is_output and slot not in prog.snapshot:
                    prog.snapshot.append(slot)
                args.append(slot)
            elif isinstance(a, comm_run.WindowView):  # this rank's memory of the window, in its actor
                t = comm_run.window_tensor(a, rk.rank)
                args.append(Slot(t.address, 0, tuple(t.shape), t.dtype))
            else:
                args.append(a)
        lp = ln.plan
        graph = lp.graph if windows is None else instrument(lp.graph)  # as comm_run.run_ranks does
        prog.launches.append(
            Launch(
                tokens.token(graph, ln.call.kernel.params, rk.rank, prog.graphs),
                args,
                lp.dims,
                lp.options,
                C.call_name(ln.call),
            )
        )
    return prog, host_outputs


def _with_prefix(e: BaseException, prefix: str) -> BaseException:
    try:
        new = type(e)(f"{prefix}{e}")
    except Exception:  # a constructor that takes other arguments: keep it, add a note
        e.add_note(prefix.rstrip(": "))
        return e
    new.__dict__.update(e.__dict__)  # its fields too (a LaneRaceError's lanes, tensor, windows)
    new.__cause__ = e
    return new


def check_ranks(cluster: Any, calls: Sequence[Any], residents: Sequence[Any]) -> dict[int, RemoteWorker]:
    """Rank -> RemoteWorker; every resident argument must live on this cluster, every device= be a rank
    of it (the checks `_rank_workers` makes for a local cluster)."""
    for name, t in C.resident_tensors(residents):
        if getattr(t.worker, "remote_cluster", None) is not cluster:
            raise DispatchError(
                f"parameter {name.split('[')[0]!r}: {name} lives on worker {t.worker.device_id} "
                "of another cluster, not on the RayCluster that runs the program"
            )
    bad = sorted({c.device for c in calls if not 0 <= c.device < cluster.n_ranks})
    if bad:
        raise DispatchError(
            f"device={bad[0]} is not a rank of the RayCluster (ranks 0..{cluster.n_ranks - 1})"
        )
    return dict(enumerate(cluster.workers))


def run_remote_program(
    cluster: Any, calls: Sequence[Any], residents: Sequence[Any], rank_prefix: bool, options: Options
) -> None:
    """backend/call.py `run_program` for a RayCluster (see the module docstring)."""
    if not calls:
        return
    programs: dict[int, RankProgram] = {}
    ranks: dict[int, RemoteWorker] = {}
    windows: ProgramWindows | None = None
    try:
        ranks = check_ranks(cluster, calls, residents)
        windows = ProgramWindows.open(cluster, calls, ranks)  # None unless its ranks communicate
        plan = C.plan_program(calls, ranks, rank_prefix, options)  # RemoteWorkers stand in for the workers
        if windows is not None:
            windows.start(sorted(plan))  # first: the ranks' programs name the hub it opened the world on
        shares = {r: rank_program(rk, ranks[r], cluster.graph_tokens, windows) for r, rk in plan.items()}
        programs = {r: prog for r, (prog, _) in shares.items()}
        replies = {r: ranks[r].send("run", prog) for r, prog in programs.items()}
        results, errors = _replies_of(replies, plan, programs, cluster, rank_prefix, windows)
        if errors:
            _rollback(ranks, [r for r in results if r not in errors])
            first = _first_error(errors, windows is not None)
            raise first from first.__cause__
        for r, (_, host_outputs) in shares.items():
            for ref, data in zip(host_outputs, results[r]):
                ref.array[...] = data
        for r in programs:
            ranks[r].send("commit")  # no reply awaited: the next message to the actor follows it
    finally:
        for p in C.pending_refs(calls):
            owner = p.tensor.worker if p.tensor is not None else None
            if isinstance(owner, RemoteWorker):
                owner.forget(p.tensor)  # freed by its actor when the program ended
        for r, prog in programs.items():
            for (h, _, _), _ in prog.uploads:
                ranks[r].gm.placed.discard(h)
        if windows is not None:
            windows.close()


def _replies_of(
    replies: dict[int, Any],
    plan: dict[int, Any],
    programs: dict[int, RankProgram],
    cluster: Any,
    rank_prefix: bool,
    windows: ProgramWindows | None,
) -> tuple[dict[int, Any], dict[int, BaseException]]:
    """Every rank's result (its host outputs' bytes) or error, as each reply arrives: a rank whose
    actor died stops the ranks that wait on it at once (not after the comm world's timeout). The
    warnings the ranks raised are raised here, in rank order."""
    results: dict[int, Any] = {}
    errors: dict[int, BaseException] = {}
    said: dict[int, list[tuple[type, str]]] = {}
    waiting = {ref: r for r, ref in replies.items()}
    while waiting:
        done, _ = ray.wait(list(waiting), num_returns=1)
        r = waiting.pop(done[0])
        try:
            results[r], said[r] = fetch(r, done[0])
        except RankLost as e:  # the actor is gone (the error names the rank)
            errors[r] = e
            if windows is not None:
                windows.rank_lost(r, f"rank {r} is lost: {e}")
            continue
        except Exception as e:  # refused before its first launch (placing its tensors)
            errors[r] = _with_prefix(e, f"rank {r}: " if rank_prefix else "")
            if windows is not None:  # its peers must not wait for it
                windows.rank_lost(r, f"rank {r} stopped before its kernels: {type(e).__name__}: {e}")
            continue
        cluster.graph_tokens.shipped(r, list(programs[r].graphs))
        if isinstance(results[r], tuple):
            index, err = results[r]
            where = (
                f"{C.call_name(plan[r].launches[index].call)}: " if index >= 0 else ""
            )  # -1: after its kernels
            errors[r] = _with_prefix(err, f"rank {r}: {where}" if rank_prefix else "")
    for r in sorted(said):
        for category, text in said[r]:
            warnings.warn(text, category, stacklevel=5)
    return results, errors


def _first_error(errors: dict[int, BaseException], communicating: bool) -> BaseException:
    """The error of the lowest failing rank; when ranks communicate, of the lowest rank whose actor
    died (its peers' errors only say that it is lost, whichever reply arrived first), else of the
    lowest rank that failed on its own (as comm_run.run_ranks names it on a local Cluster)."""
    lost = sorted(r for r, e in errors.items() if isinstance(e, RankLost))
    if communicating and lost:
        return errors[lost[0]]
    cause = comm_run.cause_of(errors) if communicating else None
    return cause[1] if cause is not None else errors[min(errors)]


def _rollback(ranks: dict[int, RemoteWorker], done: Sequence[int]) -> None:
    """Restore the resident outputs of the ranks that succeeded; wait, so the caller sees them restored."""
    refs = {r: ranks[r].send("rollback") for r in done}
    for r, ref in refs.items():
        try:
            fetch(r, ref)
        except RankLost:
            pass  # died since: its memory is gone with it, nothing left to restore


__all__ = ["GraphTokens", "run_remote_program"]
