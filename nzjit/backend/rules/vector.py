"""Rules of the vector family: elementwise ops on Vec tiles (`tile.add` ... `tile.exp`), casts and
TMOV between tiles.

The specialised elementwise step runs the ufunc straight on the tiles' byte images (same
geometry, ND): an input that dies here, of the result's type, lends its image to the result
(still reserved before that input is released: the same on-chip accounting, no buffer moves).
The batched form runs the ufunc once over every lane's images.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import runtime
from runtime import TileBuf

from ... import prims as P
from ...core.ir import Eqn
from ...core.types import TileType
from ..lane_state import Fallback, LaneState
from ..lane_values import LaneTile
from ..rule import Rule, Run, Step, register, rule
from ..steps import alloc, finish_or_generic, release1, result_geometry, tile_free

#: The numpy function of each elementwise primitive (by primitive name).
ELEMENTWISE: dict[str, Callable[..., np.ndarray]] = {
    "tile.add": np.add, "tile.sub": np.subtract, "tile.mul": np.multiply, "tile.maximum": np.maximum,
    "tile.exp": np.exp, "tile.neg": np.negative, "tile.abs": np.absolute,
}


def _elementwise(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    t = e.outputs[0].type
    assert isinstance(t, TileType)
    first: TileBuf = ins[0]
    out = alloc(ctx, t, (first.valid_row, first.valid_col))
    with np.errstate(over="ignore", invalid="ignore"):
        res = ELEMENTWISE[e.primitive.name](*(x.logical() for x in ins))
    out.set_logical(res.astype(t.dtype.np_dtype))
    return [out]


def _same_dtype_ufunc(e: Eqn, geom: Any) -> Callable[..., np.ndarray] | None:
    """The primitive's ufunc when it produces the tile dtype itself on ND tiles (int exp does not:
    the generic impl casts), else None."""
    if geom is None or geom.layout != "ND":
        return None
    ufunc = ELEMENTWISE[e.primitive.name]
    try:
        with np.errstate(all="ignore"):
            if ufunc(*(np.ones(1, geom.dtype) for _ in e.inputs)).dtype != geom.dtype:
                return None
    except TypeError:
        return None
    return ufunc


def _specialize_elementwise(st: Step) -> Run | None:
    e = st.eqn
    t = e.outputs[0].type
    geom = result_geometry(t)
    ufunc = _same_dtype_ufunc(e, geom)
    if ufunc is None:
        return None
    space, rows, cols, dt = geom.space, geom.rows, geom.cols, geom.dtype
    ins = st.ins
    shape2 = (rows, cols)
    reuse = next((j for j in sorted(st.consumed) if e.inputs[j].type == t), None)
    nbytes = geom.nbytes
    (o,) = st.outs
    free = tile_free(st)

    def result(ctx: Any, xs: list[Any]) -> Any:
        """The result tile: the dying input's, or a fresh one."""
        first, onchip = xs[0], ctx.onchip
        if reuse is not None:
            r = xs[reuse]
            if r.geometry is geom and r.owner is onchip:
                onchip.charge_transient(space, nbytes)  # the result's allocation, then the input's free
                r.valid_row, r.valid_col = first.valid_row, first.valid_col
                return r
        return onchip.alloc_geometry(geom, first.valid_row, first.valid_col, zero=False)  # all written

    def body(ctx: Any, env: list[Any]) -> Any:
        """The op on same-dtype ND tiles of any geometry (views of their images), else None."""
        xs = [env[i] for i in ins]
        for x in xs:
            if type(x) is not TileBuf or x.layout != "ND" or x.dtype != dt or x.freed or x.holds_logical:
                return None
        views = [x.image.view(dt).reshape(x.rows, x.cols) for x in xs]  # before the result may alias one
        out = result(ctx, xs)
        ufunc(*views, out=out.image.view(dt).reshape(shape2))
        return out

    general = finish_or_generic(st, body)

    if len(ins) == 2:  # binary: no argument lists to build and unpack
        i0, i1 = ins

        def run2(ctx: Any, env: list[Any]) -> None:
            a, b = env[i0], env[i1]
            if not (type(a) is TileBuf and type(b) is TileBuf and a.geometry is geom and b.geometry is geom
                    and not (a.freed or b.freed or a.holds_logical or b.holds_logical)):
                general(ctx, env)
                return
            xa, xb = a.image.view(dt), b.image.view(dt)  # viewed before the result may alias one
            onchip: runtime.OnChip = ctx.onchip
            r = b if reuse == 1 else a if reuse == 0 else None
            if r is not None and r.owner is onchip:
                onchip.charge_transient(space, nbytes)  # the result's allocation, then the input's free
                r.valid_row, r.valid_col = a.valid_row, a.valid_col
                ufunc(xa, xb, out=xb if reuse == 1 else xa)
            else:
                r = onchip.alloc_geometry(geom, a.valid_row, a.valid_col, zero=False)  # all written
                ufunc(xa, xb, out=r.image.view(dt))
            env[o] = r
            if free:
                release1(ctx, env, free, r)

        return run2

    def run(ctx: Any, env: list[Any]) -> None:
        xs = [env[i] for i in ins]
        images = [x.image_of(geom) if type(x) is TileBuf else None for x in xs]
        if any(v is None for v in images):  # not every input a live image of the result's geometry
            general(ctx, env)
            return
        views = [v.view(dt) for v in images]  # type: ignore[union-attr]
        r = result(ctx, xs)
        ufunc(*views, out=r.image.view(dt))
        env[o] = r
        if free:
            release1(ctx, env, free, r)

    return run


