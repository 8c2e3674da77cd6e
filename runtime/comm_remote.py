"""A comm world whose ranks live in other processes (RayCluster, issue 28).

The world's bookkeeping (vector clocks, byte trackers, signal logs, what each rank is blocked on)
lives in one place, a :class:`WorldHost` (on a RayCluster: a Ray actor, nzjit/distributed_ray/
hub.py), which runs the very same :class:`runtime.comm.CommWorld` as a local Cluster. So hangs,
races and unwritten reads are found by the same code and reported in the same words.

Each window is memory of its rank: the rank's kernels load from and store into it in their own GM,
in their own process. The host keeps the world's replica of every rank's window; that replica is
what peers reach, and only through the operations. A rank reaches the host only through its
:class:`RankLink` (the endpoint its kernels call, with `Endpoint`'s methods), and every call
carries the bytes that changed on either side since the rank's previous call:

* on the way in, the bytes the rank's kernels stored into its windows (the host writes them into
  the replica, where the world dates them as it dates a local store it finds by comparison);
* on the way back, the bytes peers' operations wrote into the rank's windows (a notify's signal
  cell, a remote_store, a collective's result), written into the rank's memory.

Why this is exact for a program without races: a peer can be ordered after a rank's store only
through an operation of that rank (a notify, a collective), which brings the store to the replica
first; and a rank can be ordered after a peer's write only through an operation of its own (a wait,
a collective), whose reply brings the write into its memory. An unordered pair is a race, reported
as on a local Cluster when the second access reaches the host.

The transport is a function (`send`), so this module imports neither ray nor the compiler; the
tests run a host and links in one process.
"""

from __future__ import annotations

import pickle
import threading
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .comm import CommError, CommWorld, UnwrittenWindowReadWarning, Window
from .device import DeviceTensor, Worker
from .errors import DeviceError

__all__ = ["WindowRef", "WorldHost", "RankLink", "LinkWindow", "portable"]

# (window index, byte indices, their bytes): what changed on one side of a link
Delta = tuple[int, np.ndarray, np.ndarray]
Reply = tuple[bool, Any, list[Delta], list[str]]  # (ok, value or error, bytes peers wrote, warnings)


@dataclass(frozen=True)
class WindowRef:
    """A window named in a message: its index in the program's list of windows."""

    index: int


def portable(e: BaseException) -> BaseException:
    """`e` if it survives pickling as itself, else a DeviceError that keeps its type name and text."""
    try:
        back = pickle.loads(pickle.dumps(e))
        if type(back) is type(e) and str(back) == str(e):
            return e
    except Exception:
        pass
    return DeviceError(f"{type(e).__name__}: {e}")


def _changed(cur: np.ndarray, seen: np.ndarray) -> np.ndarray:
    return np.flatnonzero(cur != seen)


class WorldHost:
    """The world of one program run, serving ranks that call :meth:`call` from other processes.

    `workers` hold the replica of the windows (rank r's worker: rank r's replica); `windows` are
    (name, bytes per rank, grain) in the order every link numbers them. Thread-safe: each rank's
    call may run on its own thread (a `wait` blocks only its caller)."""

    def __init__(
        self,
        workers: Mapping[int, Worker],
        windows: Sequence[tuple[str, int, int]],
        timeout: float,
        active: Sequence[int],
    ) -> None:
        self.world = CommWorld(workers, timeout=timeout, active=active)
        self.world.warn = self._warn  # type: ignore[method-assign]  # sent back to the reading rank
        self.windows: list[Window] = [self.world.alloc_window(n, name, grain) for name, n, grain in windows]
        # rank -> per window, the replica's bytes as that rank's memory last received them
        self._delivered = {r: [np.zeros(w.nbytes, np.uint8) for w in self.windows] for r in workers}
        self._warnings: dict[int, list[str]] = {r: [] for r in workers}
        self._lock = threading.Lock()

    def _warn(self, rank: int, message: str) -> None:
        with self._lock:
            self._warnings[rank].append(message)

    def _resolve(self, a: Any) -> Any:
        if isinstance(a, WindowRef):
            return self.windows[a.index]
        if isinstance(a, dict):
            return {k: self._resolve(v) for k, v in a.items()}
        return a

    def call(self, rank: int, pushed: Sequence[Delta], op: str, args: Sequence[Any]) -> Reply:
        """Rank `rank`'s operation `op` (an `Endpoint` method, or "start" / "finish"), after writing
        the bytes it `pushed` into its replica; the reply carries what peers wrote into its windows."""
        w = self.world
        with w._cond:  # pushed and dated as one step: no peer sees half of a rank's stores
            for i, idx, data in pushed:
                self.windows[i]._bytes(rank)[idx] = data
                self._delivered[rank][i][idx] = data
        try:
            ok, value = True, self._run(rank, op, [self._resolve(a) for a in args])
        except Exception as e:
            ok, value = False, portable(e)
        with w._cond:
            back: list[Delta] = []
            for i, win in enumerate(self.windows):
                cur, seen = win._bytes(rank), self._delivered[rank][i]
                idx = _changed(cur, seen)
                if idx.size:
                    seen[idx] = cur[idx]
                    back.append((i, idx, cur[idx].copy()))
        with self._lock:
            said, self._warnings[rank] = self._warnings[rank], []
        return ok, value, back, said

    def _run(self, rank: int, op: str, args: list[Any]) -> Any:
        if op == "start":
            return self.world.start(rank)
        if op == "finish":
            late = self.world.finish(rank, args[0])
            return None if late is args[0] else late
        if op not in _OPS:
            raise CommError(f"a rank asked the comm world for {op!r}, which is not one of its operations")
        return getattr(self.world.endpoint(rank), op)(*args)

    def abort(self, rank: int, message: str) -> None:
        """Rank `rank` is gone (its process died): every rank blocked on it stops with `message`."""
        self.world.finish(rank, CommError(message))

    def close(self) -> None:
        """Free the replica."""
        self.world.close()


