"""Rules of the memory family: TLOAD (`tile.load`) and TSTORE (`tile.store`) between GM and tiles.

The specialised steps decode their instruction once per geometry (runtime `load_plan` /
`store_plan`) and then only replay it: a trip that repeats the previous trip's window geometry,
or a fresh tensor of the same layout, re-checks just its offsets (`replay.window_bytes`) before
the replay, and anything unusual (out of bounds, negative, a different layout) takes the generic
step, which refuses or warns exactly as the instruction model does. The batched forms load every
lane's window at once (a tile loaded by one burst copy stays a read-only view of GM) and defer
the stores until every lane group ran (batched.py applies them).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from typing import Any

import numpy as np

import runtime
from runtime import GmView, TileBuf
from runtime.load import load_plan
from runtime.store import store_plan

from ... import prims as P
from ...core.ir import Eqn
from ...core.types import Mem, TileType
from ...passes.auto_tile_matmul import padded_mat_tile
from ...passes.batch_matmul_unroll import batched_mat
from ...passes.block_nz_store import ACC_COL_ALIGN, MAX_STORE_COLS
from .. import lane_gm, lane_log
from ..lane_state import Fallback, LaneState, addresses, distinct, lanes_of, replays, uniform, view_span
from ..lane_values import LaneAcc, LaneTensor, LaneTile
from ..nz_partition import nz_store_partition
from ..replay import element_offset, offsets_getter, same_layout, window_bytes
from ..rule import Run, Step, rule
from ..steps import (
    alloc,
    check_window,
    clamp,
    gm_view,
    operand_groups,
    release1,
    result_geometry,
    split,
    tile_free,
)
from ..values import HostValue, TensorVal

#: The widest Acc -> NZ store one TStoreAccNz2nz makes: the pass's 12-bit column field in whole
#: 16-column blocks (4080). Wider un-tiled reference tiles of the stages before AutoTileMatmulL0
#: are stored in column chunks of this width, as the pass would split them (NZ-22).
STORE_COLS = MAX_STORE_COLS // ACC_COL_ALIGN * ACC_COL_ALIGN


# ------------------------------------------------------------------------------------- load
def _mat_tile_of(t: TileType, src: TensorVal) -> TileType:
    """Before AutoTileMatmulL0 pads it, a decode batch's ND -> NZ Mat tile is typed M x K: it runs
    on the padded tile the pass gives it (`padded_mat_tile`), so every stage computes the same rows."""
    if t.memory is not Mem.Mat or src.nz is not None or src.layout == "NZ":
        return t
    rows, cols = t.shape if len(t.shape) == 2 else (int(np.prod(t.shape[:-1])), t.shape[-1])
    return t if rows % 16 == 0 else padded_mat_tile(TileType((rows, cols), t.dtype, t.memory))


def _pad(a: np.ndarray, tile: TileBuf) -> np.ndarray:
    if a.shape == (tile.rows, tile.cols):
        return a
    out = np.zeros((tile.rows, tile.cols), a.dtype)
    out[: a.shape[0], : a.shape[1]] = a
    return out


def _load(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    src: TensorVal = ins[0]
    offs = clamp(ctx, e, split(e, ins, "offsets"))
    valid = [int(v) for v in split(e, ins, "valid")]
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
    tile = alloc(ctx, _mat_tile_of(out_t, src), (vr, sizes[-1]))
    if src.nz is not None or batched_mat(out_t):  # reference path: the logical window, before
        # blocking (NZ) or before FlattenTileNdTo2D loads a batched matmul's operand per batch
        tile.set_logical(_pad(src.read(ctx.gm, offs, sizes).reshape(vr, sizes[-1]), tile))
        return [tile]
    runtime.isa.tload(ctx.gm, src.gm_view(offs, sizes), tile)
    return [tile]


def _specialize_load(st: Step) -> Run | None:
    e = st.eqn
    geom = result_geometry(e.outputs[0].type)
    if geom is None or batched_mat(e.outputs[0].type):  # a reference load (`_load`)
        return None
    g = operand_groups(e, st.ins)
    (s_src,) = g["src"]
    offs_slots, valid_slots = g["offsets"], g["valid"]
    shape = tuple(e.params["shape"])
    blocked = bool(e.params.get("blocked"))
    generic = st.generic
    getter = operator.itemgetter(*offs_slots) if len(offs_slots) > 1 else None
    offsets = offsets_getter(offs_slots)
    (o,) = st.outs
    free = tile_free(st)

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
        delta = element_offset(ctx, e, offs, src.strides)
        if static_sizes is not None:
            sizes, (vr, vc) = static_sizes, static_ext  # type: ignore[misc]
        else:
            sizes = tuple(int(env[i]) for i in valid_slots)
            vr, vc = extents(sizes)
        check_window(e, src.shape, offs, sizes)
        m_src, m_sizes, plan = memo
        if m_sizes == sizes and (
            m_src is src
            or (  # same view geometry as the previous trip / call
                m_src is not None
                and m_src.strides == src.strides
                and m_src.dtype == src.dtype
                and m_src.layout == src.layout
                and type(src) is type(m_src)
            )
        ):
            tile = ctx.onchip.alloc_geometry(geom, vr, vc, zero=not plan.fills(geom.nbytes))
            plan.run(ctx.gm, src.addr + delta * src.dtype.itemsize, tile)
        else:
            tile = ctx.onchip.alloc_geometry(geom, vr, vc)
            view = gm_view(src, offs, sizes)
            plan = load_plan(ctx.gm, view, tile)
            memo = (src, sizes, plan)
            plan.run(ctx.gm, view.addr, tile)
        if static_sizes is not None and len(offs) == len(shape) == len(src.shape) == len(src.strides):
            fills = plan.fills(geom.nbytes)
            # one dense copy onto the whole image of a fresh tile: its bounds are proven, only
            # the GM side is checked
            block = plan.dense[1:3] if fills and plan.dense is not None else None
            hot = (
                src,
                plan.replay,
                not fills,
                vr,
                vc,
                window_bytes(src.strides, shape, src.shape, src.dtype.itemsize),
                block,
            )
        return tile

    def run(ctx: Any, env: list[Any]) -> None:
        nonlocal hot
        src = env[s_src]
        h_src, replay, zero, vr, vc, win_bytes, block = hot
        delta = None
        if src is not h_src and same_layout(src, h_src):
            h_src = src  # the next trips of this call match by identity (built from the locals:
            hot = (src, replay, zero, vr, vc, win_bytes, block)  # one consistent tuple per thread)
        if src is h_src:  # static window, a source laid out as last time: offsets and bounds only
            delta = win_bytes(offsets(env))
        if delta is None:
            tile = body(ctx, env)
            if tile is None:
                generic(ctx, env)
                return
        elif block is not None:
            tile = ctx.onchip.alloc_geometry(geom, vr, vc, False)
            addr = src.addr + delta
            tile.image[...] = ctx.gm.span(addr + block[0], addr + block[1])
        else:
            tile = ctx.onchip.alloc_geometry(geom, vr, vc, zero)
            replay(ctx.gm, src.addr + delta, tile)
        env[o] = tile
        if free:
            release1(ctx, env, free, tile)

    return run


def _batch_load(st: Step) -> Any:
    e = st.eqn
    geom = result_geometry(e.outputs[0].type)
    if geom is None or batched_mat(e.outputs[0].type):  # a reference load (`_load`)
        return None
    g = operand_groups(e, st.ins)
    (s_src,) = g["src"]
    offs, valid = g["offsets"], g["valid"]
    shape = tuple(e.params["shape"])
    blocked = bool(e.params.get("blocked"))
    (o,) = st.outs
    wins = lane_log.window_of(e)  # None: proven race-free (or outside a launch), never noted
    # (source dtype, strides, layout, window sizes) -> (the decoded TLOAD, the bytes it reads
    # relative to the window's address): the plan depends on these only (`load_plan`)
    memo: dict[tuple[Any, ...], tuple[Any, tuple[int, int]]] = {}

    def run(s: LaneState, env: list[Any]) -> None:
        src = env[s_src]
        if type(src) not in (TensorVal, LaneTensor) or src.nz is not None:
            raise Fallback("tensor value")
        sizes = tuple(uniform(env[i]) for i in valid) if valid else shape
        if blocked:
            vr, vc = sizes[2] * sizes[3], sizes[1] * sizes[4]
        else:
            vr = math.prod(sizes[:-1])
            vc = sizes[-1]
        if len(sizes) > 5:
            raise Fallback("rank > 5 window")
        addr = lanes_of(addresses(src, [env[i] for i in offs], s.L, sizes), s.L)
        if wins is not None and not s.spmd and s.ctx.lane_log is not None:  # trips of one logged lane
            lane_log.note(s, "read", wins, src, [env[i] for i in offs], sizes, addr)
        uniq, row = distinct(addr)
        s.reserve(geom)
        key = (src.dtype, src.strides, src.layout, sizes)
        decoded = memo.get(key)
        if decoded is None:  # the decoded TLOAD and the bytes it reads, once per source geometry
            probe = TileBuf.from_geometry(geom, vr, vc, s.scratch((geom.nbytes,), np.uint8, "probe"))
            view0 = GmView.trusted(int(uniq[0]), src.dtype, sizes, src.strides, src.layout)
            decoded = (load_plan(s.ctx.gm, view0, probe), view_span(view0))
            if len(memo) < 64:
                memo[key] = decoded
        plan, (lo, hi) = decoded
        if plan.warns:
            raise Fallback("the load warns")
        gm = s.ctx.gm
        lazy = lane_gm.gm_images(plan, gm, uniq, geom)

        def fill() -> np.ndarray:  # the load's copy, done when the bytes themselves are needed
            zero = lazy is None and not plan.fills(geom.nbytes)
            # a partial valid region: only the bytes the copy leaves are a fresh tile's zeros
            gaps = lane_gm.unwritten(plan, geom.nbytes) if zero else None
            data = s.zeros(len(uniq), geom.nbytes, zero=zero and gaps is None)
            if gaps:
                s.do(lane_gm.zero_gaps, data, gaps)
            if lazy is not None:
                images = data.view(geom.dtype).reshape(len(uniq), *geom.phys)
                for u0, v in lazy:
                    s.do(np.copyto, images[u0 : u0 + len(v)], v)
            elif not lane_gm.lane_copy(plan, gm, uniq, data, True, assign=s.do):
                for u, a in enumerate(uniq.tolist()):
                    s.do(_load_image, plan, gm, a, geom, vr, vc, data[u])
            return data

        row = row if row.ndim == 1 else row.reshape(-1)  # an identity map stays the shared `iota`
        tile = LaneTile(geom, vr, vc, None if lazy is not None else fill(), row, lazy, fill)
        s.loaded.append((uniq, lo, hi))  # checked against every store before any is applied
        env[o] = tile

    return replays(run)


def _load_image(plan: Any, gm: Any, addr: int, geom: Any, vr: int, vc: int, image: np.ndarray) -> None:
    """The decoded TLOAD `plan` of one lane at GM `addr` into `image` (a fresh tile over it)."""
    plan.run(gm, addr, TileBuf.from_geometry(geom, vr, vc, image))


rule(P.tile_load_p, specialize=_specialize_load, batch=_batch_load)(_load)


# ------------------------------------------------------------------------------------ store
def _store(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    tile, dst = ins[0], ins[-1]
    offs = clamp(ctx, e, split(e, ins, "offsets"))
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
            raise runtime.DeviceError(
                f"{e.source}: a tile of {tile.valid_row} rows cannot be stored into "
                f"the rank-1 tensor of shape {dst.shape}"
            )
        sizes = ((1,) * (len(dst.shape) - 2) + (tile.valid_row, tile.valid_col))[-len(dst.shape) :]
        check_window(e, dst.shape, offs, sizes)
        runtime.isa.tstore(
            ctx.gm,
            dst.gm_view(offs, sizes),
            tile,
            atomic_add=bool(attrs.get("atomic")),
            relu=bool(attrs.get("pre_relu")),
        )
        return [dst]
    # NZ-20: an Acc tile into the blocked rank-5 NZ view through TStoreAccNz2nz (runtime
    # nz_store_acc), with the explicit partition [1, n/8, M/16, 16, 8]: the device derives its
    # column-block pitch from that partition, so a wrong partition mis-writes as on hardware.
    part = nz_store_partition(e, part, tile.valid_col)
    g0, g1, g2, g3, g4 = part
    check_window(e, dst.shape, offs, part)
    if dst.layout != "NZ" or len(dst.shape) != 5 or tile.space != "Acc":
        raise runtime.DeviceError(
            f"{e.source}: an nz_partition store needs an Acc tile and a blocked "
            f"rank-5 NZ view, got a {tile.space} tile into {dst.layout} {dst.shape}"
        )
    step = STORE_COLS // g4 * g4
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


def _specialize_store(st: Step) -> Run | None:
    """The plain TSTORE of a tile into an ND / blocked view (no NZ partition): the generic
    impl's default branch; anything else (reference values, partitions) goes through it."""
    e = st.eqn
    if e.params.get("nz_partition") is not None:
        return None
    g = operand_groups(e, st.ins)
    (s_tile,), offs_slots, (s_dst,) = g["tile"], g["offsets"], g["dst"]
    attrs = e.params.get("attrs", {})
    flags = dict(atomic_add=bool(attrs.get("atomic")), relu=bool(attrs.get("pre_relu")))
    generic = st.generic
    memo: tuple[Any, ...] = (None, None, None, None, None)  # (dst, geometry, valid row, col, plan)
    # the last store's (dst, tile geometry, valid rows, cols, offsets -> checked byte offset,
    # replay function)
    hot: tuple[Any, ...] = (None,) * 6
    offsets = offsets_getter(offs_slots)
    (o,) = st.outs
    free = tile_free(st)

    def slow(ctx: Any, env: list[Any], tile: Any, dst: Any) -> None:  # refreshes `hot`
        nonlocal memo, hot
        offs = tuple(env[i] for i in offs_slots)
        delta = element_offset(ctx, e, offs, dst.strides)
        tile.check_live()
        sizes = ((1,) * (len(dst.shape) - 2) + (tile.valid_row, tile.valid_col))[-len(dst.shape) :]
        check_window(e, dst.shape, offs, sizes)
        m_dst, m_g, m_vr, m_vc, plan = memo
        tg = tile.geometry
        if (
            m_g is tg
            and m_vr == tile.valid_row
            and m_vc == tile.valid_col
            and (
                m_dst is dst
                or (
                    m_dst is not None
                    and m_dst.strides == dst.strides
                    and m_dst.dtype == dst.dtype
                    and m_dst.layout == dst.layout
                    and m_dst.shape == dst.shape
                )
            )
        ):
            plan.run(ctx.gm, dst.addr + delta * dst.dtype.itemsize, tile)
        else:
            view = gm_view(dst, offs, sizes)
            plan = store_plan(ctx.gm, view, tile, **flags)
            memo = (dst, tg, tile.valid_row, tile.valid_col, plan)
            plan.run(ctx.gm, view.addr, tile)
        if len(offs) == len(sizes) == len(dst.strides):
            hot = (
                dst,
                tg,
                tile.valid_row,
                tile.valid_col,
                window_bytes(dst.strides, sizes, dst.shape, dst.dtype.itemsize),
                plan.replay,
            )

    def run(ctx: Any, env: list[Any]) -> None:
        nonlocal hot
        tile, dst = env[s_tile], env[s_dst]
        if type(tile) is not TileBuf or type(dst) is not TensorVal or dst.nz is not None:
            generic(ctx, env)
            return
        h_dst, h_g, h_vr, h_vc, win_bytes, replay = hot
        delta = None
        if dst is not h_dst and same_layout(dst, h_dst):
            h_dst = dst  # the next trips of this call match by identity (built from the locals:
            hot = (dst, h_g, h_vr, h_vc, win_bytes, replay)  # one consistent tuple per thread)
        if (
            dst is h_dst
            and tile.geometry is h_g
            and tile.valid_row == h_vr
            and tile.valid_col == h_vc
            and not tile.freed
        ):  # the last store's geometry: offsets and bounds only
            delta = win_bytes(offsets(env))
        if delta is None:
            slow(ctx, env, tile, dst)
        else:
            replay(ctx.gm, dst.addr + delta, tile)
        env[o] = dst
        if free:
            release1(ctx, env, free, dst)

    return run


