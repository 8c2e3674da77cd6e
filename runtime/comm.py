"""The simulated communication world: ranks that exchange data through window buffers.

A :class:`CommWorld` spans the workers of a cluster, one rank each. A *window* is memory of its
rank (a zeroed allocation in that rank's GM, as PyPTO documents for ``alloc_window_buffer``);
peers reach it only through the operations of an :class:`Endpoint`: signal ``notify`` /
``wait``, ``remote_load`` / ``remote_store`` (plain or atomic add) and the collectives. Ranks
are threads: ``wait`` really blocks the calling rank's thread until its condition holds.

What the device cannot do, the simulator does:

* **hangs are diagnosed, never hung**: when every live rank is blocked (in a ``wait`` whose
  condition does not hold, or in a collective some rank never enters, or has finished), all ranks
  stop at once with :class:`CommHangError` naming each rank, the signal cell it waits on, the value
  it expects and the value it holds, and the kernel line (``site``) given by the caller. A rank
  that makes no progress for ``timeout`` seconds stops the same way.
* **races are reported**: every access of window bytes is checked against vector clocks
  (``runtime.comm_clock``); a read of bytes a peer wrote, or a write over bytes a peer wrote or
  read, without a notify / wait chain (or a collective) ordering the two, raises
  :class:`CommRaceError` naming both ranks, the window, the byte and both sites. A
  ``remote_load`` of bytes that no rank has written since allocation warns
  (:class:`UnwrittenWindowReadWarning`): the zeros it reads are those of the allocation.

A rank's own stores into its window are not instrumented instructions: the world sees them by
comparing the window with its last known bytes whenever that rank, or a peer reaching that window,
next communicates. So a store is dated to the rank's epoch in which it happened; a store that
leaves a byte's value unchanged (zero over a fresh zero) is invisible, which is why an unwritten
read is a warning rather than an error. Loads of a rank's *own* window are not checked.

The rank threads talk to the world only through :class:`Endpoint` (its methods take plain
numbers, shapes and numpy arrays), so the world's state can later live behind a process boundary
(a Ray actor) without changing the callers. This module never imports the compiler.
"""

from __future__ import annotations

import threading
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

from .comm_clock import ByteTracker, Conflict, new_clock
from .comm_errors import CommError, CommHangError, CommRaceError, UnwrittenWindowReadWarning
from .comm_state import PendingCollective, RankState, key_text, notify_history
from .comm_window import Window, region_bytes
from .device import Worker

__all__ = [
    "CommWorld",
    "Window",
    "Endpoint",
    "CommError",
    "CommHangError",
    "CommRaceError",
    "UnwrittenWindowReadWarning",
    "current_endpoint",
    "bound",
    "NOTIFY_OPS",
    "WAIT_CMPS",
    "REDUCE_OPS",
]

NOTIFY_OPS = ("atomic_add", "set")
WAIT_CMPS = ("eq", "ge")
REDUCE_OPS = ("sum", "max", "min", "prod")
_CMP_TEXT = {"eq": "==", "ge": ">="}


_local = threading.local()


def current_endpoint() -> Endpoint | None:
    """The endpoint of the rank running on this thread (inside :meth:`CommWorld.running`), if any."""
    return getattr(_local, "endpoint", None)


@contextmanager
def bound(endpoint: Any) -> Any:
    """Make `endpoint` the current one of this thread while the block runs: a `CommWorld`'s, or a
    rank's link to a world in another process (runtime/comm_remote.py `RankLink`)."""
    prev = getattr(_local, "endpoint", None)
    _local.endpoint = endpoint
    try:
        yield endpoint
    finally:
        _local.endpoint = prev


