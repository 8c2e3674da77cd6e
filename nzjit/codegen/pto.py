"""PTO text emission: `emit_pto(graph, kernel)` turns the final lowered graph into the PTO-IR text the
assembler (PTOAS) consumes (nz-layout.md §10; api.md "Codegen text rules").

Per-primitive emission is the table `pto_rules` (one entry per primitive of core/primitives.py),
like the backend's `impl_rules`. The text it writes, and why:

- `func.func @<kernel>(%arg<i>: !pto.ptr<dt>, %<name>: <type>, ..., %<dim>: index)`: tensor
  parameter i is the pointer `%arg<i>`, a scalar parameter keeps its kernel name, and each dynamic
  dimension (`pl.dynamic("B")`) is a trailing `index` argument `%B`.
- One `pto.make_tensor_view` per tensor parameter, at the top. Its shape, its
  `!pto.tensor_view<?x...>` type and every `pto.partition_view` of it take their rank from the
  TensorType shape, so the three sites agree by construction (NZ-14); a blocked NZ view is rank 5
  (NZ-6). Strides are the type's materialised strides, else the same row-major rule (NZ-7).
  Slices of a tensor (`w[layer]`, blocked batch slices) emit nothing: their offsets are folded
  into the partition views of the loads and stores that read through them.
- Every partition offset that is not a constant passes through `arith.maxsi <x>, %c0`: the clamp
  the device applies (NZ-18). A constant offset is clamped at compile time (negative literal
  offsets were refused by the passes), which is why §10 shows `offsets = [%c0, ...]`.
- Tiles are destinations: `%t = pto.alloc_tile : !pto.tile_buf<...>`, then the instruction writes
  `outs(%t : ...)`. The tile layout follows its memory (pto_types.TILE_LAYOUTS); a transpose view
  is `pto.treshape` to the transposed layout, the same bytes (NZ of [N, K] is ZN of [K, N]).
- Index arithmetic is `arith.*i`; `//` is `arith.floordivsi` (floor, NZ-19). `%` is
  `arith.remsi` (truncating) plus the fix-up that makes it a floor modulo:
  `select(rem != 0 && (rem < 0) != (k < 0), rem + k, rem)` with `arith.cmpi` / `andi` / `select`.
  Integer constants are `%c<value>` (index) or `%c<value>_<type>`, hoisted to the function top.
- Loops are `scf.for` with `iter_args` for carried scalars and tiles; a carried tensor is an alias
  of the one it was stored into, so it is not an iter_arg. A pipelined loop keeps its stage count
  as `{pto.pipeline_stages = N}`.
- SPMD: when the kernel is one `pl.spmd(n)` over its whole body (nothing outside it stores), the
  lanes are the launch's blocks: `%lane = pto.get_block_idx : index` and the function carries
  `pto.block_dim = n`. Any other SPMD loop (nested, dynamic, or beside other stores) runs as an
  `scf.for` over its lanes, which is what the numpy backend does. Inside a lane
  `pl.get_block_idx()` is the lane and `pl.get_block_num()` the lane count; outside, 0 and 1.
- An Acc store into a blocked NZ target (`nz_partition` on tile.store, NZ-20) partitions the
  rank-5 view with those explicit sizes; with the view's row-major strides that is the
  assembler's `GlobalTensor<float, Shape<1,2,4,16,8>, Stride<1024,512,128,8,1>, Layout::NZ>`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..core import primitives as P
from ..core.dtypes import BOOL, INDEX, DType
from ..core.ir import Atom, Eqn, Graph, Literal, Var
from ..core.types import DynDim, Layout, ScalarType, TensorType, TileType, Type
from ..errors import CompileError, InternalError
from .pto_types import (
    TILE_LAYOUTS,
    Dim,
    Namer,
    TileLayout,
    constant_literal,
    constant_name,
    partition_type,
    pointer_type,
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
                acc = self.binop("muli", acc, d if isinstance(d, int) else self.dims[d.name], f"{name}_stride{i - 1}")
        return out[::-1]

    def make_view(self, ptr: str, name: str, t: TensorType) -> View:
        """Emit `pto.make_tensor_view` of `ptr` with `t`'s shape, strides and layout: the root `View`."""
        shape = [self.dim(d) for d in t.shape]
        strides = self.strides(t, name)
        ssa = self.names.fresh(f"{name}_view")
        layout = "nz" if t.layout is Layout.NZ else "nd"
        self.line(f"{ssa} = pto.make_tensor_view {ptr}, shape = [{', '.join(shape)}], "
                  f"strides = [{', '.join(self.operand(s) for s in strides)}] {{layout = #pto.layout<{layout}>}} : "
                  f"{tensor_view_type(t.rank, t.dtype)}")
        return View(ssa, name, t, ptr, tuple(strides), (0,) * t.rank, tuple(range(t.rank)))

    def root_window(self, v: View, offsets: list[Dim], sizes: list[Dim]) -> tuple[list[Dim], list[Dim]]:
        """Offsets and sizes on the root view's axes (a dropped axis has extent 1)."""
        if len(offsets) != len(v.axes) or len(sizes) != len(v.axes):
            raise InternalError(f"codegen: a window of rank {len(offsets)}/{len(sizes)} on a view of "
                                f"{v.name} with {len(v.axes)} visible axes")
        offs, szs = list(v.offsets), [1] * len(v.offsets)
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
        self.line(f"{ssa} = pto.partition_view {v.ssa}, offsets = [{', '.join(self.operand(o) for o in offs)}], "
                  f"sizes = [{', '.join(self.operand(s) for s in szs)}] : "
                  f"{tensor_view_type(v.type.rank, v.type.dtype)} -> {ptype}")
        return ssa, ptype

    # -------------------------------------------------------------------------- tiles
    def alloc(self, v: Var, valid: tuple[Dim, Dim] | None = None) -> Tile:
        """`%t = pto.alloc_tile : !pto.tile_buf<...>`: the destination of the instruction that follows."""
        t = v.type
        assert isinstance(t, TileType)
        if valid is None and not t.fully_valid and all(isinstance(x, int) for x in t.valid_shape or ()):
            valid = t.valid_shape  # static (a decode batch's Mat / Left / Acc tiles: M of 16 rows valid)
        if valid is not None and all(isinstance(x, int) for x in valid):
            valid = None if tuple(valid) == tile_rows_cols(t) else valid
        tile = Tile(self.names.fresh(v.hint, "t"), t, TILE_LAYOUTS[t.memory], valid)
        dyn = ""
        if tile.valid is not None:
            dyn = "".join(f" {k} = {x}" for k, x in zip(("valid_row", "valid_col"), tile.valid) if isinstance(x, str))
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


