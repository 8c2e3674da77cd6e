"""Instrumenting a kernel's local accesses of its own windows for the race detector (issue 28).

A `pl.store` into / `pl.load` from a `pld.DistributedTensor` is an ordinary TSTORE / TLOAD on the
device. When a program runs in a comm world, its graphs run with those two equations swapped for
`comm.window_store` / `comm.window_load`: the same implementation (the generic tile store / load),
then the exact bytes are reported to the world (`Endpoint.local_store` / `local_load`), so a store
of zeros into a fresh window counts as written and a load of bytes a peer stored unordered is a
race. The compiled graph (`low.final`, its IR and PTO) is unchanged; this is run-time only. The
two primitives' rules are in backend/rules/comm.py.
"""

from __future__ import annotations

import threading
import weakref

from .. import prims as P
from ..core.ir import Graph

__all__ = ["instrument"]

# original -> instrumented, dropped with the original (a Graph hashes by identity: eq=False).
# A graph with nothing to instrument maps to None, not to itself: a value referring to its key
# would keep the entry alive for ever
_cache: weakref.WeakKeyDictionary[Graph, Graph | None] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def instrument(g: Graph) -> Graph:
    """`g` with its stores into / loads from window parameters instrumented (cached per graph)."""
    with _lock:
        if g in _cache:
            return _cache[g] or g
        out = _rewrite(g)
        _cache[g] = None if out is g else out
        return out


def _rewrite(g: Graph) -> Graph:
    eqns = []
    changed = False
    for e in g.eqns:
        body = e.params.get("body")
        if isinstance(body, Graph):
            nb = _rewrite(body)
            if nb is not body:
                e = e.replace(params={**e.params, "body": nb})
                changed = True
        elif e.primitive is P.tile_store_p and isinstance(e.inputs[-1].type, P.DistributedTensorType):
            e, changed = e.replace(primitive=P.comm_window_store_p), True
        elif e.primitive is P.tile_load_p and isinstance(e.inputs[0].type, P.DistributedTensorType):
            e, changed = e.replace(primitive=P.comm_window_load_p), True
        eqns.append(e)
    if not changed:
        return g
    return Graph(g.params, eqns, g.outputs, dict(g.attrs), g.name)
