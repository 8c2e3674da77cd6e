"""Every primitive of the IR and its type rule. Other rules live in per-concern tables keyed by
primitive (backend `impl_rules`, codegen `pto_rules`), JAX-style: one table per rule kind, one
entry per primitive."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..errors import CompileError
from . import dtypes as dt
from .types import Layout, Mem, ScalarType, TensorType, TileType, Type


class Primitive:
    """A named operation. `groups` names the operand groups of its inputs (sizes in params['arity'])."""

    def __init__(self, name: str, groups: Sequence[str], type_rule: Callable[..., list[Type]]) -> None:
        self.name = name
        self.groups = tuple(groups)
        self.type_rule = type_rule

    def __repr__(self) -> str:
        return self.name

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        # pickled by name (a lowered graph is shipped to a Ray actor, nzjit.distributed): the
        # receiving process has the same registered primitive, identity preserved
        return _registered, (self.name,)


def _registered(name: str) -> Primitive:
    return _ALL[name]


_ALL: dict[str, Primitive] = {}


def primitive(name: str, groups: Sequence[str]) -> Callable[[Callable[..., list[Type]]], Primitive]:
    """Decorator: make a type rule into the `Primitive` `name` with operand `groups`, registered in the table
    of all primitives."""
    def deco(rule: Callable[..., list[Type]]) -> Primitive:
        p = Primitive(name, groups, rule)
        _ALL[name] = p
        return p

    return deco


def all_primitives() -> dict[str, Primitive]:
    """Every registered primitive by name (a copy)."""
    return dict(_ALL)


def _fail(msg: str, **kw: Any) -> CompileError:
    return CompileError(msg, **kw)


# ---------------------------------------------------------------------------------------- scalars
def _scalar_dtype(*ts: Type) -> dt.DType:
    for t in ts:
        if not isinstance(t, ScalarType):
            raise _fail(f"scalar arithmetic needs scalar operands, got {t}")
    d = ts[0].dtype  # type: ignore[union-attr]
    for t in ts[1:]:
        if t.dtype is not d:  # type: ignore[union-attr]
            raise _fail(f"scalar operands have different dtypes {ts[0]} and {t}; use pl.cast to convert")
    return d


def _binary_scalar(name: str) -> Primitive:
    @primitive(name, ("lhs", "rhs"))
    def rule(a: Type, b: Type, **_: Any) -> list[Type]:
        return [ScalarType(_scalar_dtype(a, b))]

    return rule


add_p = _binary_scalar("add")
sub_p = _binary_scalar("sub")
mul_p = _binary_scalar("mul")
floordiv_p = _binary_scalar("floordiv")
mod_p = _binary_scalar("mod")
min_p = _binary_scalar("min")
max_p = _binary_scalar("max")


def _compare(name: str) -> Primitive:
    @primitive(name, ("lhs", "rhs"))
    def rule(a: Type, b: Type, **_: Any) -> list[Type]:
        _scalar_dtype(a, b)
        return [ScalarType(dt.BOOL)]

    return rule


lt_p, le_p, gt_p, ge_p, eq_p, ne_p = (_compare(n) for n in ("lt", "le", "gt", "ge", "eq", "ne"))
SCALAR_BINARY = {"add": add_p, "sub": sub_p, "mul": mul_p, "floordiv": floordiv_p, "mod": mod_p,
                 "min": min_p, "max": max_p}
COMPARE = {"lt": lt_p, "le": le_p, "gt": gt_p, "ge": ge_p, "eq": eq_p, "ne": ne_p}


@primitive("convert", ("src",))
def convert_p(a: Type, *, dtype: dt.DType, **_: Any) -> list[Type]:
    """Scalar conversion to `dtype`."""
    _scalar_dtype(a)
    return [ScalarType(dtype)]


@primitive("get_block_idx", ())
def get_block_idx_p(**_: Any) -> list[Type]:
    """The SPMD lane's block index (INDEX)."""
    return [ScalarType(dt.INDEX)]


@primitive("get_block_num", ())
def get_block_num_p(**_: Any) -> list[Type]:
    """The number of SPMD lanes (INDEX)."""
    return [ScalarType(dt.INDEX)]


