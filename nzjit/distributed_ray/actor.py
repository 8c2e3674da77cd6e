"""What each rank's Ray actor runs: one simulated device and the lowered graphs shipped to it.

`RankDevice` owns a `runtime.Worker` (the rank's GM of real bytes); the driver names its tensors
by handles (proxy.py). `run` executes one rank's share of a program with the same numpy backend
as a local rank (`backend.convention.launch_resident`: the calling convention of one launch on the
already-lowered graph, every argument resident) and keeps the snapshots
of the resident outputs until the driver says `commit` or `rollback` (program.py: outputs change
only when every rank succeeded).

Every method replies `(True, value)` or `(False, error)`: an error raised on the rank reaches the
driver as itself (type and message), not wrapped in Ray's traceback text.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import runtime
from runtime.comm import bound
from runtime.comm_remote import RankLink, portable

from ..backend.convention import launch_resident
from ..backend.options import Options
from ..core.ir import Graph
from .hub import hub_link
from .proxy import Alloc


@dataclass(frozen=True)
class Slot:
    """A tensor argument of a launch: the tensor of `handle` on this rank, or its dense view of
    `shape` at byte `offset` (an orchestration view; `dtype` when it differs from the tensor's: a
    window's bytes seen as a `pld.window` view)."""

    handle: int
    offset: int = 0
    shape: tuple[int, ...] | None = None
    dtype: np.dtype | None = None


@dataclass
class CommSpec:
    """A program whose ranks communicate: the hub actor hosting its world (hub.py), the world's
    rank count, and this rank's windows (handle, name, bytes), in the order the hub numbers them."""

    hub: Any
    n_ranks: int
    windows: list[tuple[int, str, int]]


@dataclass
class Launch:
    """One kernel call: its graph (by token), its arguments (Slots and ints), dims, the options
    of the entry that recorded it, and its name for error messages ("kernel (file:line)")."""

    token: int
    args: list[Any]
    dims: dict[str, int]
    options: Options
    name: str


@dataclass
class RankProgram:
    """One rank's share of a validated program, as the driver ships it."""

    graphs: dict[int, tuple[Graph, list[Any]]] = field(
        default_factory=dict
    )  # (graph, kernel params) new to it
    uploads: list[tuple[Alloc, np.ndarray | None]] = field(default_factory=list)  # host arguments
    launches: list[Launch] = field(default_factory=list)
    snapshot: list[Slot] = field(default_factory=list)  # resident outputs, restored on failure
    gather: list[int] = field(default_factory=list)  # host outputs, downloaded on success
    frees: list[int] = field(default_factory=list)  # freed when the program ends, by success or not
    comm: CommSpec | None = None  # its ranks communicate through windows


_portable = portable  # an error raised on the rank reaches the driver as itself
Said = tuple[type, str]  # a warning a launch raised: (category, text)


def _replies(method: Callable[..., Any]) -> Callable[..., tuple[bool, Any]]:
    """The actor method of `method`: places the allocations sent with the message first, replies
    `(ok, value or error)`. Not functools.wraps: Ray checks calls against the signature it finds,
    and that must be the wrapper's (with `allocs`), not the one `__wrapped__` would point it to."""

    def wrapper(self: RankDevice, allocs: list[Alloc], *args: Any) -> tuple[bool, Any]:
        try:
            self._place(allocs)
            return True, method(self, *args)
        except Exception as e:
            return False, _portable(e)

    wrapper.__name__, wrapper.__doc__ = method.__name__, method.__doc__
    return wrapper


class RankDevice:
    """The body of one rank's actor (RayCluster makes it a Ray actor)."""

    def __init__(self, rank: int, target: str) -> None:
        self.worker = runtime.Worker(rank, target)
        self.tensors: dict[int, runtime.DeviceTensor] = {}
        self.graphs: dict[int, tuple[Graph, list[Any]]] = {}  # token -> (lowered graph, its kernel's params)
        self.snapshots: list[tuple[np.ndarray, np.ndarray]] = []  # (GM bytes, saved copy)
        self.programs_run = 0

    def _place(self, allocs: list[Alloc]) -> None:
        for h, shape, dtype in allocs:
            self.tensors[h] = self.worker.alloc_tensor(shape, dtype)

    def _tensor(self, h: int) -> runtime.DeviceTensor:
        t = self.tensors.get(h)
        if t is None:
            raise runtime.DispatchError(
                f"rank {self.worker.device_id} holds no tensor with handle {h:#x} "
                "(freed, or placed by another driver)"
            )
        return t

    def _arg(self, slot: Slot) -> runtime.DeviceTensor:
        t = self._tensor(slot.handle)
        if slot.offset == 0 and (slot.shape is None or slot.shape == t.shape):
            return t
        shape = t.shape if slot.shape is None else slot.shape  # a view: inside t's allocation, GM checks it
        return runtime.DeviceTensor(
            self.worker, t.address + slot.offset, shape, t.dtype if slot.dtype is None else slot.dtype
        )

    @_replies
    def ping(self) -> int:
        """The actor's process id (it is alive and has imported nzjit)."""
        return os.getpid()

    @_replies
    def stats(self) -> dict[str, int]:
        """What the rank holds and has done: live tensors, programs run, graphs received, host -> GM
        uploads (count and bytes, as `runtime.GlobalMemory` counts them)."""
        gm = self.worker.gm
        return {
            "tensors": len(self.tensors),
            "programs": self.programs_run,
            "graphs": len(self.graphs),
            "uploads": gm.uploads,
            "upload_bytes": gm.upload_bytes,
        }

    @_replies
    def alloc(self, h: int, shape: tuple[int, ...], dtype: np.dtype, init: np.ndarray | None) -> None:
        """Allocate tensor `h` (zeros, or the bytes of `init`)."""
        self.tensors[h] = self.worker.alloc_tensor(shape, dtype, init=init)

    @_replies
    def write(self, h: int, data: np.ndarray) -> None:
        """Upload `data` over tensor `h`."""
        self.worker.write_tensor(self._tensor(h), data)

    @_replies
    def read(self, h: int) -> np.ndarray:
        """Download tensor `h`."""
        return self.worker.copy_from(self._tensor(h))

    @_replies
    def free(self, h: int) -> None:
        """Free tensor `h`."""
        self.worker.free_tensor(self._tensor(h))
        del self.tensors[h]

    @_replies
    def run(self, program: RankProgram) -> tuple[tuple[int, BaseException] | list[np.ndarray], list[Said]]:
        """Run the launches in order. Success: the host outputs' bytes (the snapshots are kept until
        commit / rollback). Failure: (launch index, error; -1 after the last launch: a race in the
        rank's last stores), resident outputs already restored. With it, the warnings the launches
        raised (category, text): the driver raises them again."""
        self.snapshots = []  # the driver has committed or rolled back every earlier program
        self.programs_run += 1
        self.graphs.update(program.graphs)
        with warnings.catch_warnings(record=True) as said:  # the actor runs one message at a time
            warnings.simplefilter("always")
            result = self._run(program)
        return result, [(w.category, str(w.message)) for w in said]

    def _run(self, program: RankProgram) -> tuple[int, BaseException] | list[np.ndarray]:
        link = None
        try:
            for (h, shape, dtype), init in program.uploads:
                self.tensors[h] = self.worker.alloc_tensor(shape, dtype, init=init)
            if program.comm is not None:
                link = self._open_link(program.comm)
            for slot in program.snapshot:
                t = self._arg(slot)
                view = self.worker.gm.view(t.address, (t.nbytes,), (1,))
                self.snapshots.append((view, view.copy()))
            for i, ln in enumerate(program.launches):
                args = [self._arg(a) if isinstance(a, Slot) else a for a in ln.args]
                try:
                    graph, params = self.graphs[ln.token]
                    with bound(link):
                        launch_resident(params, graph, ln.dims, ln.options, self.worker, args)
                except Exception as e:
                    if link is not None:
                        link.finish(e)  # peers waiting on this rank stop too
                    self._restore()
                    return i, _portable(e)
            if link is not None:
                late = link.finish(None)
                if late is not None:
                    self._restore()
                    return -1, _portable(late)
            return [self.worker.copy_from(self._tensor(h)) for h in program.gather]
        finally:
            for h in program.frees:
                done = self.tensors.pop(h, None)
                if done is not None and not done.freed:
                    self.worker.free_tensor(done)

    def _open_link(self, comm: CommSpec) -> RankLink:
        """This rank's windows, zeroed (PyPTO: signal cells rely on it), and its link to the hub."""
        mine = []
        for h, name, nbytes in comm.windows:
            self.tensors[h] = self.worker.alloc_tensor((nbytes,), np.uint8, init=np.zeros(nbytes, np.uint8))
            mine.append((name, self.tensors[h]))
        link = RankLink(self.worker.device_id, comm.n_ranks, mine, hub_link(comm.hub))
        link.start()
        return link

    @_replies
    def commit(self) -> None:
        """Every rank succeeded: the outputs stay as written."""
        self.snapshots = []

    @_replies
    def rollback(self) -> None:
        """Another rank failed: restore this rank's resident outputs."""
        self._restore()

    def _restore(self) -> None:
        for view, saved in self.snapshots:
            view[...] = saved
        self.snapshots = []


__all__ = ["CommSpec", "Launch", "RankDevice", "RankProgram", "Slot"]