# ================================================================================ scalars
_SIGNED = {"add": "addi", "sub": "subi", "mul": "muli", "floordiv": "floordivsi", "min": "minsi",
           "max": "maxsi"}
_UNSIGNED = {**_SIGNED, "floordiv": "divui", "mod": "remui", "min": "minui", "max": "maxui"}
_FLOAT = {"add": "addf", "sub": "subf", "mul": "mulf", "min": "minimumf", "max": "maximumf"}


def _arith_op(name: str, d: DType, e: Eqn) -> str:
    table = _FLOAT if d.is_float else _SIGNED if d.is_signed else _UNSIGNED
    if name not in table:
        raise CompileError(f"'{name}' of {d.name} scalars has no PTO lowering", e.source,
                           help="use integer scalars for floor division and modulo")
    return table[name]


@rule(*(p for n, p in P.SCALAR_BINARY.items() if n != "mod"))
def _scalar_binary(em: Emitter, e: Eqn) -> None:
    _binary(em, e, _arith_op(e.primitive.name, e.outputs[0].type.dtype, e))  # type: ignore[union-attr]


def _binary(em: Emitter, e: Eqn, op: str) -> None:
    a, b = (em.value(x) for x in e.inputs)
    out = em.define(e.outputs[0])
    em.line(f"{out} = arith.{op} {a}, {b} : {e.outputs[0].type.dtype.short}")  # type: ignore[union-attr]


