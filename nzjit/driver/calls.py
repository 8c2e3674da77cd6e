"""The call entries: `kernel(...)` and `Lowered.run(...)` outside an orchestration are one-call
programs of the calling convention (backend/call.py, backend/convention.py); inside an
orchestration body they are recorded. A direct call whose signature matched an earlier
successful one runs its cached call plan (backend/direct_call.py). Every entry captures the
options of its context once (`backend.options.current()`) and passes them on."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

import runtime

from ..backend.call import (
    DeviceRef,
    HostRef,
    KernelCall,
    as_ref,
    check_entry,
    default_device,
    out_shape,
    results,
    run_program,
    split_args,
)
from ..backend.direct_call import MAX_PLANS, MISS, CallPlan, direct_key
from ..backend.options import Options, current
from ..core.ir import Graph
from ..passes.guard_bypass import ON_ANYWHERE, active_bypasses

#: the orchestration body recording on this thread (orchestration.py sets `.program`)
recording = threading.local()


def active_program() -> Any:
    """The program an orchestration body on this thread is recording, if any."""
    return getattr(recording, "program", None)


def _call(
    kernel: Any, args: Sequence[Any], device: int | None, low: Any, graph: Graph | None, options: Options
) -> Any:
    """A direct call: a one-call program with the kernel's own parameters as the entry."""
    full, _ = split_args(kernel, args)
    dims = check_entry(kernel, full, allow_stacked=False)  # before compiling: a refused call costs nothing
    refs = []
    for i, (p, a) in enumerate(zip(kernel.params, full)):
        if a is None:
            full[i] = np.zeros(out_shape(p, dims), p.type.dtype.np_dtype)
            refs.append(HostRef(full[i], None, p.name, fresh=True))
        else:
            refs.append(as_ref(a, p.name))
    rank = (
        default_device(refs) if device is None else runtime.dispatch.check_device(device)
    )  # issue 24 item 9
    residents = [r for r in refs if isinstance(r, DeviceRef)]
    run_program(
        [KernelCall(kernel, refs, int(rank), graph=graph, low=low, dims=dims)],
        residents=residents,
        rank_prefix=False,
        options=options,
    )
    if low is None and not (ON_ANYWHERE[0] and active_bypasses()):  # keep the call plan for the next call
        key = direct_key(args, device, options)
        plans = kernel.cache.call_plans
        if key is not None and key not in plans and len(plans) < MAX_PLANS:
            graph = kernel.lower(*full).final  # the compile cache entry this call ran (same arguments)
            plans[key] = CallPlan(kernel, args, full, dims, graph, device, options)
    return results(kernel, full)


def call_lowered(low: Any, graph: Graph, args: Sequence[Any], device: int | None = None) -> Any:
    """`Lowered.run(*args, after=)`: run one compiled stage (recorded inside an orchestration)."""
    prog = active_program()
    if prog is not None:
        return prog.record(low.kernel, args, device, low=low, graph=graph)
    return _call(low.kernel, args, device, low, graph, current())


def call_kernel(kernel: Any, *args: Any, device: int | None = None) -> Any:
    """`kernel(*args, device=)` (Kernel.__call__): a one-kernel orchestration, or a recorded call
    inside one."""
    prog = getattr(recording, "program", None)  # active_program(), inline: every call asks
    if prog is not None:
        return prog.record(kernel, args, device)
    options = current()
    key = (
        None if ON_ANYWHERE[0] and active_bypasses() else direct_key(args, device, options)
    )  # bypass: no plan
    plan = kernel.cache.call_plans.get(key) if key is not None else None
    if plan is not None:
        out = plan.call(args)
        if out is not MISS:
            return out
    return _call(kernel, args, device, None, None, options)
