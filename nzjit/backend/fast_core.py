"""The machinery every specialised step closure of fast.py shares: freeing the values whose last
use a step is, the generic fallback through `impl_rules`, finishing a step's result, and the
static facts of operands and tile geometries that steps resolve once when a plan is built."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import runtime
from runtime import GmView, TileBuf
from runtime.cube import TileWindow

from ..core.types import DynDim, ScalarType, TileType
from .values import TensorVal

Run = Callable[[Any, list[Any]], None]
_tile_geometry_cached = runtime.tile._geometry


def _release(ctx: Any, env: list[Any], free: tuple[int, ...], res: Any) -> None:
    """Free the tiles of the dying slots `free` (not those returned: updated in place)."""
    onchip = ctx.onchip
    for s in free:
        v = env[s]
        env[s] = None
        t = type(v)
        if (t is TileBuf or t is TileWindow) and v._owner is onchip and not v.freed:
            for r in res:
                if r is v:
                    break
            else:
                onchip.free_tile(v)


def _release1(ctx: Any, env: list[Any], free: tuple[int, ...], r: Any) -> None:
    """`_release` of a step with the one result `r`."""
    onchip = ctx.onchip
    for s in free:
        v = env[s]
        env[s] = None
        t = type(v)
        if (t is TileBuf or t is TileWindow) and v is not r and v._owner is onchip and not v.freed:
            onchip.free_tile(v)


def _tile_free(st: Any) -> tuple[int, ...]:
    """The dying slots of `st` that may hold a tile (a scalar owns no on-chip bytes and needs no
    release; its slot is simply not read again)."""
    return tuple(s for s, v in zip(st.free, st.free_after) if not isinstance(v.type, ScalarType))


def _generic(st: Any) -> Run:
    from .executor import run_loop

    fn, e, ins, outs, free, consumed = st.fn, st.eqn, st.ins, st.outs, st.free, st.consumed

    if fn is None:  # a loop

        def run_for(ctx: Any, env: list[Any]) -> None:
            ctx.step = st
            res = run_loop(ctx, e, [env[i] for i in ins], consumed)
            for s, v in zip(outs, res):
                env[s] = v
            if free:
                _release(ctx, env, free, res)

        return run_for

    def run(ctx: Any, env: list[Any]) -> None:
        ctx.step = st
        res = fn(ctx, e, [env[i] for i in ins])
        for s, v in zip(outs, res):
            env[s] = v
        if free:
            _release(ctx, env, free, res)

    return run


def _finish(st: Any, body: Callable[[Any, list[Any]], Any]) -> Run:
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
        _release(ctx, env, free, (r,))

    return run_free


def _finish_or_generic(st: Any, body: Callable[[Any, list[Any]], Any], generic: Run) -> Run:
    """Like `_finish`, for a `body` that returns None when the value is not one it plans for: the
    generic implementation runs instead (it stores the output and frees by itself). Only tile slots
    are released (`_tile_free`)."""
    (o,) = st.outs
    free = _tile_free(st)

    def run(ctx: Any, env: list[Any]) -> None:
        r = body(ctx, env)
        if r is None:
            generic(ctx, env)
            return
        env[o] = r
        if free:
            _release1(ctx, env, free, r)

    return run



# ---------------------------------------------------------------------------------- operands
def operand_groups(e: Any, ins: tuple[int, ...]) -> dict[str, tuple[int, ...]]:
    """Operand group name -> the slots `ins` of equation `e` that hold it."""
    out, start = {}, 0
    for name, n in zip(e.primitive.groups, e.params["arity"]):
        out[name] = ins[start : start + n]
        start += n
    return out


def _groups(st: Any) -> dict[str, tuple[int, ...]]:
    """Operand group name -> the input slots of plan step `st`."""
    return operand_groups(st.eqn, st.ins)


def _static_shape(shape: tuple[Any, ...]) -> tuple[int, ...] | None:
    if any(isinstance(d, DynDim) for d in shape):
        return None
    return tuple(int(d) for d in shape)


def _gm_view(src: TensorVal, offs: tuple[int, ...], sizes: tuple[int, ...]) -> GmView:
    """`TensorVal.gm_view` without the dataclass validation (the backend builds valid views)."""
    strides = src.strides
    delta = 0
    for o, s in zip(offs, strides):
        delta += o * s
    if len(sizes) > 5:
        return src.gm_view(offs, sizes)
    return GmView._make(src.addr + delta * src.dtype.itemsize, src.dtype, sizes, strides, src.layout)


def _tile_geometry(t: TileType) -> tuple[str, int, int, np.dtype]:
    rows, cols = (t.shape if len(t.shape) == 2 else (int(np.prod(t.shape[:-1])), t.shape[-1]))
    return t.memory.value, int(rows), int(cols), t.dtype.np_dtype


def _geometry_of(space: str, rows: int, cols: int, dt: np.dtype) -> Any:
    try:
        return _tile_geometry_cached(space, dt, rows, cols, None)
    except runtime.DeviceError:
        return None  # refused at run time by alloc_tile, with its message


def result_geometry(t: Any) -> Any:
    """The runtime geometry of a tile-typed result, or None when `t` is not a tile type or has
    no legal geometry (the generic path then refuses it at run time, with its message)."""
    if not isinstance(t, TileType):
        return None
    return _geometry_of(*_tile_geometry(t))


