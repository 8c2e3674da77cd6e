"""The cached program plan (issue 25 item 4): an orchestration called again with a program of the
same signature passes every check that depends only on that signature, and compiles to the same
launches.

An orchestration's body runs on every call (it is plain Python: the program it records may
change), but most programs it records are the same from call to call: the same kernels on the
same ranks, views of the same arguments, intermediates of the same shapes. Checking such a
program again (`call.plan_program`: argument checks, host data flow, compile-cache lookups, the
memory plan, the launch conventions) cost the caller 1.2 ms of tp_moe's 4-rank call, on the serial
path before any rank starts. `program_key` is the signature of a recorded program; under an equal
key the checked `LaunchPlan`s of the first call are used again, and only the facts that can change
between calls with equal keys are checked again (`stale`: whether a resident tensor was freed) -
with any doubt the general path runs, which checks everything and raises the error a refused
program gets. The same contract as a cached direct call (direct_call.py).

What the key holds, and why that is enough (each item is something the general path reads):
- per call: the kernel and its compile cache's generation (`kernel.clear_cache()` forces a new
  trace: a new generation misses), the rank, its worker (GM serial, target);
- per host array: which argument array it is a view of (the first-seen order of the roots, not
  their identity: a new array of the same shape each call still hits) and that array's shape, the
  view's index, shape, dtype, class, layout mark and flags (contiguity, writability), and whether
  it is a fresh output. Host data flow (`call._check_host_flow`) compares views of one root,
  which the key pins; two different roots that share memory are not keyed at all (their overlaps
  depend on where they lie);
- per resident tensor: its GM (serial), address, shape, dtype and class (the layout). Addresses
  are never handed out twice (runtime/memory.py), so equal addresses are the same allocation,
  live or freed - which is checked per call;
- per intermediate: its first-use order, class, shape, dtype and rank (a fresh allocation, which
  aliases nothing);
- per scalar: its type and value; the options and whether errors name the rank.
Windows of communicating ranks, pinned compile stages, remote workers and a test's guard bypass
take the general path.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np

from runtime import DeviceTensor, Worker
from runtime.layout_marks import layout_of

from ..passes.guard_bypass import ON_ANYWHERE
from .refs import DeviceRef, HostRef, KernelCall, PendingRef

__all__ = ["MAX_PROGRAMS", "HITS", "clear", "lookup", "program_key", "stale", "store"]

MAX_PROGRAMS = 64  # programs kept (least recently used first out): each holds its launch plans
HITS = [0]  # programs planned from the cache so far (tests: the second call really hit)

_HOST, _RESIDENT, _PENDING, _SCALAR = range(4)
_SCALARS = (int, float, bool, np.integer, np.floating, np.bool_)

_cache: OrderedDict[tuple[Any, ...], list[Any]] = OrderedDict()
_lock = threading.Lock()


def program_key(
    calls: Sequence[KernelCall], ranks: dict[int, Any], rank_prefix: bool, options: Any
) -> tuple[Any, ...] | None:
    """The signature of the program `calls` on `ranks` (module docstring), or None when only the
    general path may plan it."""
    if ON_ANYWHERE[0]:
        return None  # a test switched a guard off: its own compiled forms, never a cached plan
    key: list[Any] = [options, rank_prefix]
    roots: dict[int, int] = {}
    root_arrays: list[np.ndarray] = []
    pendings: dict[int, int] = {}
    for call in calls:
        if call.dims is not None or call.low is not None or call.graph is not None:
            return None
        cache = getattr(call.kernel, "cache", None)
        worker = ranks[call.device]
        if cache is None or not isinstance(worker, Worker):
            return None  # a stand-in for a rank elsewhere (a RayCluster's): its own checks
        key.append((call.kernel, cache.generation, call.device, worker.gm.serial, worker.target))
        for a in call.args:
            t = type(a)
            if t is HostRef:
                n = roots.setdefault(id(a.root), len(roots))
                if n == len(root_arrays):
                    root_arrays.append(a.root)
                v = a.array
                flags = v.flags
                key.append(
                    (_HOST, n, a.root.shape, a.key[1], a.fresh, v.shape, v.dtype, type(v), layout_of(v),
                     flags.c_contiguous, flags.writeable)
                )  # fmt: skip
            elif t is DeviceRef:
                d = a.tensor
                if not isinstance(d, DeviceTensor) or type(d.shape) is not tuple:
                    return None
                key.append((_RESIDENT, type(d), d.worker.gm.serial, d.address, d.shape, d.dtype))
            elif isinstance(a, PendingRef):
                if a.tensor is not None:
                    return None
                n = pendings.setdefault(id(a), len(pendings))
                key.append((_PENDING, n, type(a), a.shape, a.dtype, a.device))
            elif isinstance(a, _SCALARS):
                key.append((_SCALAR, t, a))
            else:
                return None  # a whole stack, a window, anything refused: the general path says why
    for i, r in enumerate(root_arrays):
        for s in root_arrays[:i]:
            if np.may_share_memory(r, s):
                return None
    return tuple(key)


def stale(calls: Sequence[KernelCall]) -> bool:
    """Has a fact the key does not fix changed: a resident tensor freed since it was keyed?"""
    return any(type(a) is DeviceRef and a.tensor.freed for call in calls for a in call.args)


def lookup(key: tuple[Any, ...]) -> list[Any] | None:
    """The launch plans of the program with this key, one per call in order (or None)."""
    with _lock:
        plans = _cache.get(key)
        if plans is not None:
            _cache.move_to_end(key)
    return plans


def store(key: tuple[Any, ...], plans: list[Any]) -> None:
    """Keep the checked launch plans of a program planned by the general path."""
    with _lock:
        _cache[key] = plans
        _cache.move_to_end(key)
        while len(_cache) > MAX_PROGRAMS:
            _cache.popitem(last=False)


def clear() -> None:
    """Forget every cached program (tests; a kernel's `clear_cache` needs no call here)."""
    with _lock:
        _cache.clear()
