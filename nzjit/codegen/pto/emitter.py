"""The state of one PTO function being emitted (`Emitter`), the codegen view of its values (`View`,
`Tile`, `Lane`) and the rule table `pto_rules` that every family module registers into."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

from ... import prims as P
from ...core.dtypes import INDEX, DType
from ...core.ir import Atom, Eqn, Literal, Var
from ...core.types import DynDim, Layout, ScalarType, TensorType, TileType
from ...errors import InternalError
from ..pto_types import (
    TILE_LAYOUTS,
    Dim,
    Namer,
    TileLayout,
    constant_literal,
    constant_name,
    partition_type,
    tensor_view_type,
    tile_buf_type,
    tile_rows_cols,
)


@dataclass(frozen=True)
class View:
    """A tensor as codegen sees it: a `make_tensor_view` plus the offsets of the slices taken of it.

    `axes` are the root axes still visible (a slice that indexes an axis drops it); `offsets` are
    per root axis.
    """

    ssa: str
    name: str
    type: TensorType
    ptr: str
    strides: tuple[Dim, ...]
    offsets: tuple[Dim, ...]
    axes: tuple[int, ...]


@dataclass(frozen=True)
class Tile:
    """A tile as codegen sees it: its SSA name, IR type, PTO tile layout and, where dynamic, the SSA names of
    its valid extent."""

    ssa: str
    type: TileType
    layout: TileLayout
    valid: tuple[Dim, Dim] | None = None  # SSA names where the valid extent is dynamic

    @property
    def spelled(self) -> str:
        """The tile's `!pto.tile_buf<...>` type as printed in the PTO."""
        return tile_buf_type(self.type, self.layout, self.valid)


@dataclass(frozen=True)
class Lane:
    """The SPMD lane being emitted: its block index and lane count."""

    idx: str
    count: str


Rule = Callable[["Emitter", Eqn], None]
pto_rules: dict[P.Primitive, Rule] = {}


def rule(*prims: P.Primitive) -> Callable[[Rule], Rule]:
    """Decorator: register `fn` as the PTO emitter of `prims` in `pto_rules`."""

    def deco(fn: Rule) -> Rule:
        for p in prims:
            pto_rules[p] = fn
        return fn

    return deco


