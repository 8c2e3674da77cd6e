"""Double buffers of a pipelined loop (issue 23 item 8): the on-chip bytes a `pl.pipeline(...,
stage=S)` loop holds beyond one trip's.

The model: a pipelined loop overlaps the next trip's GM -> on-chip loads (MTE2) with this trip's
compute, so every tile its body loads from GM (a `tile.load` of the body itself) has S buffers:
S - 1 more copies are held for the whole loop. A loop of fewer than two trips has nothing to
overlap. The memory plan charges these copies (memory_plan.py) and the simulator reserves the same
bytes while the loop runs (loops.run_loop), so both agree and an over-capacity pipeline is refused
at compile time. The cube's own K loops (AutoTileMatmulL0) load nothing - their TEXTRACTs read Mat
tiles already on chip - so they hold no extra copies here.
"""

from __future__ import annotations

from .. import prims as P
from ..core.ir import Eqn, Graph, Literal, Var
from ..core.types import TileType


def trips_at_least_two(e: Eqn) -> bool:
    """Whether a loop runs two or more trips, as far as its bounds say (a dynamic bound: assumed so)."""
    bounds = e.inputs[:3]
    if not all(isinstance(b, Literal) for b in bounds):
        return True
    start, stop, step = (int(b.value) for b in bounds)  # type: ignore[union-attr]
    return len(range(start, stop, step)) >= 2


def prefetch_buffers(e: Eqn) -> list[tuple[Var, int, Eqn]]:
    """(loaded tile, extra copies, its load) of a pipelined `for` of stage >= 2; [] for other loops."""
    if e.params.get("kind") != "pipeline":
        return []
    extra = int(e.params.get("stage", 1)) - 1
    body = e.params.get("body")
    if extra < 1 or not isinstance(body, Graph):
        return []
    return [
        (v, extra, x)
        for x in body.eqns
        if x.primitive is P.tile_load_p
        for v in x.outputs
        if isinstance(v.type, TileType)
    ]


def held_bytes(prefetch: list[tuple[Var, int, Eqn]]) -> list[tuple[str, int]]:
    """(memory space, bytes) of every extra stage copy of `prefetch`, as the simulator reserves them
    while the loop runs (the per-lane and the batched loop alike)."""
    held = []
    for v, copies, _ in prefetch:
        t = v.type
        assert isinstance(t, TileType)  # prefetch_buffers keeps tiles only
        held += [(t.memory.value, charge(t))] * copies
    return held


def charge(t: TileType) -> int:
    """The bytes a tile of type `t` takes on chip: rounded up to 32 B, as runtime.OnChip.reserve charges."""
    return -(-t.nbytes // 32) * 32


__all__ = ["charge", "held_bytes", "prefetch_buffers", "trips_at_least_two"]
