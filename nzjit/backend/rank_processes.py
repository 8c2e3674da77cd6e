"""Groups of ranks in processes of their own (issue 25 item 4): rank_batch.py's mode "processes".

Why: ranks as threads share one interpreter lock, so a rank-batched program on two cores runs its
Python steps on one core at a time (rank_batch.py). A forked process has a lock of its own: the
ranks are cut into one group per core, the first group runs on the caller's thread as before, each
other group in a rank process - forked from this one, kept for later calls, its ranks' launches
rank-batched exactly as on a thread.

What a rank process shares, and how it stays exact:
- bytes: a `Cluster`'s GM lives in shared memory (runtime/shared_gm.py); the process reads and
  writes its ranks' allocations in place, nothing is copied either way;
- the allocation table: the driver allocates and frees every tensor; each call first sends what
  changed since the last one (`GlobalMemory.take_journal`), the process mirrors it
  (`GlobalMemory.mirror`) and checks every access against it, so a use after free or an access
  outside an allocation is refused there as here. What a kernel allocates while it runs (GM
  scratch, pipe slots) the process takes from private memory at addresses the driver never
  hands out;
- compiled kernels and workers: the process has every object the driver had when it was forked.
  A call names them by `id`; one that did not exist at the fork (a new kernel, a new cluster)
  forks the processes again, so a name never reaches an object the process lacks;
- the call: the driver checks and places every launch (uploads, temporaries, snapshots of the
  resident outputs) before the process runs anything, as for ranks on threads; the process runs
  the placed launches and answers with each failing rank's first error (pickled), which the driver
  raises exactly as a thread's ("rank r: kernel (file:line): ..."); outputs are restored by the
  caller as for any failure; the warnings its launches raised come back too, and the driver raises
  them again (its warning filters decide, as for ranks on threads);
- a process that dies or breaks during a call fails the call with a `runtime.DeviceError` naming
  its ranks; an interrupted caller kills its processes before any output is restored, so nothing
  writes behind the restore. The next call forks new ones.

A rank process runs only our executor: it ignores SIGINT (the caller decides), exits on the
closed pipe or a broken one, and never runs the driver's exit handlers (`os._exit`).
"""

from __future__ import annotations

import atexit
import gc
import os
import pickle
import signal
import sys
import threading
import time
import warnings
import weakref
from collections.abc import Sequence
from multiprocessing.connection import Connection, Pipe
from typing import Any

import runtime
from runtime import shared_gm

from .launch import execute
from .plan import plan_of

__all__ = ["FORKS", "SENT", "SINCE_FORK", "WARM_CALLS", "pids", "run_groups", "settled", "stop", "usable"]


def usable(workers: Sequence[Any]) -> bool:
    """Can ranks on these workers (runtime.Worker) run in rank processes here: Linux with fork,
    every GM shared, more than one rank and more than one thread of the simulator, and no Ray in
    this process (a Ray driver's threads must not be forked)?"""
    return (
        sys.platform.startswith("linux")
        and hasattr(os, "fork")
        and runtime.threads.THREADS > 1
        and len(workers) > 1
        and all(w.gm.shared for w in workers)
        and not _ray_running()
    )


def _ray_running() -> bool:
    ray = sys.modules.get("ray")
    return ray is not None and bool(getattr(ray, "is_initialized", lambda: False)())


class _Child:
    """One rank process and the driver's end of its pipe."""

    def __init__(self, pid: int, conn: Connection) -> None:
        self.pid, self.conn = pid, conn

    def alive(self) -> bool:
        try:
            return os.waitpid(self.pid, os.WNOHANG) == (0, 0)
        except ChildProcessError:
            return False


_children: list[_Child] = []
_known: dict[int, weakref.ReferenceType[Any]] = {}  # id -> the object the processes hold
_busy = threading.Lock()  # one call at a time uses the processes


def _knows(obj: Any) -> bool:
    r = _known.get(id(obj))
    return r is not None and r() is obj


def pids() -> list[int]:
    """The process ids of the rank processes alive now (a benchmark counts their CPU time)."""
    return [ch.pid for ch in _children]


def _close_pipes() -> None:
    """Close the driver's end of every rank process's pipe."""
    for ch in _children:
        try:
            ch.conn.close()
        except OSError:
            pass


def stop() -> None:
    """End every rank process (closing its pipe ends its loop; a busy one is killed)."""
    _close_pipes()
    for ch in _children:
        try:
            os.kill(ch.pid, signal.SIGKILL)
        except OSError:
            pass
        try:
            os.waitpid(ch.pid, 0)
        except OSError:
            pass
    _children.clear()


