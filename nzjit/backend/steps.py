"""What every rule shares: releasing the values whose last use a step is, the generic step
through a rule's reference impl, finishing a specialised step's result, operand groups, the
partition checks every stage makes, and the static tile geometries a step resolves once."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import runtime
from runtime import GmView, TileBuf
from runtime.cube import TileWindow
from runtime.tile import tile_geometry

from ..core.ir import Eqn
from ..core.types import DynDim, ScalarType, TileType
from .rule import Run, Step
from .values import TensorVal


# ------------------------------------------------------------------------------------ frees
def release(ctx: Any, env: list[Any], free: tuple[int, ...], res: Any) -> None:
    """Free the tiles of the dying slots `free` (not those in `res`: returned, updated in place)."""
    onchip = ctx.onchip
    for s in free:
        v = env[s]
        env[s] = None
        t = type(v)
        if (t is TileBuf or t is TileWindow) and v.owner is onchip and not v.freed:
            for r in res:
                if r is v:
                    break
            else:
                onchip.free_tile(v)


def release1(ctx: Any, env: list[Any], free: tuple[int, ...], r: Any) -> None:
    """`release` of a step with the one result `r`."""
    onchip = ctx.onchip
    for s in free:
        v = env[s]
        env[s] = None
        t = type(v)
        if (t is TileBuf or t is TileWindow) and v is not r and v.owner is onchip and not v.freed:
            onchip.free_tile(v)


def tile_free(st: Step) -> tuple[int, ...]:
    """The dying slots of `st` that may hold a tile (a scalar owns no on-chip bytes and needs no
    release; its slot is simply not read again)."""
    return tuple(s for s, v in zip(st.free, st.free_after) if not isinstance(v.type, ScalarType))


# ------------------------------------------------------------------------------------ steps
def generic_run(st: Step) -> Run:
    """The step through the rule's reference impl: inputs as a list, results stored, frees."""
    fn, e, ins, outs, free = st.impl, st.eqn, st.ins, st.outs, st.free

    def run(ctx: Any, env: list[Any]) -> None:
        ctx.step = st
        res = fn(ctx, e, [env[i] for i in ins])
        for s, v in zip(outs, res):
            env[s] = v
        if free:
            release(ctx, env, free, res)

    return run


def finish(st: Step, body: Callable[[Any, list[Any]], Any]) -> Run:
    """Wrap `body(ctx, env) -> result` (one output) with the output store and the frees."""
    (o,) = st.outs
    free = st.free
    if not free:

        def run(ctx: Any, env: list[Any]) -> None:
            env[o] = body(ctx, env)

        return run

    def run_free(ctx: Any, env: list[Any]) -> None:
        r = body(ctx, env)
        env[o] = r
        release(ctx, env, free, (r,))

    return run_free


def finish_or_generic(st: Step, body: Callable[[Any, list[Any]], Any]) -> Run:
    """Like `finish`, for a `body` that returns None when the value is not one it plans for: the
    generic step runs instead (it stores the output and frees by itself). Only tile slots are
    released (`tile_free`)."""
    (o,) = st.outs
    free = tile_free(st)
    generic = st.generic

    def run(ctx: Any, env: list[Any]) -> None:
        r = body(ctx, env)
        if r is None:
            generic(ctx, env)
            return
        env[o] = r
        if free:
            release1(ctx, env, free, r)

    return run


# ---------------------------------------------------------------------------------- operands
def operand_groups(e: Eqn, ins: tuple[int, ...]) -> dict[str, tuple[int, ...]]:
    """Operand group name -> the slots `ins` of equation `e` that hold it."""
    out, start = {}, 0
    for name, n in zip(e.primitive.groups, e.params["arity"]):
        out[name] = ins[start : start + n]
        start += n
    return out


def split(e: Eqn, ins: list[Any], group: str) -> list[Any]:
    """The values of operand group `group` of `e` among its input values `ins`."""
    start = 0
    for name, n in zip(e.primitive.groups, e.params["arity"]):
        if name == group:
            return ins[start : start + n]
        start += n
    raise KeyError(group)


def static_shape(shape: tuple[Any, ...]) -> tuple[int, ...] | None:
    """`shape` as ints, or None when a dimension is dynamic."""
    if any(isinstance(d, DynDim) for d in shape):
        return None
    return tuple(int(d) for d in shape)


