"""The calling convention of api.md: a program of kernel calls is validated whole, then run.

`kernel(...)` is a one-call program, an `@pl.orchestration` body records many.  Either way:

1. every argument of every call is checked (shape, rank, dtype, layout, worker, liveness) and
   every kernel is compiled before anything runs, so a refused program leaves every output untouched;
2. each rank runs its calls in order on its own worker, ranks in parallel (`runtime.dispatch.run_ranks`);
   host arrays are uploaded once per rank and program, resident tensors are used where they live;
3. only when every rank succeeded are host outputs copied back; on failure, resident outputs are
   restored from device-side snapshots, so the caller sees no partial write.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import runtime
from runtime import DeviceTensor, DispatchError, StackedDeviceTensor, Worker

from ..core.types import DynDim, ScalarType
from . import (
    comm_run,  # comm hook (issue 28): windows and the comm world of communicating ranks
    program_cache,  # a program planned before: its checked launch plans (issue 25 item 4)
    rank_batch,  # ranks that run the same program: one launch per call (issue 25 item 4)
)
from .convention import LaunchPlan, download, free_temps, restore
from .launch import default_worker, execute
from .options import Options, current
from .refs import (  # the references of a program; re-exported here, where callers have found them
    DeviceRef,
    HostRef,
    KernelCall,
    PendingRef,
    Ref,
    StackedRef,
    as_ref,
    call_name,
    default_device,
    pending_refs,
    resident_tensors,
)
from .remote import remote_cluster_of


# --------------------------------------------------------------------------- entry-level checks
def split_args(entry: Any, args: Sequence[Any]) -> tuple[list[Any], bool]:
    """Out parameters may be omitted (allocated and returned) or all given (written in place)."""
    n_all = len(entry.params)
    n_in = sum(1 for p in entry.params if not p.is_pure_output)
    if len(args) == n_all:
        for p, a in zip(entry.params, args):  # None stands for an omitted Out (allocated and returned)
            if a is None and not p.is_pure_output:
                raise DispatchError(
                    f"parameter {p.name!r} got None; only an Out parameter may be None "
                    "(allocated and returned), an input needs its data"
                )
        return list(args), False
    if len(args) == n_in:
        it = iter(args)
        return [None if p.is_pure_output else next(it) for p in entry.params], True
    names = ", ".join(p.name for p in entry.params)
    raise DispatchError(
        f"{entry.__name__} takes {n_all} arguments ({names}), or {n_in} with "
        f"the Out parameters omitted; got {len(args)}"
    )


def param_spec(p: Any) -> runtime.dispatch.ParamSpec:
    """`p.spec()`: the runtime's ParamSpec of parameter `p` (built once, kept by the parameter)."""
    return p.spec()


def check_scalar(name: str, a: Any, dtype: Any) -> None:
    """An int that fits the parameter's declared width: a wider value is refused, never wrapped. A
    float parameter takes any real number its dtype holds (it is rounded to it, RNE); a
    pl.Scalar[pl.BOOL] parameter takes a Python or numpy bool, and only a bool."""
    if dtype.kind == "bool":
        if not isinstance(a, bool | np.bool_):
            raise DispatchError(f"parameter {name!r} is BOOL: expects a bool, got {type(a).__name__}")
        return
    if dtype.is_float:
        if isinstance(a, bool) or not isinstance(a, int | float | np.integer | np.floating):
            raise DispatchError(f"parameter {name!r} expects a real number, got {type(a).__name__}")
        with np.errstate(over="ignore"):
            r = np.asarray(a).astype(dtype.np_dtype)
        if np.isfinite(a) and not np.isfinite(r):
            raise DispatchError(f"parameter {name!r} is {dtype.name}: {a} is outside its range")
        return
    if isinstance(a, bool) or not isinstance(a, int | np.integer):
        raise DispatchError(f"parameter {name!r} expects an int scalar, got {type(a).__name__}")
    if dtype.wrap(int(a)) != int(a):
        lo, hi = (
            (-(1 << (dtype.bits - 1)), (1 << (dtype.bits - 1)) - 1)
            if dtype.is_signed
            else (0, (1 << dtype.bits) - 1)
        )
        raise DispatchError(f"parameter {name!r} is {dtype.name}: {int(a)} is outside [{lo}, {hi}]")


