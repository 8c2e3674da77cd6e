"""The numpy implementation of `cond` (the one-armed `if`, nzjit/prims/control.py), registered into
`impl_rules`: the arm runs when the condition holds, else the carries pass through unchanged."""

from __future__ import annotations

from typing import Any

from ..core.ir import Eqn, Graph
from ..prims.control import cond_p
from .executor import _copy_tile, plan_of, run_plan
from .impl import impl_rules

__all__ = ["run_cond"]


def run_cond(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    """`if pred: carries = body(captured, carries)`; returns the carries."""
    nb, nc, nk = e.params["arity"]
    pred, captured = ins[0], ins[nb : nb + nc]
    # a carry the arm updates in place is copied when it is read afterwards (as a loop's initial carry)
    carries = [c if ctx.consumes(e, nb + nc + i) else _copy_tile(ctx, c) for i, c in enumerate(ins[nb + nc :])]
    if not pred:
        return carries
    body: Graph = e.params["body"]
    return run_plan(ctx, plan_of(body, nk), [pred, *captured, *carries])


impl_rules[cond_p] = run_cond