def _fork(n: int, graphs: Sequence[Any], workers: Sequence[Any]) -> None:
    """Replace the rank processes by `n` new ones that hold `graphs` and `workers` (and every
    object known to the ones before, if still alive)."""
    stop()
    FORKS[0] += 1
    SINCE_FORK[0] = 0
    for obj in (*graphs, *workers):
        _known[id(obj)] = weakref.ref(obj)
    for k, r in list(_known.items()):
        if r() is None:
            del _known[k]
    for r in _known.values():
        w = r()
        if isinstance(w, runtime.Worker):
            w.gm.take_journal()  # the processes see every table as it is now; recorded from here
    for _ in range(n):
        here, there = Pipe()
        with shared_gm.shared_fork(), warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # 3.12+: fork with threads alive
            pid = os.fork()
        if pid == 0:
            here.close()
            _serve(there)  # never returns
        there.close()
        _children.append(_Child(pid, here))


def _serve(conn: Connection) -> None:
    """A rank process's loop: run each call it is sent, answer, until the pipe closes."""
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        gc.freeze()  # what the driver had stays as it is (no collection, no copy of its pages)
        pinned = {k: r() for k, r in _known.items()}
        while True:
            try:
                msg = conn.recv()
            except (EOFError, OSError):
                break
            try:
                reply: Any = _run_here(pinned, msg)
            except BaseException as e:  # the process is unusable: the driver fails the call
                reply = ("broken", f"{type(e).__name__}: {e}")
            try:
                conn.send(reply)
            except (OSError, ValueError):
                break
    finally:
        os._exit(0)


class _Placed:
    """A rank in a rank process: its launches placed by the driver."""

    def __init__(self, rank: int, worker: Any, launches: list[tuple[Any, dict, Any, list[Any]]]) -> None:
        self.rank, self.worker = rank, worker
        self.launches = [_PlacedLaunch(g, dims, opts) for g, dims, opts, _ in launches]
        self.vals = [v for *_, v in launches]
        self.at = -1  # the launch running now (its index names the call in an error)

    def begin(self) -> None:
        pass  # the driver took the snapshots

    def place(self, i: int) -> list[Any]:
        if i >= len(self.vals):  # the driver's placement of this launch failed: stop here
            raise _Unplaced()
        return self.vals[i]

    def launch(self, i: int, vals: list[Any]) -> None:
        self.at = i
        execute(self.launches[i].plan, self.worker, vals)


class _Unplaced(Exception):
    pass


class _PlacedLaunch:
    def __init__(self, graph: Any, dims: dict, options: Any) -> None:
        self.plan = self
        self.graph, self.dims, self.options = graph, dims, options
        self._plan: Any = None

    def compiled(self) -> Any:
        if self._plan is None:
            self._plan = plan_of(self.graph, 0, self.options)
        return self._plan


def _run_here(pinned: dict[int, Any], msg: tuple[Any, ...]) -> tuple[Any, ...]:
    events, ranks = msg
    for key, evs in events:
        pinned[key].gm.mirror(evs)
    group = [
        _Placed(r, pinned[wkey], [(pinned[g], dims, opts, vals) for g, dims, opts, vals in launches])
        for r, wkey, launches in ranks
    ]
    failed: dict[int, BaseException] = {}
    # the launches' warnings (a hardware defect the simulator reproduces, ...) go back to the
    # driver, which raises them again: its filters decide, as for ranks on threads
    with warnings.catch_warnings(record=True) as said, runtime.threads.ranks_running(runtime.threads.THREADS):
        warnings.simplefilter("always")
        _loop[0](group, failed)
    out = {}
    for rk in group:
        e = failed.get(rk.rank)
        if e is None or isinstance(e, _Unplaced):
            continue
        try:
            blob = pickle.dumps(e)
            pickle.loads(blob)
        except Exception:
            blob = pickle.dumps(runtime.DeviceError(f"{type(e).__name__}: {e}"))
        out[rk.rank] = (rk.at, blob)
    return ("done", out, [(w.category, str(w.message)) for w in said])


#: Calls sent to rank processes so far (tests: a call in mode "processes" really used them).
SENT = [0]
#: Times the rank processes were forked so far.
FORKS = [0]
#: Calls sent since the last fork. The first `WARM_CALLS` calls of new processes are no samples of
#: their mode (rank_batch.run_together does not time them, `settled`): the first one pays the fork
#: (~20 ms), the next ones the pages a new process copies as it first writes to the objects it
#: shares with the driver (~20% slower, measured on tp_moe).
SINCE_FORK = [0]
WARM_CALLS = 3


def settled() -> bool:
    """Have the rank processes run more than `WARM_CALLS` calls since they were forked?"""
    return SINCE_FORK[0] > WARM_CALLS


_loop: list[Any] = [None]  # the launches' loop a rank process runs (rank_batch.run_launches)


def run_groups(
    groups: Sequence[Sequence[Any]], run_group: Any, run_launches: Any
) -> dict[int, BaseException] | None:
    """Run `groups` of ranks (call.RankPlan) side by side: the first with `run_group` on this
    thread, each other one in a rank process, which runs its placed launches with `run_launches`
    (rank_batch.py: the same loop as a group on a thread). Each failing rank's first error, by
    rank; None, with nothing run, when the call cannot be sent (then the caller runs it itself)."""
    if not _busy.acquire(blocking=False):
        return None
    try:
        _loop[0] = run_launches
        return _run_groups(groups, run_group)
    finally:
        _busy.release()