# ------------------------------------------------------------------------------------------ loops
@primitive("for", ("bounds", "captured", "carries"))
def for_p(*in_types: Type, body: Any, arity: tuple[int, int, int], **_: Any) -> list[Type]:
    """A staged loop: kind range / pipeline / spmd. Outputs are the carries after the last trip."""
    nb, nc, nk = arity
    carries_in = in_types[nb + nc :]
    outs = [v.type for v in body.outputs]
    for i, (a, b) in enumerate(zip(carries_in, outs)):
        if a != b:
            name = body.params[1 + nc + i].hint or f"#{i}"
            raise _fail(f"loop-carried value '{name}' changes type from {a} before the loop to {b} "
                        "after one iteration; make both sides the same type (e.g. same tile shape "
                        "and memory, or pl.cast)")
    return list(carries_in)


# --------------------------------------------------------------------------------- tensor level
def _tensor(t: Type, what: str) -> TensorType:
    if not isinstance(t, TensorType):
        raise _fail(f"{what} needs a tensor operand, got {t}")
    return t


def _tile(t: Type, what: str) -> TileType:
    if not isinstance(t, TileType):
        raise _fail(f"{what} needs a tile operand, got {t}")
    return t


def _check_index_operands(ts: Sequence[Type], what: str) -> None:
    for t in ts:
        if not (isinstance(t, ScalarType) and t.dtype.is_int):
            raise _fail(f"{what} offsets must be integer scalars, got {t}")


@primitive("tensor.slice", ("src", "offsets", "valid"))
def tensor_slice_p(src: Type, *rest: Type, shape: tuple[int, ...], drop: tuple[int, ...] = (),
                   arity: tuple[int, ...], **_: Any) -> list[Type]:
    """A window of a tensor at `offsets` of static `shape`; the axes in `drop` are indexed away; a `valid`
    group makes the valid shape dynamic."""
    s = _tensor(src, "tensor.slice")
    _check_index_operands(rest, "tensor.slice")
    if len(shape) != s.rank or arity[1] != s.rank:
        raise _fail(f"tensor.slice of a rank-{s.rank} tensor needs {s.rank} offsets and sizes")
    kept = tuple(d for i, d in enumerate(shape) if i not in drop)
    valid = None
    if arity[2]:
        valid = tuple(None for i in range(len(shape)) if i not in drop)  # dynamic until proven
    return [TensorType(kept, s.dtype, s.layout, None, valid)]  # type: ignore[arg-type]


@primitive("tensor.reshape", ("src",))
def tensor_reshape_p(src: Type, *, shape: tuple[int, ...], **_: Any) -> list[Type]:
    """Reshape keeping the element count; a flattening to 1-D is ND whatever the layout: the tensor's bytes in
    memory order (NZ-31)."""
    s = _tensor(src, "tensor.reshape")
    if s.is_static and all(isinstance(d, int) for d in shape):
        n_src = _prod(s.shape)  # type: ignore[arg-type]
        if n_src != _prod(shape):
            raise _fail(f"tensor.reshape from {list(s.shape)} to {list(shape)} changes the element count")
    # NZ-31: the whole tensor flattened to [N] is its bytes in memory order, whatever the layout: ND
    layout = Layout.ND if len(shape) == 1 else s.layout
    return [TensorType(tuple(shape), s.dtype, layout)]


def _static_bits(shape: Sequence[Any], dtype: dt.DType) -> int | None:
    if not all(isinstance(d, int) for d in shape):
        return None
    return _prod(shape) * dtype.bits


@primitive("tensor.view", ("src",))
def tensor_view_p(src: Type, *, shape: tuple[int, ...], **_: Any) -> list[Type]:
    """The same bytes seen with another `shape` (same dtype, layout and bit count)."""
    s = _tensor(src, "tensor.view")
    a, b = _static_bits(s.shape, s.dtype), _static_bits(shape, s.dtype)
    if a is not None and b is not None and a != b:
        raise _fail(f"tensor.view from {list(s.shape)} to {list(shape)} changes the element count")
    return [TensorType(tuple(shape), s.dtype, s.layout)]


@primitive("tensor.reinterpret_view", ("src",))
def tensor_reinterpret_view_p(src: Type, *, dtype: dt.DType, shape: tuple[int, ...], **_: Any) -> list[Type]:
    """The same bytes seen as another `dtype` and `shape`; the byte count must not change."""
    s = _tensor(src, "tensor.reinterpret_view")
    a, b = _static_bits(s.shape, s.dtype), _static_bits(shape, dtype)
    if a is not None and b is not None and a != b:
        raise _fail(f"tensor.reinterpret_view of {s} as {dtype.short}[{','.join(map(str, shape))}] changes "
                    f"the byte count ({a // 8} -> {b // 8} bytes)")
    return [TensorType(tuple(shape), dtype, s.layout)]


