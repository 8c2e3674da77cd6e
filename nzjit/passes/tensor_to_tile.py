"""ConvertTensorToTileOps: tensor-level slices, matmuls and assignments become tile loads, matmuls
and stores (nz-layout.md §3: the tile ops BlockNzTensorViews rewrites must exist before it runs).

- A slice that a matmul consumes becomes that load's window: the slice chain is folded into one
  `tile.load(root, offsets, window, Mat)` (offsets summed, dropped axes kept as extent 1).
- `tensor.matmul` / `tensor.matmul_acc` become `tile.matmul` / `tile.matmul_acc` (an Acc tile).
- `out[...] = value` becomes `tile.store(value, offsets, root)`.
- `pl.create_tensor(shape, dtype)` in a kernel (issue 23 item 4) is PyPTO's start value of a matmul
  accumulator (`acc = pl.create_tensor(...)`, then `if k0 == 0: acc = pl.matmul(...) else:
  acc = pl.matmul_acc(acc, ...)`): when its only uses are as a loop's or an `if`'s carry, it becomes
  an Acc `tile.create` of its shape. Read any other way (stored into, loaded from, sliced) it is a
  GM scratch tensor of the kernel (PyPTO's InCore workspace): `tensor.create[scratch=True]`, fresh
  zeroed GM for each run of the equation (each SPMD lane its own when created inside the launch),
  freed when the kernel returns.
- `out[...] = pl.reshape(acc, shape)` of a matmul result (issue 23 item 4): the same row-major
  elements, so the Acc tile is stored into `out` viewed with the tile's shape (`tensor.reshape` of
  the whole root tensor, which must be ND, static and exactly the window). A reshaped matmul result
  used any other way is refused (the Acc tile has no reshape of its own).
Slices that are not folded (e.g. `w[layer]` handed to an explicit pl.load) stay tensor.slice.
"""

from __future__ import annotations

from .. import prims as P
from ..core.dtypes import FP32, INDEX, INT32
from ..core.ir import Atom, Eqn, Graph, Literal, Var
from ..core.types import Mem, ScalarType, TensorType, TileType, static_dim
from ..errors import CompileError
from .rewrite import Rewriter
from .scan import primitives

_RESHAPED = "a reshaped matmul result"


