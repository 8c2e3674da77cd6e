"""The calling convention of one kernel launch on one worker, written once.

A `LaunchPlan` is what the checks of a call fixed: the graph and dims, each parameter's kind
(scalar, resident DeviceTensor, host array, omitted Out) and its TensorVal layout. Running it
is always the same sequence, for a recorded program (`call.run_program`, rank by rank) and for a
cached direct call (`direct_call.CallPlan`) alike:

1. `snapshot` the resident outputs' GM bytes (restored if anything fails: outputs untouched) -
   for a cached call of a kernel that is one `pl.spmd` launch (`LaunchPlan.commits_last`), only
   once the launch is about to write anything but its single final commit (`Rollback`);
2. `place` the arguments: scalars wrapped to their declared width, resident tensors where they
   live, host arrays uploaded once per worker and program (an omitted Out allocated as zeros);
3. `launch` the graph (launch.py: a fresh on-chip accounting, the plan under the options);
4. `download` the host outputs (a program does it only once every rank succeeded), then free the
   uploads (`temps`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import ml_dtypes
import numpy as np

from runtime import DeviceTensor, GlobalMemory

from ..core.ir import Graph
from ..core.types import ScalarType
from .launch import execute, tensor_layout
from .options import Options
from .plan import GENERATION, Plan, plan_of
from .values import TensorVal

SCALAR, RESIDENT, HOST, OMITTED = range(4)
_MAX_VALS = 256  # per plan: TensorVals of resident arguments by address


def scalar_conversion(dtype: Any) -> Any:
    """How a scalar argument becomes the graph's value: an int wraps to the declared width (after
    `check_scalar` refused a wider one), a float is rounded to its dtype (RNE), as the device
    register holds it."""
    if not dtype.is_float:
        return dtype.wrap
    np_dtype = dtype.np_dtype

    def to_float(a: Any) -> float:
        with np.errstate(over="ignore"):
            return float(np.asarray(a).astype(np_dtype))

    return to_float


_REFUSED = object()  # compares unequal to every argument: the general path checks it


def scalar_check(dtype: Any) -> Any:
    """A function returning its argument unchanged exactly when the cached path may take it: an
    int of the parameter's width, a real number its float dtype holds; anything else goes to the
    general path, whose `check_scalar` refuses it with its message."""
    if not dtype.is_float:
        return dtype.wrap
    np_dtype = dtype.np_dtype
    # rounding is monotonic and the largest finite value is one of the dtype's: a real number of
    # at most its magnitude rounds to a finite value (the common case, decided without numpy)
    largest = float(ml_dtypes.finfo(np_dtype).max)

    def check(a: Any) -> Any:
        if type(a) is not float and type(a) is not int:
            return _REFUSED
        if -largest <= a <= largest:
            return a
        with np.errstate(over="ignore"):
            return a if np.isfinite(np.asarray(a).astype(np_dtype)) else _REFUSED

    return check


class ArgSlot:
    """One parameter of a launch: its position among the values given, its kind and layout."""

    __slots__ = ("pos", "kind", "is_output", "shape", "dtype", "layout", "nbytes", "wrap", "check", "upload")

    def __init__(
        self, pos: int, kind: int, param: Any, shape: Any, layout: Any, gparam: Any, upload: bool = True
    ) -> None:
        self.pos = pos  # index into the values of a call (-1: an omitted Out)
        self.kind = kind
        self.is_output = param.is_output
        self.shape, self.dtype = shape, param.type.dtype.np_dtype
        self.layout = layout  # tensors: TensorVal(address, *layout)
        self.nbytes = 0 if layout is None else math.prod(shape) * layout[0].itemsize
        self.wrap = scalar_conversion(gparam.type.dtype) if kind == SCALAR else None  # the graph's dtype
        self.check = scalar_check(param.type.dtype) if kind == SCALAR else None  # as `check_scalar` refuses
        self.upload = upload  # a host array's bytes are uploaded (not a fresh output's)


class LaunchPlan:
    """One launch's checked calling convention (module docstring). `values` are the call's
    argument values in parameter order: an int, a DeviceTensor or a host array. A parameter in
    `omitted` is an Out the call leaves out (its value only gives the shape; a cached call
    allocates it on the device and returns the download); one in `fresh` is a host array that
    needs no upload. `compact`: the values a run is given skip the omitted parameters (the
    arguments of a direct call), else they are in parameter order."""

    def __init__(
        self,
        kernel: Any,
        graph: Graph,
        dims: dict[str, int],
        options: Options,
        values: Sequence[Any],
        fresh: Sequence[bool] = (),
        omitted: Sequence[bool] = (),
        compact: bool = False,
    ) -> None:
        self.kernel, self.graph, self.dims, self.options = kernel, graph, dims, options
        blocked = bool(graph.attrs.get("nz_tensor_views_blocked"))
        self.slots: list[ArgSlot] = []
        pos = 0
        for i, (p, v, a) in enumerate(zip(kernel.params, graph.params, values)):
            if omitted and omitted[i]:
                kind, at = OMITTED, -1
            else:
                kind = (
                    SCALAR
                    if isinstance(p.type, ScalarType)
                    else RESIDENT
                    if isinstance(a, DeviceTensor)
                    else HOST
                )
                at = pos if compact else i
                pos += 1
            shape = None if kind == SCALAR else tuple(a.shape)
            layout = None if shape is None else tensor_layout(p.type, shape, dims, blocked)
            self.slots.append(ArgSlot(at, kind, p, shape, layout, v, not (fresh and fresh[i])))
        self.resident_outputs = [s for s in self.slots if s.kind == RESIDENT and s.is_output and s.nbytes]
        self._vals: dict[tuple[int, int], TensorVal] = {}
        #: the graph is one pl.spmd launch: run batched, it writes GM only in its final commit of
        #: deferred stores, after which nothing can fail (batched.py); run lane by lane, it takes
        #: the snapshot first (loops.py) - so the snapshot waits until one of them asks for it
        self.commits_last = len(graph.eqns) == 1 and graph.eqns[0].params.get("kind") == "spmd"
        self._plan: Plan | None = None
        self._generation = -1

    def compiled(self) -> Plan:
        """The graph's plan under the options (plan.plan_of), kept here while the plan cache is not
        cleared: a launch does not look it up again."""
        if self._generation != GENERATION[0] or self._plan is None:
            generation = GENERATION[0]  # before the lookup: a clear meanwhile makes it stale
            self._plan = plan_of(self.graph, 0, self.options)
            self._generation = generation
        return self._plan

    # ------------------------------------------------------------------------------ steps
    def snapshot(
        self, gm: GlobalMemory, args: Sequence[Any], seen: list[Any]
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """Host copies of the resident outputs' GM bytes not in `seen` (appended to it)."""
        snaps = []
        for s in self.resident_outputs:
            t = args[s.pos]
            if all(t is not u for u in seen):
                seen.append(t)  # the simulator's own copy of the bytes: no GM allocation
                view = gm.view_span(t.address, (s.nbytes,), (1,), 0, s.nbytes)
                snaps.append((view, view.copy()))
        return snaps

    def place(
        self,
        args: Sequence[Any],
        gm: GlobalMemory,
        placed: dict[Any, int],
        temps: list[int],
        keys: Sequence[Any] | None = None,
    ) -> tuple[list[Any], list[tuple[int, np.ndarray | None, int, ArgSlot]], list[Any]]:
        """The graph's argument values, the host outputs to download (index in the results, host
        array or None for an omitted Out, GM address, slot) and the results. A host array is
        uploaded once per `placed` (keyed by `keys[pos]`, else by the array itself); omitted Outs
        are allocated (zeros). New addresses land in `temps`."""
        vals: list[Any] = []
        host_outputs: list[tuple[int, np.ndarray | None, int, ArgSlot]] = []
        outs: list[Any] = []
        for s in self.slots:
            if s.kind == SCALAR:
                vals.append(s.wrap(args[s.pos]))  # type: ignore[misc]
                continue
            if s.kind == RESIDENT:
                t = args[s.pos]
                vals.append(self._resident_val(s, t.address))
                if s.is_output:
                    outs.append(t)
                continue
            arr: np.ndarray | None = None
            if s.kind == HOST:
                arr = args[s.pos]
                key = keys[s.pos] if keys is not None else id(arr)
                addr = placed.get(key)
                if addr is None:
                    addr = placed[key] = gm.upload(arr) if s.upload else gm.alloc(s.nbytes)
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

    def _resident_val(self, s: ArgSlot, address: int) -> TensorVal:
        """A resident argument's TensorVal, kept by address (callers reuse their tensors)."""
        v = self._vals.get((s.pos, address))
        if v is None:
            if len(self._vals) >= _MAX_VALS:
                self._vals.clear()
            v = self._vals[(s.pos, address)] = TensorVal(address, *s.layout)
        return v


