"""The calling convention of api.md: check every argument before anything runs, place numpy
arguments in a worker's GM, run the lowered graph, copy outputs back only on success."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

import runtime

from ..core.ir import Graph
from ..core.types import DynDim, Layout, ScalarType, TensorType
from .executor import Ctx, run_graph
from .values import NzWindow, TensorVal

_workers: dict[tuple[str, int], runtime.Worker] = {}
_workers_lock = threading.Lock()


def default_worker(target: str, device: int = 0) -> runtime.Worker:
    """One simulated device per (target, device id) for calls that name no worker."""
    with _workers_lock:
        w = _workers.get((target, device))
        if w is None:
            w = _workers[(target, device)] = runtime.Worker(device, target)
        return w


def _split_args(kernel: Any, args: Sequence[Any]) -> tuple[list[Any], bool]:
    """Out parameters may be omitted (allocated and returned) or all given (written in place)."""
    n_all = len(kernel.params)
    n_in = sum(1 for p in kernel.params if not p.is_pure_output)
    if len(args) == n_all:
        return list(args), False
    if len(args) == n_in:
        it = iter(args)
        return [None if p.is_pure_output else next(it) for p in kernel.params], True
    names = ", ".join(p.name for p in kernel.params)
    raise runtime.DispatchError(f"{kernel.__name__} takes {n_all} arguments ({names}), or {n_in} with "
                                f"the Out parameters omitted; got {len(args)}")


def _check(kernel: Any, full: list[Any], worker: runtime.Worker | None) -> dict[str, int]:
    specs, tensor_args, dims = [], [], {}
    for p, a in zip(kernel.params, full):
        if isinstance(p.type, ScalarType):
            if isinstance(a, bool) or not isinstance(a, int | np.integer):
                raise runtime.DispatchError(f"parameter {p.name!r} expects an int scalar, got {type(a).__name__}")
            continue
        if a is not None:
            specs.append(p.spec())
            tensor_args.append(a)
    dims = runtime.dispatch.check_args(specs, tensor_args, worker)
    for p, a in zip(kernel.params, full):  # omitted outputs: every dimension must be known
        if a is None:
            for d in p.type.shape:
                if isinstance(d, DynDim) and d.name not in dims:
                    raise runtime.DispatchError(f"Out parameter {p.name!r} has dynamic dim {d.name} that no "
                                                "argument binds; pass the output array")
    return dims


def _pick_worker(kernel: Any, full: list[Any], device: int | None) -> runtime.Worker:
    for a in full:
        if isinstance(a, runtime.DeviceTensor):
            return a.worker
    return default_worker(kernel.target.value, device or 0)


def tensor_value(t: TensorType, dev: runtime.DeviceTensor, dims: dict[str, int], blocked: bool) -> TensorVal:
    """The entry reshape of NZ-32: an NZ argument arrives logical and is viewed blocked (metadata
    only: the same bytes in the same order); before BlockNzTensorViews it stays logical."""
    dt = t.dtype.np_dtype
    if t.layout is Layout.NZ and not blocked:
        shape = tuple(dev.shape)
        return TensorVal(dev.address, dt, shape, (), "NZ", NzWindow(shape, (0,) * len(shape),
                                                                    tuple(range(len(shape)))))
    if t.layout is Layout.NZ:
        shape = runtime.dispatch.blocked_view_shape(dev.shape, dt)
    else:
        shape = tuple(dims[d.name] if isinstance(d, DynDim) else int(d) for d in t.shape)
    return TensorVal(dev.address, dt, shape, runtime.isa.row_major_strides(shape), t.layout.value)


def execute(graph: Graph, kernel: Any, full: list[Any], worker: runtime.Worker, dims: dict[str, int]) -> list[Any]:
    """Run `graph` with device-resident arguments (DeviceTensors and ints)."""
    blocked = bool(graph.attrs.get("nz_tensor_views_blocked"))
    vals: list[Any] = []
    for v, a in zip(graph.params, full):
        if isinstance(v.type, TensorType):
            vals.append(tensor_value(v.type, a, dims, blocked))
        else:
            vals.append(v.type.dtype.wrap(int(a)))  # type: ignore[union-attr]
    ctx = Ctx(worker.gm, runtime.OnChip(worker.target), dims)  # on-chip buffers are per launch
    return run_graph(ctx, graph, vals)


def call_lowered(low: Any, graph: Graph, args: Sequence[Any], device: int | None = None) -> Any:
    kernel = low.kernel
    full, omitted = _split_args(kernel, args)
    worker = _pick_worker(kernel, full, device)
    dims = _check(kernel, full, worker)
    placed: list[Any] = []
    temps: list[runtime.DeviceTensor] = []
    try:
        for p, a in zip(kernel.params, full):
            if isinstance(p.type, ScalarType) or isinstance(a, runtime.DeviceTensor):
                placed.append(a)
                continue
            if a is None:
                shape = tuple(dims[d.name] if isinstance(d, DynDim) else d for d in p.type.shape)
                t = worker.alloc_tensor(shape, p.type.dtype.np_dtype)
            else:
                t = worker.alloc_tensor(a.shape, a.dtype, init=a)
            temps.append(t)
            placed.append(t)
        execute(graph, kernel, placed, worker, dims)
        results = []
        for p, a, t in zip(kernel.params, full, placed):
            if not p.is_output:
                continue
            if a is None:
                results.append(worker.copy_from(t))
            elif isinstance(a, np.ndarray):
                a[...] = worker.copy_from(t)  # only now: a refused or failed call leaves outputs untouched
                results.append(a)
            else:
                results.append(a)
    finally:
        for t in temps:
            worker.free_tensor(t)
    if not results:
        return None
    return results[0] if len(results) == 1 else tuple(results)


def call_kernel(kernel: Any, args: Sequence[Any], device: int | None = None) -> Any:
    full, _ = _split_args(kernel, args)
    _check(kernel, full, None)  # before compiling: a refused call costs nothing
    low = kernel.lower(*args)
    return call_lowered(low, low.final, args, device=device)
