"""The driver's stand-ins for a rank that lives in a Ray actor.

A `RemoteWorker` answers what the calling convention asks of a `runtime.Worker` (device id, target,
liveness, allocation) without holding any device memory: the bytes live in the rank's actor
(actor.py). A `RemoteDeviceTensor` is a `runtime.DeviceTensor` whose `address` is a handle the
actor maps to its own allocation; it is a subclass so that the single-process fast path of a
direct call (`type(t) is DeviceTensor`) never takes it.

An allocation without initial bytes is not sent at once: it is placed on the actor with the next
message to it (usually the program that uses it), so checking a program on the driver sends nothing.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import ray

from runtime import DeviceError, DeviceTensor, DispatchError
from runtime.layout_marks import layout_of

Alloc = tuple[int, tuple[int, ...], np.dtype]  # (handle, shape, dtype): placed zeroed on the actor

_handles = itertools.count(0x10000, 0x200)  # one sequence per process: a handle never names two tensors


def next_handle() -> int:
    """A handle no tensor of this process has had."""
    return next(_handles)


@dataclass(frozen=True, eq=False)
class RemoteDeviceTensor(DeviceTensor):
    """A DeviceTensor resident in a rank's Ray actor: `address` is the actor's handle for the
    allocation, `offset` the view's first byte in it (an orchestration view, `w[r, e]`)."""

    offset: int = 0

    def memory_span(self) -> tuple[object, int, int]:
        """The actor's allocation `address` is the memory; the view's bytes are at `offset` in it."""
        return (self.worker, self.address), self.offset, self.offset + self.nbytes

    def __repr__(self) -> str:
        at = f"+{self.offset:#x}" if self.offset else ""
        return (
            f"RemoteDeviceTensor(rank={self.worker.device_id}, handle={self.address:#x}{at}, "
            f"shape={self.shape}, dtype={self.dtype.name}{', freed' if self.freed else ''})"
        )


class RemoteNzDeviceTensor(RemoteDeviceTensor):
    """A RemoteDeviceTensor whose bytes are in NZ order (as `runtime.NzDeviceTensor`): uploaded
    from a `pack_nz` / `as_nz` array. Only an NZ parameter accepts it."""

    layout = "NZ"


def remote_tensor_class(layout: str) -> type[RemoteDeviceTensor]:
    """The proxy class of a tensor of `layout` ("ND" / "NZ")."""
    return RemoteNzDeviceTensor if layout == "NZ" else RemoteDeviceTensor


class Residency:
    """Which handles of one rank are live: placed on the actor, or waiting for the next message."""

    def __init__(self) -> None:
        self.placed: set[int] = set()
        self.unplaced: dict[int, Alloc] = {}

    def is_live(self, address: int) -> bool:
        """As `runtime.GlobalMemory.is_live`: DeviceTensor.freed asks this."""
        return address in self.placed or address in self.unplaced

    def take_unplaced(self) -> list[Alloc]:
        """The allocations to send with the next message; they count as placed from now on."""
        allocs = list(self.unplaced.values())
        self.placed.update(self.unplaced)
        self.unplaced.clear()
        return allocs


class RankLost(DeviceError):
    """A rank's Ray actor is dead: its device memory is gone with it."""


def actor_died(rank: int, e: BaseException) -> RankLost:
    """The error a call gets when rank `rank`'s actor is gone (its device memory with it)."""
    reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return RankLost(
        f"rank {rank}: the Ray actor of rank {rank} is dead ({reason}); its device memory, "
        "resident shards included, is lost and no output of this call was changed. "
        "help: make a new RayCluster and place the shards again"
    )


def fetch(rank: int, ref: Any) -> Any:
    """`ray.get` of one actor reply: an error the actor reported is raised here as itself; a dead
    actor is a runtime.DeviceError naming the rank."""
    try:
        ok, value = ray.get(ref)
    except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError) as e:
        raise actor_died(rank, e) from None
    if not ok:
        raise value
    return value


