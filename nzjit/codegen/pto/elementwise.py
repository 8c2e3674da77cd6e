"""PTO emitters of the elementwise Vec tile primitives: `pto.tcvt` and `pto.tadd / tsub / tmul /
tmax / texp`."""

from __future__ import annotations

from ... import prims as P
from ...core.ir import Eqn
from .emitter import Emitter, instr, pto_rules, rule


@rule(P.tile_cast_p)
def _cast(em: Emitter, e: Eqn) -> None:
    instr(em, e, "pto.tcvt", valid_from=em.tile(e.inputs[0]))


_ELEMENTWISE = {
    "tile.add": "pto.tadd",
    "tile.sub": "pto.tsub",
    "tile.mul": "pto.tmul",
    "tile.maximum": "pto.tmax",
    "tile.exp": "pto.texp",
    "tile.neg": "pto.tneg",
    "tile.abs": "pto.tabs",
}


def _elementwise(em: Emitter, e: Eqn) -> None:
    instr(em, e, _ELEMENTWISE[e.primitive.name], valid_from=em.tile(e.inputs[0]))


for _p in P.ELEMENTWISE.values():
    pto_rules[_p] = _elementwise