@rule(P.mod_p)
def _mod(em: Emitter, e: Eqn) -> None:
    """Floor modulo (NZ-19): `remsi` truncates toward zero; a non-zero remainder whose sign differs
    from the divisor's is moved into the divisor's range by adding the divisor once."""
    d = e.outputs[0].type.dtype  # type: ignore[union-attr]
    if not (d.is_int and d.is_signed):  # unsigned: remui is already the floor modulo
        _binary(em, e, _arith_op("mod", d, e))
        return
    a, k = (em.value(x) for x in e.inputs)
    t = d.short
    out = em.define(e.outputs[0])
    base = out[1:]
    rem, nz, rneg, kneg, differ, fix, adj = (em.names.fresh(f"{base}_{s}") for s in
                                             ("rem", "rem_nz", "rem_neg", "k_neg", "signs_differ", "fix", "adj"))
    zero = em.const(0, d)
    em.line(f"{rem} = arith.remsi {a}, {k} : {t}")
    em.line(f"{nz} = arith.cmpi ne, {rem}, {zero} : {t}")
    em.line(f"{rneg} = arith.cmpi slt, {rem}, {zero} : {t}")
    em.line(f"{kneg} = arith.cmpi slt, {k}, {zero} : {t}")
    em.line(f"{differ} = arith.cmpi ne, {rneg}, {kneg} : i1")
    em.line(f"{fix} = arith.andi {nz}, {differ} : i1")
    em.line(f"{adj} = arith.addi {rem}, {k} : {t}")
    em.line(f"{out} = arith.select {fix}, {adj}, {rem} : {t}")


_PRED = {"lt": "lt", "le": "le", "gt": "gt", "ge": "ge", "eq": "eq", "ne": "ne"}


@rule(*P.COMPARE.values())
def _compare(em: Emitter, e: Eqn) -> None:
    a, b = (em.value(x) for x in e.inputs)
    d = e.inputs[0].type.dtype  # type: ignore[union-attr]
    rel = _PRED[e.primitive.name]
    if d.is_float:
        op, pred = "cmpf", f"o{rel}" if rel not in ("eq", "ne") else ("oeq" if rel == "eq" else "one")
    else:
        op, pred = "cmpi", rel if rel in ("eq", "ne") else ("s" if d.is_signed else "u") + rel
    out = em.define(e.outputs[0])
    em.line(f"{out} = arith.{op} {pred}, {a}, {b} : {d.short}")


def _convert_op(src: DType, dst: DType) -> str:
    if src.kind == "index" or dst.kind == "index":
        return "index_cast" if src.is_signed else "index_castui"
    if src.is_float and dst.is_float:
        return "extf" if dst.bits > src.bits else "truncf"
    if src.is_float:
        return "fptosi" if dst.is_signed else "fptoui"
    if dst.is_float:
        return "sitofp" if src.is_signed else "uitofp"
    if dst.bits > src.bits:
        return "extsi" if src.is_signed else "extui"
    return "trunci" if dst.bits < src.bits else "bitcast"


@rule(P.convert_p)
def _convert(em: Emitter, e: Eqn) -> None:
    (a,) = e.inputs
    src, dst = a.type.dtype, e.params["dtype"]  # type: ignore[union-attr]
    if src is dst:
        em.alias(e.outputs[0], a)
        return
    x = em.value(a)
    out = em.define(e.outputs[0])
    em.line(f"{out} = arith.{_convert_op(src, dst)} {x} : {src.short} to {dst.short}")


@rule(P.get_block_idx_p)
def _block_idx(em: Emitter, e: Eqn) -> None:
    """Inside a lane the lane's block index; outside any pl.spmd it is 0 (language/ops.py)."""
    em.env[e.outputs[0]] = em.lanes[-1].idx if em.lanes else em.const(0, INDEX)


@rule(P.get_block_num_p)
def _block_num(em: Emitter, e: Eqn) -> None:
    em.env[e.outputs[0]] = em.lanes[-1].count if em.lanes else em.const(1, INDEX)


