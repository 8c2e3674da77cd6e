"""Memory primitives: tensor windows and views (GM, before and after tiling), assignment, scalar
reads and writes of GM elements (`tensor.read` / `tensor.write`), and the
tile moves between GM and on-chip buffers (`pl.load`, `pl.store`, `pl.move`) and views of a tile."""

from __future__ import annotations

from typing import Any

from ..core import dtypes as dt
from ..core.primitives import (
    _check_index_operands,
    _fail,
    _prod,
    _squeeze2,
    _static_bits,
    _tensor,
    _tile,
    primitive,
)
from ..core.types import Layout, Mem, ScalarType, TensorType, TileType, Type


@primitive("tensor.slice", ("src", "offsets", "valid"))
def tensor_slice_p(
    src: Type,
    *rest: Type,
    shape: tuple[int, ...],
    drop: tuple[int, ...] = (),
    arity: tuple[int, ...],
    **_: Any,
) -> list[Type]:
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
        raise _fail(
            f"tensor.reinterpret_view of {s} as {dtype.short}[{','.join(map(str, shape))}] changes "
            f"the byte count ({a // 8} -> {b // 8} bytes)"
        )
    return [TensorType(tuple(shape), dtype, s.layout)]


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


@primitive("tile.load", ("src", "offsets", "valid"))
def tile_load_p(
    src: Type,
    *rest: Type,
    shape: tuple[int, ...],
    memory: Mem,
    arity: tuple[int, ...],
    valid_static: tuple[int | None, ...] | None = None,
    out_type: TileType | None = None,
    **_: Any,
) -> list[Type]:
    """`pl.load`: a window of static `shape` of a GM tensor into a tile of `memory`; a blocked load keeps its
    explicit `out_type` (NZ-13)."""
    if out_type is not None:  # NZ-13: a blocked load keeps its explicit logical tile type
        return [out_type]
    s = _tensor(src, "pl.load")
    _check_index_operands(rest, "pl.load")
    if arity[1] != s.rank or len(shape) != s.rank:
        raise _fail(
            f"pl.load from a rank-{s.rank} tensor needs {s.rank} offsets and {s.rank} shapes, "
            f"got {arity[1]} and {len(shape)}"
        )
    for i, d in enumerate(shape):
        if not isinstance(d, int) or d <= 0:
            raise _fail(f"pl.load shapes must be positive static ints, got {list(shape)}")
        sd = s.shape[i]
        # a window past the tensor is a ragged tile: only its valid part is read (TLOAD moves
        # validRow x validCol), so the valid extent, not the window, must lie inside the tensor
        v_i = None if valid_static is None else valid_static[i]
        has_valid = arity[2] > 0 and (v_i is None or not isinstance(sd, int) or v_i <= sd)
        if isinstance(sd, int) and d > sd and not has_valid:
            raise _fail(
                f"pl.load window {list(shape)} exceeds the tensor shape {list(s.shape)} on axis {i}",
                help="give the ragged tile a valid_shape inside the tensor, or pass clamp=True",
            )
    return [TileType(tuple(shape), s.dtype, memory, valid_static)]


@primitive("tile.store", ("tile", "offsets", "dst"))
def tile_store_p(tile: Type, *rest: Type, arity: tuple[int, ...], **_: Any) -> list[Type]:
    """`pl.store` of a tile into the tensor `dst` at `offsets`; the result is the updated tensor."""
    _tile(tile, "pl.store")
    d = _tensor(rest[-1], "pl.store")
    _check_index_operands(rest[:-1], "pl.store")
    return [d]


@primitive("tile.transpose_view", ("src",))
def tile_transpose_view_p(src: Type, **_: Any) -> list[Type]:
    """`pl.tile.transpose_view`: a 2-D tile's bytes read as its transpose (no copy); the valid shape is
    swapped too. A rank-3 Mat tile (a `pl.batch_matmul` operand) swaps its last two axes, batch by batch."""
    s = _tile(src, "pl.tile.transpose_view")
    if s.rank == 3 and s.memory is Mem.Mat and s.shape[0] != 1:
        vs3 = None if s.valid_shape is None else (s.valid_shape[0], s.valid_shape[2], s.valid_shape[1])
        return [TileType((s.shape[0], s.shape[2], s.shape[1]), s.dtype, s.memory, vs3)]
    shape = _squeeze2(s.shape)
    if len(shape) != 2:
        raise _fail(f"pl.tile.transpose_view needs a 2-D tile (or a rank-3 Mat tile), got {s}")
    vs = None if s.valid_shape is None else tuple(reversed(s.valid_shape[-2:]))
    return [TileType((shape[1], shape[0]), s.dtype, s.memory, vs)]


@primitive("tile.move", ("src",))
def tile_move_p(src: Type, *, memory: Mem, **_: Any) -> list[Type]:
    """`pl.move` of a tile to another on-chip `memory` (same shape and dtype)."""
    s = _tile(src, "pl.move")
    return [s.with_(memory=memory)]


# ------------------------------------------------------------------------------ kernel tensors
@primitive("tensor.create", ())
def tensor_create_p(*, shape: tuple[int, ...], dtype: dt.DType, **_: Any) -> list[Type]:
    """`pl.create_tensor(shape, dtype)` inside a kernel: a new row-major ND tensor. PyPTO's
    accumulator idiom starts a matmul accumulator with it (ConvertTensorToTileOps makes a start
    value that is only carried an Acc tile.create); read as a tensor it is a GM scratch
    (`scratch=True` after that pass): zeroed GM per run of the equation, freed with the kernel."""
    if not shape or not all(isinstance(d, int) and d > 0 for d in shape):
        raise _fail(f"pl.create_tensor in a kernel takes a static shape of positive ints, got {list(shape)}")
    return [TensorType(tuple(shape), dtype)]


# ---------------------------------------------------------------------------------- scalar access
def _element_indices(t: TensorType, idx: tuple[Type, ...], what: str) -> None:
    _check_index_operands(idx, what)
    if len(idx) != t.rank:
        raise _fail(f"{what} of a rank-{t.rank} tensor takes {t.rank} indices, got {len(idx)}")
    if t.layout is Layout.NZ:
        raise _fail(
            f"{what} of an NZ tensor: its elements are in NZ order, not at row-major addresses",
            rule="NZ-14",
            help="read or write an ND tensor (a scalar table is ND)",
        )


@primitive("tensor.read", ("src", "indices"))
def tensor_read_p(src: Type, *idx: Type, **_: Any) -> list[Type]:
    """`pl.read(tensor, indices)`: one element of an ND tensor in GM, as a scalar of its dtype (the
    scalar unit's load). Its value is the call's: unknown when the kernel is compiled."""
    t = _tensor(src, "pl.read")
    _element_indices(t, idx, "pl.read")
    return [ScalarType(t.dtype)]


@primitive("tensor.write", ("dst", "indices", "value"))
def tensor_write_p(dst: Type, *rest: Type, **_: Any) -> list[Type]:
    """`pl.write(tensor, indices, value)`: one element of an ND tensor in GM set to a scalar of its
    dtype (the scalar unit's store). The result aliases `dst` (later reads see the write)."""
    t = _tensor(dst, "pl.write")
    *idx, v = rest
    _element_indices(t, tuple(idx), "pl.write")
    if not isinstance(v, ScalarType) or v.dtype is not t.dtype:
        raise _fail(
            f"pl.write of a {v} into a {t.dtype!r} tensor: the value is a scalar of the tensor's dtype",
            help=f"pl.cast the value to {t.dtype!r}",
        )
    return [t]