class Rollback:
    """The resident outputs' snapshot of one launch, taken lazily: `take` snapshots them (once),
    `restore` puts back what was taken. A launch of a `commits_last` plan hands `take` to the
    executor (`Ctx.pending`), which calls it before the first GM write that a later failure could
    leave behind; a batched launch whose commit is one assignment, the last thing that can fail,
    never calls it - nothing is copied, and a failure before the commit has written nothing."""

    __slots__ = ("plan", "gm", "args", "saved")

    def __init__(self, plan: LaunchPlan, gm: GlobalMemory, args: Sequence[Any]) -> None:
        self.plan, self.gm, self.args = plan, gm, args
        self.saved: list[tuple[np.ndarray, np.ndarray]] | None = None

    def take(self) -> None:
        """Snapshot the resident outputs now, if that has not been done (later calls do nothing)."""
        if self.saved is None:
            self.saved = self.plan.snapshot(self.gm, self.args, [])

    def restore(self) -> None:
        """Put back what `take` saved (nothing taken: nothing was written that needs it)."""
        if self.saved:
            restore(self.saved)


def restore(snapshots: Sequence[tuple[np.ndarray, np.ndarray]]) -> None:
    """Put the snapshotted GM bytes back (a failed call leaves its outputs untouched)."""
    for view, saved in snapshots:
        view[...] = saved