# ================================================================================ loops
def _scalar_or_tile_type(em: Emitter, a: Atom) -> str:
    x = em.env.get(a) if isinstance(a, Var) else None
    if isinstance(x, Tile):
        return x.spelled
    return a.type.dtype.short  # type: ignore[union-attr]


def _bind_like(em: Emitter, v: Var, init: Atom, ssa: str) -> None:
    """Body input / loop result `v` takes the form of its initial value (a tile keeps its layout)."""
    x = em.env.get(init) if isinstance(init, Var) else None
    em.env[v] = Tile(ssa, x.type, x.layout, x.valid) if isinstance(x, Tile) else ssa


def _bounds(em: Emitter, e: Eqn) -> tuple[str, str, str, str]:
    start, stop, step = (em.value(x) for x in e.inputs[:3])
    d = e.inputs[0].type.dtype  # type: ignore[union-attr]
    return start, stop, step, "" if d is INDEX else f" : {d.short}"


@rule(P.for_p)
def _for(em: Emitter, e: Eqn) -> None:
    if e.params["kind"] == "spmd":
        _spmd(em, e)
        return
    nb, nc, nk = e.params["arity"]
    body: Graph = e.params["body"]
    for p, a in zip(body.params[1 : 1 + nc], e.inputs[nb : nb + nc]):
        em.alias(p, a)
    inits, carries = e.inputs[nb + nc :], body.params[1 + nc :]
    iters = [i for i, c in enumerate(carries) if not isinstance(c.type, TensorType)]
    for i, c in enumerate(carries):
        if i not in iters:  # a carried tensor is the tensor it was stored into (an alias)
            em.alias(c, inits[i])
            em.alias(e.outputs[i], inits[i])
    results = []
    for i in iters:
        ssa = em.names.fresh(e.outputs[i].hint, "r")
        _bind_like(em, e.outputs[i], inits[i], ssa)
        results.append(ssa)
    start, stop, step, ty = _bounds(em, e)
    iv = em.define(body.params[0], "i")
    head = f"scf.for {iv} = {start} to {stop} step {step}{ty}"
    if iters:
        pairs, types = [], []
        for i in iters:
            ssa = em.names.fresh(carries[i].hint, "r")
            types.append(_scalar_or_tile_type(em, inits[i]))
            pairs.append(f"{ssa} = {_ssa(em, inits[i])}")
            _bind_like(em, carries[i], inits[i], ssa)
        head = f"{', '.join(results)} = {head} iter_args({', '.join(pairs)}) -> ({', '.join(types)})"
    em.line(head + " {")
    em.depth += 1
    em.eqns(body.eqns)
    if iters:
        outs = [body.outputs[i] for i in iters]
        em.line(f"scf.yield {', '.join(_ssa(em, a) for a in outs)} : "
                f"{', '.join(_scalar_or_tile_type(em, inits[i]) for i in iters)}")
    em.depth -= 1
    stage = e.params.get("stage")
    em.line("}" + (f" {{pto.pipeline_stages = {stage} : i64}}" if e.params["kind"] == "pipeline" and stage else ""))


def _ssa(em: Emitter, a: Atom) -> str:
    if isinstance(a, Literal):
        return em.value(a)
    x = em.env.get(a)
    if isinstance(x, Tile):
        return x.ssa
    if isinstance(x, str):
        return x
    raise InternalError(f"codegen: {a!r} has no SSA value")


def _spmd(em: Emitter, e: Eqn) -> None:
    """The lanes: the launch's block index when this loop is the kernel (module docstring), else an
    `scf.for` over the lanes, as the backend runs them."""
    nb, nc, _ = e.params["arity"]
    body: Graph = e.params["body"]
    for p, a in zip(body.params[1 : 1 + nc], e.inputs[nb : nb + nc]):
        em.alias(p, a)
    if e is em.launch:
        idx = em.define(body.params[0], "lane")
        em.line(f"{idx} = pto.get_block_idx : index")
        em.lanes.append(Lane(idx, em.value(e.inputs[1])))
        em.eqns(body.eqns)
        em.lanes.pop()
        return
    start, stop, step, ty = _bounds(em, e)
    count = stop if isinstance(e.inputs[0], Literal) and e.inputs[0].value == 0 else _lane_count(em, e)
    iv = em.define(body.params[0], "lane")
    em.line(f"scf.for {iv} = {start} to {stop} step {step}{ty} {{")
    em.depth += 1
    em.lanes.append(Lane(iv, count))
    em.eqns(body.eqns)
    em.lanes.pop()
    em.depth -= 1
    em.line("}")