def _run_groups(groups: Sequence[Sequence[Any]], run_group: Any) -> dict[int, BaseException] | None:
    away = [rk for g in groups[1:] for rk in g]
    workers = [rk.worker for g in groups for rk in g]
    graphs = [ln.plan.graph for rk in away for ln in rk.launches]
    if (
        len(_children) != len(groups) - 1
        or not all(ch.alive() for ch in _children)  # one ended since the last call (killed)
        or not all(_knows(o) for o in (*graphs, *workers))
        or any(w.gm.journal is None for w in workers)  # it overflowed: the processes lag behind
    ):
        _fork(len(groups) - 1, graphs, _unique(workers))
    failed: dict[int, BaseException] = {}
    unplaced: dict[int, BaseException] = {}
    messages = []
    for g in groups[1:]:
        ranks = []
        for rk in g:
            launches = []
            for i, ln in enumerate(rk.launches):
                try:
                    vals = rk.place(i)
                except Exception as e:  # raised as a thread would: after the launches before it
                    unplaced[rk.rank] = e
                    break
                p = ln.plan
                launches.append((id(p.graph), p.dims, p.options, vals))
            ranks.append((rk.rank, id(rk.worker), launches))
        messages.append(ranks)
    events = [(id(w), evs) for w in _unique(workers) if (evs := w.gm.take_journal())]
    try:
        blobs = [pickle.dumps((events, ranks)) for ranks in messages]
    except Exception:  # a value that does not pickle: this call runs in one process
        stop()  # the events are gone with the processes
        return None
    for rk in away:
        rk.begin()  # the snapshots, before any rank runs
    try:
        for ch, blob, g in zip(_children, blobs, groups[1:]):
            try:
                ch.conn.send_bytes(blob)
            except OSError as broke:  # it ended after the check above: nothing of this call ran
                _failed([rk.rank for rk in g], f"its pipe broke: {broke}")
        SENT[0] += 1
        SINCE_FORK[0] += 1
        started = time.monotonic()
        failed.update(run_group(groups[0]))
        now = time.monotonic()
        allowed = max(HANG_FLOOR, HANG_FACTOR * (now - started))
        replies = [
            _answer(ch, [rk.rank for rk in g], now + allowed, allowed) for ch, g in zip(_children, groups[1:])
        ]
        for (errors, said), g in zip(replies, groups[1:]):
            by_rank = {rk.rank: rk for rk in g}
            for r, (i, blob) in errors.items():
                failed[r] = by_rank[r].named(i, pickle.loads(blob))
            for category, text in said:
                warnings.warn(text, category, stacklevel=2)
    except BaseException:
        stop()  # nothing may write behind the caller's restore
        raise
    for r, err in unplaced.items():
        failed.setdefault(r, err)
    return failed


#: A rank process that has not answered `HANG_FACTOR` times the caller's own group's time after
#: that group finished (and at least `HANG_FLOOR` seconds) is taken for hung: the call fails
#: instead of waiting for ever. Its ranks do the same work as the caller's, so a live one answers
#: in about that time; a hang is a lock another thread of the driver held when it forked, or a
#: kernel that never ends.
HANG_FLOOR = 60.0
HANG_FACTOR = 20.0


def _answer(
    ch: _Child, ranks: list[int], deadline: float, allowed: float
) -> tuple[dict[int, tuple[int, bytes]], list[tuple[type[Warning], str]]]:
    """A rank process's answer by `deadline` (time.monotonic; `allowed` seconds after the
    caller's own ranks finished): each failing rank's (launch index, pickled error), and the
    warnings its launches raised (category, text)."""
    try:
        if ch.conn.poll(max(0.0, deadline - time.monotonic())):
            reply = ch.conn.recv()
        else:
            reply = (
                "hung",
                f"no answer {allowed:.3g} s after the caller's own ranks ended, {HANG_FACTOR:g}x "
                "their time: taken for hung (a lock another thread held at the fork, or a kernel "
                "that never ends) and stopped",
            )
    except (EOFError, OSError):
        reply = ("died", "its process ended")
    if reply[0] != "done":
        _failed(ranks, reply[1])
    return reply[1], reply[2]


def _failed(ranks: list[int], why: str) -> None:
    stop()  # nothing may write behind the caller's restore
    raise runtime.DeviceError(
        f"ranks {ranks}: their process failed during the call ({why}); "
        "every output is unchanged, and the next call starts a new process"
    )


def _unique(xs: Sequence[Any]) -> list[Any]:
    seen: dict[int, Any] = {}
    for x in xs:
        seen.setdefault(id(x), x)
    return list(seen.values())


def _forget_children() -> None:
    """In any process forked from this one (a rank process too): the driver's pipe ends are not
    its own; closed here, a rank process still sees its pipe close when the driver closes it."""
    _close_pipes()
    _children.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_children)
atexit.register(stop)
