"""The kernel language's operations: each stages one primitive through `tracing.bind`; they also give
the Python operators of a traced value their meaning (`Tracer.operators`)."""

from __future__ import annotations

import builtins
import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import prims as P
from ..core import dtypes as dt
from ..core.ir import Literal, Var
from ..core.types import DynDim, Layout, Mem, ScalarType, TensorType, TileType
from ..driver.calls import active_program
from ..errors import CompileError, user_source
from ..tracing import Operators, Tracer, bind, current_state, in_trace, lift
from . import valid_regions
from .scalar_math import scalar_binary

Index = int | Tracer


def min(a: Any, b: Any) -> Any:  # noqa: A001 - the kernel language's pl.min
    """pl.min(a, b) on scalars (Python ints fold at trace time)."""
    return scalar_binary("min", a, b)


def max(a: Any, b: Any) -> Any:  # noqa: A001
    """pl.max(a, b) on scalars."""
    return scalar_binary("max", a, b)


def get_block_idx() -> Tracer:
    """The index of the running SPMD lane (0 outside pl.spmd); never negative."""
    return bind(P.get_block_idx_p, [])[0]


def get_block_num() -> Tracer:
    """The number of SPMD lanes of the innermost pl.spmd (1 outside one)."""
    return bind(P.get_block_num_p, [])[0]


# ------------------------------------------------------------------------------------ indexing
def _check_offset(x: Any, what: str) -> None:
    if type(x) is not int:  # a plain int, the common case, skips the ABC checks (~6% of a trace)
        if isinstance(x, Tracer):
            if not (isinstance(x.type, ScalarType) and x.type.dtype.is_int):
                raise CompileError(f"{what} offsets must be integer scalars, got {x.type}", user_source())
            return
        if not isinstance(x, numbers.Integral) or isinstance(x, bool | np.bool_):
            raise CompileError(f"{what} offsets must be ints or traced integers, got {x!r}", user_source())
    if x < 0:
        raise CompileError(f"{what} offset {x} is negative; offsets must be non-negative", user_source())


def _int(x: Any) -> Any:
    """numpy integers as Python ints; anything else unchanged."""
    return int(x) if isinstance(x, numbers.Integral) and not isinstance(x, bool) else x


def _offsets(xs: Sequence[Any], what: str) -> list[Any]:
    """Checked offsets, numpy integers as Python ints."""
    for x in xs:
        _check_offset(x, what)
    return [x if isinstance(x, Tracer) else int(x) for x in xs]


def _check_window(
    what: str, offsets: Sequence[Any], extents: Sequence[Any], shape: Sequence[Any], help: str | None = None
) -> None:  # noqa: A002 - CompileError's own name
    """A window whose offset and extent are static must lie inside the tensor (checked when built:
    the device would read or write past the tensor)."""
    for axis, (o, n, d) in enumerate(zip(offsets, extents, shape)):
        if isinstance(o, int) and isinstance(n, int) and isinstance(d, int) and o + n > d:
            raise CompileError(
                f"{what} window [{o}, {o + n}) on axis {axis} is out of bounds for the "
                f"dimension {d} of {list(shape)}",
                user_source(),
                help=help,
            )


def _static_extent(start: Any, stop: Any, dim: Any, axis: int) -> Any:
    if (
        isinstance(dim, DynDim)
        and type(start) is int
        and start == 0
        and (stop is None or stop is dim or (isinstance(stop, DynDim) and stop == dim))
    ):
        return dim  # the whole of a pl.dynamic axis (issue 23 item 7): a window of the call's extent
    if stop is None:
        if isinstance(start, int) and isinstance(dim, int):
            return dim - start
    elif isinstance(start, int) and isinstance(stop, int):
        return stop - start
    elif isinstance(start, Tracer) or isinstance(stop, Tracer):
        frame = current_state().top
        lo, hi = _linear(start, frame), _linear(stop, frame)
        diff = {v: hi[0].get(v, 0) - lo[0].get(v, 0) for v in {*lo[0], *hi[0]}}
        if not any(diff.values()):
            return hi[1] - lo[1]
    if isinstance(dim, DynDim) or isinstance(stop, DynDim):
        raise CompileError(
            f"the extent of the slice on axis {axis} of the pl.dynamic dimension {dim} must be "
            "static or the whole axis",
            user_source(),
            help="slice the whole axis (x[:, ...]) or a constant extent (x[n0 : n0 + 128]); a "
            "ragged tail is a pl.load with valid_shape=[pl.min(rows, 128), ...]",
        )
    raise CompileError(
        f"the extent of the slice on axis {axis} must be static",
        user_source(),
        help="write the window as w[n0 : n0 + 128] (start + a constant)",
    )


