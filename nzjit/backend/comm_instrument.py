"""Instrumenting a kernel's local accesses of its own windows for the race detector (issue 28).

A `pl.store` into / `pl.load` from a `pld.DistributedTensor` is an ordinary TSTORE / TLOAD on the
device. When a program runs in a comm world, its graphs run with those two equations swapped for
`comm.window_store` / `comm.window_load`: the same implementation (the generic tile store / load),
then the exact bytes are reported to the world (`Endpoint.local_store` / `local_load`), so a store
of zeros into a fresh window counts as written and a load of bytes a peer stored unordered is a
race. The compiled graph (`low.final`, its IR and PTO) is unchanged; this is run-time only.
"""

from __future__ import annotations

import threading
from typing import Any

from runtime.comm import current_endpoint

from ..core import primitives as P
from ..core.ir import Eqn, Graph
from ..prims import comm as PC
from .comm_impl import _site, _window_or_none
from .impl import _split, clamp, impl_rules
from .values import TensorVal

__all__ = ["instrument"]

_cache: dict[int, tuple[Graph, Graph]] = {}  # id(original) -> (original kept alive, instrumented)
_lock = threading.Lock()


def instrument(g: Graph) -> Graph:
    """`g` with its stores into / loads from window parameters instrumented (cached per graph)."""
    with _lock:
        hit = _cache.get(id(g))
        if hit is not None and hit[0] is g:
            return hit[1]
        out = _rewrite(g)
        if len(_cache) > 1024:
            _cache.clear()
        _cache[id(g)] = (g, out)
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
        elif e.primitive is P.tile_store_p and isinstance(e.inputs[-1].type, PC.DistributedTensorType):
            e, changed = e.replace(primitive=PC.comm_window_store_p), True
        elif e.primitive is P.tile_load_p and isinstance(e.inputs[0].type, PC.DistributedTensorType):
            e, changed = e.replace(primitive=PC.comm_window_load_p), True
        eqns.append(e)
    if not changed:
        return g
    return Graph(g.params, eqns, g.outputs, dict(g.attrs), g.name)


def _box(tv: TensorVal, rows: int, cols: int) -> tuple[int, ...]:
    if len(tv.shape) == 1:
        return (cols,)
    return (1,) * (len(tv.shape) - 2) + (rows, cols)


def _window_store(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    out = impl_rules[P.tile_store_p](ctx, e, ins)
    ep, tv = current_endpoint(), ins[-1]
    win = _window_or_none(ep, tv)
    tile = ins[0]
    if ep is not None and win is not None and hasattr(tile, "valid_row"):
        offs = [int(o) for o in clamp(ctx, e, _split(e, ins, "offsets"))]
        ep.local_store(win, tv.shape, tv.dtype.itemsize, offs, _box(tv, tile.valid_row, tile.valid_col), _site(e))
    return out  # a slice of a window, or a host value: the world's byte comparison dates it instead


def _window_load(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    out = impl_rules[P.tile_load_p](ctx, e, ins)
    ep, tv = current_endpoint(), ins[0]
    win = _window_or_none(ep, tv)
    if ep is not None and win is not None:
        offs = [int(o) for o in clamp(ctx, e, _split(e, ins, "offsets"))]
        valid = [int(v) for v in _split(e, ins, "valid")]
        sizes = tuple(valid) if valid else tuple(e.params["shape"])
        ep.local_load(win, tv.shape, tv.dtype.itemsize, offs, sizes[-len(tv.shape):] if len(sizes) >= len(tv.shape)
                      else (1,) * (len(tv.shape) - len(sizes)) + sizes, _site(e))
    return out


impl_rules[PC.comm_window_store_p] = _window_store
impl_rules[PC.comm_window_load_p] = _window_load