def _matmul_shape(a: tuple[Any, ...], b: tuple[Any, ...], b_trans: bool, what: str) -> tuple[Any, Any]:
    if len(a) != 2 or len(b) != 2:
        raise _fail(f"{what} needs 2-D operands, got {list(a)} and {list(b)}")
    m, k = a
    n, kb = (b[0], b[1]) if b_trans else (b[1], b[0])
    if k != kb:
        raise _fail(f"{what}: contraction sizes differ, lhs {list(a)} and rhs {list(b)}"
                    f"{' (b_trans=True)' if b_trans else ''}")
    return m, n


_MATMUL_OUT = {dt.INT8: dt.INT32, dt.FP16: dt.FP32, dt.BF16: dt.FP32, dt.FP32: dt.FP32}


def _matmul_out_dtype(a: dt.DType, b: dt.DType, out: dt.DType | None, what: str) -> dt.DType:
    if a is not b or a not in _MATMUL_OUT:
        raise _fail(f"{what}: unsupported operand dtypes {a} x {b}; the cube takes INT8 x INT8, "
                    "FP16 x FP16, BF16 x BF16 or FP32 x FP32")
    want = _MATMUL_OUT[a]
    if out is not None and out is not want:
        raise _fail(f"{what}: {a} operands accumulate in {want}, not {out}")
    return want


def _squeeze2(shape: tuple[Any, ...]) -> tuple[Any, ...]:
    """Tensor-level matmul operands may carry leading unit axes (w[e:e+1, ...])."""
    while len(shape) > 2 and shape[0] == 1:
        shape = shape[1:]
    return shape


@primitive("tensor.matmul", ("a", "b"))
def tensor_matmul_p(a: Type, b: Type, *, b_trans: bool = False, out_dtype: Any = None, **_: Any) -> list[Type]:
    """`pl.matmul` on tensors (before tiling): `[M,K] x [K,N]` (or `B^T` with `b_trans`) -> `[M,N]` of the
    accumulator dtype."""
    ta, tb = _tensor(a, "pl.matmul"), _tensor(b, "pl.matmul")
    m, n = _matmul_shape(_squeeze2(ta.shape), _squeeze2(tb.shape), b_trans, "pl.matmul")
    return [TensorType((m, n), _matmul_out_dtype(ta.dtype, tb.dtype, out_dtype, "pl.matmul"))]


@primitive("tensor.matmul_acc", ("acc", "a", "b"))
def tensor_matmul_acc_p(acc: Type, a: Type, b: Type, *, b_trans: bool = False, **_: Any) -> list[Type]:
    """`pl.matmul_acc` on tensors: `acc + a @ b`; the accumulator must have the product's shape and dtype."""
    tc, ta, tb = _tensor(acc, "pl.matmul_acc"), _tensor(a, "pl.matmul_acc"), _tensor(b, "pl.matmul_acc")
    m, n = _matmul_shape(_squeeze2(ta.shape), _squeeze2(tb.shape), b_trans, "pl.matmul_acc")
    if tuple(tc.shape) != (m, n) or tc.dtype is not _matmul_out_dtype(ta.dtype, tb.dtype, None, "pl.matmul_acc"):
        raise _fail(f"pl.matmul_acc: accumulator {tc} does not match the product [{m},{n}]")
    return [tc]


@primitive("tensor.assign", ("dst", "value", "offsets"))
def tensor_assign_p(dst: Type, value: Type, *offs: Type, **_: Any) -> list[Type]:
    """Assignment of a tensor or tile value into `dst` at `offsets`; the result is the updated `dst`."""
    d = _tensor(dst, "assignment")
    _check_index_operands(offs, "assignment")
    if len(offs) != d.rank:
        raise _fail(f"assignment into a rank-{d.rank} tensor needs {d.rank} offsets")
    if not isinstance(value, TensorType | TileType):
        raise _fail(f"can only assign a tensor or tile value, got {value}")
    return [d]


