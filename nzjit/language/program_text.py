"""The program an orchestration records, as text (`nzjit ir FILE` on an orchestration; issue 25).

    program moe_experts: 12 kernel calls on ranks 0..3, 8 intermediates
      rank 0: gate_up(x=xe[0], wg=wg[0], wu=wu[0]) -> g=new gate_up.g@rank0 FP32[2, 64, 512], ...  # tp_moe.py:84

One line per kernel call in program order: its rank, each input (an argument's view, an
intermediate by name, a scalar), each output (an argument's view, or `new NAME TYPE`: an
intermediate allocated on that rank and freed when the program ends). Nothing runs: the body is
recorded with zero arrays of the annotated shapes.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from ..backend import call as C
from ..core.types import DynDim, Layout, ScalarType
from ..errors import CompileError


def placeholder_args(entry: Any) -> list[Any]:
    """Zero arrays of `entry`'s annotated shapes and dtypes (0 for a scalar), Outs left out."""
    args: list[Any] = []
    for p in entry.params:
        if isinstance(p.type, ScalarType):
            args.append(0)
            continue
        dyn = [d.name for d in p.type.shape if isinstance(d, DynDim)]
        if dyn:
            raise CompileError(f"orchestration {entry.__name__}: parameter {p.name!r} has the dynamic dim "
                               f"{dyn[0]}; its program depends on the arguments", entry.source,
                               help="record it with arguments: print(program_text(orch.record(*args)))")
        if not p.is_pure_output:
            args.append(np.zeros(tuple(int(d) for d in p.type.shape), p.type.dtype.np_dtype))
    return args


def _type_text(p: Any) -> str:
    t = p.type
    if isinstance(t, ScalarType):
        return t.dtype.name
    nz = " NZ" if t.layout is Layout.NZ else ""
    return f"{t.dtype.name}{[d.name if isinstance(d, DynDim) else int(d) for d in t.shape]}{nz}"


def _arg_text(a: Any, p: Any, outputs: set[int]) -> str:
    if isinstance(a, C.PendingRef):
        if id(a) in outputs:
            return f"{a.name}"
        outputs.add(id(a))
        return f"new {a.name} {p.type.dtype.name}{list(a.shape)}"
    if isinstance(a, C.HostRef | C.DeviceRef | C.StackedRef):
        return a.name
    return repr(a)


def program_text(prog: Any) -> str:
    """The recorded program `prog` (language/orchestration.py Program) as text, one call per line."""
    entry = prog.entry
    calls = prog.calls
    made: set[int] = set()
    lines = []
    for c in calls:
        ins: list[str] = []
        outs: list[str] = []
        for p, a in zip(c.kernel.params, c.args):
            text = f"{p.name}={_arg_text(a, p, made)}"
            (outs if p.is_output else ins).append(text)  # an InOut is listed once, with the outputs
        where = f"  # {os.path.basename(c.source.file)}:{c.source.line}" if c.source else ""
        lines.append(f"  rank {c.device}: {c.kernel.__name__}({', '.join(ins)}) -> {', '.join(outs) or 'nothing'}"
                     f"{where}")
    ranks = sorted({c.device for c in calls})
    span = (f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {ranks[0]}..{ranks[-1]}"
            if ranks == list(range(ranks[0], ranks[-1] + 1)) else f"ranks {ranks}") if ranks else "no rank"
    sig = ", ".join(f"{p.name}: {'Out ' if p.is_pure_output else 'InOut ' if p.is_output else ''}{_type_text(p)}"
                    for p in entry.params)
    head = [f"orchestration {entry.__name__}({sig})",
            f"program {entry.__name__}: {len(calls)} kernel call{'s' * (len(calls) != 1)} on {span}, "
            f"{len(made)} intermediate{'s' * (len(made) != 1)} (on their rank, freed when the program ends); "
            "ranks run in parallel, each its calls in this order"]
    return "\n".join(head + lines)


__all__ = ["placeholder_args", "program_text"]