def check_stacked(name: str, st: StackedDeviceTensor) -> None:
    """Re-validate a stack at the entry: its shards may have been freed or replaced since it was built."""
    who = f"parameter {name!r}"
    shards, ids, full = tuple(st.shards), tuple(st.worker_ids), tuple(st.full_shape)
    if not full or not (len(shards) == full[0] == len(ids)):
        raise DispatchError(
            f"{who}: StackedDeviceTensor has {len(shards)} shards, full_shape {full} and "
            f"{len(ids)} worker ids; they must agree"
        )
    for i, (s, w) in enumerate(zip(shards, ids)):
        if not isinstance(s, DeviceTensor):
            raise DispatchError(f"{who}: shard {i} is a {type(s).__name__}, expected a DeviceTensor")
        if tuple(s.shape) != full[1:]:
            raise DispatchError(
                f"{who}: shard {i} has shape {tuple(s.shape)}, shard shapes must all be "
                f"full_shape[1:] = {full[1:]}"
            )
        if s.dtype != shards[0].dtype:
            raise DispatchError(
                f"{who}: shard {i} has dtype {s.dtype.name}, shard 0 has {shards[0].dtype.name}"
            )
        if s.worker.device_id != w:
            raise DispatchError(
                f"{who}: shard {i} lives on worker {s.worker.device_id}, worker_ids[{i}] says {w}"
            )
        if s.freed:
            raise DispatchError(f"{who}: shard {i} of {st!r} was freed (use after free)")


def check_entry(entry: Any, full: list[Any], allow_stacked: bool) -> dict[str, int]:
    """Check an entry's arguments against its own annotations; return the dynamic-dim bindings."""
    specs, tensor_args = [], []
    for p, a in zip(entry.params, full):
        if isinstance(p.type, ScalarType):
            check_scalar(p.name, a, p.type.dtype)
            continue
        if isinstance(a, StackedDeviceTensor):
            if not allow_stacked:
                raise DispatchError(
                    f"parameter {p.name!r} got a StackedDeviceTensor, which spans ranks; a "
                    "kernel receives one shard: call it from a @pl.orchestration as "
                    f"kernel(..., {p.name}[r], ..., device=r)"
                )
            check_stacked(p.name, a)
        if a is not None:
            specs.append(param_spec(p))
            tensor_args.append(a)
    dims = runtime.dispatch.check_args(specs, tensor_args)
    for p, a in zip(entry.params, full):  # omitted outputs: every dimension must be known
        if a is None:
            out_shape(p, dims)
    return dims


def out_shape(p: Any, dims: dict[str, int]) -> tuple[int, ...]:
    """The shape of an omitted Out parameter; its dynamic dims must be bound by the other arguments."""
    for d in p.type.shape:
        if isinstance(d, DynDim) and d.name not in dims:
            raise DispatchError(
                f"Out parameter {p.name!r} has dynamic dim {d.name} that no argument binds; pass the output"
            )
    return tuple(dims[d.name] if isinstance(d, DynDim) else int(d) for d in p.type.shape)


def results(entry: Any, full: Sequence[Any]) -> Any:
    """The Out / InOut arguments in parameter order: None, one value, or a tuple."""
    outs = [a for p, a in zip(entry.params, full) if p.is_output]
    if not outs:
        return None
    return outs[0] if len(outs) == 1 else tuple(outs)


# ------------------------------------------------------------------------------- the program
def _reraise_in(call: KernelCall, e: Exception) -> None:
    """Raise `e` again, same type, its message prefixed with the call (run_ranks adds the rank)."""
    try:
        new = type(e)(f"{call_name(call)}: {e}")
    except Exception:  # a constructor that takes other arguments: keep the original, add a note
        e.add_note(f"in {call_name(call)}")
        raise e from None
    new.__dict__.update(e.__dict__)  # its fields too (a LaneRaceError's lanes, tensor, windows)
    raise new from e