class CommWorld:
    """The communication state of one program run: `workers` maps rank -> Worker (ranks 0..n-1).

    Use :meth:`alloc_window` before the ranks start, :meth:`running` around each rank's thread,
    :meth:`close` at the end (frees the windows)."""

    def __init__(
        self, workers: Mapping[int, Worker], timeout: float = 60.0, active: Sequence[int] | None = None
    ) -> None:
        self.workers = dict(workers)
        self.n_ranks = len(self.workers)
        if sorted(self.workers) != list(range(self.n_ranks)):
            raise CommError(f"a comm world needs ranks 0..n-1, got {sorted(self.workers)}")
        self.timeout = timeout
        self.windows: list[Window] = []
        self._cond = threading.Condition(threading.RLock())
        # `active`: the ranks that will run kernels; until a rank starts it counts as making progress
        act = set(self.workers) if active is None else set(active)
        self._states = {r: RankState("pending" if r in act else "idle") for r in self.workers}
        self._clocks = {r: new_clock(r, self.n_ranks) for r in self.workers}
        self._cell_clocks: dict[tuple[int, int, int], np.ndarray] = {}
        # (window, rank, byte) -> the notifies that reached the cell: (rank, op, value, site), for hang reports
        self._cell_log: dict[tuple[int, int, int], list[tuple[int, str, int, str]]] = {}
        self._collectives: dict[int, PendingCollective] = {}
        self._failure: CommError | None = None
        self._endpoints = {r: Endpoint(self, r) for r in self.workers}

    # ------------------------------------------------------------------------------ windows
    def alloc_window(self, nbytes: int, name: str = "window", grain: int = 1) -> Window:
        """A window of `nbytes` bytes on every rank, zeroed (signal cells rely on it). `grain`: the
        element size of its data, so a local store of 1.0f (bytes 00 00 80 3f) counts all 4 bytes."""
        if isinstance(nbytes, bool) or not isinstance(nbytes, int | np.integer) or nbytes <= 0:
            raise CommError(
                f"alloc_window_buffer {name!r}: the size is a positive number of bytes, got {nbytes!r}"
            )
        n = int(nbytes)
        # zeroed explicitly: fresh device memory holds the poison pattern (runtime.memory.POISON_BYTE)
        tensors = {
            r: w.alloc_tensor((n,), np.uint8, init=np.zeros(n, np.uint8)) for r, w in self.workers.items()
        }
        win = Window(
            name,
            n,
            tensors,
            {r: ByteTracker(n, self.n_ranks) for r in self.workers},
            {r: np.zeros(n, np.uint8) for r in self.workers},
            max(1, int(grain)),
        )
        self.windows.append(win)
        return win

    def close(self) -> None:
        """Free every window's memory."""
        for win in self.windows:
            for t in win.tensors.values():
                if not t.freed:
                    t.worker.free_tensor(t)
        self.windows.clear()

    def endpoint(self, rank: int) -> Endpoint:
        """The endpoint through which `rank` communicates."""
        return self._endpoints[rank]

    @contextmanager
    def running(self, rank: int) -> Any:
        """Context manager around rank `rank`'s work on this thread: makes its endpoint current, marks
        the rank finished (or failed) at exit, so that peers waiting on it are diagnosed."""
        ep = self._endpoints[rank]
        self.start(rank)
        with bound(ep):
            try:
                yield ep
            except BaseException as e:
                self.finish(rank, e)
                raise
        late = self.finish(rank, None)
        if late is not None:  # a race found in the stores made after its last communication
            raise late

    def start(self, rank: int) -> None:
        """Rank `rank` starts its kernels (`running`'s entry; a rank in another process calls it
        through runtime/comm_remote.py)."""
        with self._cond:
            self._states[rank] = RankState("running")

    def finish(self, rank: int, error: BaseException | None) -> BaseException | None:
        """Rank `rank`'s kernels returned (`error` None) or failed; peers waiting on it are diagnosed.
        Returns the error the rank ends with: a race found in the stores it made after its last
        communication, else `error`."""
        return self._endpoints[rank]._finish(error)

    def warn(self, rank: int, message: str) -> None:
        """Report an unwritten window read by `rank` (a world serving ranks in other processes
        replaces this to send the warning to the rank)."""
        warnings.warn(message, UnwrittenWindowReadWarning, stacklevel=3)

    # ------------------------------------------------------------------------- blocking core
    def _block(self, rank: int, state: RankState) -> None:
        """Block rank `rank` (lock held) until `state.ready()`, a failure elsewhere, or a hang."""
        self._states[rank] = state
        try:
            while not state.ready():
                if self._failure is not None:
                    raise type(self._failure)(str(self._failure))
                self._check_stuck()
                if self._failure is not None:
                    continue
                self._cond.wait(timeout=0.05)
        finally:
            self._states[rank] = RankState("running")
        self._cond.notify_all()

    def _check_stuck(self) -> None:
        """Set the world's failure when no rank can make progress any more (lock held)."""
        live = [s for s in self._states.values() if s.kind not in ("done", "failed", "idle")]
        blocked = [s for s in live if s.kind in ("wait", "collective")]
        if not blocked:
            return
        now = time.monotonic()
        if len(blocked) == len(live) and not any(s.ready() for s in blocked):
            self._fail_hang("every rank is blocked and none can proceed")
        elif all(now - s.progress > self.timeout for s in blocked) and not any(s.ready() for s in blocked):
            self._fail_hang(f"no blocked rank made progress for {self.timeout:g} s")

    def _fail_hang(self, why: str) -> None:
        lines = [f"communication hang: {why} (on the device the program would hang here)"]
        for r in sorted(self._states):
            s = self._states[r]
            if s.kind in ("wait", "collective"):
                lines.append(f"  rank {r}: {s.describe()}")
            elif s.kind == "done":
                lines.append(f"  rank {r}: finished (its kernels returned){s.describe()}")
            elif s.kind == "failed":
                lines.append(f"  rank {r}: stopped by an error: {s.describe()}")
            elif s.kind == "idle":
                lines.append(f"  rank {r}: runs no kernel in this program")
            else:
                lines.append(f"  rank {r}: running")
        lines.append(
            "help: every wait needs a notify on a peer that brings its cell to the expected value "
            "(NotifyOp.AtomicAdd where several ranks add to one cell, Set for one writer), and "
            "every rank must enter the same collectives in the same order"
        )
        self._failure = CommHangError("\n".join(lines))
        self._cond.notify_all()

    def _fail(self, err: CommError) -> CommError:
        with self._cond:
            if self._failure is None:
                self._failure = err
            self._cond.notify_all()
        return err

    # ---------------------------------------------------------------------- byte tracking
    def _scan_local(self, rank: int, site: str, only: Window | None = None) -> None:
        """Date the bytes `rank` stored into its own windows since the world last looked (lock held)."""
        clock = self._clocks[rank]
        for win in [only] if only is not None else self.windows:
            cur, shadow = win._bytes(rank), win.shadows[rank]
            changed = np.flatnonzero(cur != shadow)
            if changed.size == 0:
                continue
            if win.grain > 1:  # whole elements: an unchanged zero byte of a stored value was stored too
                g = win.grain
                el = np.unique(changed // g)
                changed = (el[:, None] * g + np.arange(g)).reshape(-1)
                changed = changed[changed < win.nbytes]
            what = f"store into its own window (seen at {site})"
            tr = win.trackers[rank]
            c = tr.write_conflict(changed, rank, clock, atomic=False)
            if c is not None:
                raise self._race(win, rank, rank, what, c)
            tr.record_write(changed, rank, int(clock[rank]), what)
            shadow[changed] = cur[changed]

    def _race(self, win: Window, owner: int, rank: int, what: str, c: Conflict) -> CommError:
        """The race between this access (`rank`'s `what`) and the recorded one `c`, in a canonical
        order (the write first, else the lower rank), so the text does not depend on which of the two
        rank threads happened to run first."""
        kind = "read" if what.startswith(("remote_load", "load")) else "write"
        a = (rank, kind, what)
        b = (c.other_rank, c.other_kind, c.other_site)
        first, second = sorted((a, b), key=lambda x: (x[1] != "write", x[0]))
        lines = [
            f"communication race on window {win.name!r} of rank {owner}, byte {c.byte}: rank {first[0]}'s "
            f"{first[2]} and rank {second[0]}'s {second[2]} are not ordered; no notify/wait chain (or "
            "collective) orders the two",
            f"help: make rank {first[0]} notify after its {first[1]} and rank {second[0]} wait for that notify "
            f"before its {second[1]} (or put a pld.tensor.barrier between them)",
        ]
        return self._fail(CommRaceError("\n".join(lines)))


class Endpoint:
    """What one rank's thread calls. Offsets / shapes are in elements of the window view
    (`view_shape`, `dtype`); `site` names the kernel line for messages."""

    def __init__(self, world: CommWorld, rank: int) -> None:
        self.world = world
        self.rank = rank
        self._seq = 0  # collectives entered

    @property
    def n_ranks(self) -> int:
        """The number of ranks of the world."""
        return self.world.n_ranks

    def _peer(self, peer: int, what: str, site: str) -> int:
        if isinstance(peer, bool) or not 0 <= int(peer) < self.world.n_ranks:
            raise self.world._fail(
                CommError(
                    f"{site}: {what}: peer {peer} is not a rank of the world "
                    f"(ranks 0..{self.world.n_ranks - 1})"
                )
            )
        return int(peer)

    def _finish(self, error: BaseException | None) -> BaseException | None:
        w = self.world
        with w._cond:
            if error is None:
                try:
                    w._scan_local(self.rank, "the end of its kernels")
                except CommError as e:
                    error = e
            st = RankState("done") if error is None else RankState("failed")
            if error is not None:
                st.describe = lambda: f"{type(error).__name__}: {str(error).splitlines()[0]}"
            w._states[self.rank] = st
            w._cond.notify_all()
        if isinstance(error, CommError):
            w._fail(error)  # peers blocked in a wait or collective stop too
        return error

    # ------------------------------------------------------------------------------ signals
    def _cell(
        self, win: Window, rank: int, view_shape: Sequence[int], offsets: Sequence[int], what: str, site: str
    ) -> tuple[int, np.ndarray]:
        idx = region_bytes(view_shape, 4, offsets, [1] * len(view_shape), f"{site}: {what}")
        return int(idx[0]), win._bytes(rank)[idx[0] : idx[0] + 4].view(np.int32)

    def notify(
        self,
        win: Window,
        peer: int,
        view_shape: Sequence[int],
        offsets: Sequence[int],
        value: int,
        op: str,
        site: str,
    ) -> None:
        """Deposit `value` into the INT32 signal cell `offsets` of `peer`'s window: `op` "atomic_add"
        adds it, "set" overwrites. Publishes this rank's clock with the cell, then ticks it."""
        w = self.world
        peer = self._peer(peer, "notify", site)
        with w._cond:
            w._scan_local(self.rank, site)
            byte, cell = self._cell(win, peer, view_shape, offsets, "notify", site)
            new = int(cell[0]) + int(value) if op == "atomic_add" else int(value)
            cell[0] = np.int32((new + (1 << 31)) % (1 << 32) - (1 << 31))  # an INT32 cell wraps
            sl = np.arange(byte, byte + 4, dtype=np.intp)
            win.shadows[peer][sl] = win._bytes(peer)[sl]
            win.trackers[peer].record_write(sl, self.rank, 0, f"notify at {site}")  # a sync write
            key = (id(win), peer, byte)
            log = w._cell_log.setdefault(key, [])
            if len(log) < 16:
                log.append((self.rank, op, int(value), site))
            clock = w._clocks[self.rank]
            prev = w._cell_clocks.get(key)
            w._cell_clocks[key] = clock.copy() if prev is None else np.maximum(prev, clock)
            clock[self.rank] += 1
            w._cond.notify_all()

    def wait(
        self,
        win: Window,
        view_shape: Sequence[int],
        offsets: Sequence[int],
        expected: int,
        cmp: str,
        site: str,
    ) -> None:
        """Block until this rank's INT32 signal cell `offsets` satisfies `cmp` ("eq" / "ge")
        `expected`; then this rank is ordered after every notify that reached the cell."""
        w = self.world
        with w._cond:
            w._scan_local(self.rank, site)
            byte, cell = self._cell(win, self.rank, view_shape, offsets, "wait", site)
            exp = int(expected)

            def ready() -> bool:
                v = int(cell[0])
                return v == exp if cmp == "eq" else v >= exp

            def describe() -> str:
                cell_txt = ", ".join(map(str, offsets))
                return (
                    f"waits at {site} for signal[{cell_txt}] of window {win.name!r} to be "
                    f"{_CMP_TEXT[cmp]} {exp} (WaitCmp.{cmp.capitalize()}); it holds {int(cell[0])}"
                    + notify_history(w._cell_log.get((id(win), self.rank, byte), []))
                    + (
                        " - it is past the expected value and counters only grow: WaitCmp.Eq never holds "
                        "again, wait with WaitCmp.Ge"
                        if cmp == "eq" and int(cell[0]) > exp
                        else ""
                    )
                )

            w._block(self.rank, RankState("wait", site, describe, ready))
            joined = w._cell_clocks.get((id(win), self.rank, byte))
            if joined is not None:
                np.maximum(w._clocks[self.rank], joined, out=w._clocks[self.rank])

    # --------------------------------------------------------------------------------- RMA
    def remote_load(
        self,
        win: Window,
        peer: int,
        view_shape: Sequence[int],
        dtype: Any,
        offsets: Sequence[int],
        box: Sequence[int],
        site: str,
    ) -> np.ndarray:
        """A copy of the `box` at `offsets` of `peer`'s window (as a `view_shape` `dtype` view)."""
        w = self.world
        dtype = np.dtype(dtype)
        peer = self._peer(peer, "remote_load", site)
        with w._cond:
            w._scan_local(self.rank, site)
            if peer != self.rank:
                w._scan_local(peer, site, only=win)
            idx = region_bytes(view_shape, dtype.itemsize, offsets, box, f"{site}: remote_load")
            tr = win.trackers[peer]
            clock = w._clocks[self.rank]
            what = f"remote_load at {site}"
            c = tr.read_conflict(idx, self.rank, clock)
            if c is not None:
                raise w._race(win, peer, self.rank, what, c)
            fresh = tr.unwritten(idx)
            if fresh.size:
                first = int(fresh[0]) // dtype.itemsize
                w.warn(
                    self.rank,
                    f"{site}: rank {self.rank} remote_loads {fresh.size} bytes of window {win.name!r} "
                    f"of rank {peer} that no rank has written since allocation (first: element "
                    f"{tuple(int(i) for i in np.unravel_index(first, tuple(view_shape)))}); it reads the "
                    "allocation's zeros - check that its offsets and shape match what the peer stored",
                )
            tr.record_read(idx, self.rank, int(clock[self.rank]), what)
            return win._bytes(peer)[idx].view(dtype).reshape(tuple(box)).copy()

    def remote_store(
        self,
        win: Window,
        peer: int,
        view_shape: Sequence[int],
        offsets: Sequence[int],
        data: np.ndarray,
        atomic: bool,
        site: str,
    ) -> None:
        """Write `data` at `offsets` of `peer`'s window (`atomic`: add to what is there, in its dtype)."""
        w = self.world
        data = np.ascontiguousarray(data)
        peer = self._peer(peer, "remote_store", site)
        with w._cond:
            w._scan_local(self.rank, site)
            if peer != self.rank:
                w._scan_local(peer, site, only=win)
            idx = region_bytes(view_shape, data.dtype.itemsize, offsets, data.shape, f"{site}: remote_store")
            tr = win.trackers[peer]
            clock = w._clocks[self.rank]
            what = f"{'atomic ' if atomic else ''}remote_store at {site}"
            c = tr.write_conflict(idx, self.rank, clock, atomic)
            if c is not None:
                raise w._race(win, peer, self.rank, what, c)
            mem = win._bytes(peer)
            if atomic:
                cur = mem[idx].view(data.dtype).reshape(data.shape)
                with np.errstate(over="ignore"):
                    data = (cur + data).astype(data.dtype)  # integers wrap, as the device's atomic add
            mem[idx] = data.reshape(-1).view(np.uint8)
            win.shadows[peer][idx] = mem[idx]
            tr.record_write(idx, self.rank, int(clock[self.rank]), what, atomic)

    # ---------------------------------------------------------------- this rank's own window
    def local_store(
        self,
        win: Window,
        view_shape: Sequence[int],
        itemsize: int,
        offsets: Sequence[int],
        box: Sequence[int],
        site: str,
    ) -> None:
        """Record that this rank's kernel stored the `box` at `offsets` of its own window (the bytes are
        already in memory): a race when a peer's read or write of them is not ordered before."""
        w = self.world
        with w._cond:
            idx = region_bytes(view_shape, itemsize, offsets, box, f"{site}: store")
            tr = win.trackers[self.rank]
            clock = w._clocks[self.rank]
            what = f"store into its own window at {site}"
            c = tr.write_conflict(idx, self.rank, clock, atomic=False)
            if c is not None:
                raise w._race(win, self.rank, self.rank, what, c)
            tr.record_write(idx, self.rank, int(clock[self.rank]), what)
            win.shadows[self.rank][idx] = win._bytes(self.rank)[idx]

    def local_load(
        self,
        win: Window,
        view_shape: Sequence[int],
        itemsize: int,
        offsets: Sequence[int],
        box: Sequence[int],
        site: str,
    ) -> None:
        """Record that this rank's kernel loaded the `box` at `offsets` of its own window: a race when
        a peer wrote those bytes (remote_store, put, notify aside) without an ordering chain."""
        w = self.world
        with w._cond:
            idx = region_bytes(view_shape, itemsize, offsets, box, f"{site}: load")
            tr = win.trackers[self.rank]
            clock = w._clocks[self.rank]
            what = f"load of its own window at {site}"
            c = tr.read_conflict(idx, self.rank, clock)
            if c is not None:
                raise w._race(win, self.rank, self.rank, what, c)
            tr.record_read(idx, self.rank, int(clock[self.rank]), what)

    # ----------------------------------------------------------------------------- collectives
    def collective(
        self,
        kind: str,
        key: tuple[Any, ...],
        site: str,
        args: dict[str, Any],
        run: Callable[[Endpoint, dict[int, dict[str, Any]]], dict[int, Any]],
    ) -> Any:
        """Enter this rank's next collective. Every rank must enter the same `kind` with the same
        `key`; the last one to arrive runs `run(its endpoint, args by rank) -> result by rank` (`run`
        reaches the windows only through that endpoint: it may be shipped to another process) with every rank
        stopped, and all leave ordered after everything each did before entering."""
        w = self.world
        with w._cond:
            w._scan_local(self.rank, site)
            seq = self._seq
            self._seq += 1
            col = w._collectives.get(seq)
            if col is None:
                col = w._collectives[seq] = PendingCollective(kind, key, self.rank, site)
            elif (col.kind, col.key) != (kind, key):
                raise w._fail(
                    CommError(
                        f"collective #{seq + 1} differs between ranks: rank {col.first_rank} entered {col.kind} "
                        f"{key_text(col.key)} at {col.first_site}, rank {self.rank} entered {kind} "
                        f"{key_text(key)} at {site}\nhelp: every rank must call the same collectives, in the same "
                        "order, with the same op and shapes"
                    )
                )
            col.args[self.rank] = args
            if len(col.args) == w.n_ranks:
                for r in range(w.n_ranks):
                    if r != self.rank:
                        w._scan_local(r, col.first_site)
                try:
                    col.results = run(self, col.args)
                except CommError as e:
                    raise w._fail(e) from None
                joined = np.maximum.reduce([w._clocks[r] for r in range(w.n_ranks)])
                for r in range(w.n_ranks):
                    w._clocks[r][...] = joined
                    w._clocks[r][r] += 1
                col.done = True
                w._cond.notify_all()
            else:

                def describe() -> str:
                    missing = [r for r in range(w.n_ranks) if r not in col.args]
                    return (
                        f"entered {kind} (collective #{seq + 1}) at {site}; waiting for rank(s) "
                        f"{', '.join(map(str, missing))}, which never entered it"
                    )

                w._block(self.rank, RankState("collective", site, describe, lambda: col.done))
            return col.results.get(self.rank)

    def write_window(self, win: Window, rank: int, idx: np.ndarray, data: np.ndarray, site: str) -> None:
        """A collective's write of `data` (flat bytes) at bytes `idx` of `rank`'s window: a sync
        write, ordered before everything after the collective. Called only inside `collective`'s run."""
        mem = win._bytes(rank)
        mem[idx] = data.reshape(-1).view(np.uint8)
        win.shadows[rank][idx] = mem[idx]
        win.trackers[rank].record_write(idx, rank, 0, site)

    def read_window(self, win: Window, rank: int, idx: np.ndarray) -> np.ndarray:
        """A collective's read of bytes `idx` of `rank`'s window (every rank is stopped in it)."""
        return win._bytes(rank)[idx].copy()