class RemoteWorker:
    """Rank `device_id` of a RayCluster, seen from the driver: `runtime.Worker`'s methods, each a
    message to the rank's actor."""

    def __init__(self, cluster: Any, device_id: int, actor: Any, target: str) -> None:
        self.remote_cluster = cluster  # backend/remote.py remote_cluster_of finds the cluster through it
        self.device_id = device_id
        self.target = target
        self.actor = actor
        self.gm = Residency()

    def __repr__(self) -> str:
        return f"RemoteWorker(device_id={self.device_id}, target={self.target!r}, actor={self.actor!r})"

    def send(self, method: str, *args: Any) -> Any:
        """Call `method` on the actor (with the allocations waiting to be placed); its reply's ref."""
        return getattr(self.actor, method).remote(self.gm.take_unplaced(), *args)

    def alloc_tensor(
        self, shape: Sequence[int], dtype: np.dtype | type, init: np.ndarray | None = None
    ) -> RemoteDeviceTensor:
        """As `runtime.Worker.alloc_tensor`; `init` is uploaded to the actor now, a tensor without
        `init` (fresh memory: the poison pattern, as on a local Worker) is placed with the next message."""
        dt = np.dtype(dtype)
        shape = tuple(operator.index(d) for d in shape)
        if any(d < 0 for d in shape):
            raise DispatchError(f"alloc_tensor: negative dimension in shape {shape}")
        h = next_handle()
        cls = remote_tensor_class("ND" if init is None else layout_of(init))
        if init is None:
            self.gm.unplaced[h] = (h, shape, dt)
        else:
            fetch(self.device_id, self.send("alloc", h, shape, dt, init))
            self.gm.placed.add(h)
        return cls(self, h, shape, dt)  # type: ignore[arg-type]  # a Worker's stand-in

    def reserve(self) -> int:
        """A new handle, live from now on: the caller places its tensor on the actor (a program's
        host argument, uploaded with the program) and discards the handle when it is freed."""
        h = next_handle()
        self.gm.placed.add(h)
        return h

    def adopt(
        self, h: int, shape: tuple[int, ...], dtype: np.dtype, layout: str = "ND"
    ) -> RemoteDeviceTensor:
        """The tensor of handle `h`, already allocated on the actor (RayCluster.alloc_stacked_tensor),
        holding bytes of `layout`."""
        self.gm.placed.add(h)
        return remote_tensor_class(layout)(self, h, shape, dtype)  # type: ignore[arg-type]  # a Worker's stand-in

    def view_of(self, t: RemoteDeviceTensor, offset: int, shape: tuple[int, ...]) -> RemoteDeviceTensor:
        """The dense block of `t` at byte `offset` with `shape` (driver/views.py device_view)."""
        return type(t)(self, t.address, shape, t.dtype, t.offset + offset)  # type: ignore[arg-type]

    def write_tensor(self, t: DeviceTensor, data: np.ndarray) -> None:
        """Upload host `data` over resident `t` (as `runtime.Worker.write_tensor`)."""
        self.check_tensor(t)
        fetch(self.device_id, self.send("write", t.address, data))

    def copy_from(self, t: DeviceTensor) -> np.ndarray:
        """Download `t` from the actor: a new host array of its logical shape."""
        self.check_tensor(t)
        return np.array(fetch(self.device_id, self.send("read", t.address)))

    def free_tensor(self, t: DeviceTensor) -> None:
        """Free `t` on the actor; later use raises DispatchError, as on a local worker."""
        self.check_tensor(t)
        if self.gm.unplaced.pop(t.address, None) is None:  # never placed: nothing to tell the actor
            self.gm.placed.discard(t.address)
            self.send("free", t.address)  # no reply awaited: the actor runs its messages in order

    def forget(self, t: DeviceTensor) -> None:
        """`t` was freed by the actor itself (a program's intermediate): drop it here too."""
        self.gm.unplaced.pop(t.address, None)
        self.gm.placed.discard(t.address)

    def check_tensor(self, t: object, what: str = "tensor") -> DeviceTensor:
        """Refuse anything but a live tensor of this rank (DispatchError), as `runtime.Worker` does."""
        if not isinstance(t, DeviceTensor):
            raise DispatchError(f"{what}: expected a DeviceTensor, got {type(t).__name__}")
        if t.worker is not self:
            raise DispatchError(
                f"{what} {t!r} lives on worker {t.worker.device_id}, not on rank {self.device_id} "
                "of this RayCluster; copy it over first"
            )
        if t.freed:
            raise DispatchError(f"{what} {t!r} was freed (use after free)")
        return t


__all__ = [
    "RankLost",
    "RemoteDeviceTensor",
    "RemoteWorker",
    "Residency",
    "actor_died",
    "fetch",
    "next_handle",
]
