"""Rules of the vector family: elementwise ops on Vec tiles (`tile.add` ... `tile.exp`), casts and
TMOV between tiles.

Every form computes the valid region only, as the device does (pto-isa: an instruction iterates
over dst's valid rows x columns; sources of another valid shape are refused): a result's bytes
outside it are those of a fresh tile (zero). The specialised elementwise step runs the ufunc
straight on the tiles' byte images (same geometry, ND): for wholly valid operands an input that
dies here, of the result's type, lends its image to the result (still reserved before that input
is released: the same on-chip accounting, no buffer moves). The batched form runs the ufunc once
over every lane's valid regions.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import runtime
from runtime import TileBuf

from ... import prims as P
from ...core.ir import Eqn
from ...core.types import Mem, TileType
from ..lane_state import Fallback, LaneState, replays
from ..lane_values import LaneTile, LaneWindow
from ..rule import Rule, Run, Step, register, rule
from ..steps import alloc, finish_or_generic, release1, result_geometry, tile_free
from .vector_lanes import VecOp, gathered, lanes_of, out_type

#: The numpy function of each elementwise primitive (by primitive name).
ELEMENTWISE: dict[str, Callable[..., np.ndarray]] = {
    "tile.add": np.add,
    "tile.sub": np.subtract,
    "tile.mul": np.multiply,
    "tile.maximum": np.maximum,
    "tile.exp": np.exp,
    "tile.neg": np.negative,
    "tile.abs": np.absolute,
}


#: The device instruction of each elementwise primitive (its name in a refusal).
_INSTR = {
    "tile.add": "TADD",
    "tile.sub": "TSUB",
    "tile.mul": "TMUL",
    "tile.maximum": "TMAX",
    "tile.exp": "TEXP",
    "tile.neg": "TNEG",
    "tile.abs": "TABS",
}


def same_valid(e: Eqn, xs: list[Any]) -> tuple[int, int]:
    """The valid region every operand of `e` shares (the result's), else the device's refusal: an
    elementwise instruction runs over dst's valid region and needs sources of that same shape."""
    vr, vc = xs[0].valid_row, xs[0].valid_col
    for x in xs[1:]:
        if (x.valid_row, x.valid_col) != (vr, vc):
            raise runtime.DeviceError(
                f"{_INSTR[e.primitive.name]}: source valid shape {x.valid_row}x{x.valid_col} "
                f"differs from the destination's {vr}x{vc}"
            )
    return vr, vc


def _elementwise(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    """The reference: the ufunc over the valid region only; the result's bytes outside it are those
    of a fresh tile (zero), as the device leaves a destination it does not write."""
    t = e.outputs[0].type
    assert isinstance(t, TileType)
    vr, vc = same_valid(e, ins)
    out = alloc(ctx, t, (vr, vc))
    with np.errstate(over="ignore", invalid="ignore"):
        res = ELEMENTWISE[e.primitive.name](*(x.window(0, 0, vr, vc) for x in ins))
    out.set_window(0, 0, res.astype(t.dtype.np_dtype))
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
        """The wholly valid result tile: the dying input's, or a fresh one."""
        onchip = ctx.onchip
        if reuse is not None:
            r = xs[reuse]
            if r.geometry is geom and r.owner is onchip:
                onchip.charge_transient(space, nbytes)  # the result's allocation, then the input's free
                r.valid_row, r.valid_col = rows, cols
                return r
        return onchip.alloc_geometry(geom, rows, cols, zero=False)  # all written

    def body(ctx: Any, env: list[Any]) -> Any:
        """The op on same-dtype ND tiles of any geometry (views of their valid regions), else None
        (operands of different valid shapes too: the reference refuses them)."""
        xs = [env[i] for i in ins]
        for x in xs:
            if type(x) is not TileBuf or x.layout != "ND" or x.dtype != dt or x.freed or x.holds_logical:
                return None
        vr, vc = xs[0].valid_row, xs[0].valid_col
        for x in xs:
            if x.valid_row != vr or x.valid_col != vc:
                return None
        # viewed before the result may alias one
        views = [x.image.view(dt).reshape(x.rows, x.cols)[:vr, :vc] for x in xs]
        if (vr, vc) == shape2:
            out = result(ctx, xs)
        else:  # a fresh zeroed tile: only the valid region is written, as the reference leaves it
            out = ctx.onchip.alloc_geometry(geom, vr, vc)
        ufunc(*views, out=out.image.view(dt).reshape(shape2)[:vr, :vc])
        return out

    general = finish_or_generic(st, body)

    if len(ins) == 2:  # binary: no argument lists to build and unpack
        i0, i1 = ins

        def run2(ctx: Any, env: list[Any]) -> None:
            a, b = env[i0], env[i1]
            if not (
                type(a) is TileBuf
                and type(b) is TileBuf
                and a.geometry is geom
                and b.geometry is geom
                and not (a.freed or b.freed or a.holds_logical or b.holds_logical)
                and a.valid_row == rows
                and a.valid_col == cols
                and b.valid_row == rows
                and b.valid_col == cols
            ):
                general(ctx, env)  # a partial valid region (or another geometry): `body`
                return
            xa, xb = a.image.view(dt), b.image.view(dt)  # viewed before the result may alias one
            onchip: runtime.OnChip = ctx.onchip
            r = b if reuse == 1 else a if reuse == 0 else None
            if r is not None and r.owner is onchip:
                onchip.charge_transient(space, nbytes)  # the result's allocation, then the input's free
                ufunc(xa, xb, out=xb if reuse == 1 else xa)
            else:
                r = onchip.alloc_geometry(geom, rows, cols, zero=False)  # all written
                ufunc(xa, xb, out=r.image.view(dt))
            env[o] = r
            if free:
                release1(ctx, env, free, r)

        return run2

    def run(ctx: Any, env: list[Any]) -> None:
        xs = [env[i] for i in ins]
        images = [x.image_of(geom) if type(x) is TileBuf else None for x in xs]
        if any(v is None for v in images) or any(x.valid_row != rows or x.valid_col != cols for x in xs):
            general(ctx, env)  # not every input a live, wholly valid image of the result's geometry
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
    t = e.outputs[0].type
    donors = tuple(j for j in sorted(st.consumed) if e.inputs[j].type == t)  # may lend their images

    whole = (geom.rows, geom.cols)

    def run(s: LaneState, env: list[Any]) -> None:
        xs = [env[i] for i in ins]
        for x in xs:
            if type(x) is not LaneTile or x.freed or x.g.layout != "ND" or x.g.dtype != dt:
                raise Fallback("elementwise operands")
        vr, vc = xs[0].valid_row, xs[0].valid_col
        for x in xs:
            if x.valid_row != vr or x.valid_col != vc:
                raise Fallback("operands of different valid shapes (the reference refuses)")
        s.reserve(geom)
        r0 = xs[0].row
        if (vr, vc) == whole and all(x.g is geom and x.row is r0 for x in xs):
            # the common step: wholly valid images of the result's own geometry, one lane map - the
            # ufunc over the flat images (the same elements in the same order as the [n, rows,
            # cols] views below, without building them), in place over a dying operand's
            datas = [x.data for x in xs]
            n = len(datas[0])
            if all(len(d) == n for d in datas):
                data = next((d for j in donors if (d := s.adopt(xs[j])) is not None), None)
                if data is None:
                    data = s.zeros(n, geom.nbytes, zero=False)  # all written
                s.do(_into, ufunc, data.view(dt), *(d.view(dt) for d in datas))
                env[o] = LaneTile(geom, vr, vc, data, r0)
                return
        rows = [x.row for x in xs]
        shared = all(r is rows[0] or np.array_equal(r, rows[0]) for r in rows)
        if shared:  # same images per lane
            args = [x.data.view(dt).reshape(len(x.data), x.g.rows, x.g.cols) for x in xs]
            row = rows[0]
        else:
            args = [gathered(s, x, j).view(dt).reshape(s.L, x.g.rows, x.g.cols) for j, x in enumerate(xs)]
            row = np.arange(s.L)
        n = len(args[0])
        partial = (vr, vc) != (geom.rows, geom.cols)  # outside the valid region: a fresh tile's zeros
        # wholly valid: in place over a dying operand's images (a ufunc is safe in place), else fresh
        data = next((d for j in donors if shared and not partial and (d := s.adopt(xs[j])) is not None), None)
        if data is None:
            data = s.zeros(n, geom.nbytes, zero=partial)
        s.do(
            _into,
            ufunc,
            data.view(dt).reshape(n, geom.rows, geom.cols)[:, :vr, :vc],
            *(a[:, :vr, :vc] for a in args),
        )
        env[o] = LaneTile(geom, vr, vc, data, row)

    return replays(run)


def _into(ufunc: Any, out: np.ndarray, *ins: np.ndarray) -> None:
    """``ufunc(*ins, out=out)``, as a recorded call (`LaneState.do`)."""
    ufunc(*ins, out=out)


register(tuple(P.ELEMENTWISE.values()), Rule(_elementwise, _specialize_elementwise, _batch_elementwise))


# ------------------------------------------------------------------------------------- cast
def _batch_cast(st: Step) -> Any:
    """`pl.cast` of an ND tile: every image's valid region converted at once, as the per-lane impl
    converts its valid region. A conversion numpy defines for every value (to a float type, or to an
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
        if (
            type(x) is not LaneTile
            or x.freed
            or x.g.layout != "ND"
            or x.g.dtype != src_dt
            or (x.g.rows, x.g.cols) != (geom.rows, geom.cols)
        ):
            raise Fallback("cast operand")
        n = len(x.data)
        vr, vc = x.valid_row, x.valid_col
        src = x.data.view(src_dt).reshape(n, geom.rows, geom.cols)[:, :vr, :vc]
        if bounds is not None and src.size:  # the values decide: a recorded check (a replay checks too)
            s.do(_in_range, src, bounds)
        s.reserve(geom)
        data = s.zeros(n, geom.nbytes, zero=(vr, vc) != (geom.rows, geom.cols))  # outside: a fresh tile's
        s.do(np.copyto, data.view(dst_dt).reshape(n, geom.rows, geom.cols)[:, :vr, :vc], src, "unsafe")
        env[o] = LaneTile(geom, vr, vc, data, x.row)

    return replays(run)


def _in_range(src: np.ndarray, bounds: tuple[float, float]) -> None:
    """Fallback unless every value of `src` converts in range (NaN fails both comparisons)."""
    lo, hi = np.min(src), np.max(src)
    if not (lo >= bounds[0] and hi <= bounds[1]):
        raise Fallback("a float -> int cast out of range")


@rule(P.tile_cast_p, batch=_batch_cast)
def _cast(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    src: TileBuf = ins[0]
    t = e.outputs[0].type
    assert isinstance(t, TileType)
    vr, vc = src.valid_row, src.valid_col
    out = alloc(ctx, t, (vr, vc))  # zeroed: only the valid region is converted, as on the device
    out.set_window(0, 0, src.window(0, 0, vr, vc).astype(t.dtype.np_dtype))
    return [out]


# ------------------------------------------------------------------------------------- move
def _tmov(e: Eqn, out: TileBuf, ins: list[Any], target: str, scratch: Any) -> None:
    runtime.isa.tmov(out, ins[0])


def _tmov_valid(e: Eqn, ins: list[Any]) -> tuple[int | None, int | None]:
    return ins[0].valid_row, ins[0].valid_col


#: Vec -> Vec is a row-local copy (lanes stacked); Mat -> Left / Right changes the fractal layout:
#: once per lane image
_TMOV = {row_local: VecOp(_tmov, _tmov_valid, row_local=row_local) for row_local in (True, False)}


def _batch_move(st: Step) -> Any:
    """TMOV of every lane image; a Left / Right result is handed to the batched mad as the window
    (0, 0) of itself (`LaneWindow`, what a fused TEXTRACT gives it): the same logical matrix."""
    t = out_type(st.eqn)
    inner = lanes_of(_TMOV[t.memory is Mem.Vec])(st)
    if inner is None or t.memory not in (Mem.Left, Mem.Right):
        return inner
    (o,) = st.outs

    def run(s: LaneState, env: list[Any]) -> None:
        inner(s, env)
        x = env[o]
        env[o] = LaneWindow(x.g, x, 0, 0, False, x.valid_row, x.valid_col)

    return run


@rule(P.tile_move_p, batch=_batch_move)
def _move(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    src: TileBuf = ins[0]
    t = e.outputs[0].type
    assert isinstance(t, TileType)
    out = alloc(ctx, t, (src.valid_row, src.valid_col))
    runtime.isa.tmov(out, src)
    return [out]
