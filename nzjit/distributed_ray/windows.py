"""The windows of a program whose ranks communicate, on a RayCluster (issue 28), seen from the driver.

Each window is memory of its rank's actor: the driver only reserves a handle per rank (the actor
allocates it zeroed when the program starts and frees it when the program ends) so that the
program is checked on the driver exactly as on a local Cluster (a `pld.window` view is a tensor of
that rank). The world itself is hosted by the cluster's comm hub (hub.py), opened afresh for each
program.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import ray

from ..backend import comm_run
from .actor import CommSpec
from .proxy import RemoteDeviceTensor, RemoteWorker


@dataclass(eq=False)
class RemoteWindow:
    """One window buffer of the program: `nbytes` per rank, the memory of rank r's actor under
    handle `handles[r]`."""

    name: str
    nbytes: int
    grain: int
    workers: dict[int, RemoteWorker]
    handles: dict[int, int] = field(default_factory=dict)

    def tensor(self, rank: int, shape: Sequence[int], dtype: Any) -> RemoteDeviceTensor:
        """Rank `rank`'s memory of the window as a dense `shape` / `dtype` tensor (comm_run.window_tensor;
        window_buffers checked that it fits)."""
        w = self.workers[rank]
        return RemoteDeviceTensor(w, self.handles[rank], tuple(int(d) for d in shape), np.dtype(dtype))  # type: ignore[arg-type]


class ProgramWindows:
    """The windows of one program run on `cluster` (None from `open` when the program has none)."""

    def __init__(
        self, cluster: Any, buffers: list[comm_run.WindowBuffer], workers: dict[int, RemoteWorker]
    ) -> None:
        self.cluster = cluster
        self.buffers = buffers
        self.workers = workers
        self.windows: list[RemoteWindow] = []
        for buf in buffers:
            win = RemoteWindow(
                buf.name, buf.nbytes, buf.grain, workers, {r: w.reserve() for r, w in workers.items()}
            )
            self.windows.append(win)
            buf.window = win  # type: ignore[assignment]  # a stand-in: comm_run asks it for tensors only

    @classmethod
    def open(
        cls, cluster: Any, calls: Sequence[Any], ranks: dict[int, RemoteWorker]
    ) -> ProgramWindows | None:
        """The windows of `calls` (refused as on a local Cluster when a view does not fit)."""
        buffers = comm_run.window_buffers(calls)
        if not buffers:
            return None
        return cls(cluster, buffers, comm_run.world_ranks(calls, ranks, cluster))

    def spec(self, rank: int) -> CommSpec:
        """What rank's actor needs: the hub, the rank count, its windows in the hub's order."""
        return CommSpec(
            self.cluster.comm_hub(),
            len(self.workers),
            [(win.handles[rank], win.name, win.nbytes) for win in self.windows],
        )

    def start(self, active: Sequence[int]) -> None:
        """Open the world on the hub before any rank runs (`active`: the ranks that run kernels). A
        hub that died since the last program is replaced: it keeps nothing from one program to the next."""
        spec = ([(w.name, w.nbytes, w.grain) for w in self.windows], comm_run.DEFAULT_TIMEOUT, list(active))
        try:
            ok, err = ray.get(self.cluster.comm_hub().open.remote(*spec))
        except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError):
            self.cluster.forget_hub()
            ok, err = ray.get(self.cluster.comm_hub().open.remote(*spec))
        if not ok:
            raise err

    def rank_lost(self, rank: int, why: str) -> None:
        """Rank `rank` will not run its kernels (its actor died, or it failed before them): the ranks
        waiting on it stop with `why` (no reply awaited)."""
        self.cluster.comm_hub().abort.remote(rank, why)

    def close(self) -> None:
        """The program ended: its actors freed their windows; forget the handles and the views."""
        for win in self.windows:
            for r, h in win.handles.items():
                self.workers[r].gm.placed.discard(h)
        for buf in self.buffers:
            buf.window = None


__all__ = ["ProgramWindows", "RemoteWindow"]
