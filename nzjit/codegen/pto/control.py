"""PTO emitter of `cond` (a staged `if` arm, nzjit/prims/control.py): an `scf.if` whose `else`
yields the carries unchanged. The `else` arm of a two-armed `if` is a second `cond` on the same
predicate with `negate`: its condition is `arith.xori %pred, %true`."""

from __future__ import annotations

from ... import prims as P
from ...core.dtypes import BOOL
from ...core.ir import Eqn, Graph
from ...core.types import TensorType
from .emitter import Emitter, rule
from .loops import _bind_like, _scalar_or_tile_type, _ssa


@rule(P.cond_p)
def _cond(em: Emitter, e: Eqn) -> None:
    """`[%r = ] scf.if %pred [-> (types)] { arm; scf.yield new } else { scf.yield old }`."""
    nb, nc, nk = e.params["arity"]
    body: Graph = e.params["body"]
    em.alias(body.params[0], e.inputs[0])
    for p, a in zip(body.params[1 : 1 + nc], e.inputs[nb : nb + nc]):
        em.alias(p, a)
    inits, carries = e.inputs[nb + nc :], body.params[1 + nc :]
    yields = [i for i, c in enumerate(carries) if not isinstance(c.type, TensorType)]
    for i, c in enumerate(carries):
        em.alias(c, inits[i])
        if i not in yields:  # a carried tensor is the tensor it was stored into (an alias)
            em.alias(e.outputs[i], inits[i])
    pred = em.value(e.inputs[0])
    if e.params.get("negate", False):
        neg = em.names.fresh(f"not_{pred[1:]}")
        em.line(f"{neg} = arith.xori {pred}, {em.const(True, BOOL)} : i1")
        pred = neg
    types = [_scalar_or_tile_type(em, inits[i]) for i in yields]
    olds = [_ssa(em, inits[i]) for i in yields]
    results = [em.names.fresh(e.outputs[i].hint, "r") for i in yields]
    head = f"scf.if {pred}" + (f" -> ({', '.join(types)})" if yields else "") + " {"
    em.line((f"{', '.join(results)} = " if yields else "") + head)
    em.depth += 1
    em.eqns(body.eqns)
    if yields:
        em.line(f"scf.yield {', '.join(_ssa(em, body.outputs[i]) for i in yields)} : {', '.join(types)}")
        em.depth -= 1
        em.line("} else {")
        em.depth += 1
        em.line(f"scf.yield {', '.join(olds)} : {', '.join(types)}")
    em.depth -= 1
    em.line("}")
    for i, ssa in zip(yields, results):
        _bind_like(em, e.outputs[i], inits[i], ssa)
