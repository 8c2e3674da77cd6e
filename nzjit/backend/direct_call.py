"""The cached direct call.

A direct call with the signature of an earlier successful one (same argument kinds, shapes,
dtypes, device) passes every check that depends only on those, and compiles to the same graph.
`DirectPlan` keeps what they produced; a call re-checks only the facts that can change between
calls with equal signatures (liveness, worker, contiguity, scalar values) and takes the general
path on any doubt, which checks everything again and raises the error a refused call gets.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

import runtime
from runtime import DeviceTensor, Worker

from ..core.ir import Graph
from ..core.types import ScalarType
from .executor import Ctx, run_graph
from .launch import default_worker, launch_onchip, recycle_onchip, tensor_layout
from .values import TensorVal

_SCALAR, _RESIDENT, _HOST, _OMITTED = range(4)
MISS = object()  # DirectPlan.call: this call needs the general path
_MAX_PLANS = 64  # per kernel: dynamic dims give one signature per extent; beyond this, no caching
_MAX_VALS = 256  # per plan: TensorVals of resident arguments by address


def direct_key(args: Sequence[Any], device: Any) -> tuple[Any, ...] | None:
    """The signature of a direct call: each argument's kind, shape and dtype (a scalar's type only:
    its value is checked per call), and `device`. None for arguments only the general path takes."""
    if device is not None and type(device) is not int:
        return None
    key: list[Any] = [device]
    for a in args:
        t = type(a)
        if t is DeviceTensor or t is np.ndarray:
            if type(a.shape) is not tuple:
                return None  # a hand-made DeviceTensor: its shape may not even hash
            key.append((t, a.shape, a.dtype))
        elif t is int or a is None:
            key.append(t)
        else:
            return None
    return tuple(key)


class _Slot:
    """One parameter of a DirectPlan: where its argument is, what kind it is, what it needs."""

    __slots__ = ("pos", "kind", "is_output", "shape", "dtype", "layout", "nbytes", "wrap", "check")

    def __init__(self, pos: int, kind: int, param: Any, shape: Any, layout: Any, gparam: Any) -> None:
        self.pos = pos  # index into the call's args (-1: an omitted Out)
        self.kind = kind
        self.is_output = param.is_output
        self.shape, self.dtype = shape, param.type.dtype.np_dtype  # of an omitted Out
        self.layout = layout  # tensors: TensorVal(address, *layout)
        self.nbytes = 0 if layout is None else math.prod(layout[1]) * layout[0].itemsize
        self.wrap = gparam.type.dtype.wrap if kind == _SCALAR else None  # as `execute` converts
        self.check = param.type.dtype.wrap if kind == _SCALAR else None  # as `check_scalar` refuses


class DirectPlan:
    """A direct call's checked and compiled signature: the graph, the dims, each argument's kind
    and TensorVal layout. Built from a call that succeeded through the general path."""

    def __init__(self, kernel: Any, args: Sequence[Any], full: Sequence[Any], dims: dict[str, int],
                 graph: Graph, device: int | None) -> None:
        self.kernel, self.graph, self.dims = kernel, graph, dims
        self.target = kernel.target.value
        self.device = device
        blocked = bool(graph.attrs.get("nz_tensor_views_blocked"))
        omitted = len(args) != len(full)
        self.slots: list[_Slot] = []
        pos = 0
        for p, v, a in zip(kernel.params, graph.params, full):
            if omitted and p.is_pure_output:
                kind, at = _OMITTED, -1
            else:
                kind, at = (_SCALAR if isinstance(p.type, ScalarType) else
                            _RESIDENT if isinstance(a, DeviceTensor) else _HOST), pos
                pos += 1
            shape = None if kind == _SCALAR else tuple(a.shape)
            layout = None if shape is None else tensor_layout(p.type, shape, dims, blocked)
            self.slots.append(_Slot(at, kind, p, shape, layout, v))
        self.resident_outputs = [s for s in self.slots if s.kind == _RESIDENT and s.is_output and s.nbytes]
        # no resident argument: the call runs on the default worker of its device (a stable object)
        resident = any(s.kind == _RESIDENT for s in self.slots)
        self.worker = None if resident else default_worker(self.target, device or 0)
        self._vals: dict[tuple[int, int], TensorVal] = {}
        # issue-24 hook (aliasing): the tensor arguments whose sharing of memory each call re-checks
        tensors = [(s.pos, s.is_output) for s in self.slots if s.kind in (_RESIDENT, _HOST)]
        self.alias_slots = tensors if len(tensors) > 1 and any(o for _, o in tensors) else None

    def worker_for(self, args: Sequence[Any]) -> Worker | None:
        """The worker this call runs on, if every per-call fact is as the general path would accept
        it; else None (nothing was changed)."""
        w = None
        for s in self.slots:
            if s.kind == _RESIDENT:
                t = args[s.pos]
                if w is None:
                    w = t.worker
                elif t.worker is not w:
                    return None  # other workers: the general path names them
                if not w.gm.is_live(t.address):
                    return None  # use after free
            elif s.kind == _HOST:
                flags = args[s.pos].flags
                if not flags.c_contiguous or (s.is_output and not flags.writeable):
                    return None
            elif s.kind == _SCALAR:
                a = args[s.pos]
                if s.check(a) != a:
                    return None  # out of range
        if w is None:
            w = self.worker
        elif self.device is not None and self.device != w.device_id:
            return None
        # issue-24 hook (aliasing): a signature does not fix which arguments share memory
        if self.alias_slots and runtime.dispatch.find_alias([(str(p), args[p], o) for p, o in self.alias_slots]):
            return None  # the general path refuses it (check_args)
        return w if w.target == self.target else None

    def call(self, args: Sequence[Any]) -> Any:
        """Run the call as `run_program` would (resident outputs restored on failure, host arrays
        uploaded once and copied back on success); MISS if it needs the general path."""
        w = self.worker_for(args)
        if w is None:
            return MISS
        snapshots = self._snapshot(args, w)
        gm = w.gm
        temps: list[int] = []
        try:
            try:
                vals, host_outputs, outs = self._place(args, gm, temps)
                onchip = launch_onchip(w.target)
                run_graph(Ctx(gm, onchip, self.dims), self.graph, vals)
                recycle_onchip(onchip)
            except BaseException:
                for view, saved in snapshots:
                    view[...] = saved
                raise
            for i, arr, addr, s in host_outputs:
                if arr is None:  # an omitted Out: the download (`copy_from`) is the new array
                    outs[i] = gm.read(addr, s.nbytes).view(s.dtype).reshape(s.shape)
                else:  # the caller's array (C-contiguous, see `worker_for`): no intermediate copy
                    gm.read_into(addr, arr)
        finally:
            for addr in temps:  # the call's own live allocations: nothing for free_tensor to check
                gm.free(addr)
        return None if not outs else outs[0] if len(outs) == 1 else tuple(outs)

    def _snapshot(self, args: Sequence[Any], w: Worker) -> list[tuple[np.ndarray, np.ndarray]]:
        """Host copies of the resident outputs' GM bytes (see `_Rank._snapshot_outputs`)."""
        snaps, seen = [], []
        for s in self.resident_outputs:
            t = args[s.pos]
            if all(t is not u for u in seen):
                seen.append(t)
                view = w.gm.view_span(t.address, (s.nbytes,), (1,), 0, s.nbytes)
                snaps.append((view, view.copy()))
        return snaps

    def _place(self, args: Sequence[Any], gm: runtime.GlobalMemory, temps: list[int]
               ) -> tuple[list[Any], list[tuple[int, np.ndarray | None, int, _Slot]], list[Any]]:
        """The graph's argument values, the host outputs to download (index in the results, host array or
        None for an omitted Out, GM address, slot), the results. Host arrays are uploaded once each (see
        `_Rank._place`), omitted Outs allocated (zeros); their addresses land in `temps`. The plan's
        signature fixed every array's shape and dtype, so no DeviceTensor is needed: the bytes go
        straight to GM as `Worker.alloc_tensor` would place them."""
        vals: list[Any] = []
        host_outputs: list[tuple[int, np.ndarray | None, int, _Slot]] = []
        outs: list[Any] = []
        placed: dict[int, int] = {}
        for s in self.slots:
            if s.kind == _SCALAR:
                vals.append(s.wrap(args[s.pos]))
                continue
            if s.kind == _RESIDENT:
                t = args[s.pos]
                vals.append(self._resident_val(s, t.address))
                if s.is_output:
                    outs.append(t)
                continue
            arr: np.ndarray | None = None
            if s.kind == _HOST:
                arr = args[s.pos]
                addr = placed.get(id(arr))
                if addr is None:
                    addr = placed[id(arr)] = gm.upload(arr)
                    temps.append(addr)
            else:  # an omitted Out
                addr = gm.alloc(s.nbytes)
                temps.append(addr)
            if s.is_output:
                if all(addr != u for _, _, u, _ in host_outputs):
                    host_outputs.append((len(outs), arr, addr, s))
                outs.append(arr)
            vals.append(TensorVal(addr, *s.layout))
        return vals, host_outputs, outs

    def _resident_val(self, s: _Slot, address: int) -> TensorVal:
        """A resident argument's TensorVal, kept by address (callers reuse their tensors)."""
        v = self._vals.get((s.pos, address))
        if v is None:
            if len(self._vals) >= _MAX_VALS:
                self._vals.clear()
            v = self._vals[(s.pos, address)] = TensorVal(address, *s.layout)
        return v


def remember(kernel: Any, args: Sequence[Any], device: Any, full: list[Any], dims: dict[str, int]) -> None:
    """Keep the DirectPlan of a call that just succeeded, for the next call with its signature."""
    plans = kernel._direct_plans
    key = direct_key(args, device)
    if key is None or key in plans or len(plans) >= _MAX_PLANS:
        return
    graph = kernel.lower(*full).final  # the compile cache entry this call ran (same arguments)
    plans[key] = DirectPlan(kernel, args, full, dims, graph, device)