def _linear(x: Any, frame: Any, depth: int = 0) -> tuple[dict[Var, int], int]:
    """`x` as sum(coef * var) + const over the scalar equations of `frame` (+, -, * by a constant),
    so that `w[n0 * 16 : n0 * 16 + 16]` has the static extent 16 however often n0 * 16 is computed."""
    a = lift(x, frame) if isinstance(x, Tracer) else x
    if isinstance(a, int):
        return {}, a
    if isinstance(a, Literal):
        return {}, int(a.value)
    e = frame.defs.get(a)
    if e is None or depth > 64 or e.primitive not in (P.add_p, P.sub_p, P.mul_p):
        return {a: 1}, 0
    (fx, cx), (fy, cy) = (_linear(i, frame, depth + 1) for i in e.inputs)
    if e.primitive is P.mul_p:
        if fx and fy:
            return {a: 1}, 0
        (f, c), k = ((fx, cx), cy) if not fy else ((fy, cy), cx)
        return {v: n * k for v, n in f.items()}, c * k
    sign = 1 if e.primitive is P.add_p else -1
    f = dict(fx)
    for v, n in fy.items():
        f[v] = f.get(v, 0) + sign * n
    return f, cx + sign * cy


def _parse_key(t: Tracer, key: Any) -> tuple[list[Any], list[int], tuple[int, ...]]:
    tt = t.type
    if not isinstance(tt, TensorType):
        raise CompileError(f"indexing is defined on tensors, got {tt}; use pl.load for tiles", user_source())
    items = list(key) if isinstance(key, tuple) else [key]
    if any(k is Ellipsis for k in items):
        i = items.index(Ellipsis)
        items[i : i + 1] = [builtins.slice(None)] * (tt.rank - len(items) + 1)
    if len(items) > tt.rank:
        raise CompileError(f"too many indices for a rank-{tt.rank} tensor", user_source())
    items += [builtins.slice(None)] * (tt.rank - len(items))
    offsets: list[Any] = []
    sizes: list[int] = []
    drop: list[int] = []
    for axis, (k, dim) in enumerate(zip(items, tt.shape)):
        if isinstance(k, builtins.slice):
            if k.step not in (None, 1):
                raise CompileError("strided slices are not supported", user_source())
            start = 0 if k.start is None else _int(k.start)
            _check_offset(start, "slice")
            size = _static_extent(start, _int(k.stop), dim, axis)
            if isinstance(size, int) and size <= 0:
                raise CompileError(f"empty slice on axis {axis}", user_source())
            offsets.append(start)
            sizes.append(size)
        else:
            k = _int(k)
            _check_offset(k, "index")
            offsets.append(k)
            sizes.append(1)
            drop.append(axis)
        if isinstance(offsets[-1], int) and isinstance(dim, int) and offsets[-1] + sizes[-1] > dim:
            raise CompileError(
                f"window [{offsets[-1]}, {offsets[-1] + sizes[-1]}) on axis {axis} is out of "
                f"bounds for dimension {dim}",
                user_source(),
            )
    return offsets, sizes, tuple(drop)


#: Tile indexing (`t[:, 0:64]`, `t[0:1, :] = v` on a tile), installed by language/tile_values.py,
#: which imports this module (so the dependency stays one-way): "get" and "set" callables.
tile_indexing: dict[str, Any] = {}


