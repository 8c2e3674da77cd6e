"""Specialised steps that move data between GM and tiles: tensor slices, TLOAD and TSTORE.

A load or store decodes its instruction once per geometry (runtime's `load_plan` / `store_plan`)
and then only replays it: a trip that repeats the previous trip's window geometry, or a fresh
tensor of the same layout, re-checks just its offsets (`_window_bytes`) before the replay, and
anything unusual (out of bounds, negative, a different layout) takes the generic path, which
refuses or warns exactly as the instruction model does.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import runtime
from runtime import TileBuf

from ..core.types import TensorType
from .fast_core import (
    Run,
    _finish_or_generic,
    _generic,
    _gm_view,
    _groups,
    _release1,
    _static_shape,
    _tile_free,
    result_geometry,
)
from .impl import check_window, clamp
from .values import TensorVal

_load_plan, _store_plan = runtime.load.load_plan, runtime.store.store_plan

# --------------------------------------------------------------------------------- tensor level
def _element_offset(ctx: Any, e: Any, offs: tuple[Any, ...], strides: tuple[int, ...]) -> int:
    """sum(offset * stride) of a partition; a negative offset is refused as `clamp` refuses it."""
    delta = 0
    for x, s in zip(offs, strides):
        if x < 0:
            clamp(ctx, e, list(offs))
        delta += x * s
    return delta


def _mk_slice(st: Any) -> Run | None:
    e = st.eqn
    out_t = e.outputs[0].type
    shape = _static_shape(out_t.shape) if isinstance(out_t, TensorType) else None
    if shape is None:
        return None
    g = _groups(st)
    (s_src,) = g["src"]
    offs_slots = g["offsets"]
    drop = e.params["drop"]
    window = tuple(e.params["shape"])
    generic = _generic(st)
    getter = operator.itemgetter(*offs_slots) if len(offs_slots) > 1 else None

    def body(ctx: Any, env: list[Any]) -> Any:
        src = env[s_src]
        if src.nz is not None:
            return None
        offs = getter(env) if getter is not None else tuple(env[i] for i in offs_slots)
        delta = _element_offset(ctx, e, offs, src.strides)
        check_window(e, src.shape, offs, window)
        strides = tuple(s for i, s in enumerate(src.strides) if i not in drop)
        if len(strides) != len(shape):  # a blocked NZ slice: same rank-5 geometry, narrower batch
            strides = src.strides
        return TensorVal(src.addr + delta * src.dtype.itemsize, src.dtype, shape, strides, src.layout)

    return _finish_or_generic(st, body, generic)


# ----------------------------------------------------------------------------------- tile level
def _offsets_getter(slots: tuple[int, ...]) -> Callable[[list[Any]], tuple[Any, ...]]:
    """`env -> tuple(env[i] for i in slots)`, as one C call when there are several."""
    if len(slots) > 1:
        return operator.itemgetter(*slots)
    if len(slots) == 1:
        (i,) = slots
        return lambda env: (env[i],)
    return lambda env: ()


def _window_bytes(strides: tuple[int, ...], sizes: tuple[int, ...], shape: tuple[int, ...],
                  itemsize: int) -> Callable[[Any], int | None]:
    """`offsets -> byte offset` of a window of extents `sizes` in a view of `shape` / element
    `strides`, or None when an offset is negative or the window leaves the view (the caller then
    raises what `clamp` / `check_window` raise). Fixed per view geometry: one specialised check."""
    limits = tuple(d - n for d, n in zip(shape, sizes))  # x + n <= d  <=>  x <= d - n
    steps = tuple(st * itemsize for st in strides)
    if len(steps) == 2:
        (b0, b1), (l0, l1) = steps, limits

        def rank2(offs: Any) -> int | None:
            x0, x1 = offs
            if 0 <= x0 <= l0 and 0 <= x1 <= l1:
                return x0 * b0 + x1 * b1
            return None

        return rank2

    def any_rank(offs: Any) -> int | None:
        delta = 0
        for x, b, lim in zip(offs, steps, limits):
            if not 0 <= x <= lim:
                return None
            delta += x * b
        return delta

    return any_rank


def _same_layout(v: Any, h: Any) -> bool:
    """`v` is a TensorVal laid out as `h` (None: nothing remembered yet): the same shape, strides,
    dtype, layout and NZ facts, only the base address may differ. The decoded instruction and the
    window check remembered for `h` then hold for `v` at `v.addr`: neither depends on the address
    (an InstrPlan is decoded at address 0, the window check on shape and strides), and GM bounds
    are checked against the allocation at the new address when the bytes move. This is what keeps
    the fast path for a fresh tensor of an earlier call's layout (the device never reuses an
    address, so every call with a host array gets new TensorVals)."""
    return (type(v) is TensorVal and h is not None and v.shape == h.shape and v.strides == h.strides
            and v.layout == h.layout and (v.nz is h.nz or v.nz == h.nz)
            and (v.dtype is h.dtype or v.dtype == h.dtype))


def _mk_load(st: Any) -> Run | None:
    e = st.eqn
    geom = result_geometry(e.outputs[0].type)
    if geom is None:
        return None
    g = _groups(st)
    (s_src,) = g["src"]
    offs_slots, valid_slots = g["offsets"], g["valid"]
    shape = tuple(e.params["shape"])
    blocked = bool(e.params.get("blocked"))
    generic = _generic(st)
    getter = operator.itemgetter(*offs_slots) if len(offs_slots) > 1 else None
    offsets = _offsets_getter(offs_slots)
    (o,) = st.outs
    free = _tile_free(st)

    def extents(sizes: tuple[int, ...]) -> tuple[int, int]:
        if blocked:  # NZ -> NZ: the partition is the valid window when given (NZ-26)
            return sizes[2] * sizes[3], sizes[1] * sizes[4]
        vr = 1
        for d in sizes[:-1]:
            vr *= d
        return (vr if len(sizes) > 1 else 1), sizes[-1]

    static_sizes = None if valid_slots else shape
    static_ext = extents(shape) if static_sizes is not None else None
    # the decoded TLOAD of the last source view: (source TensorVal, sizes, InstrPlan)
    memo: tuple[Any, ...] = (None, None, None)
    # the same trip after trip (the source and window extents unchanged): (source, the replay
    # function, zero the tile first?, valid rows, valid cols, offsets -> checked byte offset,
    # the GM bytes of a whole-image dense copy)
    hot: tuple[Any, ...] = (None,) * 7

    def body(ctx: Any, env: list[Any]) -> Any:  # the general case; refreshes `hot`
        nonlocal memo, hot
        src = env[s_src]
        if type(src) is not TensorVal or src.nz is not None:
            return None
        offs = getter(env) if getter is not None else tuple(env[i] for i in offs_slots)
        delta = _element_offset(ctx, e, offs, src.strides)
        if static_sizes is not None:
            sizes, (vr, vc) = static_sizes, static_ext  # type: ignore[misc]
        else:
            sizes = tuple(int(env[i]) for i in valid_slots)
            vr, vc = extents(sizes)
        check_window(e, src.shape, offs, sizes)
        m_src, m_sizes, plan = memo
        if m_sizes == sizes and (m_src is src or (  # same view geometry as the previous trip / call
                m_src is not None and m_src.strides == src.strides and m_src.dtype == src.dtype
                and m_src.layout == src.layout and type(src) is type(m_src))):
            tile = ctx.onchip.alloc_geometry(geom, vr, vc, zero=not plan.fills(geom.nbytes))
            plan.run(ctx.gm, src.addr + delta * src.dtype.itemsize, tile)
        else:
            tile = ctx.onchip.alloc_geometry(geom, vr, vc)
            view = _gm_view(src, offs, sizes)
            plan = _load_plan(ctx.gm, view, tile)
            memo = (src, sizes, plan)
            plan.run(ctx.gm, view.addr, tile)
        if static_sizes is not None and len(offs) == len(shape) == len(src.shape) == len(src.strides):
            fills = plan.fills(geom.nbytes)
            # one dense copy onto the whole image of a fresh tile: its bounds are proven, only
            # the GM side is checked
            block = plan.dense[1:3] if fills and plan.dense is not None else None
            hot = (src, plan.replay, not fills, vr, vc,
                   _window_bytes(src.strides, shape, src.shape, src.dtype.itemsize), block)
        return tile

    def run(ctx: Any, env: list[Any]) -> None:
        nonlocal hot
        src = env[s_src]
        h_src, replay, zero, vr, vc, window_bytes, block = hot
        delta = None
        if src is not h_src and _same_layout(src, h_src):
            h_src = src  # the next trips of this call match by identity (built from the locals:
            hot = (src, replay, zero, vr, vc, window_bytes, block)  # one consistent tuple per thread)
        if src is h_src:  # static window, a source laid out as last time: offsets and bounds only
            delta = window_bytes(offsets(env))
        if delta is None:
            tile = body(ctx, env)
            if tile is None:
                generic(ctx, env)
                return
        elif block is not None:
            tile = ctx.onchip.alloc_geometry(geom, vr, vc, False)
            addr = src.addr + delta
            tile._data[...] = ctx.gm.span(addr + block[0], addr + block[1])
        else:
            tile = ctx.onchip.alloc_geometry(geom, vr, vc, zero)
            replay(ctx.gm, src.addr + delta, tile)
        env[o] = tile
        if free:
            _release1(ctx, env, free, tile)

    return run


def _mk_store(st: Any) -> Run | None:
    """The plain TSTORE of a tile into an ND / blocked view (no NZ partition): the generic
    impl's default branch; anything else (reference values, partitions) goes through it."""
    e = st.eqn
    if e.params.get("nz_partition") is not None:
        return None
    g = _groups(st)
    (s_tile,), offs_slots, (s_dst,) = g["tile"], g["offsets"], g["dst"]
    attrs = e.params.get("attrs", {})
    flags = dict(atomic_add=bool(attrs.get("atomic")), relu=bool(attrs.get("pre_relu")))
    generic = _generic(st)
    memo: tuple[Any, ...] = (None, None, None, None, None)  # (dst, geometry, valid row, col, plan)
    # the last store's (dst, tile geometry, valid rows, cols, offsets -> checked byte offset,
    # replay function)
    hot: tuple[Any, ...] = (None,) * 6
    offsets = _offsets_getter(offs_slots)
    (o,) = st.outs
    free = _tile_free(st)

    def slow(ctx: Any, env: list[Any], tile: Any, dst: Any) -> None:  # refreshes `hot`
        nonlocal memo, hot
        offs = tuple(env[i] for i in offs_slots)
        delta = _element_offset(ctx, e, offs, dst.strides)
        tile._live()
        sizes = ((1,) * (len(dst.shape) - 2) + (tile.valid_row, tile.valid_col))[-len(dst.shape):]
        check_window(e, dst.shape, offs, sizes)
        m_dst, m_g, m_vr, m_vc, plan = memo
        if m_g is tile._g and m_vr == tile.valid_row and m_vc == tile.valid_col and (m_dst is dst or (
                m_dst is not None and m_dst.strides == dst.strides and m_dst.dtype == dst.dtype
                and m_dst.layout == dst.layout and m_dst.shape == dst.shape)):
            plan.run(ctx.gm, dst.addr + delta * dst.dtype.itemsize, tile)
        else:
            view = _gm_view(dst, offs, sizes)
            plan = _store_plan(ctx.gm, view, tile, **flags)
            memo = (dst, tile._g, tile.valid_row, tile.valid_col, plan)
            plan.run(ctx.gm, view.addr, tile)
        if len(offs) == len(sizes) == len(dst.strides):
            hot = (dst, tile._g, tile.valid_row, tile.valid_col,
                   _window_bytes(dst.strides, sizes, dst.shape, dst.dtype.itemsize), plan.replay)

    def run(ctx: Any, env: list[Any]) -> None:
        nonlocal hot
        tile, dst = env[s_tile], env[s_dst]
        if type(tile) is not TileBuf or type(dst) is not TensorVal or dst.nz is not None:
            generic(ctx, env)
            return
        h_dst, h_g, h_vr, h_vc, window_bytes, replay = hot
        delta = None
        if dst is not h_dst and _same_layout(dst, h_dst):
            h_dst = dst  # the next trips of this call match by identity (built from the locals:
            hot = (dst, h_g, h_vr, h_vc, window_bytes, replay)  # one consistent tuple per thread)
        if dst is h_dst and tile._g is h_g and tile.valid_row == h_vr and tile.valid_col == h_vc \
                and not tile.freed:  # the last store's geometry: offsets and bounds only
            delta = window_bytes(offsets(env))
        if delta is None:
            slow(ctx, env, tile, dst)
        else:
            replay(ctx.gm, dst.addr + delta, tile)
        env[o] = dst
        if free:
            _release1(ctx, env, free, dst)

    return run