def _lane_count(em: Emitter, e: Eqn) -> str:
    """stop - start, what get_block_num reports inside the lanes (backend/executor.py)."""
    start, stop = (em.value(x) for x in e.inputs[:2])
    out = em.names.fresh("lanes")
    em.line(f"{out} = arith.subi {stop}, {start} : {e.inputs[0].type.dtype.short}")  # type: ignore[union-attr]
    return out


def launch_loop(g: Graph) -> Eqn | None:
    """The top-level `pl.spmd(n)` that can be the launch grid: static 0..n step 1, and nothing
    outside it stores (code outside is replicated on every block, so it must be pure)."""
    spmd = [e for e in g.eqns if e.primitive is P.for_p and e.params["kind"] == "spmd"]
    if len(spmd) != 1:
        return None
    (loop,) = spmd
    start, stop, step = loop.inputs[:3]
    if not (isinstance(start, Literal) and isinstance(stop, Literal) and isinstance(step, Literal)
            and start.value == 0 and step.value == 1 and int(stop.value) > 0):
        return None
    for e in g.eqns:
        if e is not loop and _stores(e):
            return None
    return loop


def _stores(e: Eqn) -> bool:
    if e.primitive is P.tile_store_p:
        return True
    body = e.params.get("body")
    return isinstance(body, Graph) and any(x.primitive is P.tile_store_p for x in body.walk())


# ================================================================================ tensors
def _unlowered(after: str) -> Rule:
    def refuse(em: Emitter, e: Eqn) -> None:
        raise InternalError(f"codegen: '{e.primitive.name}' reached PTO emission; {after} removes it, "
                            "so codegen runs on the graph after every pass (Lowered.pto())")

    return refuse


pto_rules[P.tensor_matmul_p] = pto_rules[P.tensor_matmul_acc_p] = _unlowered("ConvertTensorToTileOps")
pto_rules[P.tensor_assign_p] = _unlowered("ConvertTensorToTileOps")
pto_rules[P.tile_matmul_p] = pto_rules[P.tile_matmul_acc_p] = _unlowered("AutoTileMatmulL0")


@rule(P.tensor_slice_p)
def _slice(em: Emitter, e: Eqn) -> None:
    """A window of a view: no text, its offsets are folded into later partition views."""
    v = em.view(e.inputs[0])
    offsets = [em.index(a) for a in e.operands("offsets")]
    zero = [0] * len(offsets)
    offs, _ = em.root_window(v, offsets, zero)
    drop = set(e.params.get("drop", ()))
    axes = tuple(a for j, a in enumerate(v.axes) if j not in drop)
    em.env[e.outputs[0]] = View(v.ssa, v.name, v.type, v.ptr, v.strides, tuple(offs), axes)


@rule(P.tensor_reshape_p, P.tensor_view_p, P.tensor_reinterpret_view_p)
def _reshape(em: Emitter, e: Eqn) -> None:
    """A new shape over the same bytes: a new make_tensor_view of the (offset) base pointer."""
    v = em.view(e.inputs[0])
    out = e.outputs[0]
    t = out.type
    assert isinstance(t, TensorType)
    ptr = _offset_pointer(em, v)
    if t.dtype is not v.type.dtype:
        cast = em.names.fresh(f"{v.name}_ptr")
        em.line(f"{cast} = pto.castptr {ptr} : {pointer_type(v.type.dtype)} -> {pointer_type(t.dtype)}")
        ptr = cast
    em.env[out] = em.make_view(ptr, out.hint or v.name, t)


