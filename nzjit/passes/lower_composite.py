"""LowerCompositeOps: a matmul's `b_trans=True` becomes an explicit `tile.transpose_view` operand.

After this pass every tile matmul reads `a: [M, K]` and `b: [K, N]`, so AutoTileMatmulL0 only
has one orientation to tile. For a weight `[N, K]` in NZ order the transposed view is exactly the
L0B (Right, Zn) byte order (hardware-model.md §6), so the view costs nothing on the device.
"""

from __future__ import annotations

from .. import prims as P
from ..core.ir import Eqn, Graph
from ..core.types import TileType
from .rewrite import Rewriter

#: The index of `b` among each tile matmul's inputs.
_B_INDEX = {P.tile_matmul_p: 1, P.tile_matmul_acc_p: 2, P.tile_matmul_bias_p: 1}


class _Lower(Rewriter):
    def rewrite(self, e: Eqn) -> None:
        if e.primitive in _B_INDEX and e.params.get("b_trans"):
            ins = list(self.atoms(e.inputs))
            ib = _B_INDEX[e.primitive]
            b = ins[ib]
            bt = b.type
            assert isinstance(bt, TileType)
            (vt,) = P.tile_transpose_view_p.type_rule(bt)  # keeps a valid_shape, transposed
            (view,) = self.emit(P.tile_transpose_view_p, [[b]], {}, [vt], e.source)
            ins[ib] = view
            groups = [[x] for x in ins]
            params = {k: v for k, v in e.params.items() if k != "arity"}
            params["b_trans"] = False
            outs = [self.fresh(v) for v in e.outputs]
            self.emit(e.primitive, groups, params, outs, e.source)
        else:
            self.copy(e)


def lower_composite_ops(g: Graph) -> Graph:
    """b_trans matmuls -> matmuls of an explicit transposed view."""
    return _Lower().run(g)
