"""Step closures of execution plans: each equation's impl, pre-bound to its static parameters.

`make_step(step)` returns `run(ctx, env)`, which reads the equation's inputs from the slot list
`env`, computes, stores its results and frees the values whose last use it is. Hot primitives
(scalars, slices, loads, extracts, mad, elementwise) get a specialised closure: operand groups,
output tile geometry, literal operands and liveness are resolved once when the plan is built,
so a run is a handful of Python operations plus the instruction itself. Everything else, and
every unusual run-time case of a specialised one, goes through the generic `impl_rules` entry
with the same semantics. This file holds the scalar, cube and elementwise steps and the table of
makers; fast_memory.py the GM <-> tile steps (slice, load, store); fast_core.py what they share.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import runtime
from runtime import TileBuf
from runtime.cube import textract_window

from .. import prims as P
from ..core.types import ScalarType, TileType
from .fast_core import (
    Run,
    _finish,
    _finish_or_generic,
    _generic,
    _geometry_of,
    _release1,
    _tile_free,
    _tile_geometry,
    result_geometry,
)
from .fast_memory import _mk_load, _mk_slice, _mk_store
from .impl import _CMP, _ELEMENTWISE, _SCALAR, static_valid
from .values import TransposedTile

_tmov, _tmatmul = runtime.isa.tmov, runtime.isa.tmatmul


# --------------------------------------------------------------------------------------- scalars
def _int_range(t: Any) -> tuple[int, int] | None:
    dt = t.dtype
    if not dt.is_int:
        return None
    if dt.is_signed:
        return -(1 << (dt.bits - 1)), 1 << (dt.bits - 1)
    return 0, 1 << dt.bits


def _mk_scalar(st: Any) -> Run | None:
    e = st.eqn
    t = e.outputs[0].type
    if not isinstance(t, ScalarType) or len(st.ins) != 2:
        return None
    name = e.primitive.name
    op = _SCALAR[name]
    a, b = st.ins
    (o,) = st.outs
    rng = _int_range(t)
    wrap = t.dtype.wrap
    lo, hi = rng if rng is not None else (None, None)
    checked = name in ("floordiv", "mod")
    if checked:

        def run_div(ctx: Any, env: list[Any]) -> None:
            x, y = env[a], env[b]
            if y == 0:
                raise runtime.DeviceError(f"{e.source}: integer {name} by zero")
            v = op(x, y)
            env[o] = v if lo is None or lo <= v < hi else wrap(v)

        return run_div

    if lo is None:

        def run_float(ctx: Any, env: list[Any]) -> None:
            env[o] = op(env[a], env[b])

        return run_float

    def run(ctx: Any, env: list[Any]) -> None:
        v = op(env[a], env[b])
        env[o] = v if lo <= v < hi else wrap(v)

    return run


def _mk_compare(st: Any) -> Run | None:
    op = _CMP[st.eqn.primitive.name]
    a, b = st.ins
    (o,) = st.outs

    def run(ctx: Any, env: list[Any]) -> None:
        env[o] = op(env[a], env[b])

    return run


def _mk_convert(st: Any) -> Run | None:
    wrap = st.eqn.params["dtype"].wrap
    (a,) = st.ins
    (o,) = st.outs

    def run(ctx: Any, env: list[Any]) -> None:
        env[o] = wrap(int(env[a]))

    return run


def _mk_block_idx(st: Any) -> Run | None:
    (o,) = st.outs

    def run(ctx: Any, env: list[Any]) -> None:
        env[o] = ctx.block_idx

    return run


def _mk_block_num(st: Any) -> Run | None:
    (o,) = st.outs

    def run(ctx: Any, env: list[Any]) -> None:
        env[o] = ctx.block_num

    return run


def _mk_extract(st: Any) -> Run | None:
    e = st.eqn
    t = e.outputs[0].type
    if not isinstance(t, TileType):
        return None
    space, rows, cols, dt = _tile_geometry(t)
    vr, vc = static_valid(t)  # a decode batch's Left tile: its M valid rows (TMATMUL m, §6)
    s_src, s_r, s_c = st.ins

    geom = _geometry_of(space, rows, cols, dt)
    if st.window and geom is not None:  # only the next mad reads it: a window of the source, no bytes moved

        def window(ctx: Any, env: list[Any]) -> Any:
            src, r0, c0 = env[s_src], env[s_r], env[s_c]
            transpose = False
            while type(src) is TransposedTile:
                src, transpose, r0, c0 = src.tile, not transpose, c0, r0
            if type(src) is not TileBuf:
                raise runtime.DeviceError(f"{st.eqn.source}: TEXTRACT source is a {type(src).__name__}")
            win = textract_window(ctx.onchip, geom, src, r0, c0, transpose)
            if vr is not None:
                win.valid_row, win.valid_col = vr, vc
            return win

        return _finish(st, window)

    def body(ctx: Any, env: list[Any]) -> Any:
        src, r0, c0 = env[s_src], env[s_r], env[s_c]
        dst = ctx.onchip.alloc_tile(space, rows, cols, dt, valid_row=vr, valid_col=vc)
        transpose = False
        while type(src) is TransposedTile:  # window (r0, c0) of src^T is window (c0, r0) of src
            src, transpose, r0, c0 = src.tile, not transpose, c0, r0
        _tmov(dst, src, r0, c0, transpose=transpose)
        return dst

    return _finish(st, body)


def _mk_mad(st: Any) -> Run | None:
    t = st.eqn.outputs[0].type
    if not isinstance(t, TileType):
        return None
    space, rows, cols, dt = _tile_geometry(t)
    vr, vc = static_valid(t)  # a decode batch's Acc tile: the store writes its M valid rows
    s_l, s_r = st.ins

    def body(ctx: Any, env: list[Any]) -> Any:
        acc = ctx.onchip.alloc_tile(space, rows, cols, dt, valid_row=vr, valid_col=vc)
        _tmatmul(acc, env[s_l], env[s_r], accumulate=False)
        return acc

    return _finish(st, body)


def _mk_mad_acc(st: Any) -> Run | None:
    t = st.eqn.outputs[0].type
    if not isinstance(t, TileType):
        return None
    space, rows, cols, dt = _tile_geometry(t)
    vr, vc = static_valid(t)
    s_acc, s_l, s_r = st.ins
    in_place = 0 in st.consumed

    def body(ctx: Any, env: list[Any]) -> Any:
        acc = env[s_acc]
        if not in_place:  # the accumulator is still read later: TMATMUL_ACC on a copy
            copy = ctx.onchip.alloc_tile(space, rows, cols, dt, valid_row=vr, valid_col=vc)
            copy.data[:] = acc.data
            acc = copy
        _tmatmul(acc, env[s_l], env[s_r], accumulate=True)
        return acc

    return _finish(st, body)


def _mk_transpose_view(st: Any) -> Run | None:
    (a,) = st.ins
    (o,) = st.outs

    def run(ctx: Any, env: list[Any]) -> None:
        env[o] = TransposedTile(env[a])

    return run


def _mk_elementwise(st: Any) -> Run | None:
    e = st.eqn
    t = e.outputs[0].type
    geom = result_geometry(t)
    if geom is None or geom.layout != "ND":
        return None
    space, rows, cols, dt = geom.space, geom.rows, geom.cols, geom.dtype
    ufunc = _ELEMENTWISE[e.primitive.name]
    ins = st.ins
    try:  # the op must produce the tile dtype itself (int exp does not: the generic impl casts)
        with np.errstate(all="ignore"):
            if ufunc(*(np.ones(1, dt) for _ in ins)).dtype != dt:
                return None
    except TypeError:
        return None
    generic = _generic(st)
    shape2 = (rows, cols)
    # an input that dies here, of the result's type, lends its image to the result: the result is
    # still reserved before that input is released (same on-chip accounting), no buffer moves
    reuse = next((j for j in sorted(st.consumed) if e.inputs[j].type == t), None)
    nbytes = geom.nbytes
    (o,) = st.outs
    free = _tile_free(st)

    def result(ctx: Any, xs: list[Any]) -> Any:
        """The result tile: the dying input's (reserved before that input is released: the same
        on-chip accounting, no buffer moves), or a fresh one."""
        first, onchip = xs[0], ctx.onchip
        if reuse is not None:
            r = xs[reuse]
            if r._g is geom and r._owner is onchip:
                onchip.charge_transient(space, nbytes)  # the result's allocation, then the input's free
                r.valid_row, r.valid_col = first.valid_row, first.valid_col
                return r
        return onchip.alloc_geometry(geom, first.valid_row, first.valid_col, zero=False)  # all written

    def body(ctx: Any, env: list[Any]) -> Any:
        """The op on same-dtype ND tiles of any geometry (views of their images), else None."""
        xs = [env[i] for i in ins]
        for x in xs:
            if type(x) is not TileBuf or x.layout != "ND" or x.dtype != dt or x.freed or x._logical:
                return None
        views = [x._data.view(dt).reshape(x.rows, x.cols) for x in xs]  # before the result may alias one
        out = result(ctx, xs)
        ufunc(*views, out=out._data.view(dt).reshape(shape2))
        return out

    def same_geometry(xs: list[Any]) -> bool:
        """Every input a live, non-logical tile of the result's geometry (so ND, the result's
        dtype and shape): the op runs on the flat images, in row-major order on every side."""
        for x in xs:
            if type(x) is not TileBuf or x._g is not geom or x.freed or x._logical:
                return False
        return True

    general = _finish_or_generic(st, body, generic)

    if len(ins) == 2:  # binary: no argument lists to build and unpack
        i0, i1 = ins

        def run2(ctx: Any, env: list[Any]) -> None:
            a, b = env[i0], env[i1]
            if not (type(a) is TileBuf and type(b) is TileBuf and a._g is geom and b._g is geom
                    and not (a.freed or b.freed or a._logical or b._logical)):
                general(ctx, env)
                return
            xa, xb = a._data.view(dt), b._data.view(dt)  # viewed before the result may alias one
            onchip = ctx.onchip
            r = b if reuse == 1 else a if reuse == 0 else None
            if r is not None and r._owner is onchip:
                onchip.charge_transient(space, nbytes)  # the result's allocation, then the input's free
                r.valid_row, r.valid_col = a.valid_row, a.valid_col
                ufunc(xa, xb, out=xb if reuse == 1 else xa)
            else:
                r = onchip.alloc_geometry(geom, a.valid_row, a.valid_col, zero=False)  # all written
                ufunc(xa, xb, out=r._data.view(dt))
            env[o] = r
            if free:
                _release1(ctx, env, free, r)

        return run2

    def run(ctx: Any, env: list[Any]) -> None:
        xs = [env[i] for i in ins]
        if not same_geometry(xs):
            general(ctx, env)
            return
        views = [x._data.view(dt) for x in xs]
        r = result(ctx, xs)
        ufunc(*views, out=r._data.view(dt))
        env[o] = r
        if free:
            _release1(ctx, env, free, r)

    return run


_MAKERS: dict[Any, Callable[[Any], Run | None]] = {
    P.convert_p: _mk_convert,
    P.get_block_idx_p: _mk_block_idx,
    P.get_block_num_p: _mk_block_num,
    P.tensor_slice_p: _mk_slice,
    P.tile_load_p: _mk_load,
    P.tile_store_p: _mk_store,
    P.tile_extract_p: _mk_extract,
    P.tile_mad_p: _mk_mad,
    P.tile_mad_acc_p: _mk_mad_acc,
    P.tile_transpose_view_p: _mk_transpose_view,
}
for _p in P.SCALAR_BINARY.values():
    _MAKERS[_p] = _mk_scalar
for _p in P.COMPARE.values():
    _MAKERS[_p] = _mk_compare
for _p in P.ELEMENTWISE.values():
    _MAKERS[_p] = _mk_elementwise


def make_step(st: Any) -> Run:
    """The run closure of plan step `st` (specialised when a maker applies, else generic)."""
    from . import executor

    maker = _MAKERS.get(st.eqn.primitive) if executor.FAST else None
    # a specialised closure implements the generic impl's semantics: only for the default impl
    if maker is not None and st.fn is _DEFAULT_IMPLS.get(st.eqn.primitive):
        run = maker(st)
        if run is not None:
            return run
    return _generic(st)


def _default_impls() -> dict[Any, Any]:
    from .impl import impl_rules

    return dict(impl_rules)


_DEFAULT_IMPLS = _default_impls()