@dataclass(eq=False)
class Launch:
    """One checked call of a program: the call and its launch plan (graph, dims, options, slots)."""

    call: KernelCall
    plan: LaunchPlan


@dataclass(eq=False)
class RankPlan:
    """One rank's share of a program (its launches, in order) and what it placed on its worker."""

    rank: int
    worker: Worker
    launches: list[Launch] = field(default_factory=list)
    placed: dict[Any, int] = field(default_factory=dict)  # host array (root, plane) -> GM address
    host_outputs: list[tuple[HostRef, int, Any]] = field(default_factory=list)  # (ref, address, slot)
    snapshots: list[tuple[np.ndarray, np.ndarray]] = field(default_factory=list)  # (GM bytes, saved copy)
    temps: list[int] = field(default_factory=list)

    def run(self, name_calls: bool) -> None:
        """The calling convention (convention.py) for each launch in order; host outputs wait for
        `gather` (every rank must succeed first)."""
        self.begin()
        for i in range(len(self.launches)):
            self.launch(i, self.place(i), name_calls)

    def begin(self) -> None:
        """Snapshot the resident outputs of every launch (restored if any rank fails). The
        program's own intermediates are left out: they are allocated for it and freed when it
        ends, by failure too, so no one could see their bytes restored (tp_moe: 2.6 MB of
        copies per call saved, issue 25 item 4)."""
        gm = self.worker.gm
        seen: list[Any] = [p.tensor for p in pending_refs([ln.call for ln in self.launches])]
        for ln in self.launches:
            self.snapshots += ln.plan.snapshot(gm, values_of(ln.call), seen)

    def place(self, i: int) -> list[Any]:
        """Place launch `i`'s arguments on this rank's worker; the graph's argument values."""
        ln = self.launches[i]
        keys = [a.key if isinstance(a, HostRef) else None for a in ln.call.args]
        vals, host_outputs, _ = ln.plan.place(
            values_of(ln.call), self.worker.gm, self.placed, self.temps, keys
        )
        for _, _, addr, slot in host_outputs:
            if all(addr != a for _, a, _ in self.host_outputs):
                self.host_outputs.append((ln.call.args[slot.pos], addr, slot))
        return vals

    def launch(self, i: int, vals: list[Any], name_calls: bool = True) -> None:
        """Run launch `i` on this rank's worker with its placed values `vals`."""
        ln = self.launches[i]
        try:
            execute(ln.plan, self.worker, vals)
        except Exception as e:
            if not name_calls:
                raise
            _reraise_in(ln.call, e)

    def named(self, i: int, e: Exception) -> Exception:
        """`e`, raised by launch `i` elsewhere (a rank process), as `launch` raises it here."""
        try:
            _reraise_in(self.launches[i].call, e)
        except Exception as named:
            return named
        return e  # not reached: `_reraise_in` always raises

    def restore(self) -> None:
        """Put the resident outputs' snapshotted bytes back (another rank, or this one, failed)."""
        restore(self.snapshots)

    def gather(self) -> None:
        """Copy the host outputs back (every rank succeeded)."""
        gm = self.worker.gm
        download(gm, [(0, ref.array, addr, slot) for ref, addr, slot in self.host_outputs], [None])

    def free(self) -> None:
        """Free this rank's uploads and allocations of the program."""
        free_temps(self.worker.gm, self.temps)


def values_of(call: KernelCall) -> list[Any]:
    """A recorded call's argument values in parameter order (host arrays, DeviceTensors, ints)."""
    out: list[Any] = []
    for a in call.args:
        if isinstance(a, HostRef):
            out.append(a.array)
        elif isinstance(a, DeviceRef | PendingRef):
            out.append(a.tensor)
        elif isinstance(a, comm_run.WindowView):  # comm hook (issue 28): this rank's memory of the window
            out.append(comm_run.window_tensor(a, call.device))
        else:
            out.append(a)
    return out


