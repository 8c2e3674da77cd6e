"""ConvertTensorToTileOps: tensor-level slices, matmuls and assignments become tile loads, matmuls
and stores (nz-layout.md §3: the tile ops BlockNzTensorViews rewrites must exist before it runs).

- A slice that a matmul consumes becomes that load's window: the slice chain is folded into one
  `tile.load(root, offsets, window, Mat)` (offsets summed, dropped axes kept as extent 1).
- `tensor.matmul` / `tensor.matmul_acc` become `tile.matmul` / `tile.matmul_acc` (an Acc tile).
- `out[...] = value` becomes `tile.store(value, offsets, root)`.
Slices that are not folded (e.g. `w[layer]` handed to an explicit pl.load) stay tensor.slice.
"""

from __future__ import annotations

from .. import prims as P
from ..core.dtypes import INDEX
from ..core.ir import Atom, Eqn, Graph, Literal, Var
from ..core.types import Mem, ScalarType, TensorType, TileType
from ..errors import CompileError
from .rewrite import Rewriter


class _Convert(Rewriter):
    def window(self, v: Atom) -> tuple[Atom, list[Atom], list[int]]:
        """Fold the tensor.slice chain ending at `v` into (root, offsets on root, window on root).

        The window has the root's rank; -1 marks an axis a slice dropped (extent 1, not an axis
        of `v`). `v`'s axes are the root axes whose window is not -1, in order.
        """
        t = v.type
        assert isinstance(t, TensorType)
        e = self.definition(v)
        if e is None or e.primitive is not P.tensor_slice_p or e.operands("valid"):
            return self.atom(v), [Literal(0, ScalarType(INDEX)) for _ in t.shape], list(t.shape)  # type: ignore[arg-type]
        root, offs, win = self.window(e.inputs[0])
        kept = [i for i, w in enumerate(win) if w != -1]
        for j, axis in enumerate(kept):
            offs[axis] = self.add(offs[axis], self.atom(e.operands("offsets")[j]), e.source)
            win[axis] = e.params["shape"][j]
        for j in e.params["drop"]:
            win[kept[j]] = -1
        return root, offs, win

    def load_operand(self, v: Atom, e: Eqn) -> Var:
        t = self.atom(v).type
        if isinstance(t, TileType):
            if t.memory is not Mem.Acc:
                return self.atom(v)  # type: ignore[return-value]
            raise CompileError("a matmul result cannot feed another matmul directly; store it first",
                               e.source)
        root, offs, win = self.window(v)
        rt = root.type
        assert isinstance(rt, TensorType)
        # the load is the operand's slice (`w[n0:n0 + 128, k0:k0 + 512]`): diagnostics point at it
        sliced = self.definition(v)
        source = sliced.source if sliced is not None and sliced.source is not None else e.source
        shape = tuple(1 if w == -1 else w for w in win)
        for i, d in enumerate(shape):
            if not isinstance(d, int):
                raise CompileError(f"the matmul operand's window on axis {i} has dynamic extent {d}; "
                                   "slice a static window", e.source)
        tile_t = TileType(shape, rt.dtype, Mem.Mat)
        params = {"shape": shape, "memory": Mem.Mat, "valid_static": None, "memory_given": True}
        return self.emit(P.tile_load_p, [[root], offs, []], params, [tile_t], source)[0]

    def rewrite(self, e: Eqn) -> None:
        p = e.primitive
        if p is P.tensor_matmul_p:
            a, b = (self.load_operand(x, e) for x in e.inputs)
            out_t = e.outputs[0].type
            assert isinstance(out_t, TensorType)
            acc_t = TileType(tuple(out_t.shape), out_t.dtype, Mem.Acc)  # type: ignore[arg-type]
            params = {"b_trans": e.params["b_trans"], "out_dtype": e.params.get("out_dtype")}
            (o,) = self.emit(P.tile_matmul_p, [[a], [b]], params, [acc_t], e.source)
            o.hint = e.outputs[0].hint
            self.env[e.outputs[0]] = o
        elif p is P.tensor_matmul_acc_p:
            acc = self.atom(e.inputs[0])
            if not isinstance(acc.type, TileType):
                raise CompileError("pl.matmul_acc needs an accumulator made by pl.matmul", e.source)
            a, b = (self.load_operand(x, e) for x in e.inputs[1:])
            (o,) = self.emit(P.tile_matmul_acc_p, [[acc], [a], [b]], {"b_trans": e.params["b_trans"]},
                             [acc.type], e.source)
            o.hint = e.outputs[0].hint
            self.env[e.outputs[0]] = o
        elif p is P.tensor_assign_p:
            value = self.atom(e.inputs[1])
            if not isinstance(value.type, TileType):
                raise CompileError(f"cannot assign {value.type}: only computed values (a matmul result "
                                   "or a tile) can be assigned", e.source)
            root, offs, win = self.window(e.inputs[0])
            own = e.operands("offsets")
            for j, axis in enumerate(i for i, w in enumerate(win) if w != -1):
                offs[axis] = self.add(offs[axis], self.atom(own[j]), e.source)
            (o,) = self.emit(P.tile_store_p, [[value], offs, [root]], {"attrs": {}}, [root.type], e.source)
            self.env[e.outputs[0]] = o
        else:
            self.copy(e)

def convert_tensor_to_tile_ops(g: Graph) -> Graph:
    """Tensor-level ops -> tile ops (see module docstring)."""
    return _Convert().run(g)