# ----------------------------------------------------------------------------------- tile level
@primitive("tile.load", ("src", "offsets", "valid"))
def tile_load_p(src: Type, *rest: Type, shape: tuple[int, ...], memory: Mem, arity: tuple[int, ...],
                valid_static: tuple[int | None, ...] | None = None, out_type: TileType | None = None,
                **_: Any) -> list[Type]:
    """`pl.load`: a window of static `shape` of a GM tensor into a tile of `memory`; a blocked load keeps its
    explicit `out_type` (NZ-13)."""
    if out_type is not None:  # NZ-13: a blocked load keeps its explicit logical tile type
        return [out_type]
    s = _tensor(src, "pl.load")
    _check_index_operands(rest, "pl.load")
    if arity[1] != s.rank or len(shape) != s.rank:
        raise _fail(f"pl.load from a rank-{s.rank} tensor needs {s.rank} offsets and {s.rank} shapes, "
                    f"got {arity[1]} and {len(shape)}")
    for i, d in enumerate(shape):
        if not isinstance(d, int) or d <= 0:
            raise _fail(f"pl.load shapes must be positive static ints, got {list(shape)}")
        sd = s.shape[i]
        if isinstance(sd, int) and d > sd:
            raise _fail(f"pl.load window {list(shape)} exceeds the tensor shape {list(s.shape)} on axis {i}")
    return [TileType(tuple(shape), s.dtype, memory, valid_static)]


@primitive("tile.store", ("tile", "offsets", "dst"))
def tile_store_p(tile: Type, *rest: Type, arity: tuple[int, ...], **_: Any) -> list[Type]:
    """`pl.store` of a tile into the tensor `dst` at `offsets`; the result is the updated tensor."""
    _tile(tile, "pl.store")
    d = _tensor(rest[-1], "pl.store")
    _check_index_operands(rest[:-1], "pl.store")
    return [d]


def _mm_operands(a: Type, b: Type, what: str) -> tuple[TileType, TileType]:
    ta, tb = _tile(a, what), _tile(b, what)
    for t in (ta, tb):
        if t.memory not in (Mem.Mat, Mem.Left, Mem.Right):
            raise _fail(f"{what} operands must be Mat (or Left/Right) tiles, got {t}; load them with "
                        "target_memory=pl.Mem.Mat")
    return ta, tb


@primitive("tile.matmul", ("a", "b"))
def tile_matmul_p(a: Type, b: Type, *, b_trans: bool = False, out_dtype: Any = None, **_: Any) -> list[Type]:
    """`pl.matmul` on Mat (or Left/Right) tiles: `[M,N]` Acc tile of the accumulator dtype."""
    ta, tb = _mm_operands(a, b, "pl.matmul")
    m, n = _matmul_shape(_squeeze2(ta.shape), _squeeze2(tb.shape), b_trans, "pl.matmul")
    return [TileType((m, n), _matmul_out_dtype(ta.dtype, tb.dtype, out_dtype, "pl.matmul"), Mem.Acc)]


@primitive("tile.matmul_acc", ("acc", "a", "b"))
def tile_matmul_acc_p(acc: Type, a: Type, b: Type, *, b_trans: bool = False, **_: Any) -> list[Type]:
    """`pl.matmul_acc` on tiles: `acc + a @ b`; the accumulator must be the product's Acc tile."""
    tc = _tile(acc, "pl.matmul_acc")
    ta, tb = _mm_operands(a, b, "pl.matmul_acc")
    m, n = _matmul_shape(_squeeze2(ta.shape), _squeeze2(tb.shape), b_trans, "pl.matmul_acc")
    want = TileType((m, n), _matmul_out_dtype(ta.dtype, tb.dtype, None, "pl.matmul_acc"), Mem.Acc)
    if tc.shape != want.shape or tc.dtype is not want.dtype or tc.memory is not Mem.Acc:
        raise _fail(f"pl.matmul_acc: accumulator {tc} does not match the product {want}")
    return [tc]


@primitive("tile.extract", ("src", "offsets"))
def tile_extract_p(src: Type, *offs: Type, shape: tuple[int, int], memory: Mem, transpose: bool = False,
                   valid_shape: tuple[int, int] | None = None, **_: Any) -> list[Type]:
    """Mat -> Left/Right (TEXTRACT) of a window; `transpose` reads the window as its transpose. TEXTRACT
    moves whole fractals; `valid_shape` is the part a decode batch's rows fill (hardware-model.md §6:
    TMATMUL takes m = Left.validRow)."""
    s = _tile(src, "tile.extract")
    return [TileType(tuple(shape), s.dtype, memory, None if valid_shape is None else tuple(valid_shape))]


