"""The cached direct call: a call with the signature of an earlier successful one (same argument
kinds, shapes, dtypes, device, options) passes every check that depends only on those and
compiles to the same graph. `CallPlan` keeps the `LaunchPlan` those checks produced and runs it
through the one calling convention (convention.py); a call re-checks only the facts that can
change between calls with equal signatures (liveness, worker, contiguity, scalar values) and
takes the general path on any doubt, which checks everything again and raises the error a
refused call gets.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from runtime import DeviceTensor, Worker
from runtime.device import NzDeviceTensor

from ..core.ir import Graph
from .convention import HOST, RESIDENT, SCALAR, ArgSlot, LaunchPlan, Rollback, download, free_temps, restore
from .launch import default_worker, execute
from .options import Options

MISS = object()  # CallPlan.call: this call needs the general path
MAX_PLANS = 64  # per kernel: dynamic dims give one signature per extent; beyond this, no caching


def direct_key(args: Sequence[Any], device: Any, options: Options) -> tuple[Any, ...] | None:
    """The signature of a direct call: each argument's kind, shape and dtype (a scalar's type only:
    its value is checked per call), `device` and the options. None for arguments only the general
    path takes."""
    if device is not None and type(device) is not int:
        return None
    key: list[Any] = [device, options]
    for a in args:
        t = type(a)
        if t is DeviceTensor or t is NzDeviceTensor or t is np.ndarray:  # the class is in the key
            if type(a.shape) is not tuple:
                return None  # a hand-made DeviceTensor: its shape may not even hash
            key.append((t, a.shape, a.dtype))
        elif t is int or t is float or a is None:  # a float only reaches a float parameter
            key.append(t)
        else:
            return None
    return tuple(key)


class CallPlan:
    """A direct call's checked and compiled signature: its `LaunchPlan` and the worker rule.
    Built from a call that succeeded through the general path."""

    def __init__(
        self,
        kernel: Any,
        args: Sequence[Any],
        full: Sequence[Any],
        dims: dict[str, int],
        graph: Graph,
        device: int | None,
        options: Options,
    ) -> None:
        # an Out left out of the arguments, or passed as None: allocated by each call, returned
        compact = len(args) != len(full)
        omitted = [p.is_pure_output and (compact or args[i] is None) for i, p in enumerate(kernel.params)]
        self.launch = LaunchPlan(kernel, graph, dims, options, full, omitted=omitted, compact=compact)
        self.target = kernel.target.value
        self.device = device
        # no resident argument: the call runs on the default worker of its device (a stable object)
        resident = any(s.kind == RESIDENT for s in self.launch.slots)
        self.worker = None if resident else default_worker(self.target, device or 0)
        # issue 24 item 3: a signature does not fix which tensor arguments share memory; each call
        # re-checks them when one of them is written (`overlapping`; resident pairs by their
        # addresses, compared in `worker_for` itself)
        pairs = alias_pairs(self.launch.slots)
        self.resident_pairs = tuple((i, n_i, j, n_j) for i, n_i, j, n_j, host in pairs if not host)
        self.host_pairs = tuple(p for p in pairs if p[4])

    def worker_for(self, args: Sequence[Any]) -> Worker | None:
        """The worker this call runs on, if every per-call fact is as the general path would accept
        it; else None (nothing was changed)."""
        w = None
        for s in self.launch.slots:
            if s.kind == RESIDENT:
                t = args[s.pos]
                if w is None:
                    w = t.worker
                elif t.worker is not w:
                    return None  # other workers: the general path names them
                if not w.gm.is_live(t.address):
                    return None  # use after free
            elif s.kind == HOST:
                flags = args[s.pos].flags
                if not flags.c_contiguous or (s.is_output and not flags.writeable):
                    return None
            elif s.kind == SCALAR:
                a = args[s.pos]
                if s.check(a) != a:  # type: ignore[misc]
                    return None  # out of range
        for i, n_i, j, n_j in self.resident_pairs:  # `overlapping` of one worker's addresses
            lo_i, lo_j = args[i].address, args[j].address
            if lo_i < lo_j + n_j and lo_j < lo_i + n_i:
                return None  # the general path refuses it (check_args)
        if self.host_pairs and overlapping(args, self.host_pairs):
            return None
        if w is None:
            w = self.worker
        elif self.device is not None and self.device != w.device_id:
            return None
        return w if w is not None and w.target == self.target else None

    def call(self, args: Sequence[Any]) -> Any:
        """Run the call through the calling convention; MISS if it needs the general path."""
        w = self.worker_for(args)
        if w is None:
            return MISS
        plan, gm = self.launch, w.gm
        saved: list[tuple[np.ndarray, np.ndarray]] | None = None
        rollback = pending = None
        if plan.resident_outputs:
            if plan.commits_last:  # taken only if the launch needs it (convention.Rollback)
                rollback = Rollback(plan, gm, args)
                pending = [rollback.take]
            else:  # the snapshot a Rollback would take at once, without the object
                saved = plan.snapshot(gm, args, [])
        temps: list[int] = []
        try:
            try:
                vals, host_outputs, outs = plan.place(args, gm, {}, temps)
                execute(plan, w, vals, pending)
            except BaseException:
                if saved:
                    restore(saved)
                elif rollback is not None:
                    rollback.restore()
                raise
            if host_outputs:
                download(gm, host_outputs, outs)
        finally:
            if temps:
                free_temps(gm, temps)
        return None if not outs else outs[0] if len(outs) == 1 else tuple(outs)


def alias_pairs(slots: Sequence[ArgSlot]) -> tuple[tuple[int, int, int, int, bool], ...]:
    """The pairs of tensor arguments `runtime.dispatch.find_alias` would compare, as (position,
    bytes, position, bytes, host?): both of one kind (a host array and a DeviceTensor live in
    different memories: never aliased), one of them written, neither empty. The byte counts are
    the signature's (shape and dtype), so a call only reads each argument's first byte."""
    tensors = [s for s in slots if s.kind in (RESIDENT, HOST) and s.nbytes]
    return tuple(
        (a.pos, a.nbytes, b.pos, b.nbytes, a.kind == HOST)
        for i, a in enumerate(tensors)
        for b in tensors[i + 1 :]
        if a.kind == b.kind and (a.is_output or b.is_output)
    )


def overlapping(args: Sequence[Any], pairs: Sequence[tuple[int, int, int, int, bool]]) -> bool:
    """Do the byte ranges of any pair share a byte? `find_alias`'s test, for the arguments of a
    cached call: its host arrays are C-contiguous (one range from the data pointer) and its
    resident tensors live on the one worker `worker_for` found (one memory), so the ranges alone
    decide; the general path then names the pair."""
    for i, n_i, j, n_j, host in pairs:
        if host:
            lo_i, lo_j = (args[p].__array_interface__["data"][0] for p in (i, j))
        else:
            lo_i, lo_j = args[i].address, args[j].address
        if lo_i < lo_j + n_j and lo_j < lo_i + n_i:
            return True
    return False
