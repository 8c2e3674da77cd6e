"""Walks a graph and issues runtime instructions: a precomputed plan per graph, values freed at
their last use, SPMD lanes run with their own block index, loops run their trips."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from runtime import GlobalMemory, OnChip, TileBuf

from ..core import primitives as P
from ..core.ir import Eqn, Graph, Literal, Var
from ..errors import InternalError
from .impl import impl_rules
from .values import TransposedTile


@dataclass
class Step:
    eqn: Eqn
    fn: Any
    free_after: tuple[Var, ...]  # values whose last use is this equation
    consumed: frozenset[int]  # input positions whose value dies here (in-place update allowed)


@dataclass
class Plan:
    steps: list[Step]


@dataclass
class Ctx:
    gm: GlobalMemory
    onchip: OnChip
    dims: dict[str, int]
    block_idx: int = 0
    block_num: int = 1
    plans: dict[int, Plan] = field(default_factory=dict)
    step: Step | None = None

    def consumes(self, e: Eqn, i: int) -> bool:
        return self.step is not None and i in self.step.consumed


def make_plan(g: Graph, n_owned_params: int) -> Plan:
    """Last uses: a value dies after the last equation that reads it (a transposed view keeps its
    source alive). Only the trailing `n_owned_params` params (loop carries) are owned by `g`:
    kernel arguments and captured values belong to the caller."""
    last: dict[Var, int] = {}
    for i, e in enumerate(g.eqns):
        for a in e.inputs:
            if isinstance(a, Var):
                last[a] = i
    keep = {a for a in g.outputs if isinstance(a, Var)}
    for i in range(len(g.eqns) - 1, -1, -1):
        e = g.eqns[i]
        if e.primitive is P.tile_transpose_view_p and isinstance(e.inputs[0], Var):
            src, view = e.inputs[0], e.outputs[0]
            last[src] = max(last.get(src, i), last.get(view, i))
            if view in keep:
                keep.add(src)
    n_params = len(g.params)
    keep.update(g.params[: n_params - n_owned_params])
    free: dict[int, list[Var]] = {}
    for v, i in last.items():
        if v not in keep:
            free.setdefault(i, []).append(v)
    steps = []
    for i, e in enumerate(g.eqns):
        fn = impl_rules.get(e.primitive)
        if fn is None and e.primitive is not P.for_p:
            raise InternalError(f"no backend implementation for {e.primitive.name}")
        dying = set(free.get(i, ()))
        consumed = frozenset(j for j, a in enumerate(e.inputs) if isinstance(a, Var) and a in dying
                             and sum(1 for b in e.inputs if b is a) == 1)
        for out in e.outputs:  # a result nobody reads dies at once
            if out not in last and out not in keep:
                free.setdefault(i, []).append(out)
        steps.append(Step(e, fn, tuple(free.get(i, ())), consumed))
    return Plan(steps)


def _free(ctx: Ctx, val: Any) -> None:
    if isinstance(val, TileBuf) and not val.freed and getattr(val, "_owner", None) is ctx.onchip:
        ctx.onchip.free_tile(val)


def run_graph(ctx: Ctx, g: Graph, args: list[Any], n_owned_params: int = 0) -> list[Any]:
    plan = ctx.plans.get(id(g))
    if plan is None:
        plan = ctx.plans[id(g)] = make_plan(g, n_owned_params)
    env: dict[Var, Any] = dict(zip(g.params, args))
    for st in plan.steps:
        e = st.eqn
        ins = [a.value if isinstance(a, Literal) else env[a] for a in e.inputs]
        ctx.step = st
        outs = run_loop(ctx, e, ins) if st.fn is None else st.fn(ctx, e, ins)
        for v, val in zip(e.outputs, outs):
            env[v] = val
        for v in st.free_after:
            val = env.pop(v, None)
            if val is not None and not any(val is o for o in outs):  # updated in place: lives on
                _free(ctx, val)
    return [a.value if isinstance(a, Literal) else env[a] for a in g.outputs]


def _copy_tile(ctx: Ctx, t: Any) -> Any:
    if not isinstance(t, TileBuf):
        return t
    c = ctx.onchip.alloc_tile(t.space, t.rows, t.cols, t.dtype, layout=t.layout, valid_row=t.valid_row,
                              valid_col=t.valid_col)
    c.data[:] = t.data
    return c


def run_loop(ctx: Ctx, e: Eqn, ins: list[Any]) -> list[Any]:
    nb, nc, nk = e.params["arity"]
    start, stop, step = (int(x) for x in ins[:3])
    captured = ins[nb : nb + nc]
    carries = list(ins[nb + nc :])
    st = ctx.step
    assert st is not None
    # a carry's initial value is updated in place by the body: copy it if it is read afterwards
    carries = [c if (nb + nc + i) in st.consumed else _copy_tile(ctx, c) for i, c in enumerate(carries)]
    body: Graph = e.params["body"]
    if e.params["kind"] == "spmd":
        saved = (ctx.block_idx, ctx.block_num)
        n = max(0, stop - start)
        try:
            for lane in range(start, stop, step):
                ctx.block_idx, ctx.block_num = lane, n
                run_graph(ctx, body, [lane, *captured])
        finally:
            ctx.block_idx, ctx.block_num = saved
        return []
    for i in range(start, stop, step):
        carries = run_graph(ctx, body, [i, *captured, *carries], nk)
    return carries


__all__ = ["Ctx", "run_graph", "TransposedTile"]