@primitive("tile.mad", ("left", "right"))
def tile_mad_p(left: Type, right: Type, *, out_dtype: dt.DType, **_: Any) -> list[Type]:
    """The cube's MAD: Left `[M,K]` x Right `[K,N]` -> a fresh Acc `[M,N]` of `out_dtype`."""
    tl, tr = _tile(left, "tile.mad"), _tile(right, "tile.mad")
    if tl.memory is not Mem.Left or tr.memory is not Mem.Right or tl.shape[1] != tr.shape[0]:
        raise _fail(f"tile.mad needs Left [M,K] and Right [K,N] tiles, got {tl} and {tr}")
    shape = (tl.shape[0], tr.shape[1])
    # TMATMUL computes m = Left.validRow rows (hardware-model.md §6): a decode batch's Acc tile is
    # whole 16-row fractals of which its M rows are valid (the store writes those only)
    rows = tl.shape[0] if tl.fully_valid else tl.valid_shape[0]  # type: ignore[index]
    return [TileType(shape, out_dtype, Mem.Acc, None if rows == shape[0] else (rows, shape[1]))]


@primitive("tile.mad_acc", ("acc", "left", "right"))
def tile_mad_acc_p(acc: Type, left: Type, right: Type, **_: Any) -> list[Type]:
    """MAD accumulating into an existing Acc tile (same rule as `tile.mad`, the accumulator's dtype)."""
    tc = _tile(acc, "tile.mad_acc")
    (want,) = tile_mad_p.type_rule(left, right, out_dtype=tc.dtype)
    if want.valid_shape is not None and tc.valid_shape != want.valid_shape:  # the valid rows of a decode batch's accumulator stay M
        raise _fail(f"tile.mad_acc: accumulator {tc} does not have the product's valid rows {want}")
    return [tc]


@primitive("tile.transpose_view", ("src",))
def tile_transpose_view_p(src: Type, **_: Any) -> list[Type]:
    """`pl.tile.transpose_view`: a 2-D tile's bytes read as its transpose (no copy); the valid shape is
    swapped too."""
    s = _tile(src, "pl.tile.transpose_view")
    shape = _squeeze2(s.shape)
    if len(shape) != 2:
        raise _fail(f"pl.tile.transpose_view needs a 2-D tile, got {s}")
    vs = None if s.valid_shape is None else tuple(reversed(s.valid_shape[-2:]))
    return [TileType((shape[1], shape[0]), s.dtype, s.memory, vs)]


@primitive("tile.cast", ("src",))
def tile_cast_p(src: Type, *, dtype: dt.DType, **_: Any) -> list[Type]:
    """`pl.cast` of a tile to `dtype` (same shape and memory)."""
    s = _tile(src, "pl.cast")
    return [s.with_(dtype=dtype)]


@primitive("tile.move", ("src",))
def tile_move_p(src: Type, *, memory: Mem, **_: Any) -> list[Type]:
    """`pl.move` of a tile to another on-chip `memory` (same shape and dtype)."""
    s = _tile(src, "pl.move")
    return [s.with_(memory=memory)]


def _elementwise(name: str, nargs: int) -> Primitive:
    @primitive(f"tile.{name}", tuple(f"x{i}" for i in range(nargs)))
    def rule(*ts: Type, **_: Any) -> list[Type]:
        tiles = [_tile(t, f"pl.{name}") for t in ts]
        t0 = tiles[0]
        for t in tiles:
            if t.memory is not Mem.Vec:
                raise _fail(f"pl.{name} works on Vec tiles, got {t}; load with target_memory=pl.Mem.Vec")
            if t.shape != t0.shape or t.dtype is not t0.dtype:
                raise _fail(f"pl.{name} operands differ: {t0} and {t}")
        return [t0]

    return rule


ELEMENTWISE = {n: _elementwise(n, k) for n, k in
               (("add", 2), ("sub", 2), ("mul", 2), ("maximum", 2), ("exp", 1))}


#: Primitives without effects: an equation of one whose results nobody reads can be dropped.
PURE: frozenset[Primitive] = frozenset({
    *SCALAR_BINARY.values(), *COMPARE.values(), convert_p, get_block_idx_p, get_block_num_p,
    tensor_slice_p, tensor_reshape_p, tensor_view_p, tensor_reinterpret_view_p, tile_transpose_view_p,
})


def _prod(xs: Sequence[int]) -> int:
    n = 1
    for x in xs:
        n *= x
    return n


__all__ = ["Primitive", "Layout", "all_primitives"]