def _offset_pointer(em: Emitter, v: View) -> str:
    """The base pointer of a sliced view: `%arg` plus the element offset of its window."""
    linear: Dim = 0
    for o, s in zip(v.offsets, v.strides):
        linear = em.binop("addi", linear, em.binop("muli", o, s, f"{v.name}_eoff"), f"{v.name}_eoff")
    if linear == 0:
        return v.ptr
    out = em.names.fresh(f"{v.name}_ptr")
    em.line(f"{out} = pto.addptr {v.ptr}, {em.operand(linear)} : {pointer_type(v.type.dtype)}")
    return out


# ================================================================================ tiles
def _load_valid(em: Emitter, e: Eqn, sizes: list[Dim]) -> tuple[Dim, Dim] | None:
    """The tile's valid rows / cols when the load's valid_shape is given (dynamic ones as SSA)."""
    if not e.operands("valid"):
        return None
    if e.params.get("blocked"):  # [1, cols/c0, rows/16, 16, c0] (NZ-12)
        return (em.binop("muli", sizes[2], sizes[3], "valid_rows"),
                em.binop("muli", sizes[1], sizes[4], "valid_cols"))
    rows: Dim = 1
    for s in sizes[:-1]:
        rows = em.binop("muli", rows, s, "valid_rows")
    return rows, sizes[-1]


@rule(P.tile_load_p)
def _load(em: Emitter, e: Eqn) -> None:
    v = em.view(e.inputs[0])
    offsets = [em.index(a) for a in e.operands("offsets")]
    valid = e.operands("valid")
    sizes = [em.index(a) for a in valid] if valid else list(e.params["shape"])
    pview, ptype = em.partition(v, offsets, sizes)
    tile = em.alloc(e.outputs[0], valid=_load_valid(em, e, sizes))
    em.line(f"pto.tload ins({pview} : {ptype}) outs({tile.ssa} : {tile.spelled})")


def _store_sizes(em: Emitter, e: Eqn, tile: Tile, rank: int) -> list[Dim]:
    part = e.params.get("nz_partition")
    if part is not None:  # the explicit rank-5 partition of an Acc store into NZ (NZ-20)
        return [x if isinstance(x, int) else em.index(x) for x in part]
    rows, cols = tile.valid if tile.valid is not None else tile_rows_cols(tile.type)
    return ([1] * max(0, rank - 2) + [rows, cols])[-rank:]