_OPS = frozenset({"notify", "wait", "remote_load", "remote_store", "local_store", "local_load", "collective"})


@dataclass(eq=False)
class LinkWindow:
    """A rank's own memory of one window (what its kernels get for a `pld.DistributedTensor`)."""

    index: int
    name: str
    tensor: DeviceTensor  # uint8 [nbytes] in the rank's GM

    @property
    def nbytes(self) -> int:
        """Bytes per rank."""
        return int(self.tensor.nbytes)

    def address(self, rank: int) -> int:
        """The window's base address in this rank's GM (`rank` is the link's own)."""
        return self.tensor.address

    def memory(self) -> np.ndarray:
        """The window's bytes, in place."""
        t = self.tensor
        return t.worker.gm.view(t.address, (self.nbytes,), (1,))


class RankLink:
    """The endpoint of rank `rank` whose world is a :class:`WorldHost` elsewhere, reached by
    `send(rank, pushed, op, args) -> Reply`. Same methods as `runtime.comm.Endpoint` (the backend's
    comm rules call either); `world` is itself, so `world.windows` lists this rank's windows."""

    def __init__(
        self,
        rank: int,
        n_ranks: int,
        windows: Sequence[tuple[str, DeviceTensor]],
        send: Callable[[int, list[Delta], str, list[Any]], Reply],
    ) -> None:
        self.rank = rank
        self.n_ranks = n_ranks
        self.world = self
        self.windows = [LinkWindow(i, name, t) for i, (name, t) in enumerate(windows)]
        self._seen = [win.memory().copy() for win in self.windows]  # the bytes the host has of each
        self._send = send

    def _as_sent(self, a: Any) -> Any:
        if isinstance(a, LinkWindow):
            return WindowRef(a.index)
        if isinstance(a, dict):
            return {k: self._as_sent(v) for k, v in a.items()}
        return a

    def _call(self, op: str, *args: Any) -> Any:
        pushed: list[Delta] = []
        for i, win in enumerate(self.windows):
            cur, seen = win.memory(), self._seen[i]
            idx = _changed(cur, seen)
            if idx.size:
                seen[idx] = cur[idx]
                pushed.append((i, idx, cur[idx].copy()))
        ok, value, back, said = self._send(self.rank, pushed, op, [self._as_sent(a) for a in args])
        for i, idx, data in back:
            self.windows[i].memory()[idx] = data
            self._seen[i][idx] = data
        for message in said:
            warnings.warn(message, UnwrittenWindowReadWarning, stacklevel=3)
        if not ok:
            raise value
        return value

    def start(self) -> None:
        """This rank starts its kernels."""
        self._call("start")

    def finish(self, error: BaseException | None) -> BaseException | None:
        """This rank's kernels returned (or failed with `error`); the error it ends with (a race in
        its last stores, else `error`)."""
        late = self._call("finish", None if error is None else portable(error))
        return error if late is None else late

    def notify(self, win: LinkWindow, *args: Any) -> None:
        """`Endpoint.notify`."""
        self._call("notify", win, *args)

    def wait(self, win: LinkWindow, *args: Any) -> None:
        """`Endpoint.wait`: blocks (in the host) until the cell holds the value."""
        self._call("wait", win, *args)

    def remote_load(self, win: LinkWindow, *args: Any) -> np.ndarray:
        """`Endpoint.remote_load`."""
        return np.asarray(self._call("remote_load", win, *args))

    def remote_store(self, win: LinkWindow, *args: Any) -> None:
        """`Endpoint.remote_store`."""
        self._call("remote_store", win, *args)

    def local_store(self, win: LinkWindow, *args: Any) -> None:
        """`Endpoint.local_store`."""
        self._call("local_store", win, *args)

    def local_load(self, win: LinkWindow, *args: Any) -> None:
        """`Endpoint.local_load`."""
        self._call("local_load", win, *args)

    def collective(
        self,
        kind: str,
        key: tuple[Any, ...],
        site: str,
        args: dict[str, Any],
        run: Callable[..., dict[int, Any]],
    ) -> Any:
        """`Endpoint.collective`: `run` goes to the host (it reaches windows only through the
        endpoint it is given there)."""
        return self._call("collective", kind, key, site, args, run)