def _rank_workers(calls: Sequence[KernelCall], cluster: Any, residents: Sequence[Any]) -> dict[int, Worker]:
    """Rank -> worker: the given cluster, else the one the resident arguments live on, else one
    default worker per rank the program dispatches to."""
    devices = sorted({c.device for c in calls})
    if cluster is not None:
        if not isinstance(cluster, runtime.Cluster):
            raise DispatchError(
                f"cluster= expects a runtime.Cluster or an nzjit.distributed.RayCluster, got "
                f"{type(cluster).__name__}"
            )
        for name, t in resident_tensors(residents):
            d = t.worker.device_id
            if not (0 <= d < cluster.n_ranks and cluster.workers[d] is t.worker):
                raise DispatchError(
                    f"parameter {name.split('[')[0]!r}: {name} lives on worker {d} of another "
                    "cluster, not on the cluster given as cluster="
                )
        bad = [d for d in devices if not 0 <= d < cluster.n_ranks]
        if bad:
            raise DispatchError(
                f"device={bad[0]} is not a rank of the given cluster (ranks 0..{cluster.n_ranks - 1})"
            )
        return dict(enumerate(cluster.workers))
    found: dict[int, tuple[Worker, str]] = {}
    stacked = False
    for r in residents:
        stacked = stacked or isinstance(r, StackedRef)
    for name, t in resident_tensors(residents):
        w, first = found.setdefault(t.worker.device_id, (t.worker, name))
        if w is not t.worker:
            raise DispatchError(
                f"{name} and {first} live on two different workers with device id "
                f"{w.device_id} (two clusters); put the arguments on one cluster"
            )
    ranks = {d: w for d, (w, _) in found.items()}
    for c in calls:
        if c.device in ranks:
            continue
        if stacked:
            raise DispatchError(
                f"device={c.device} is not a rank of the cluster the StackedDeviceTensor "
                f"arguments live on (ranks {sorted(ranks)}); pass cluster="
            )
        ranks[c.device] = default_worker(c.kernel.target.value, c.device)
    return ranks


def _check_resident(pname: str, name: str, t: DeviceTensor, worker: Worker, rank: int) -> None:
    if t.worker is worker or t.freed:
        return  # freed: check_args names it
    where = (
        f"worker {t.worker.device_id} of another cluster"
        if t.worker.device_id == worker.device_id
        else f"worker {t.worker.device_id}"
    )
    got = f"{name}, a DeviceTensor" if name != pname else "a DeviceTensor"
    raise DispatchError(
        f"parameter {pname!r} got {got} of {where}; the call runs on worker "
        f"{worker.device_id} (device={rank}): pass rank {rank}'s shard or copy it over"
    )


_Access = tuple[np.ndarray, Any, int, bool, str]  # (view, key, rank, written, name) of a host array


def _check_host_flow(p: Any, a: HostRef, v: np.ndarray, rank: int, seen: list[_Access]) -> None:
    """Refuse, before dispatch, host data flow that parallel ranks would get wrong (issue 25, issue
    24 item 5). Each rank uploads the host views it uses once, when the program starts, and copies
    its outputs back when it ends; so a view written by one rank and used by another, or two
    different overlapping views on one rank of which one is written, would see stale bytes.
    Views are dense (driver/views.py), so overlap of their byte ranges is exact."""
    written = bool(p.is_output)
    for view, key, r, w, what in seen:
        if not (w or written) or not np.may_share_memory(view, v):
            continue
        if r != rank and w and written:
            raise DispatchError(
                f"parameter {p.name!r}: rank {r} writes {what} and rank {rank} writes {a.name} "
                "of the same host array; give each rank its own plane (out[r])"
            )
        if r != rank and w:
            raise DispatchError(
                f"parameter {p.name!r}: rank {rank} reads {a.name}, which rank {r} writes "
                f"({what}) earlier in this orchestration; ranks run in parallel on the host "
                f"arrays as they were uploaded, so rank {rank} would read the stale bytes. help: "
                f"run both calls on rank {r}, keep the data on one rank (an intermediate), or "
                "split the orchestration in two (the second one sees the first one's results)"
            )
        if r == rank and key != a.key:
            raise DispatchError(
                f"parameter {p.name!r}: {a.name} and {what} overlap in one host array and one "
                f"of them is written on rank {rank}; a rank uploads each view once, so one "
                "would not see the other's bytes: use the same view for both"
            )
    seen.append((v, a.key, rank, written, a.name))