def download(
    gm: GlobalMemory, host_outputs: Sequence[tuple[int, np.ndarray | None, int, ArgSlot]], outs: list[Any]
) -> None:
    """Copy the host outputs back: into the caller's array, or as the new array of an omitted Out."""
    for i, arr, addr, s in host_outputs:
        if arr is None:  # an omitted Out: the download is the new array
            outs[i] = gm.read(addr, s.nbytes).view(s.dtype).reshape(s.shape)
        elif arr.flags.c_contiguous:  # straight into the caller's array, no intermediate copy
            gm.read_into(addr, arr)
        else:
            arr[...] = gm.read(addr, s.nbytes).view(s.dtype).reshape(s.shape)


def free_temps(gm: GlobalMemory, temps: list[int]) -> None:
    """Free a call's own uploads and allocations."""
    for addr in temps:
        gm.free(addr)
    temps.clear()


class Entry:
    """What a LaunchPlan reads of a kernel: its parameters. A process that holds only the lowered
    graph (a RayCluster rank's actor) builds its plans from this stand-in."""

    def __init__(self, params: Sequence[Any]) -> None:
        self.params = list(params)


def launch_resident(
    params: Sequence[Any],
    graph: Graph,
    dims: dict[str, int],
    options: Options,
    worker: Any,
    args: Sequence[Any],
) -> None:
    """One launch whose tensor arguments all live on `worker` already (DeviceTensors, scalars as
    ints): the calling convention of `LaunchPlan` with nothing to upload or download. A RayCluster
    rank runs its share of a program this way, after the driver checked it (call.plan_program)."""
    plan = LaunchPlan(Entry(params), graph, dims, options, args)
    vals, _, _ = plan.place(args, worker.gm, {}, [])
    execute(plan, worker, vals)
