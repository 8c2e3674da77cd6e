"""Dead-code elimination over the IR: pure equations nobody reads, and loop carries and captures
that a loop neither reads nor hands to a reader. Used by tracing and after every pass (`Rewriter.run`)."""

from __future__ import annotations

from collections.abc import Sequence

from ..core.ir import Atom, Eqn, Graph, Var
from ..prims import PURE, for_p


def prune(eqns: Sequence[Eqn], live_out: Sequence[Atom]) -> list[Eqn]:
    """Drop pure equations nobody reads, and loop carries and captures a loop neither reads nor
    returns to a reader (e.g. a tile reloaded every trip under the name it had before the loop)."""
    live = {a for a in live_out if isinstance(a, Var)}
    kept: list[Eqn] = []
    add = live.add
    for e in reversed(eqns):  # plain loops: this runs after every pass, over every equation
        p = e.primitive
        if p is for_p:
            e = _prune_loop(e, live)
        elif p in PURE:
            for v in e.outputs:
                if v in live:
                    break
            else:
                continue
        kept.append(e)
        for a in e.inputs:
            if type(a) is Var:  # no subclasses; cheaper than isinstance in this hot loop
                add(a)
    kept.reverse()
    return kept


def _prune_loop(e: Eqn, live: set[Var]) -> Eqn:
    nb, nc, nk = e.params["arity"]
    body: Graph = e.params["body"]
    carry_params = body.params[1 + nc :]
    keep = [v in live for v in e.outputs]
    while True:  # a carry the body reads stays; that can make another carry's output read
        outs = [o for o, k in zip(body.outputs, keep) if k]
        eqns = prune(body.eqns, outs)
        used = {a for x in eqns for a in x.inputs if isinstance(a, Var)}
        used.update(a for a in outs if isinstance(a, Var))
        new_keep = [k or p in used for k, p in zip(keep, carry_params)]
        if new_keep == keep:
            break
        keep = new_keep
    cap = [i for i, p in enumerate(body.params[1 : 1 + nc]) if p in used]
    car = [i for i, k in enumerate(keep) if k]
    captured, inits = e.inputs[nb : nb + nc], e.inputs[nb + nc :]
    new_body = Graph(
        [body.params[0], *(body.params[1 + i] for i in cap), *(carry_params[i] for i in car)],
        eqns,
        [body.outputs[i] for i in car],
        dict(body.attrs),
        body.name,
    )
    params = dict(e.params, body=new_body, arity=(nb, len(cap), len(car)))
    inputs = (*e.inputs[:nb], *(captured[i] for i in cap), *(inits[i] for i in car))
    return e.replace(inputs=inputs, outputs=tuple(e.outputs[i] for i in car), params=params)
