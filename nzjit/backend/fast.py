"""Step closures of execution plans: each equation's impl, pre-bound to its static parameters.

`make_step(step)` returns `run(ctx, env)`, which reads the equation's inputs from the slot list
`env`, computes, stores its results and frees the values whose last use it is. Hot primitives
(scalars, slices, loads, extracts, mad, elementwise) get a specialised closure: operand groups,
output tile geometry, literal operands and liveness are resolved once when the plan is built,
so a run is a handful of Python operations plus the instruction itself. Everything else, and
every unusual run-time case of a specialised one, goes through the generic `impl_rules` entry
with the same semantics.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import numpy as np

import runtime
from runtime import GmView, TileBuf
from runtime.cube import TileWindow, textract_window

from ..core import primitives as P
from ..core.types import DynDim, ScalarType, TensorType, TileType
from .impl import _CMP, _ELEMENTWISE, _SCALAR, check_window, clamp, static_valid
from .values import TensorVal, TransposedTile

Run = Callable[[Any, list[Any]], None]
_tload, _tmov, _tmatmul = runtime.isa.tload, runtime.isa.tmov, runtime.isa.tmatmul
_load_plan, _store_plan = runtime.load.load_plan, runtime.store.store_plan
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
    generic implementation runs instead (it stores the output and frees by itself)."""
    (o,) = st.outs
    free = st.free

    def run(ctx: Any, env: list[Any]) -> None:
        r = body(ctx, env)
        if r is None:
            generic(ctx, env)
            return
        env[o] = r
        if free:
            _release(ctx, env, free, (r,))

    return run


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


# ---------------------------------------------------------------------------------- operands
def _groups(st: Any) -> dict[str, tuple[int, ...]]:
    """Operand group name -> its input slots."""
    e = st.eqn
    out, start = {}, 0
    for name, n in zip(e.primitive.groups, e.params["arity"]):
        out[name] = st.ins[start : start + n]
        start += n
    return out


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


# --------------------------------------------------------------------------------- tensor level
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
        delta = 0
        for o, s in zip(offs, src.strides):
            if o < 0:
                clamp(ctx, e, list(offs))
            delta += o * s
        check_window(e, src.shape, offs, window)
        strides = tuple(s for i, s in enumerate(src.strides) if i not in drop)
        if len(strides) != len(shape):  # a blocked NZ slice: same rank-5 geometry, narrower batch
            strides = src.strides
        return TensorVal(src.addr + delta * src.dtype.itemsize, src.dtype, shape, strides, src.layout)

    return _finish_or_generic(st, body, generic)


# ----------------------------------------------------------------------------------- tile level
def _tile_geometry(t: TileType) -> tuple[str, int, int, np.dtype]:
    rows, cols = (t.shape if len(t.shape) == 2 else (int(np.prod(t.shape[:-1])), t.shape[-1]))
    return t.memory.value, int(rows), int(cols), t.dtype.np_dtype


def _geometry_of(space: str, rows: int, cols: int, dt: np.dtype) -> Any:
    try:
        return _tile_geometry_cached(space, dt, rows, cols, None)
    except runtime.DeviceError:
        return None  # refused at run time by alloc_tile, with its message


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
    out_t = e.outputs[0].type
    if not isinstance(out_t, TileType):
        return None
    space, rows, cols, dt = _tile_geometry(out_t)
    geom = _geometry_of(space, rows, cols, dt)
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
        delta = 0
        for x, s in zip(offs, src.strides):
            if x < 0:
                clamp(ctx, e, list(offs))
            delta += x * s
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
        delta = 0
        for x, s in zip(offs, dst.strides):
            if x < 0:
                clamp(ctx, e, list(offs))
            delta += x * s
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
    if not isinstance(t, TileType):
        return None
    space, rows, cols, dt = _tile_geometry(t)
    geom = _geometry_of(space, rows, cols, dt)
    if geom is None or geom.layout != "ND":
        return None
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

    def general(ctx: Any, env: list[Any]) -> None:
        r = body(ctx, env)
        if r is None:
            generic(ctx, env)
            return
        env[o] = r
        if free:
            _release1(ctx, env, free, r)

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