def _attr(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return f"{v} : i64"
    return '"' + str(getattr(v, "value", v)).replace('"', '\\"') + '"'


@rule(P.tile_store_p)
def _store(em: Emitter, e: Eqn) -> None:
    tile = em.tile(e.inputs[0])
    v = em.view(e.inputs[-1])
    offsets = [em.index(a) for a in e.operands("offsets")]
    pview, ptype = em.partition(v, offsets, _store_sizes(em, e, tile, len(v.axes)))
    attrs = e.params.get("attrs") or {}
    extra = " {" + ", ".join(f"{k} = {_attr(x)}" for k, x in sorted(attrs.items())) + "}" if attrs else ""
    em.line(f"pto.tstore ins({tile.ssa} : {tile.spelled}) outs({pview} : {ptype}){extra}")
    em.env[e.outputs[0]] = v


def _instr(em: Emitter, e: Eqn, op: str, valid_from: Tile | None = None) -> None:
    """`op ins(srcs : types) outs(%dst : type)`, the destination allocated first."""
    tiles = [em.tile(a) for a in e.inputs]
    out = em.alloc(e.outputs[0], valid=valid_from.valid if valid_from else None)
    names = ", ".join(t.ssa for t in tiles)
    types = ", ".join(t.spelled for t in tiles)
    em.line(f"{op} ins({names} : {types}) outs({out.ssa} : {out.spelled})")


@rule(P.tile_extract_p)
def _extract(em: Emitter, e: Eqn) -> None:
    src = em.tile(e.inputs[0])
    r0, c0 = (em.operand(em.index(a)) for a in e.operands("offsets"))
    out = em.alloc(e.outputs[0])
    flag = " {transpose}" if e.params.get("transpose") else ""
    em.line(f"pto.textract ins({src.ssa}, {r0}, {c0} : {src.spelled}, index, index) "
            f"outs({out.ssa} : {out.spelled}){flag}")


@rule(P.tile_mad_p)
def _mad(em: Emitter, e: Eqn) -> None:
    _instr(em, e, "pto.tmatmul")


@rule(P.tile_mad_acc_p)
def _mad_acc(em: Emitter, e: Eqn) -> None:
    _instr(em, e, "pto.tmatmul.acc")


@rule(P.tile_transpose_view_p)
def _transpose_view(em: Emitter, e: Eqn) -> None:
    """No data moves: the same bytes under the transposed layout (NZ [N, K] == ZN [K, N])."""
    src = em.tile(e.inputs[0])
    out_v = e.outputs[0]
    t = out_v.type
    assert isinstance(t, TileType)
    valid = None if src.valid is None else (src.valid[1], src.valid[0])
    tile = Tile(em.names.fresh(out_v.hint, "t"), t, src.layout.transposed(), valid)
    em.line(f"{tile.ssa} = pto.treshape {src.ssa} : {src.spelled} -> {tile.spelled}")
    em.env[out_v] = tile


@rule(P.tile_cast_p)
def _cast(em: Emitter, e: Eqn) -> None:
    _instr(em, e, "pto.tcvt", valid_from=em.tile(e.inputs[0]))


@rule(P.tile_move_p)
def _move(em: Emitter, e: Eqn) -> None:
    _instr(em, e, "pto.tmov", valid_from=em.tile(e.inputs[0]))


_ELEMENTWISE = {"tile.add": "pto.tadd", "tile.sub": "pto.tsub", "tile.mul": "pto.tmul",
                "tile.maximum": "pto.tmax", "tile.exp": "pto.texp"}


def _elementwise(em: Emitter, e: Eqn) -> None:
    _instr(em, e, _ELEMENTWISE[e.primitive.name], valid_from=em.tile(e.inputs[0]))


for _p in P.ELEMENTWISE.values():
    pto_rules[_p] = _elementwise


# ================================================================================ the function
def _signature(em: Emitter, g: Graph) -> list[str]:
    """Function arguments; tensor params get their make_tensor_view (emitted at the top)."""
    args: list[str] = []
    tensors: list[tuple[Var, str]] = []
    for i, p in enumerate(g.params):
        if isinstance(p.type, TensorType):
            ptr = em.names.exact(f"arg{i}")
            args.append(f"{ptr}: {pointer_type(p.type.dtype)}")
            tensors.append((p, ptr))
        else:
            args.append(f"{em.define(p, 's')}: {_type(p.type)}")
    for p in g.params:
        for d in p.type.shape if isinstance(p.type, TensorType) else ():
            if isinstance(d, DynDim) and d.name not in em.dims:
                em.dims[d.name] = em.names.fresh(d.name)
                args.append(f"{em.dims[d.name]}: index")
    for p, ptr in tensors:
        em.env[p] = em.make_view(ptr, p.hint or ptr[1:], p.type)  # type: ignore[arg-type]
    return args


def _type(t: Type) -> str:
    if isinstance(t, ScalarType):
        return "i1" if t.dtype is BOOL else t.dtype.short
    raise InternalError(f"codegen: parameter of type {t} has no PTO argument form")


def emit_pto(graph: Graph, kernel: Any = None) -> str:
    """The PTO text of one kernel (see the module docstring for every choice it makes)."""
    em = Emitter()
    name = getattr(kernel, "__name__", None) or graph.name
    args = _signature(em, graph)
    em.launch = launch_loop(graph)
    em.eqns(graph.eqns)
    attrs = ""
    if em.launch is not None:
        attrs = f" attributes {{pto.block_dim = {int(em.launch.inputs[1].value)} : i64}}"  # type: ignore[union-attr]
    head = f"func.func @{name}({', '.join(args)}){attrs} {{"
    return "\n".join([head, *em.const_lines, *em.lines, "  return", "}"]) + "\n"