class Emitter:
    """The state of one function: names, hoisted constants, lines, and what each IR Var became."""

    def __init__(self) -> None:
        self.names = Namer()
        self.consts: dict[tuple[Any, DType], str] = {}
        self.const_lines: list[str] = []
        self.lines: list[str] = []
        self.depth = 1
        self.env: dict[Var, Any] = {}  # str (scalar SSA) | Tile | View
        self.lanes: list[Lane] = []
        self.launch: Eqn | None = None
        self.dims: dict[str, str] = {}

    # -------------------------------------------------------------------------- text
    def line(self, text: str) -> None:
        """Append one line of PTO at the current nesting depth."""
        self.lines.append("  " * self.depth + text)

    def const(self, value: Any, dtype: DType) -> str:
        """SSA name of the constant `value` of `dtype`, hoisted to the function entry and emitted once."""
        key = (value, dtype)
        if key not in self.consts:
            name = constant_name(value, dtype)
            # a float constant is `%cst_<n>`: `cst` names are reserved for the emitter, so
            # `fresh` (which skips reserved names) would never find one
            ssa = self.names.exact(name if name else f"cst_{len(self.consts)}")
            self.consts[key] = ssa
            self.const_lines.append(f"  {ssa} = arith.constant {constant_literal(value, dtype)}")
        return self.consts[key]

    def define(self, v: Var, default: str = "v") -> str:
        """Bind `v` to a fresh SSA name from its hint and return the name."""
        ssa = self.names.fresh(v.hint, default)
        self.env[v] = ssa
        return ssa

    # -------------------------------------------------------------------------- values
    def value(self, a: Atom) -> str:
        """The SSA name of a scalar atom (a literal becomes a hoisted constant)."""
        if isinstance(a, Literal):
            return self.const(a.value, a.type.dtype)
        v = self.env.get(a)
        if not isinstance(v, str):
            raise InternalError(f"codegen: {a!r} has no scalar value (got {type(v).__name__})")
        return v

    def index(self, a: Atom) -> Dim:
        """An index operand: a static int, or the SSA name of an `index` value."""
        if isinstance(a, Literal):
            return int(a.value)
        t = a.type
        ssa = self.value(a)
        if isinstance(t, ScalarType) and t.dtype is not INDEX:
            out = self.names.fresh(f"{ssa[1:]}_idx")
            self.line(f"{out} = arith.index_cast {ssa} : {t.dtype.short} to index")
            return out
        return ssa

    def operand(self, x: Dim) -> str:
        """An index operand as SSA: a static int becomes a hoisted constant."""
        return self.const(x, INDEX) if isinstance(x, int) else x

    def tile(self, a: Atom) -> Tile:
        """The `Tile` that `a` became; InternalError if it is not a tile value."""
        t = self.env.get(a) if isinstance(a, Var) else None
        if not isinstance(t, Tile):
            raise InternalError(f"codegen: {a!r} is not a tile value")
        return t

    def view(self, a: Atom) -> View:
        """The `View` that `a` became; InternalError if it is not a tensor view."""
        t = self.env.get(a) if isinstance(a, Var) else None
        if not isinstance(t, View):
            raise InternalError(f"codegen: {a!r} is not a tensor view")
        return t

    def alias(self, v: Var, a: Atom) -> None:
        """`v` is the same value as `a` (captured loop operands, store results, lanes)."""
        self.env[v] = self.value(a) if isinstance(a, Literal) else self.env[a]

    # -------------------------------------------------------------------------- arithmetic
    def binop(self, op: str, a: Dim, b: Dim, hint: str) -> Dim:
        """`a op b` on index operands, folding constants (used for offsets, strides, sizes)."""
        if isinstance(a, int) and isinstance(b, int):
            return {"addi": a + b, "muli": a * b}[op]
        if op == "addi" and (a == 0 or b == 0):
            return b if a == 0 else a
        if op == "muli" and (a == 1 or b == 1):
            return b if a == 1 else a
        out = self.names.fresh(hint)
        self.line(f"{out} = arith.{op} {self.operand(a)}, {self.operand(b)} : index")
        return out

    def clamp(self, x: Dim) -> Dim:
        """`arith.maxsi x, %c0`: the partition view's clamp of a negative offset (NZ-18)."""
        if isinstance(x, int):
            return max(x, 0)
        out = self.names.fresh(f"{x[1:]}_clamp")
        self.line(f"{out} = arith.maxsi {x}, {self.const(0, INDEX)} : index")
        return out

    # -------------------------------------------------------------------------- views
    def dim(self, d: int | DynDim) -> str:
        """SSA name of a dimension: the function argument of a dynamic dim, else an index constant."""
        if isinstance(d, DynDim):
            return self.dims[d.name]
        return self.const(d, INDEX)

    def strides(self, t: TensorType, name: str) -> list[Dim]:
        """The type's strides, or row-major ones (NZ-7), computed where a dimension is dynamic."""
        given = list(t.strides) if t.strides is not None else [None] * t.rank
        out: list[Dim] = []
        acc: Dim = 1
        for i in range(t.rank - 1, -1, -1):
            s = given[i]
            out.append(s if isinstance(s, int) else acc)
            if i:
                d = t.shape[i]
                acc = self.binop(
                    "muli", acc, d if isinstance(d, int) else self.dims[d.name], f"{name}_stride{i - 1}"
                )
        return out[::-1]

    def make_view(self, ptr: str, name: str, t: TensorType) -> View:
        """Emit `pto.make_tensor_view` of `ptr` with `t`'s shape, strides and layout: the root `View`."""
        shape = [self.dim(d) for d in t.shape]
        strides = self.strides(t, name)
        ssa = self.names.fresh(f"{name}_view")
        layout = "nz" if t.layout is Layout.NZ else "nd"
        self.line(
            f"{ssa} = pto.make_tensor_view {ptr}, shape = [{', '.join(shape)}], "
            f"strides = [{', '.join(self.operand(s) for s in strides)}] {{layout = #pto.layout<{layout}>}} : "
            f"{tensor_view_type(t.rank, t.dtype)}"
        )
        return View(ssa, name, t, ptr, tuple(strides), (0,) * t.rank, tuple(range(t.rank)))

    def root_window(
        self, v: View, offsets: Sequence[Dim], sizes: Sequence[Dim]
    ) -> tuple[list[Dim], list[Dim]]:
        """Offsets and sizes on the root view's axes (a dropped axis has extent 1)."""
        if len(offsets) != len(v.axes) or len(sizes) != len(v.axes):
            raise InternalError(
                f"codegen: a window of rank {len(offsets)}/{len(sizes)} on a view of "
                f"{v.name} with {len(v.axes)} visible axes"
            )
        offs: list[Dim] = list(v.offsets)
        szs: list[Dim] = [1] * len(v.offsets)
        for j, axis in enumerate(v.axes):
            offs[axis] = self.binop("addi", offs[axis], offsets[j], f"{v.name}_off{axis}")
            szs[axis] = sizes[j]
        return offs, szs

    def partition(self, v: View, offsets: list[Dim], sizes: list[Dim]) -> tuple[str, str]:
        """A `pto.partition_view` on its own line; returns (its SSA name, its type)."""
        offs, szs = self.root_window(v, offsets, sizes)
        offs = [self.clamp(o) for o in offs]
        ssa = self.names.fresh(f"{v.name}_pview")
        ptype = partition_type(szs, v.type.dtype)
        self.line(
            f"{ssa} = pto.partition_view {v.ssa}, offsets = [{', '.join(self.operand(o) for o in offs)}], "
            f"sizes = [{', '.join(self.operand(s) for s in szs)}] : "
            f"{tensor_view_type(v.type.rank, v.type.dtype)} -> {ptype}"
        )
        return ssa, ptype

    # -------------------------------------------------------------------------- tiles
    def alloc(self, v: Var, valid: tuple[Dim, Dim] | None = None) -> Tile:
        """`%t = pto.alloc_tile : !pto.tile_buf<...>`: the destination of the instruction that follows."""
        t = v.type
        assert isinstance(t, TileType)
        vs = t.valid_shape
        if valid is None and not t.fully_valid and vs is not None and all(isinstance(x, int) for x in vs):
            valid = cast(
                "tuple[Dim, Dim]", vs
            )  # all ints (just checked); static (a decode batch's Mat / Left / Acc tiles: M of 16 rows valid)
        if valid is not None and all(isinstance(x, int) for x in valid):
            valid = None if tuple(valid) == tile_rows_cols(t) else valid
        tile = Tile(self.names.fresh(v.hint, "t"), t, TILE_LAYOUTS[t.memory], valid)
        dyn = ""
        if tile.valid is not None:
            dyn = "".join(
                f" {k} = {x}" for k, x in zip(("valid_row", "valid_col"), tile.valid) if isinstance(x, str)
            )
        self.line(f"{tile.ssa} = pto.alloc_tile{dyn} : {tile.spelled}")
        self.env[v] = tile
        return tile

    # -------------------------------------------------------------------------- walk
    def eqns(self, eqns: list[Eqn]) -> None:
        """Emit every equation through its `pto_rules` entry; InternalError for a primitive with no rule."""
        for e in eqns:
            fn = pto_rules.get(e.primitive)
            if fn is None:
                raise InternalError(f"codegen: no PTO rule for primitive {e.primitive.name}")
            fn(self, e)


def instr(em: Emitter, e: Eqn, op: str, valid_from: Tile | None = None) -> None:
    """`op ins(srcs : types) outs(%dst : type)`, the destination allocated first."""
    tiles = [em.tile(a) for a in e.inputs]
    out = em.alloc(e.outputs[0], valid=valid_from.valid if valid_from else None)
    names = ", ".join(t.ssa for t in tiles)
    types = ", ".join(t.spelled for t in tiles)
    em.line(f"{op} ins({names} : {types}) outs({out.ssa} : {out.spelled})")


def unlowered(after: str) -> Rule:
    """The rule of a primitive that `after` removes: reaching codegen is an internal error."""

    def refuse(em: Emitter, e: Eqn) -> None:
        raise InternalError(
            f"codegen: '{e.primitive.name}' reached PTO emission; {after} removes it, "
            "so codegen runs on the graph after every pass (Lowered.pto())"
        )

    return refuse