def _call_args(
    call: KernelCall, worker: Worker, writes: dict[int, list[_Access]]
) -> tuple[list[Any], dict[str, int]]:
    """Check one call's arguments on its worker; return the values compile keys on, and its dims."""
    specs, tensor_args, keyed = [], [], []
    for p, a in zip(call.kernel.params, call.args):
        if isinstance(p.type, ScalarType):
            check_scalar(p.name, a, p.type.dtype)
            keyed.append(a)
            continue
        if isinstance(a, StackedRef):
            raise DispatchError(
                f"parameter {p.name!r} got the whole StackedDeviceTensor {a.name}, which spans "
                f"ranks; pass one rank's shard, {a.name}[r]"
            )
        if isinstance(a, HostRef):
            v: Any = a.array
            _check_host_flow(p, a, v, call.device, writes.setdefault(id(a.root), []))
        elif isinstance(a, DeviceRef | PendingRef):
            if isinstance(a, PendingRef) and a.device != call.device:
                raise DispatchError(
                    f"parameter {p.name!r} got {a.name}, an intermediate of rank {a.device}; the "
                    f"call runs on rank {call.device}, and ranks do not share memory: write it to "
                    "an Out of the orchestration and pass it in a second call"
                )
            if isinstance(a, PendingRef) and a.tensor is None:
                a.tensor = worker.alloc_tensor(a.shape, a.dtype)  # freed with the program
            assert a.tensor is not None
            _check_resident(p.name, a.name, a.tensor, worker, call.device)
            v = a.tensor
        elif isinstance(a, comm_run.WindowView):  # comm hook (issue 28): this rank's memory of the window
            v = comm_run.window_tensor(a, call.device)
        else:
            v = a  # check_args refuses it by type
        specs.append(param_spec(p))
        tensor_args.append(v)
        keyed.append(v)
    if call.dims is not None:  # a direct call: check_entry validated them; residency is checked above
        return keyed, call.dims
    return keyed, runtime.dispatch.check_args(specs, tensor_args, worker)


def plan_program(
    calls: Sequence[KernelCall], ranks: dict[int, Any], rank_prefix: bool, options: Options
) -> dict[int, RankPlan]:
    """Validate every call and compile every kernel; nothing runs yet. `ranks` maps each rank to
    its worker: a `runtime.Worker`, or the driver's stand-in for a rank in another process (a
    RayCluster's), which answers the same questions (device id, target, allocation, liveness).
    A program with the signature of one planned before reuses its checked launch plans
    (program_cache.py)."""
    key = program_cache.program_key(calls, ranks, rank_prefix, options)
    plans = None if key is None else program_cache.lookup(key)
    if plans is not None and not program_cache.stale(calls):
        program_cache.HITS[0] += 1
    else:
        plans = _checked(calls, ranks, rank_prefix, options)
        if key is not None:
            program_cache.store(key, plans)
    plan: dict[int, RankPlan] = {}
    for call, lp in zip(calls, plans):
        worker = ranks[call.device]
        for a in call.args:  # a cached plan's intermediates are new (the checks allocated the others)
            if isinstance(a, PendingRef) and a.tensor is None:
                a.tensor = worker.alloc_tensor(a.shape, a.dtype)  # freed with the program
        rk = plan.get(call.device)
        if rk is None:
            rk = plan[call.device] = RankPlan(call.device, worker)
        rk.launches.append(Launch(call, lp))
    return plan


