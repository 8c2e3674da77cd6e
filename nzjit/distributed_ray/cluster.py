"""`RayCluster`: the ranks of a cluster as Ray actors, each owning its simulated device memory.

The methods are those of `runtime.Cluster` (`alloc_stacked_tensor`, `copy_stacked_from`,
`free_stacked`, `workers`, `n_ranks`); an orchestration accepts it as `cluster=` and finds it
through its StackedDeviceTensor arguments. Shards are placed once and stay resident in the
actors; a program is checked on the driver, then each rank runs its share in its actor
(program.py).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import ray

import runtime
from runtime import DispatchError, StackedDeviceTensor
from runtime.layout_marks import layout_of

from ..backend.options import Options
from ..backend.remote import RemoteCluster
from .actor import RankDevice
from .hub import start_hub
from .program import GraphTokens, run_remote_program
from .proxy import RemoteWorker, fetch, next_handle


def _this_checkout() -> dict[str, Any]:
    """The runtime_env of a local Ray this process starts: its actors import the nzjit and runtime
    this driver runs (first on their path), not whichever another install or the working directory
    would give them: the driver ships lowered graphs that the actors' nzjit executes."""
    import nzjit

    roots = {str(Path(m.__file__).resolve().parent.parent) for m in (nzjit, runtime) if m.__file__}
    path = os.pathsep.join([*sorted(roots), *filter(None, [os.environ.get("PYTHONPATH")])])
    return {"env_vars": {"PYTHONPATH": path}}


class RayCluster(RemoteCluster):
    """`n_ranks` ranks, rank r a Ray actor (`actors[r]`) owning the device memory of rank r.

    With `address=None` and no Ray running in this process, a local Ray is started with
    `ray.init(**ray_init_kwargs)` (its actors import this process's nzjit unless `runtime_env=` says
    otherwise); `address=` connects to an existing cluster (docs/ray.md says what
    its nodes need). Ray already initialised in this process is used as it is. An actor asks for
    no CPU of the scheduler (`num_cpus=0`, so any number of ranks fits a small machine) and the
    actors are spread over the cluster's nodes."""

    def __init__(
        self, n_ranks: int, address: str | None = None, *, target: str = "A2A3", **ray_init_kwargs: Any
    ) -> None:
        if isinstance(n_ranks, bool) or not isinstance(n_ranks, int | np.integer) or int(n_ranks) < 1:
            raise DispatchError(f"RayCluster needs at least one rank, got {n_ranks!r}")
        if not ray.is_initialized():
            if address is None and "runtime_env" not in ray_init_kwargs:
                ray_init_kwargs["runtime_env"] = _this_checkout()
            ray.init(address=address, **ray_init_kwargs)
        self.target = target
        remote = ray.remote(RankDevice).options(num_cpus=0, scheduling_strategy="SPREAD", max_restarts=0)
        self.actors: list[Any] = [remote.remote(r, target) for r in range(int(n_ranks))]
        self.workers = [RemoteWorker(self, r, a, target) for r, a in enumerate(self.actors)]
        self.graph_tokens = GraphTokens()
        self._hub: Any = None  # comm_hub()
        for r, ref in enumerate([w.send("ping") for w in self.workers]):
            fetch(r, ref)  # every actor started and imported nzjit, or a clear error now

    def __repr__(self) -> str:
        return f"RayCluster(n_ranks={self.n_ranks}, target={self.target!r})"

    @property
    def n_ranks(self) -> int:
        """Number of ranks (actors)."""
        return len(self.workers)

    def rank_stats(self) -> list[dict[str, int]]:
        """Per rank, from its actor: live tensors, programs run, lowered graphs received, uploads and
        uploaded bytes (what a local worker's `gm.uploads` / `gm.upload_bytes` count)."""
        replies = [w.send("stats") for w in self.workers]
        return [fetch(r, ref) for r, ref in enumerate(replies)]

    def alloc_stacked_tensor(self, host_array: np.ndarray) -> StackedDeviceTensor:
        """Upload `host_array[r]` to rank r's actor (all ranks at once); the shards stay resident."""
        layout = layout_of(host_array)  # a pack_nz / as_nz array gives NZ shards, as on runtime.Cluster
        a = np.asarray(host_array)
        if a.ndim < 1 or a.shape[0] != self.n_ranks:
            raise DispatchError(
                f"alloc_stacked_tensor: leading axis of shape {a.shape} must be the rank count {self.n_ranks}"
            )
        handles = [next_handle() for _ in self.workers]
        replies = [
            w.send("alloc", h, a.shape[1:], a.dtype, np.ascontiguousarray(a[r]))
            for r, (w, h) in enumerate(zip(self.workers, handles))
        ]
        errors: list[BaseException] = []
        for r, ref in enumerate(replies):
            try:
                fetch(r, ref)
            except Exception as e:
                errors.append(e)
        shards = [w.adopt(h, a.shape[1:], a.dtype, layout) for w, h in zip(self.workers, handles)]
        if errors:  # no stack: free what the other ranks placed (a dead rank's memory is gone anyway)
            for w, s in zip(self.workers, shards):
                w.free_tensor(s)
            raise errors[0]
        return StackedDeviceTensor(shards, a.shape, range(self.n_ranks))

    def copy_stacked_from(self, t: StackedDeviceTensor) -> np.ndarray:
        """Download every shard (all ranks at once) and stack them into `full_shape`."""
        self._check_stacked(t)
        owners = [self.workers[w] for w in t.worker_ids]
        for s, w in zip(t.shards, owners):
            w.check_tensor(s)
        replies = [w.send("read", s.address) for s, w in zip(t.shards, owners)]
        out = np.empty(t.full_shape, dtype=t.dtype)
        for i, (w, ref) in enumerate(zip(owners, replies)):
            out[i] = fetch(w.device_id, ref)
        return out

    def free_stacked(self, t: StackedDeviceTensor) -> None:
        """Free every shard of `t` on its rank."""
        self._check_stacked(t)
        for s, w in zip(t.shards, t.worker_ids):
            self.workers[w].free_tensor(s)

    def _check_stacked(self, t: object) -> None:
        if not isinstance(t, StackedDeviceTensor):
            raise DispatchError(f"expected a StackedDeviceTensor, got {type(t).__name__}")
        for i, (s, w) in enumerate(zip(t.shards, t.worker_ids)):
            if not 0 <= w < self.n_ranks or s.worker is not self.workers[w]:
                raise DispatchError(f"shard {i} of {t!r} does not live on this RayCluster's rank {w}")

    def run_program(
        self, calls: Sequence[Any], residents: Sequence[Any], rank_prefix: bool, options: Options
    ) -> None:
        """The RemoteCluster entry (backend/call.py `run_program` hands a program here)."""
        run_remote_program(self, calls, residents, rank_prefix, options)

    def comm_hub(self) -> Any:
        """The actor hosting the comm world of programs whose ranks communicate (hub.py), started
        with the first such program."""
        if self._hub is None:
            self._hub = start_hub(self.n_ranks, self.target)
        return self._hub

    def forget_hub(self) -> None:
        """The hub actor died: the next program that communicates starts a new one."""
        self._hub = None

    def shutdown(self) -> None:
        """Kill the actors (their device memory with them); Ray itself keeps running."""
        for a in [*self.actors, *([self._hub] if self._hub is not None else [])]:
            try:
                ray.kill(a)
            except ray.exceptions.ActorHandleNotFoundError:
                pass  # the Ray session it belonged to has ended: the actor is gone with it

    def __enter__(self) -> RayCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


__all__ = ["RayCluster"]