def getitem(t: Tracer, key: Any) -> Tracer:
    """numpy-style basic indexing of a tensor: a `tensor.slice` (integers drop their axis). The
    author slices logical coordinates, NZ or not; the compiler supplies the blocked form (NZ-2)."""
    if isinstance(t.type, TileType) and "get" in tile_indexing:
        return tile_indexing["get"](t, key)
    offsets, sizes, drop = _parse_key(t, key)
    region = valid_regions.of_slice(t, offsets, sizes, None, drop)
    view = bind(P.tensor_slice_p, [[t], offsets, []], {"shape": tuple(sizes), "drop": drop})[0]
    valid_regions.record(view, region)
    return view


def setitem(t: Tracer, key: Any, value: Any) -> None:
    """`out[a:b, c:d] = value`: a tensor-level assignment (a store once tiles exist)."""
    if isinstance(t.type, TileType) and "set" in tile_indexing:
        tile_indexing["set"](t, key, value)
        return
    offsets, sizes, drop = _parse_key(t, key)
    if not isinstance(value, Tracer):
        raise CompileError("only a traced tensor or tile value can be assigned", user_source())
    kept = tuple(s for i, s in enumerate(sizes) if i not in drop)
    vshape = tuple(value.shape)
    if kept != vshape and tuple(sizes) != vshape:
        raise CompileError(
            f"cannot assign a value of shape {list(vshape)} to a window of shape {list(kept)}", user_source()
        )
    bind(P.tensor_assign_p, [[t], [value], offsets], {"shape": tuple(sizes)})


def create_tensor(shape: Sequence[int], dtype: Any) -> Any:
    """pl.create_tensor(shape, dtype): a new tensor. In an orchestration body, an intermediate of
    the program, resident on the rank of the first kernel call that uses it (driver/intermediates.py);
    in a kernel, the start value of a matmul accumulator (PyPTO's `if k0 == 0` idiom) or, stored
    into and loaded from, a GM scratch tensor of the kernel (passes/tensor_to_tile.py)."""
    prog = active_program()
    if prog is not None:  # an orchestration body is recording on this thread
        return prog.create_tensor(shape, dtype)
    if in_trace():  # a kernel: PyPTO's accumulator start value (passes/tensor_to_tile.py)
        return bind(P.tensor_create_p, [], {"shape": tuple(_int(d) for d in shape), "dtype": dtype})[0]
    raise CompileError(
        "pl.create_tensor is used in an orchestration body here; a kernel allocates its "
        "tensors from its Out parameters",
        user_source(),
        help="call it inside a @pl.orchestration, or add an Out parameter to the kernel",
    )


def slice(
    t: Tracer,
    shape: Sequence[int],
    offsets: Sequence[Index],  # noqa: A001
    valid_shape: Sequence[Index] | None = None,
) -> Tracer:
    """pl.slice(t, shape, offsets, valid_shape=None): a window of a tensor (shape before offsets)."""
    in_orchestration = getattr(
        t, "orchestration_slice", None
    )  # an orchestration argument's handle (issue 25)
    if in_orchestration is not None:
        return in_orchestration(shape, offsets, valid_shape)
    offsets = _offsets(offsets, "pl.slice")
    valid = list(valid_shape) if valid_shape is not None else []
    if isinstance(t, Tracer) and isinstance(t.type, TensorType):
        _check_window("pl.slice", offsets, valid or shape, t.type.shape)
    region = valid_regions.of_slice(t, offsets, shape, valid)
    view = bind(P.tensor_slice_p, [[t], list(offsets), valid], {"shape": tuple(shape), "drop": ()})[0]
    valid_regions.record(view, region)
    return view


def reshape(t: Tracer, shape: Sequence[int]) -> Tracer:
    """pl.reshape(t, shape) of a whole tensor."""
    valid_regions.refuse_reshape(t, "pl.reshape")
    return bind(P.tensor_reshape_p, [[t]], {"shape": tuple(shape)})[0]


def _refuse_nz(t: Tracer, what: str) -> None:
    if isinstance(t.type, TensorType) and t.type.layout is Layout.NZ:
        raise CompileError(
            f"{what} does not support an NZ source: it would reinterpret NZ coordinates",
            user_source(),
            rule="NZ-14",
            help="load the NZ tensor with pl.load(..., target_memory=pl.Mem.Mat) instead",
        )


