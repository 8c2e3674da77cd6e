"""`impl_rules`: the numpy implementation of every primitive, keyed by primitive.

The lowered graph runs through the runtime's instruction models (TLOAD / TSTORE / TMOV / TMATMUL)
on real bytes; the tensor-level and un-tiled primitives of earlier stages run as reference
implementations, so the graph after any pass executes (per-pass bisection).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import numpy as np

import runtime
from runtime import TileBuf

from ..core import primitives as P
from ..core.geometry import ceil16
from ..core.ir import Eqn
from ..core.types import DynDim, Mem, ScalarType, TensorType, TileType
from .values import HostValue, TensorVal, TransposedTile

Impl = Callable[["Ctx", Eqn, list[Any]], list[Any]]  # noqa: F821 - Ctx is in executor.py
impl_rules: dict[P.Primitive, Impl] = {}


def impl(*prims: P.Primitive) -> Callable[[Impl], Impl]:
    """Decorator: register `fn` as the numpy implementation of `prims` in `impl_rules`."""
    def deco(fn: Impl) -> Impl:
        for p in prims:
            impl_rules[p] = fn
        return fn

    return deco


# ---------------------------------------------------------------------------------- scalars
# operator functions (C calls) rather than lambdas: the interpreter calls these once per scalar step
_SCALAR: dict[str, Callable[[int, int], int]] = {
    "add": operator.add, "sub": operator.sub, "mul": operator.mul,
    "floordiv": operator.floordiv,  # Python // and % are floor division / modulo (NZ-19)
    "mod": operator.mod, "min": min, "max": max,
}
_CMP: dict[str, Callable[[int, int], bool]] = {
    "lt": operator.lt, "le": operator.le, "gt": operator.gt, "ge": operator.ge, "eq": operator.eq,
    "ne": operator.ne,
}


def _scalar(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    a, b = ins
    t = e.outputs[0].type
    assert isinstance(t, ScalarType)
    if e.primitive.name in ("floordiv", "mod") and b == 0:
        raise runtime.DeviceError(f"{e.source}: integer {e.primitive.name} by zero")
    return [t.dtype.wrap(_SCALAR[e.primitive.name](a, b))]  # wraps at the declared width (NZ-17)


def _compare(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    return [_CMP[e.primitive.name](*ins)]


for _p in P.SCALAR_BINARY.values():
    impl_rules[_p] = _scalar
for _p in P.COMPARE.values():
    impl_rules[_p] = _compare


@impl(P.convert_p)
def _convert(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    return [e.params["dtype"].wrap(int(ins[0]))]


@impl(P.get_block_idx_p)
def _block_idx(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    return [ctx.block_idx]


@impl(P.get_block_num_p)
def _block_num(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    return [ctx.block_num]


# ------------------------------------------------------------------------------ coordinates
def clamp(ctx: Any, e: Eqn, offsets: list[int]) -> tuple[int, ...]:
    """The partition view's `arith.maxsi x, 0` (NZ-18), refused when it would change a value."""
    if any(o < 0 for o in offsets):
        raise runtime.DispatchError(f"{e.source}: partition offset {offsets} is negative; the device "
                                    "clamps it to 0 and would read the wrong window (NZ-18), so the call "
                                    "is refused (nothing is written back)")
    return tuple(offsets)


def check_window(e: Eqn, shape: tuple[int, ...], offsets: Any, sizes: Any) -> None:
    """Every partition must lie inside its tensor. A coordinate that depends on a kernel argument
    (`w[layer]` with a runtime layer) cannot be bounded at compile time, and past the end it would
    read or write another tensor's bytes; the call is refused, nothing is written back."""
    for axis, (o, n, d) in enumerate(zip(offsets, sizes, shape)):
        if o + n > d:
            raise runtime.DispatchError(
                f"{e.source}: the window [{o}, {o + n}) on axis {axis} is out of bounds for the view of "
                f"shape {tuple(shape)}: a coordinate computed from the arguments addresses past the "
                "tensor, so the call is refused (nothing is written back)")


def concrete(ctx: Any, shape: tuple[Any, ...]) -> tuple[int, ...]:
    """`shape` with every `DynDim` replaced by its value for this call."""
    return tuple(ctx.dims[d.name] if isinstance(d, DynDim) else int(d) for d in shape)


def _split(e: Eqn, ins: list[Any], group: str) -> list[Any]:
    start = 0
    for name, n in zip(e.primitive.groups, e.params["arity"]):
        if name == group:
            return ins[start : start + n]
        start += n
    raise KeyError(group)


