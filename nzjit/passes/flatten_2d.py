"""FlattenTileNdTo2D: every tile becomes a logical 2-D operand `[rows, cols]`.

A load window `[1, 128, 512]` gives a `[128, 512]` tile (leading extents fold into rows). An ND
source loaded into Mat is ND->NZ, whose GlobalTensor must be 2-D (hardware-model.md §3), so its
window is collapsed (`window_2d`). An NZ source is NZ->NZ and keeps its whole logical window for
BlockNzTensorViews (NZ-10). A batched matmul on rank-3 Mat tiles is unrolled into one 2-D matmul
per batch (batch_matmul_unroll.py).
"""

from __future__ import annotations

from .. import prims as P
from ..core.ir import Eqn, Graph, Var
from ..core.types import Layout, Mem, TensorType, TileType, Type
from ..errors import CompileError
from .batch_matmul_unroll import BatchMatmulUnroll, has_batch_matmul


def _flat(shape: tuple[int, ...]) -> tuple[int, int]:
    if len(shape) == 1:
        return (1, shape[0])
    rows = 1
    for d in shape[:-1]:
        rows *= d
    return (rows, shape[-1])


class _Flatten(BatchMatmulUnroll):
    def map_type(self, t: Type) -> Type:
        if isinstance(t, TileType) and t.rank != 2:
            vs = None
            if t.valid_shape is not None:  # rows are valid only where every leading extent is known
                lead = t.valid_shape[:-1]
                rows = _flat(tuple(v or 0 for v in lead) + (1,))[0] if None not in lead else None
                vs = (rows, t.valid_shape[-1])
            return TileType(_flat(t.shape), t.dtype, t.memory, vs)
        return t

    def rewrite(self, e: Eqn) -> None:
        if self.batched(e):  # a batched matmul, its rank-3 operands and its stores
            return
        if e.primitive is P.tile_load_p:
            self.load(e)
            return
        self.copy(e)

    def load(self, e: Eqn) -> list[Var]:
        src = self.atom(e.inputs[0]).type
        assert isinstance(src, TensorType)
        if src.layout is Layout.ND and e.params["memory"] is Mem.Mat:
            lead = e.params["shape"][:-2]
            if any(d != 1 for d in lead):
                raise CompileError(
                    f"an ND->NZ load into Mat takes a 2-D window; window "
                    f"{list(e.params['shape'])} has leading extents > 1",
                    e.source,
                    help="load one leading index at a time (a rank-3 Mat tile is a pl.batch_matmul operand)",
                )
            return self.copy(e, window_2d=True, out_type=self.map_type(e.outputs[0].type))
        out_t = self.map_type(e.outputs[0].type)
        if out_t != e.outputs[0].type:
            return self.copy(e, out_type=out_t)  # the window stays whole (NZ-10)
        return self.copy(e)


def flatten_tile_nd_to_2d(g: Graph) -> Graph:
    """N-D tiles -> 2-D tiles; ND->NZ source windows collapsed, NZ source windows kept (NZ-10)."""
    flatten = _Flatten()
    flatten.unrolls = has_batch_matmul(g)
    return flatten.run(g)
