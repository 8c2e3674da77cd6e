"""The comm hub of a RayCluster: one Ray actor that hosts the comm world of a program whose ranks
communicate (issue 28; the world's protocol is runtime/comm_remote.py).

A rank's actor calls the hub for each of its kernels' communication operations (notify, wait,
remote_load / remote_store, put / get, collectives, and its instrumented loads and stores of its
own windows). The hub is a threaded actor: a `wait` blocks only the thread serving its rank (on a
condition, not spinning), while the other ranks' calls go on. The driver opens a world for each
program (`open`) and, when a rank's actor dies, stops the ranks blocked on it (`abort`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import ray

import runtime
from runtime.comm_remote import Delta, Reply, WorldHost


class CommHub:
    """The body of the hub actor of a RayCluster of `n_ranks` ranks."""

    def __init__(self, n_ranks: int, target: str) -> None:
        self.workers = {r: runtime.Worker(r, target) for r in range(n_ranks)}  # the windows' replicas
        self.host: WorldHost | None = None

    def open(
        self, windows: Sequence[tuple[str, int, int]], timeout: float, active: Sequence[int]
    ) -> tuple[bool, Any]:
        """A fresh world for the next program (the previous one's replica is freed)."""
        try:
            if self.host is not None:
                self.host.close()
            self.host = WorldHost(self.workers, windows, timeout, active)
            return True, None
        except Exception as e:
            return False, e

    def call(self, rank: int, pushed: list[Delta], op: str, args: list[Any]) -> Reply:
        """One operation of rank `rank` (runtime/comm_remote.py `WorldHost.call`)."""
        assert self.host is not None, "the driver opens a world before any rank runs"
        return self.host.call(rank, pushed, op, args)

    def abort(self, rank: int, message: str) -> tuple[bool, Any]:
        """Rank `rank`'s actor died: stop the ranks that wait on it."""
        if self.host is not None:
            self.host.abort(rank, message)
        return True, None


def start_hub(n_ranks: int, target: str) -> Any:
    """A hub actor: no CPU asked of the scheduler (as the rank actors), one thread per rank that
    may block in a wait, and a few for the driver's messages."""
    remote: Any = ray.remote(CommHub).options(num_cpus=0, max_concurrency=n_ranks + 4, max_restarts=0)
    hub: Any = remote.remote(n_ranks, target)
    ray.get(hub.abort.remote(-1, ""))  # started (or a clear error now)
    return hub


def hub_died(e: BaseException) -> runtime.DeviceError:
    """The error of a program whose comm hub actor is gone (the windows' world with it)."""
    reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return runtime.DeviceError(
        f"the comm hub of the RayCluster (the actor hosting the ranks' comm world) is dead "
        f"({reason}); no output of this call was changed. help: run the call again (a new "
        "hub starts with it)"
    )


def hub_link(hub: Any) -> Any:
    """The `send` of a rank's `runtime.comm_remote.RankLink`: one call to the hub, awaited."""

    def send(rank: int, pushed: list[Delta], op: str, args: list[Any]) -> Reply:
        try:
            reply: Reply = ray.get(hub.call.remote(rank, pushed, op, args))
        except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError) as e:
            raise hub_died(e) from None
        return reply

    return send


__all__ = ["CommHub", "hub_died", "hub_link", "start_hub"]