# ----------------------------------------------------------------------------- tensor level
@impl(P.tensor_slice_p)
def _slice(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    src: TensorVal = ins[0]
    offs = clamp(ctx, e, _split(e, ins, "offsets"))
    check_window(e, src.shape, offs, e.params["shape"])
    out_t = e.outputs[0].type
    assert isinstance(out_t, TensorType)
    shape = concrete(ctx, out_t.shape)
    drop = e.params["drop"]
    if src.nz is not None:
        return [TensorVal(src.addr, src.dtype, shape, (), "NZ", src.nz.sub(offs, drop))]
    delta = sum(o * s for o, s in zip(offs, src.strides)) * src.dtype.itemsize
    strides = tuple(s for i, s in enumerate(src.strides) if i not in drop)
    if len(strides) != len(shape):  # a blocked NZ slice: same rank-5 geometry, narrower batch
        strides = src.strides
    return [TensorVal(src.addr + delta, src.dtype, shape, strides, src.layout)]


@impl(P.tensor_reshape_p, P.tensor_view_p, P.tensor_reinterpret_view_p)
def _reshape(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    src: TensorVal = ins[0]
    out_t = e.outputs[0].type
    assert isinstance(out_t, TensorType)
    shape = concrete(ctx, out_t.shape)
    strides = runtime.isa.row_major_strides(shape)
    return [TensorVal(src.addr, out_t.dtype.np_dtype, shape, strides, out_t.layout.value)]


def _operand(ctx: Any, v: Any) -> np.ndarray:
    if isinstance(v, TensorVal):
        return _squeeze2(v.read(ctx.gm))
    return _squeeze2(v.logical())


def _squeeze2(a: np.ndarray) -> np.ndarray:
    while a.ndim > 2 and a.shape[0] == 1:
        a = a[0]
    return a


def reference_matmul(a: np.ndarray, b: np.ndarray, b_trans: bool, out: np.dtype) -> np.ndarray:
    """The exact math of the cube: int8 -> int32 wrapping, floating -> float32."""
    if b_trans:
        b = b.T
    if np.issubdtype(out, np.integer):
        return (a.astype(np.int64) @ b.astype(np.int64)).astype(out)
    return (a.astype(np.float32) @ b.astype(np.float32)).astype(out)


@impl(P.tensor_matmul_p)
def _tensor_matmul(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    out_t = e.outputs[0].type
    assert isinstance(out_t, TensorType)
    a, b = (_operand(ctx, x) for x in ins)
    return [HostValue(reference_matmul(a, b, e.params["b_trans"], out_t.dtype.np_dtype))]


@impl(P.tensor_matmul_acc_p)
def _tensor_matmul_acc(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    acc = ins[0].logical()
    a, b = (_operand(ctx, x) for x in ins[1:])
    prod = reference_matmul(a, b, e.params["b_trans"], acc.dtype)
    return [HostValue((acc + prod).astype(acc.dtype))]


@impl(P.tensor_assign_p)
def _assign(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    dst: TensorVal = ins[0]
    offs = clamp(ctx, e, _split(e, ins, "offsets"))
    value = ins[1].logical()
    check_window(e, dst.shape, offs, (1,) * (len(dst.shape) - value.ndim) + value.shape)
    dst.write(ctx.gm, offs, value)
    return [dst]


# ------------------------------------------------------------------------------- tile level
def static_valid(t: TileType) -> tuple[int | None, int | None]:
    """The valid rows / cols a tile type fixes statically (a decode batch's Left / Acc tiles: M
    rows of whole 16-row fractals, hardware-model.md §6), else (None, None): the whole tile."""
    vs = t.valid_shape
    if vs is None or len(vs) != 2 or not all(isinstance(v, int) for v in vs) or t.fully_valid:
        return None, None
    return vs[0], vs[1]


def alloc(ctx: Any, t: TileType, valid: tuple[int, int] | None = None, *, virtual: bool = False) -> TileBuf:
    """A tile of IR type `t` in its memory space; `virtual` tiles (un-tiled reference matmuls of
    earlier stages) are not charged to the on-chip capacity: no instruction ever holds them."""
    rows, cols = (t.shape if len(t.shape) == 2 else (int(np.prod(t.shape[:-1])), t.shape[-1]))
    vr, vc = valid if valid is not None else static_valid(t)
    # a [R, 1] Vec tile (a row reduction's result) is the one-column DN layout (runtime/vector.py)
    layout = "DN" if t.memory is Mem.Vec and cols == 1 and rows > 1 else None
    if virtual:
        return TileBuf(t.memory.value, t.dtype.np_dtype, rows, cols, layout=layout, valid_row=vr, valid_col=vc)
    return ctx.onchip.alloc_tile(t.memory.value, rows, cols, t.dtype.np_dtype, layout=layout, valid_row=vr,
                                 valid_col=vc)


@impl(P.tile_load_p)
def _load(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    src: TensorVal = ins[0]
    offs = clamp(ctx, e, _split(e, ins, "offsets"))
    valid = [int(v) for v in _split(e, ins, "valid")]
    out_t = e.outputs[0].type
    assert isinstance(out_t, TileType)
    shape = tuple(e.params["shape"])
    check_window(e, src.shape, offs, tuple(valid) if valid else shape)
    if e.params.get("blocked"):  # NZ -> NZ: the partition is the valid window when given (NZ-26)
        sizes = tuple(valid) if valid else shape
        vr, vc = sizes[2] * sizes[3], sizes[1] * sizes[4]
        tile = alloc(ctx, out_t, (vr, vc))
        runtime.isa.tload(ctx.gm, src.gm_view(offs, sizes), tile)
        return [tile]
    sizes = tuple(valid) if valid else shape
    vr = int(np.prod(sizes[:-1])) if len(sizes) > 1 else 1
    tile = alloc(ctx, _whole_mat_fractals(out_t, src), (vr, sizes[-1]))
    if src.nz is not None:  # reference path: the logical NZ window, before blocking
        tile.set_logical(_pad(src.read(ctx.gm, offs, sizes).reshape(vr, sizes[-1]), tile))
        return [tile]
    runtime.isa.tload(ctx.gm, src.gm_view(offs, sizes), tile)
    return [tile]


def _whole_mat_fractals(t: TileType, src: TensorVal) -> TileType:
    """Before AutoTileMatmulL0 pads it, a decode batch's ND -> NZ Mat tile is typed M x K: run it on
    the ceil16(M)-row tile the load writes M rows of (hardware-model.md §3), as the later stages
    do, so `low.run(after=...)` of every stage computes the same rows."""
    if t.memory is not Mem.Mat or src.nz is not None or src.layout == "NZ":
        return t
    rows, cols = (t.shape if len(t.shape) == 2 else (int(np.prod(t.shape[:-1])), t.shape[-1]))
    return t if rows % 16 == 0 else TileType((ceil16(rows), cols), t.dtype, t.memory)


def _pad(a: np.ndarray, tile: TileBuf) -> np.ndarray:
    if a.shape == (tile.rows, tile.cols):
        return a
    out = np.zeros((tile.rows, tile.cols), a.dtype)
    out[: a.shape[0], : a.shape[1]] = a
    return out


@impl(P.tile_store_p)
def _store(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    tile, dst = ins[0], ins[-1]
    offs = clamp(ctx, e, _split(e, ins, "offsets"))
    attrs = e.params.get("attrs", {})
    if isinstance(tile, HostValue) or dst.nz is not None:
        arr = tile.logical()
        if isinstance(tile, TileBuf):
            arr = arr[: tile.valid_row, : tile.valid_col]
        check_window(e, dst.shape, offs, (1,) * (len(dst.shape) - arr.ndim) + arr.shape)
        dst.write(ctx.gm, offs, arr)
        return [dst]
    part = e.params.get("nz_partition")
    if part is None:
        if len(dst.shape) == 1 and tile.valid_row != 1:
            raise runtime.DeviceError(f"{e.source}: a tile of {tile.valid_row} rows cannot be stored into "
                                      f"the rank-1 tensor of shape {dst.shape}")
        sizes = ((1,) * (len(dst.shape) - 2) + (tile.valid_row, tile.valid_col))[-len(dst.shape):]
        check_window(e, dst.shape, offs, sizes)
        runtime.isa.tstore(ctx.gm, dst.gm_view(offs, sizes), tile, atomic_add=bool(attrs.get("atomic")),
                           relu=bool(attrs.get("pre_relu")))
        return [dst]
    # NZ-20: an Acc tile into the blocked rank-5 NZ view through TStoreAccNz2nz (runtime
    # nz_store_acc), with the explicit partition [1, n/8, M/16, 16, 8]: the device derives its
    # column-block pitch from that partition, so a wrong partition mis-writes as on hardware.
    g0, g1, g2, g3, g4 = part
    check_window(e, dst.shape, offs, part)
    if dst.layout != "NZ" or len(dst.shape) != 5 or tile.space != "Acc":
        raise runtime.DeviceError(f"{e.source}: an nz_partition store needs an Acc tile and a blocked "
                                  f"rank-5 NZ view, got a {tile.space} tile into {dst.layout} {dst.shape}")
    # nSize is a 12-bit field: the un-tiled reference tile of an earlier stage (bisection) is
    # stored in column chunks, as AutoTileMatmulL0 splits it (NZ-22)
    step = 4080 // g4 * g4
    if tile.cols <= step:
        runtime.isa.tstore(ctx.gm, dst.gm_view(offs, tuple(part)), tile)
        return [dst]
    full = tile.logical()
    for c in range(0, g1 * g4, step):
        w = min(step, g1 * g4 - c)
        sub = TileBuf("Acc", tile.dtype, tile.rows, w)
        sub.set_logical(full[:, c : c + w])
        o = (offs[0], offs[1] + c // g4, *offs[2:])
        runtime.isa.tstore(ctx.gm, dst.gm_view(o, (g0, w // g4, g2, g3, g4)), sub)
    return [dst]


def _tile_matmul_ref(ctx: Any, e: Eqn, acc: np.ndarray | None, a: Any, b: Any) -> TileBuf:
    out_t = e.outputs[0].type
    assert isinstance(out_t, TileType)
    prod = reference_matmul(_squeeze2(a.logical()), _squeeze2(b.logical()), e.params.get("b_trans", False),
                            out_t.dtype.np_dtype)
    prod = prod[: out_t.shape[-2]]  # a decode batch's Left tile has ceil16(M) rows, the result M
    if acc is not None:
        prod = (acc + prod).astype(prod.dtype)
    t = alloc(ctx, out_t, virtual=True)
    t.set_logical(prod)
    return t


@impl(P.tile_matmul_p)
def _tile_matmul(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    return [_tile_matmul_ref(ctx, e, None, *ins)]


@impl(P.tile_matmul_acc_p)
def _tile_matmul_acc(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    return [_tile_matmul_ref(ctx, e, ins[0].logical(), ins[1], ins[2])]


@impl(P.tile_extract_p)
def _extract(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    src, r0, c0 = ins
    t = e.outputs[0].type
    assert isinstance(t, TileType)
    dst = alloc(ctx, t)
    transpose = False
    while isinstance(src, TransposedTile):  # window (r0, c0) of src^T is window (c0, r0) of src
        src, transpose, r0, c0 = src.tile, not transpose, c0, r0
    if transpose:
        runtime.isa.tmov(dst, src, r0, c0, transpose=True)
    else:
        runtime.isa.tmov(dst, src, r0, c0)
    return [dst]


@impl(P.tile_mad_p)
def _mad(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    left, right = ins
    t = e.outputs[0].type
    assert isinstance(t, TileType)
    acc = alloc(ctx, t)
    runtime.isa.tmatmul(acc, left, right, accumulate=False)
    return [acc]


@impl(P.tile_mad_acc_p)
def _mad_acc(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    acc, left, right = ins
    if not ctx.consumes(e, 0):  # the accumulator is still read later: TMATMUL_ACC on a copy
        t = e.outputs[0].type
        assert isinstance(t, TileType)
        copy = alloc(ctx, t)
        copy.data[:] = acc.data
        acc = copy
    runtime.isa.tmatmul(acc, left, right, accumulate=True)
    return [acc]


@impl(P.tile_transpose_view_p)
def _transpose_view(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    src = ins[0]
    return [TransposedTile(src)]


@impl(P.tile_cast_p)
def _cast(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    src: TileBuf = ins[0]
    t = e.outputs[0].type
    assert isinstance(t, TileType)
    out = alloc(ctx, t, (src.valid_row, src.valid_col))
    out.set_logical(src.logical().astype(t.dtype.np_dtype))
    return [out]


@impl(P.tile_move_p)
def _move(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    src: TileBuf = ins[0]
    t = e.outputs[0].type
    assert isinstance(t, TileType)
    out = alloc(ctx, t, (src.valid_row, src.valid_col))
    runtime.isa.tmov(out, src)
    return [out]


_ELEMENTWISE: dict[str, Callable[..., np.ndarray]] = {
    "tile.add": np.add, "tile.sub": np.subtract, "tile.mul": np.multiply, "tile.maximum": np.maximum,
    "tile.exp": np.exp,
}


def _elementwise(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    t = e.outputs[0].type
    assert isinstance(t, TileType)
    first: TileBuf = ins[0]
    out = alloc(ctx, t, (first.valid_row, first.valid_col))
    with np.errstate(over="ignore", invalid="ignore"):
        res = _ELEMENTWISE[e.primitive.name](*(x.logical() for x in ins))
    out.set_logical(res.astype(t.dtype.np_dtype))
    return [out]


for _p in P.ELEMENTWISE.values():
    impl_rules[_p] = _elementwise