def concrete(ctx: Any, shape: tuple[Any, ...]) -> tuple[int, ...]:
    """`shape` with every `DynDim` replaced by its value for this call."""
    return tuple(ctx.dims[d.name] if isinstance(d, DynDim) else int(d) for d in shape)


def clamp(ctx: Any, e: Eqn, offsets: list[int]) -> tuple[int, ...]:
    """The partition view's `arith.maxsi x, 0` (NZ-18), refused when it would change a value."""
    if any(o < 0 for o in offsets):
        raise runtime.DispatchError(
            f"{e.source}: partition offset {offsets} is negative; the device "
            "clamps it to 0 and would read the wrong window (NZ-18), so the call "
            "is refused (nothing is written back)"
        )
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
                "tensor, so the call is refused (nothing is written back)"
            )


def gm_view(src: TensorVal, offs: tuple[int, ...], sizes: tuple[int, ...]) -> GmView:
    """`TensorVal.gm_view` without the dataclass validation (the backend builds valid views)."""
    strides = src.strides
    delta = 0
    for o, s in zip(offs, strides):
        delta += o * s
    if len(sizes) > 5:
        return src.gm_view(offs, sizes)
    return GmView.trusted(src.addr + delta * src.dtype.itemsize, src.dtype, sizes, strides, src.layout)


# ------------------------------------------------------------------------------ tile shapes
def static_valid(t: TileType) -> tuple[int | None, int | None]:
    """The valid rows / cols a tile type fixes statically (a decode batch's Left / Acc tiles: M
    rows of whole 16-row fractals, hardware-model.md §6), else (None, None): the whole tile."""
    vs = t.valid_shape
    if vs is None or len(vs) != 2 or not all(isinstance(v, int) for v in vs) or t.fully_valid:
        return None, None
    return vs[0], vs[1]


def tile_dims(t: TileType) -> tuple[str, int, int, np.dtype]:
    """(space, rows, cols, dtype) of a tile type, leading extents folded into rows."""
    rows, cols = t.shape if len(t.shape) == 2 else (int(np.prod(t.shape[:-1])), t.shape[-1])
    return t.memory.value, int(rows), int(cols), t.dtype.np_dtype


def tile_layout(space: str, rows: int, cols: int) -> str | None:
    """The layout the backend gives a tile: a `[R, 1]` Vec tile (a row reduction's result) is the
    one-column DN layout (runtime/vector.py), every other tile its space's default (None). The
    fast forms' `geometry_of` keeps the default: an ND `[R, 1]` tile is no legal geometry, so they
    leave such tiles to the generic step."""
    return "DN" if space == "Vec" and cols == 1 and rows > 1 else None


def geometry_of(space: str, rows: int, cols: int, dt: np.dtype) -> Any:
    """The runtime geometry of a tile, or None when the device refuses it (then the generic step
    refuses it at run time, with its message)."""
    try:
        return tile_geometry(space, dt, rows, cols, None)
    except runtime.DeviceError:
        return None


def result_geometry(t: Any) -> Any:
    """The runtime geometry of a tile-typed result, or None when `t` is not a tile type or has
    no legal geometry (the generic path then refuses it at run time, with its message)."""
    if not isinstance(t, TileType):
        return None
    return geometry_of(*tile_dims(t))


def alloc(
    ctx: Any, t: TileType, valid: tuple[int | None, int | None] | None = None, *, virtual: bool = False
) -> TileBuf:
    """A tile of IR type `t` in its memory space; `virtual` tiles (un-tiled reference matmuls of
    earlier stages) are not charged to the on-chip capacity: no instruction ever holds them."""
    space, rows, cols, dt = tile_dims(t)
    vr, vc = valid if valid is not None else static_valid(t)
    layout = tile_layout(space, rows, cols)
    if virtual:
        return TileBuf(space, dt, rows, cols, layout=layout, valid_row=vr, valid_col=vc)
    return ctx.onchip.alloc_tile(space, rows, cols, dt, layout=layout, valid_row=vr, valid_col=vc)


def free_value(ctx: Any, val: Any) -> None:
    """Free `val` if it is a live tile allocated from this call's on-chip accounting (other values
    own no on-chip bytes)."""
    if (type(val) is TileBuf or type(val) is TileWindow) and not val.freed:
        onchip: runtime.OnChip = ctx.onchip
        if val.owner is onchip:
            onchip.free_tile(val)