def _batch_elementwise(st: Step) -> Any:
    e = st.eqn
    geom = result_geometry(e.outputs[0].type)
    ufunc = _same_dtype_ufunc(e, geom)
    if ufunc is None:
        return None
    dt = geom.dtype
    ins = st.ins
    (o,) = st.outs

    def run(s: LaneState, env: list[Any]) -> None:
        xs = [env[i] for i in ins]
        for x in xs:
            if type(x) is not LaneTile or x.freed or x.g.layout != "ND" or x.g.dtype != dt:
                raise Fallback("elementwise operands")
        first = xs[0]
        s.reserve(geom)
        rows = [x.row for x in xs]
        if all(r is rows[0] or np.array_equal(r, rows[0]) for r in rows):  # same images per lane
            args = [x.data.view(dt).reshape(len(x.data), x.g.rows, x.g.cols) for x in xs]
            row = rows[0]
        else:
            args = [x.data.view(dt).reshape(len(x.data), x.g.rows, x.g.cols)[x.row] for x in xs]
            row = np.arange(s.L)
        data = s.empty((len(args[0]), geom.nbytes), np.uint8)
        ufunc(*args, out=data.view(dt).reshape(len(args[0]), geom.rows, geom.cols))
        env[o] = LaneTile(geom, first.valid_row, first.valid_col, data, row)

    return run


register(tuple(P.ELEMENTWISE.values()), Rule(_elementwise, _specialize_elementwise, _batch_elementwise))


# ------------------------------------------------------------------------------------- cast
def _batch_cast(st: Step) -> Any:
    """`pl.cast` of an ND tile: every image converted at once, as the per-lane impl converts its
    whole logical matrix. A conversion numpy defines for every value (to a float type, or to an
    integer type that holds the source's) always; a float -> int one (quantisation) only when
    every value converts in range - out of range is undefined in C, and one long conversion need
    not give the bits of many short ones."""
    e = st.eqn
    t = e.outputs[0].type
    geom = result_geometry(t)
    src_t = e.inputs[0].type
    if geom is None or geom.layout != "ND" or not isinstance(src_t, TileType):
        return None
    src_dt, dst_dt = src_t.dtype.np_dtype, geom.dtype
    defined = t.dtype.is_float or (src_t.dtype.is_int and np.can_cast(src_dt, dst_dt, "safe"))
    if not defined and not (src_t.dtype.is_float and t.dtype.is_int):
        return None
    bounds = None if defined else (float(np.iinfo(dst_dt).min), float(np.iinfo(dst_dt).max))
    ((a,), (o,)) = st.ins, st.outs

    def run(s: LaneState, env: list[Any]) -> None:
        x = env[a]
        if type(x) is not LaneTile or x.freed or x.g.layout != "ND" or x.g.dtype != src_dt \
                or (x.g.rows, x.g.cols) != (geom.rows, geom.cols):
            raise Fallback("cast operand")
        n = len(x.data)
        src = x.data.view(src_dt).reshape(n, geom.rows, geom.cols)
        if bounds is not None:  # NaN fails both comparisons: it falls back too
            lo, hi = np.min(src), np.max(src)
            if not (lo >= bounds[0] and hi <= bounds[1]):
                raise Fallback("a float -> int cast out of range")
        s.reserve(geom)
        data = s.empty((n, geom.nbytes), np.uint8)
        np.copyto(data.view(dst_dt).reshape(n, geom.rows, geom.cols), src, casting="unsafe")
        env[o] = LaneTile(geom, x.valid_row, x.valid_col, data, x.row)

    return run


@rule(P.tile_cast_p, batch=_batch_cast)
def _cast(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    src: TileBuf = ins[0]
    t = e.outputs[0].type
    assert isinstance(t, TileType)
    out = alloc(ctx, t, (src.valid_row, src.valid_col))
    out.set_logical(src.logical().astype(t.dtype.np_dtype))
    return [out]


# ------------------------------------------------------------------------------------- move
@rule(P.tile_move_p)
def _move(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    src: TileBuf = ins[0]
    t = e.outputs[0].type
    assert isinstance(t, TileType)
    out = alloc(ctx, t, (src.valid_row, src.valid_col))
    runtime.isa.tmov(out, src)
    return [out]