def _batch_store(st: Step) -> Any:
    # NZ-20: an Acc tile into the blocked rank-5 NZ view, with its explicit partition; a store that
    # would mis-write (TStoreAccNz2nz ignores the view's strides, hw §4.3) warns, and falls back
    e = st.eqn
    part = e.params.get("nz_partition")
    groups = operand_groups(e, st.ins)
    (s_tile,), offs, (s_dst,) = groups["tile"], groups["offsets"], groups["dst"]
    attrs = e.params.get("attrs", {})
    flags = dict(atomic_add=bool(attrs.get("atomic")), relu=bool(attrs.get("pre_relu")))
    (o,) = st.outs
    wins = lane_log.window_of(e)  # None: proven race-free (or outside a launch), never noted
    kind = "atomic" if flags["atomic_add"] else "write"

    def run(s: LaneState, env: list[Any]) -> None:
        tile, dst = env[s_tile], env[s_dst]
        if type(dst) not in (TensorVal, LaneTensor) or dst.nz is not None:
            raise Fallback("store target")
        if type(tile) is LaneAcc and not tile.freed:
            vr, vc = tile.valid_row, tile.valid_col
            s.pinned.add(id(tile.data))  # stored at the end: later mads must not update it in place
            get: Callable[[int], TileBuf] = (lambda acc: lambda lane: acc.lane_tile(lane))(tile)
            get.sums = tile.data  # type: ignore[attr-defined]
        elif type(tile) is LaneTile and not tile.freed:
            vr, vc = tile.valid_row, tile.valid_col
            s.pinned.add(id(tile.data))
            get = (lambda lt: lambda lane: lt.image(int(lt.row[lane])))(tile)
            get.images = (tile.data, tile.row)  # type: ignore[attr-defined]
        else:
            raise Fallback("stored value")
        if len(dst.shape) > 5:
            raise Fallback("rank > 5 store")
        if part is None:
            sizes = (1,) * (len(dst.shape) - 2) + (vr, vc)
        elif (
            type(tile) is LaneAcc
            and dst.layout == "NZ"
            and len(dst.shape) == 5
            and vc <= STORE_COLS // part[4] * part[4]
        ):  # wider tiles are stored in column chunks
            sizes = nz_store_partition(e, part, vc)
        else:
            raise Fallback("NZ partition store")
        addr = lanes_of(addresses(dst, [env[i] for i in offs], s.L, sizes[-len(dst.shape) :]), s.L)
        view0 = GmView.trusted(int(addr[0]), dst.dtype, sizes, dst.strides, dst.layout)
        probe = get(0)
        plan = store_plan(s.ctx.gm, view0, probe, **flags)
        if plan.warns:
            raise Fallback("the store warns")
        lo, hi = view_span(view0)
        s.stored.append((addr, lo, hi))
        # stop early when this group's own loads meet the store (the run would not be exact); the
        # loads of every group are checked against every store once, before any is applied
        if lane_gm.overlap(s.loaded[s.group_loads :], s.stored[-1:]):
            raise Fallback("a lane loads bytes that the body stores")
        s.stores.append((plan, addr, get))
        if wins is not None and s.ctx.lane_log is not None:
            lane_log.note(s, kind, wins, dst, [env[i] for i in offs], sizes[-len(dst.shape) :], addr)
        env[o] = dst

    return replays(run)  # deferred: the commit (batched.commit) writes GM, on a replay too


rule(P.tile_store_p, specialize=_specialize_store, batch=_batch_store)(_store)
