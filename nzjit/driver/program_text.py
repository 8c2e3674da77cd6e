"""The program an orchestration records, as text (`nzjit ir` / `nzjit pto` on an orchestration).

    # orchestration moe_experts: 12 kernel calls on 4 ranks
    orchestration moe_experts(xe: FP32[4, 2, 64, 256], wg: FP32[4, 2, 512, 256] NZ, ...)
    12 intermediates, each on its rank and freed when the program ends; ranks run in parallel, each its calls in order
    rank 0:
      gate_up(xe[0], wg[0], wu[0]) -> gate_up.g@rank0, gate_up.u@rank0  # tp_moe.py:80
      ...
      intermediates: gate_up.g@rank0 FP32[2, 64, 512], gate_up.u@rank0 FP32[2, 64, 512], act.h@rank0 ...

Rank by rank, each rank's calls in program order: the inputs, then the outputs (an InOut is in
both), each an argument's view (`w[1, 0:2]`), an intermediate by name, or a scalar. Nothing runs.
"""

from __future__ import annotations

import os
from typing import Any

from ..backend.refs import PendingRef
from ..core.dtypes import from_numpy
from ..core.types import DynDim, Layout, ScalarType


def _type_text(t: Any) -> str:
    if isinstance(t, ScalarType):
        return t.dtype.name
    nz = " NZ" if t.layout is Layout.NZ else ""
    return f"{t.dtype.name}{[d.name if isinstance(d, DynDim) else int(d) for d in t.shape]}{nz}"


def _plural(n: int, what: str) -> str:
    return f"{n} {what}{'s' if n != 1 else ''}"


def program_text(prog: Any) -> str:
    """The recorded program `prog` (driver/orchestration.py Program) as text (see the module)."""
    entry, calls = prog.entry, prog.calls
    ranks = sorted({c.device for c in calls})
    sig = ", ".join(
        f"{p.name}: {'Out ' if p.is_pure_output else 'InOut ' if p.is_output else ''}{_type_text(p.type)}"
        for p in entry.params
    )
    body: list[str] = []
    made = 0
    for r in ranks:
        body.append(f"rank {r}:")
        new: list[str] = []
        seen: set[int] = set()
        for c in (c for c in calls if c.device == r):
            names = [a.name if hasattr(a, "name") else repr(a) for a in c.args]
            ins = [n for p, n in zip(c.kernel.params, names) if not p.is_pure_output]
            outs = [n for p, n in zip(c.kernel.params, names) if p.is_output]
            where = f"  # {os.path.basename(c.source.file)}:{c.source.line}" if c.source is not None else ""
            body.append(f"  {c.kernel.__name__}({', '.join(ins)}) -> {', '.join(outs) or 'nothing'}{where}")
            for a in c.args:
                if isinstance(a, PendingRef) and id(a) not in seen:
                    seen.add(id(a))
                    new.append(f"{a.name} {from_numpy(a.dtype).name}{list(a.shape)}")
        if new:
            body.append(f"  intermediates: {', '.join(new)}")
        made += len(new)
    head = [
        f"# orchestration {entry.__name__}: {_plural(len(calls), 'kernel call')} on {_plural(len(ranks), 'rank')}",
        f"orchestration {entry.__name__}({sig})",
        f"{_plural(made, 'intermediate')}, each on its rank and freed when the program ends; ranks run in "
        "parallel, each its calls in order",
    ]
    return "\n".join(head + body)


__all__ = ["program_text"]