def tensor_view(t: Tracer, shape: Sequence[int]) -> Tracer:
    """pl.tensor.view(t, shape): reinterpret the shape of an ND tensor (refuses NZ when built)."""
    _refuse_nz(t, "'tensor.view'")
    valid_regions.refuse_reshape(t, "pl.tensor.view")
    return bind(P.tensor_view_p, [[t]], {"shape": tuple(shape)})[0]


def tensor_reinterpret_view(t: Tracer, dtype: dt.DType, shape: Sequence[int] | None = None) -> Tracer:
    """pl.tensor.reinterpret_view(t, dtype, shape): reinterpret the bytes of an ND tensor."""
    _refuse_nz(t, "'tensor.reinterpret_view'")
    valid_regions.refuse_reshape(t, "pl.tensor.reinterpret_view")
    tt = t.type
    assert isinstance(tt, TensorType)
    new_shape = tuple(shape) if shape is not None else tt.shape
    if shape is None and tt.shape and isinstance(tt.shape[-1], int) and dtype.bits != tt.dtype.bits:
        last = tt.shape[-1] * tt.dtype.bits  # same bytes: the last axis holds more or fewer elements
        if last % dtype.bits == 0:
            new_shape = (*tt.shape[:-1], last // dtype.bits)
    return bind(P.tensor_reinterpret_view_p, [[t]], {"dtype": dtype, "shape": new_shape})[0]


# ---------------------------------------------------------------------------------- tile level
def load(
    tensor: Tracer,
    offsets: Sequence[Index],
    shapes: Sequence[int],
    target_memory: Mem | None = None,
    valid_shape: Sequence[Index] | None = None,
    *,
    clamp: bool = False,
) -> Tracer:
    """pl.load(tensor, offsets, shapes, target_memory=pl.Mem.Vec, valid_shape=None, clamp=False) -> Tile.

    The window may run past the tensor when its valid part does not (a ragged last tile: TLOAD
    reads only the valid part). PyPTO's `clamp=True` cuts the valid extent back to the tensor's
    edge: `min(valid, dim - offset)` per axis (a traced `pl.min` for a traced offset)."""
    if not isinstance(tensor, Tracer) or not isinstance(tensor.type, TensorType):
        raise CompileError("pl.load reads a tensor", user_source())
    offsets = _offsets(offsets, "pl.load")
    valid = list(valid_shape) if valid_shape is not None else []
    if not isinstance(clamp, bool):
        raise CompileError(f"pl.load clamp must be a bool, got {clamp!r}", user_source())
    if clamp:
        valid = _clamped(offsets, valid or list(shapes), tensor.type.shape)
    if valid and len(valid) != len(shapes):
        raise CompileError("pl.load valid_shape must have one entry per window axis", user_source())
    for v, s in zip(valid, shapes):
        if isinstance(v, int) and not 0 < v <= s:
            raise CompileError(
                f"pl.load valid_shape {list(valid)} must lie within shapes {list(shapes)}", user_source()
            )
    _check_window(
        "pl.load",
        offsets,
        valid or shapes,
        tensor.type.shape,
        help="a ragged tile reads only its valid part: give it a valid_shape inside the tensor, "
        "or pass clamp=True",
    )
    valid = valid_regions.of_load(tensor, offsets, shapes, valid)  # a view's region bounds the tile
    valid_static = tuple(v if isinstance(v, int) else None for v in valid) if valid else None
    memory = Mem.Vec if target_memory is None else target_memory
    _check_tile_geometry("pl.load", tuple(shapes), tensor.type.dtype, memory)
    params = {
        "shape": tuple(shapes),
        "memory": memory,
        "valid_static": valid_static,
        "memory_given": target_memory is not None,
    }
    return bind(P.tile_load_p, [[tensor], list(offsets), valid], params)[0]


def _clamped(offsets: Sequence[Any], valid: list[Any], shape: Sequence[Any]) -> list[Any]:
    """The valid extents of a clamped load: each cut back to the tensor's edge (static dims only;
    a dynamic dim stays as given and is checked at run time)."""
    out = []
    for o, v, d in zip(offsets, valid, shape):
        if isinstance(d, int):
            v = min(v, d - o) if isinstance(o, int) and isinstance(v, int) else scalar_binary("min", v, d - o)
        out.append(v)
    return out


def store(tile: Tracer, offsets: Sequence[Index], out: Tracer, **attrs: Any) -> Tracer:
    """pl.store(tile, offsets, out, **attrs) -> alias of `out`; attrs are kept on the IR."""
    offsets = _offsets(offsets, "pl.store")
    if not isinstance(out, Tracer) or not isinstance(out.type, TensorType):
        raise CompileError("pl.store writes into a tensor", user_source())
    if len(offsets) != out.type.rank:
        raise CompileError(
            f"pl.store into a rank-{out.type.rank} tensor needs {out.type.rank} offsets", user_source()
        )
    # an NZ target's window is checked with the store's own NZ rules (NZ-21, BlockNzTensorViews)
    if _is_tile(tile) and tile.type.rank <= out.type.rank and out.type.layout is Layout.ND:  # type: ignore[union-attr]
        tt: TileType = tile.type  # type: ignore[assignment]
        ext = [v if isinstance(v, int) else None for v in (tt.valid_shape or tt.shape)]
        _check_window("pl.store", offsets, [1] * (out.type.rank - tt.rank) + ext, out.type.shape)
    return bind(P.tile_store_p, [[tile], list(offsets), [out]], {"attrs": dict(attrs)})[0]


def _check_tile_geometry(what: str, shape: tuple[Any, ...], dtype: dt.DType, memory: Mem) -> None:
    """A Vec tile row is whole 32-byte blocks (hardware-model.md §7), checked where the kernel makes
    the tile. (A Mat tile's whole fractals: BlockNzTensorViews for NZ, AutoTileMatmulL0 for ND.)"""
    if memory is not Mem.Vec or dtype.is_sub_byte or not shape or not isinstance(shape[-1], int):
        return
    cols = shape[-1]
    if (cols * dtype.bits) % 256:
        raise CompileError(
            f"{what}: a Vec tile row is whole 32-byte blocks; {cols} {dtype!r} columns are "
            f"{cols * dtype.bits / 8:g} bytes, so columns must be a multiple of "
            f"{dt.c0_of(dtype)}",
            user_source(),
            help="widen the window and pass the real extent as valid_shape",
        )


def _is_tile(x: Any) -> bool:
    return isinstance(x, Tracer) and isinstance(x.type, TileType)


def matmul(
    a: Tracer,
    b: Tracer,
    b_trans: bool = False,
    out_dtype: dt.DType | None = None,
    *,
    a_trans: bool = False,
    c_matrix_nz: bool = False,
) -> Tracer:
    """pl.matmul on Mat tiles (-> Acc tile) or on tensors (placed by ConvertTensorToTileOps).

    PyPTO's `a_trans=True` multiplies by the transpose of `a` (a transposed view of a Mat tile);
    `c_matrix_nz=True` asks for the result in NZ, which is what the Acc tile (L0C) holds anyway."""
    _check_matmul_flags(a_trans, c_matrix_nz)
    if a_trans:
        if not _is_tile(a):
            raise CompileError(
                "pl.matmul(a_trans=True) needs `a` as a Mat tile: a tensor window is loaded "
                "by the compiler in its own layout",
                user_source(),
                help="load it first: a = pl.load(x, offsets, shape, target_memory=pl.Mem.Mat)",
            )
        a = transpose_view(a)
    prim = P.tile_matmul_p if _is_tile(a) else P.tensor_matmul_p
    return bind(prim, [[a], [b]], {"b_trans": b_trans, "out_dtype": out_dtype})[0]


def _check_matmul_flags(a_trans: Any, c_matrix_nz: Any) -> None:
    for name, v in (("a_trans", a_trans), ("c_matrix_nz", c_matrix_nz)):
        if not isinstance(v, bool):
            raise CompileError(f"pl.matmul {name} must be a bool, got {v!r}", user_source())


def matmul_acc(
    acc: Tracer,
    a: Tracer,
    b: Tracer,
    b_trans: bool = False,
    *,
    a_trans: bool = False,
    c_matrix_nz: bool = False,
) -> Tracer:
    """acc + a @ b (b transposed when b_trans; a when a_trans, a Mat tile)."""
    _check_matmul_flags(a_trans, c_matrix_nz)
    if a_trans:
        if not _is_tile(a):
            raise CompileError(
                "pl.matmul_acc(a_trans=True) needs `a` as a Mat tile",
                user_source(),
                help="load it first: a = pl.load(x, offsets, shape, target_memory=pl.Mem.Mat)",
            )
        a = transpose_view(a)
    prim = P.tile_matmul_acc_p if _is_tile(a) else P.tensor_matmul_acc_p
    return bind(prim, [[acc], [a], [b]], {"b_trans": b_trans})[0]


def transpose_view(tile: Tracer) -> Tracer:
    """The transpose of a 2-D tile, as a view of the same bytes."""
    return bind(P.tile_transpose_view_p, [[tile]])[0]


def cast(x: Any, dtype: dt.DType) -> Any:
    """pl.cast on a tile (element conversion) or an integer scalar (wraps to the new width); a
    `pl.dynamic` dimension (`x.shape[0]`) is its value for the call, an INDEX scalar."""
    if isinstance(x, DynDim):
        x = DynDim.kernel_value(x)
    if _is_tile(x):
        _check_tile_geometry("pl.cast", x.type.shape, dtype, x.type.memory)
        return bind(P.tile_cast_p, [[x]], {"dtype": dtype})[0]
    if isinstance(x, Tracer):
        return bind(P.convert_p, [[x]], {"dtype": dtype}, dtype=x.type.dtype)[0]
    if isinstance(x, int) and dtype.is_int:
        current_state()
        tr = bind(P.convert_p, [[Literal(dt.INDEX.wrap(x), ScalarType(dt.INDEX))]], {"dtype": dtype})[0]
        return tr
    raise CompileError(f"pl.cast takes a tile or an integer scalar, got {x!r}", user_source())


def elementwise(name: str, *xs: Any) -> Tracer:
    """pl.add / sub / mul / maximum / exp on Vec tiles."""
    for x in xs:
        if not _is_tile(x):
            raise CompileError(f"pl.{name} takes Vec tiles, got {x!r}", user_source())
    return bind(P.ELEMENTWISE[name], [[x] for x in xs])[0]


#: What the Python operators of a traced value stage: `a + b` is pl.add on tiles and scalar
#: arithmetic on scalars, `t[i]` a tensor.slice, `t[i] = v` a tensor.assign (nzjit.tracing.tracer).
Tracer.operators = Operators(
    scalar_binary=scalar_binary, elementwise=elementwise, getitem=getitem, setitem=setitem
)


def add(a: Tracer, b: Tracer) -> Tracer:
    """`pl.add`: elementwise sum of two Vec tiles."""
    return elementwise("add", a, b)


def sub(a: Tracer, b: Tracer) -> Tracer:
    """`pl.sub`: elementwise difference of two Vec tiles."""
    return elementwise("sub", a, b)


def mul(a: Tracer, b: Tracer) -> Tracer:
    """`pl.mul`: elementwise product of two Vec tiles."""
    return elementwise("mul", a, b)


def maximum(a: Tracer, b: Tracer) -> Tracer:
    """`pl.maximum`: elementwise maximum of two Vec tiles."""
    return elementwise("maximum", a, b)


def exp(a: Tracer) -> Tracer:
    """`pl.exp`: elementwise exponential of a Vec tile."""
    return elementwise("exp", a)


def neg(a: Tracer) -> Tracer:
    """`pl.neg`: elementwise negation of a Vec tile (integers wrap, as two's complement does)."""
    return elementwise("neg", a)


def abs(a: Tracer) -> Tracer:  # noqa: A001 - the kernel language's pl.abs
    """`pl.abs`: elementwise absolute value of an FP32 / FP16 Vec tile."""
    return elementwise("abs", a)