class _Convert(Rewriter):
    def __init__(self, carried: set[Var]) -> None:
        super().__init__()
        self.reshaped: dict[Var, Atom] = {}  # tensor.reshape result of an Acc tile -> the tile
        self.carried = carried  # tensor.create results used only as carries

    def _create(self, e: Eqn) -> None:
        (v,) = e.outputs
        t = v.type
        assert isinstance(t, TensorType)
        if v not in self.carried:  # read as a tensor: a GM scratch of the kernel (an InCore workspace)
            (o,) = self.emit(P.tensor_create_p, [], dict(e.params, scratch=True), [t], e.source)
            o.hint = v.hint
            self.env[v] = o
            return
        if len(t.shape) != 2 or t.dtype not in (FP32, INT32):
            raise CompileError(
                f"pl.create_tensor({list(t.shape)}, {t.dtype!r}) in a kernel that is only a loop's or an "
                "`if`'s carry is the start value of a matmul accumulator, a 2-D FP32 / INT32 Acc tile",
                e.source,
                help="create the accumulator as a 2-D pl.FP32 (or pl.INT32) tensor, or store into it / load "
                "from it to use it as a GM scratch tensor",
            )
        acc_t = TileType(tuple(t.shape), t.dtype, Mem.Acc)  # type: ignore[arg-type]
        (o,) = self.emit(
            P.create_p, [], {"shape": acc_t.shape, "dtype": t.dtype, "memory": Mem.Acc}, [acc_t], e.source
        )
        o.hint = v.hint
        self.env[v] = o

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
            raise CompileError(
                "a matmul result cannot feed another matmul directly; store it first", e.source
            )
        root, offs, win = self.window(v)
        rt = root.type
        assert isinstance(rt, TensorType)
        # the load is the operand's slice (`w[n0:n0 + 128, k0:k0 + 512]`): diagnostics point at it
        sliced = self.definition(v)
        source = sliced.source if sliced is not None and sliced.source is not None else e.source
        shape = tuple(1 if w == -1 else w for w in win)
        for i, d in enumerate(shape):
            if not isinstance(d, int):
                raise CompileError(
                    f"the matmul operand's window on axis {i} has dynamic extent {d}; slice a static window",
                    e.source,
                )
        tile_t = TileType(shape, rt.dtype, Mem.Mat)
        params = {"shape": shape, "memory": Mem.Mat, "valid_static": None, "memory_given": True}
        return self.emit(P.tile_load_p, [[root], offs, []], params, [tile_t], source)[0]

    def _store_reshaped(self, e: Eqn, acc: Atom) -> None:
        """`out[...] = pl.reshape(acc, shape)`: store `acc` into the whole root seen as acc's shape."""
        root, offs, win = self.window(e.inputs[0])
        rt, at = root.type, acc.type
        assert isinstance(rt, TensorType) and isinstance(at, TileType)
        zero = all(isinstance(o, Literal) and o.value == 0 for o in [*offs, *e.operands("offsets")])
        whole = zero and list(win) == list(rt.shape) and list(e.params["shape"]) == list(rt.shape)
        if not (
            whole and rt.is_static and rt.layout.value == "ND" and rt.strides in (None, _row_major(rt.shape))
        ):
            raise CompileError(
                f"{_RESHAPED} is stored by viewing the destination with the result's shape "
                f"{list(at.shape)}: the destination must be a whole static ND tensor, got a window "
                f"{list(e.params['shape'])} of {rt}",
                e.source,
                help="assign it to the whole output (out[...] = pl.reshape(acc, out_shape)), or "
                "store the matmul result unreshaped into out viewed with pl.tensor.view",
            )
        n = 1
        for d in rt.shape:
            n *= static_dim(d)
        if n != at.shape[0] * at.shape[1]:
            raise CompileError(
                f"{_RESHAPED} of {list(at.shape)} assigned to {rt}: the element counts differ", e.source
            )
        view_t = TensorType(tuple(at.shape), rt.dtype, rt.layout)
        (view,) = self.emit(P.tensor_reshape_p, [[root]], {"shape": tuple(at.shape)}, [view_t], e.source)
        zeros = [Literal(0, ScalarType(INDEX)), Literal(0, ScalarType(INDEX))]
        self.emit(P.tile_store_p, [[acc], zeros, [view]], {"attrs": {}}, [view_t], e.source)
        self.env[e.outputs[0]] = root

    def rewrite(self, e: Eqn) -> None:
        p = e.primitive
        if self.reshaped and any(isinstance(x, Var) and x in self.reshaped for x in e.inputs):
            if p is P.tensor_assign_p and e.inputs[1] in self.reshaped and e.inputs[0] not in self.reshaped:
                self._store_reshaped(e, self.reshaped[e.inputs[1]])
                return
            raise CompileError(
                f"{_RESHAPED} can only be assigned to a tensor (out[...] = pl.reshape(acc, shape)): "
                "the Acc tile has no reshape of its own",
                e.source,
                help="pl.move it to pl.Mem.Vec first and pl.reshape the Vec tile",
            )
        if p is P.tensor_create_p:
            self._create(e)
            return
        if p is P.tensor_reshape_p and isinstance(self.atom(e.inputs[0]).type, TileType):
            acc = self.atom(e.inputs[0])
            if acc.type.memory is Mem.Acc and len(acc.type.shape) == 2:  # type: ignore[union-attr]
                self.reshaped[e.outputs[0]] = acc
                return
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
            (o,) = self.emit(
                P.tile_matmul_acc_p, [[acc], [a], [b]], {"b_trans": e.params["b_trans"]}, [acc.type], e.source
            )
            o.hint = e.outputs[0].hint
            self.env[e.outputs[0]] = o
        elif p is P.tensor_assign_p:
            value = self.atom(e.inputs[1])
            if not isinstance(value.type, TileType):
                raise CompileError(
                    f"cannot assign {value.type}: only computed values (a matmul result "
                    "or a tile) can be assigned",
                    e.source,
                )
            root, offs, win = self.window(e.inputs[0])
            own = e.operands("offsets")
            for j, axis in enumerate(i for i, w in enumerate(win) if w != -1):
                offs[axis] = self.add(offs[axis], self.atom(own[j]), e.source)
            (o,) = self.emit(P.tile_store_p, [[value], offs, [root]], {"attrs": {}}, [root.type], e.source)
            self.env[e.outputs[0]] = o
        else:
            self.copy(e)


def _row_major(shape: tuple[object, ...]) -> tuple[int, ...]:
    out, acc = [], 1
    for d in reversed(shape):
        out.append(acc)
        acc *= int(d)  # type: ignore[call-overload]
    return tuple(reversed(out))


def _carried_creates(g: Graph, out: set[Var], other: set[Var]) -> None:
    """tensor.create results read only as a for / cond carry's initial value (`out`); `other` collects
    the ones read any other way (a captured operand counts as another use: the body reads it)."""
    for e in g.eqns:
        if e.primitive is P.tensor_create_p:
            out.add(e.outputs[0])
        body = e.params.get("body")
        first_carry = sum(e.params["arity"][:2]) if isinstance(body, Graph) else len(e.inputs)
        for i, a in enumerate(e.inputs):
            if isinstance(a, Var) and i < first_carry:
                other.add(a)
        if isinstance(body, Graph):
            _carried_creates(body, out, other)


def convert_tensor_to_tile_ops(g: Graph) -> Graph:
    """Tensor-level ops -> tile ops (see module docstring)."""
    creates: set[Var] = set()
    other: set[Var] = set()
    if P.tensor_create_p in primitives(g):  # else no use needs sorting out
        _carried_creates(g, creates, other)
    return _Convert(creates - other).run(g)
