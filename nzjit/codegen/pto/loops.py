"""PTO emitters of the staged loops: `scf.for` with `iter_args`, and SPMD lanes as the launch's blocks
or as an `scf.for` over the lanes (`launch_loop` decides)."""

from __future__ import annotations

from ... import prims as P
from ...core.dtypes import INDEX
from ...core.ir import Atom, Eqn, Graph, Literal, Var
from ...core.types import TensorType
from ...errors import InternalError
from .emitter import Emitter, Lane, Tile, rule


def _scalar_or_tile_type(em: Emitter, a: Atom) -> str:
    x = em.env.get(a) if isinstance(a, Var) else None
    if isinstance(x, Tile):
        return x.spelled
    return a.type.dtype.short


def _bind_like(em: Emitter, v: Var, init: Atom, ssa: str) -> None:
    """Body input / loop result `v` takes the form of its initial value (a tile keeps its layout)."""
    x = em.env.get(init) if isinstance(init, Var) else None
    em.env[v] = Tile(ssa, x.type, x.layout, x.valid) if isinstance(x, Tile) else ssa


def _bounds(em: Emitter, e: Eqn) -> tuple[str, str, str, str]:
    start, stop, step = (em.value(x) for x in e.inputs[:3])
    d = e.inputs[0].type.dtype
    return start, stop, step, "" if d is INDEX else f" : {d.short}"


@rule(P.for_p)
def _for(em: Emitter, e: Eqn) -> None:
    if e.params["kind"] == "spmd":
        _spmd(em, e)
        return
    nb, nc, nk = e.params["arity"]
    body: Graph = e.params["body"]
    for p, a in zip(body.params[1 : 1 + nc], e.inputs[nb : nb + nc]):
        em.alias(p, a)
    inits, carries = e.inputs[nb + nc :], body.params[1 + nc :]
    iters = [i for i, c in enumerate(carries) if not isinstance(c.type, TensorType)]
    for i, c in enumerate(carries):
        if i not in iters:  # a carried tensor is the tensor it was stored into (an alias)
            em.alias(c, inits[i])
            em.alias(e.outputs[i], inits[i])
    results = []
    for i in iters:
        ssa = em.names.fresh(e.outputs[i].hint, "r")
        _bind_like(em, e.outputs[i], inits[i], ssa)
        results.append(ssa)
    start, stop, step, ty = _bounds(em, e)
    iv = em.define(body.params[0], "i")
    head = f"scf.for {iv} = {start} to {stop} step {step}{ty}"
    if iters:
        pairs, types = [], []
        for i in iters:
            ssa = em.names.fresh(carries[i].hint, "r")
            types.append(_scalar_or_tile_type(em, inits[i]))
            pairs.append(f"{ssa} = {_ssa(em, inits[i])}")
            _bind_like(em, carries[i], inits[i], ssa)
        head = f"{', '.join(results)} = {head} iter_args({', '.join(pairs)}) -> ({', '.join(types)})"
    em.line(head + " {")
    em.depth += 1
    em.eqns(body.eqns)
    if iters:
        outs = [body.outputs[i] for i in iters]
        em.line(
            f"scf.yield {', '.join(_ssa(em, a) for a in outs)} : "
            f"{', '.join(_scalar_or_tile_type(em, inits[i]) for i in iters)}"
        )
    em.depth -= 1
    stage = e.params.get("stage")
    em.line(
        "}"
        + (f" {{pto.pipeline_stages = {stage} : i64}}" if e.params["kind"] == "pipeline" and stage else "")
    )


def _ssa(em: Emitter, a: Atom) -> str:
    if isinstance(a, Literal):
        return em.value(a)
    x = em.env.get(a)
    if isinstance(x, Tile):
        return x.ssa
    if isinstance(x, str):
        return x
    raise InternalError(f"codegen: {a!r} has no SSA value")


def _spmd(em: Emitter, e: Eqn) -> None:
    """The lanes: the launch's block index when this loop is the kernel (module docstring), else an
    `scf.for` over the lanes, as the backend runs them."""
    nb, nc, _ = e.params["arity"]
    body: Graph = e.params["body"]
    for p, a in zip(body.params[1 : 1 + nc], e.inputs[nb : nb + nc]):
        em.alias(p, a)
    if e is em.launch:
        idx = em.define(body.params[0], "lane")
        em.line(f"{idx} = pto.get_block_idx : index")
        em.lanes.append(Lane(idx, em.value(e.inputs[1])))
        em.eqns(body.eqns)
        em.lanes.pop()
        return
    start, stop, step, ty = _bounds(em, e)
    count = stop if isinstance(e.inputs[0], Literal) and e.inputs[0].value == 0 else _lane_count(em, e)
    iv = em.define(body.params[0], "lane")
    em.line(f"scf.for {iv} = {start} to {stop} step {step}{ty} {{")
    em.depth += 1
    em.lanes.append(Lane(iv, count))
    em.eqns(body.eqns)
    em.lanes.pop()
    em.depth -= 1
    em.line("}")


def _lane_count(em: Emitter, e: Eqn) -> str:
    """stop - start, what get_block_num reports inside the lanes (backend/loops.py)."""
    start, stop = (em.value(x) for x in e.inputs[:2])
    out = em.names.fresh("lanes")
    em.line(f"{out} = arith.subi {stop}, {start} : {e.inputs[0].type.dtype.short}")
    return out


def launch_loop(g: Graph) -> Eqn | None:
    """The top-level `pl.spmd(n)` that can be the launch grid: static 0..n step 1, and nothing
    outside it stores (code outside is replicated on every block, so it must be pure)."""
    spmd = [e for e in g.eqns if e.primitive is P.for_p and e.params["kind"] == "spmd"]
    if len(spmd) != 1:
        return None
    (loop,) = spmd
    start, stop, step = loop.inputs[:3]
    if not (
        isinstance(start, Literal)
        and isinstance(stop, Literal)
        and isinstance(step, Literal)
        and start.value == 0
        and step.value == 1
        and int(stop.value) > 0
    ):
        return None
    for e in g.eqns:
        if e is not loop and _stores(e):
            return None
    return loop


def _stores(e: Eqn) -> bool:
    if e.primitive is P.tile_store_p:
        return True
    body = e.params.get("body")
    return isinstance(body, Graph) and any(x.primitive is P.tile_store_p for x in body.walk())