def _checked(
    calls: Sequence[KernelCall], ranks: dict[int, Any], rank_prefix: bool, options: Options
) -> list[LaunchPlan]:
    """The general path of `plan_program`: every check; the launch plans in call order."""
    plans: list[LaunchPlan] = []
    writes: dict[int, list[_Access]] = {}
    for call in calls:
        worker = ranks[call.device]
        try:
            if worker.target != call.kernel.target.value:
                raise DispatchError(
                    f"kernel {call.kernel.__name__} targets {call.kernel.target.value}, "
                    f"worker {worker.device_id} is {worker.target}"
                )
            keyed, dims = _call_args(call, worker, writes)
        except DispatchError as e:
            if not rank_prefix:
                raise
            raise DispatchError(f"rank {call.device}: {call_name(call)}: {e}") from None
        low = call.low if call.low is not None else call.kernel.lower(*keyed)
        graph = call.graph if call.graph is not None else low.final
        if graph is low.final:  # the compile-time memory plan refuses before anything runs
            low.check_memory()
        fresh = [isinstance(a, HostRef) and a.fresh for a in call.args]
        plans.append(LaunchPlan(call.kernel, graph, dims, options, values_of(call), fresh))
    return plans


def run_program(
    calls: Sequence[KernelCall],
    cluster: Any = None,
    residents: Sequence[Any] = (),
    rank_prefix: bool = True,
    options: Options | None = None,
) -> None:
    """Validate all `calls`, run each rank's calls on its worker (ranks in parallel), then copy
    host outputs back; on any failure no output changes. `residents` are the entry's resident
    arguments (they pick the cluster); `rank_prefix` prefixes errors with "rank r: "; `options`
    (default: the context's, `options.current()`) go to every rank's thread."""
    if not calls:
        return
    opts = current() if options is None else options
    remote = remote_cluster_of(cluster, residents)
    if remote is not None:  # ranks in other processes (RayCluster): it checks and runs the program itself
        remote.run_program(calls, residents, rank_prefix, opts)
        return
    plan: dict[int, RankPlan] = {}
    world = None
    try:
        ranks = _rank_workers(calls, cluster, residents)
        if len({id(w) for w in ranks.values()}) != len(ranks):
            raise DispatchError("two ranks map to the same worker")
        world = comm_run.open_world(calls, ranks, cluster)  # comm hook (issue 28): None without windows
        plan = plan_program(calls, ranks, rank_prefix, opts)
        try:
            if world is not None:  # comm hook (issue 28): ranks as threads of one comm world
                comm_run.run_ranks(world, plan)
            elif rank_prefix and rank_batch.same_program(list(plan.values())):
                rank_batch.run_together(list(plan.values()))  # one launch per call over every rank
            elif rank_prefix:
                runtime.dispatch.run_ranks({r: functools.partial(rk.run, True) for r, rk in plan.items()})
            else:
                for rk in plan.values():
                    rk.run(False)
        except BaseException:
            for rk in plan.values():
                rk.restore()
            raise
        for rk in plan.values():
            rk.gather()
    finally:
        if world is not None:  # comm hook (issue 28)
            comm_run.close_world(world, calls)
        for rk in plan.values():
            rk.free()
        for p in pending_refs(calls):
            if p.tensor is not None and not p.tensor.freed:
                p.tensor.worker.free_tensor(p.tensor)


__all__ = [
    "DeviceRef",
    "HostRef",
    "KernelCall",
    "Launch",
    "PendingRef",
    "RankPlan",
    "Ref",
    "StackedRef",
    "as_ref",
    "call_name",
    "check_entry",
    "check_scalar",
    "check_stacked",
    "default_device",
    "out_shape",
    "param_spec",
    "pending_refs",
    "plan_program",
    "resident_tensors",
    "results",
    "run_program",
    "split_args",
    "values_of",
]
