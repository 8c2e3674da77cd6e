"""What one kernel launch needs: the default worker of a (target, device), each argument's
TensorVal (where the NZ entry reshape of NZ-32 happens), and the launch's on-chip accounting."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

import runtime
from runtime import DeviceTensor, Worker

from ..core.types import DynDim, Layout, TensorType
from .executor import Ctx, run_launch
from .values import NzWindow, TensorVal

_workers: dict[tuple[str, int], Worker] = {}
_workers_lock = threading.Lock()


def default_worker(target: str, device: int = 0) -> Worker:
    """One simulated device per (target, device id) for calls that name no worker or cluster."""
    with _workers_lock:
        w = _workers.get((target, device))
        if w is None:
            w = _workers[(target, device)] = Worker(device, target)
        return w


def tensor_layout(
    t: TensorType, shape: tuple[int, ...], dims: dict[str, int], blocked: bool
) -> tuple[np.dtype, tuple[int, ...], tuple[int, ...], str, NzWindow | None]:
    """Everything of an argument's TensorVal but its address (a function of the parameter, the
    argument's shape, the dims and the stage): `TensorVal(address, *tensor_layout(...))`.

    The entry reshape of NZ-32 happens here and only here: an NZ argument arrives with its logical
    shape and is viewed blocked (metadata only: the same bytes in the same order); a graph before
    BlockNzTensorViews sees it logical."""
    dt = t.dtype.np_dtype
    if t.layout is Layout.NZ and not blocked:
        return dt, shape, (), "NZ", NzWindow(shape, (0,) * len(shape), tuple(range(len(shape))))
    if t.layout is Layout.NZ:
        shape = runtime.dispatch.blocked_view_shape(shape, dt)
    else:
        shape = tuple(dims[d.name] if isinstance(d, DynDim) else int(d) for d in t.shape)
    return dt, shape, runtime.isa.row_major_strides(shape), t.layout.value, None


def tensor_value(t: TensorType, dev: DeviceTensor, dims: dict[str, int], blocked: bool) -> TensorVal:
    """The TensorVal of a device-resident argument (see `tensor_layout`)."""
    return TensorVal(dev.address, *tensor_layout(t, tuple(dev.shape), dims, blocked))


# OnChips of finished launches, per target, handed to the next launch: a launch's on-chip
# accounting starts empty either way, and one that kept its pool of freed tile images does not
# allocate (and fault in) fresh images for every tile of every call
_IDLE_ONCHIPS: dict[str, list[runtime.OnChip]] = {}
_MAX_IDLE = 2  # per target: enough for one launch per core of a small machine; each holds images


def launch_onchip(target: str) -> runtime.OnChip:
    """The on-chip accounting of a new launch (nothing live, no peak): an idle one, else new."""
    idle = _IDLE_ONCHIPS.get(target)
    if idle:
        try:
            return idle.pop()  # atomic: two threads never take the same one
        except IndexError:
            pass
    return runtime.OnChip(target)


def recycle_onchip(onchip: runtime.OnChip) -> None:
    """Return the OnChip of a launch that finished cleanly. One with bytes still accounted (a
    tile not freed) is dropped: the next launch must start with every byte available."""
    if not onchip.reset():
        return
    idle = _IDLE_ONCHIPS.setdefault(onchip.target, [])
    if len(idle) < _MAX_IDLE:
        idle.append(onchip)


def execute(plan: Any, worker: Worker, vals: list[Any], pending: list[Any] | None = None) -> list[Any]:
    """Launch `plan` (a convention.LaunchPlan: graph, dims, options, its compiled plan) on `worker`
    with the placed argument values `vals`; on-chip buffers are per launch. `pending`: snapshots
    to take before the launch first writes GM outside a one-assignment final commit (`Ctx.pending`)."""
    onchip = launch_onchip(worker.target)
    out = run_launch(Ctx(worker.gm, onchip, plan.dims, plan.options, pending=pending), plan.compiled(), vals)
    recycle_onchip(onchip)
    return out
