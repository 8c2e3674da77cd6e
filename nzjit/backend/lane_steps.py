"""The lane-batched form of each primitive (see batched.py): one step builder per primitive, in
`STEP_RULES`. A builder returns None when the equation has no batched form (the body then runs
lane by lane); a step raises `Fallback` when this run cannot be exact."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

import runtime
from runtime import GmView, TileBuf

from .. import prims as P
from ..core import dtypes as D
from ..core.ir import Eqn
from ..core.types import ScalarType, TensorType, TileType
from . import lane_gm
from .fast_core import _static_shape, operand_groups, result_geometry
from .lane_cube import extract_step, mad_step
from .lane_state import Fallback, LaneState, Step, addresses, distinct, lanes_of, uniform, view_span
from .lane_values import LaneAcc, LaneTensor, LaneTile
from .values import TensorVal, TransposedTile


def _scalar_step(e: Eqn, ins: tuple[int, ...], outs: tuple[int, ...]) -> Step | None:
    t = e.outputs[0].type
    if not isinstance(t, ScalarType) or t.dtype not in (D.INDEX, D.INT64):
        return None  # numpy int64 arithmetic wraps like a 64-bit scalar, nothing narrower
    name = e.primitive.name
    a, b = ins
    (o,) = outs
    wrap = t.dtype.wrap
    ops: dict[str, Callable[[Any, Any], Any]] = {
        "add": lambda x, y: x + y, "sub": lambda x, y: x - y, "mul": lambda x, y: x * y,
        "floordiv": lambda x, y: x // y, "mod": lambda x, y: x % y, "min": np.minimum, "max": np.maximum,
    }
    op = ops.get(name)
    if op is None:
        return None
    checked = name in ("floordiv", "mod")

    def run(s: LaneState, env: list[Any]) -> None:
        x, y = env[a], env[b]
        if not isinstance(x, np.ndarray) and not isinstance(y, np.ndarray):
            if checked and y == 0:
                raise Fallback("division by zero")
            env[o] = wrap(min(x, y) if name == "min" else max(x, y) if name == "max" else op(x, y))
            return
        if checked and (y == 0 if not isinstance(y, np.ndarray) else (y == 0).any()):
            raise Fallback("division by zero")
        # int64 overflow wraps silently: try_run_spmd runs every step under errstate(over="ignore")
        env[o] = np.asarray(op(np.int64(x) if not isinstance(x, np.ndarray) else x,
                               np.int64(y) if not isinstance(y, np.ndarray) else y), dtype=np.int64)

    return run


def _block_idx_step(e: Eqn, ins: tuple[int, ...], outs: tuple[int, ...]) -> Step:
    (o,) = outs

    def run(s: LaneState, env: list[Any]) -> None:
        env[o] = s.lanes if s.spmd else s.ctx.block_idx

    return run


def _block_num_step(e: Eqn, ins: tuple[int, ...], outs: tuple[int, ...]) -> Step:
    (o,) = outs

    def run(s: LaneState, env: list[Any]) -> None:
        env[o] = s.n if s.spmd else s.ctx.block_num

    return run


def _slice_step(e: Eqn, ins: tuple[int, ...], outs: tuple[int, ...]) -> Step | None:
    out_t = e.outputs[0].type
    shape = _static_shape(out_t.shape) if isinstance(out_t, TensorType) else None
    if shape is None:
        return None
    g = operand_groups(e, ins)
    (s_src,) = g["src"]
    offs = g["offsets"]
    drop = e.params["drop"]
    (o,) = outs

    def run(s: LaneState, env: list[Any]) -> None:
        src = env[s_src]
        if type(src) not in (TensorVal, LaneTensor) or src.nz is not None:
            raise Fallback("tensor value")
        addr = addresses(src, [env[i] for i in offs], s.L, e.params["shape"])
        strides = tuple(x for i, x in enumerate(src.strides) if i not in drop)
        if len(strides) != len(shape):
            strides = src.strides
        if isinstance(addr, np.ndarray):
            env[o] = LaneTensor(addr, src.dtype, shape, strides, src.layout)
        else:
            env[o] = TensorVal(addr, src.dtype, shape, strides, src.layout)

    return run


def _load_step(e: Eqn, ins: tuple[int, ...], outs: tuple[int, ...]) -> Step | None:
    out_t = e.outputs[0].type
    geom = result_geometry(out_t)
    if geom is None:
        return None
    g = operand_groups(e, ins)
    (s_src,) = g["src"]
    offs, valid = g["offsets"], g["valid"]
    shape = tuple(e.params["shape"])
    blocked = bool(e.params.get("blocked"))
    (o,) = outs

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
        uniq, row = distinct(addr)
        s.reserve(geom)
        probe = TileBuf._from_geometry(geom, vr, vc, s.scratch((geom.nbytes,), np.uint8, "probe"))
        view0 = GmView._make(int(uniq[0]), src.dtype, sizes, src.strides, src.layout)
        plan = runtime.load.load_plan(s.ctx.gm, view0, probe)
        if plan.warns:
            raise Fallback("the load warns")
        gm = s.ctx.gm
        lazy = lane_gm.gm_images(plan, gm, uniq, geom)

        def fill() -> np.ndarray:  # the load's copy, done when the bytes themselves are needed
            data = s.zeros(len(uniq), geom.nbytes, zero=lazy is None and not plan.fills(geom.nbytes))
            if lazy is not None:
                images = data.view(geom.dtype).reshape(len(uniq), *geom.phys)
                for u0, v in lazy:
                    images[u0 : u0 + len(v)] = v
            elif not lane_gm.lane_copy(plan, gm, uniq, data, True):
                for u, a in enumerate(uniq.tolist()):
                    plan.run(gm, a, TileBuf._from_geometry(geom, vr, vc, data[u]))
            return data

        tile = LaneTile(geom, vr, vc, None if lazy is not None else fill(), row.reshape(-1), lazy, fill)
        lo, hi = view_span(view0)
        s.loaded.append((uniq, lo, hi))  # checked against every store before any is applied
        env[o] = tile

    return run


def _transpose_step(e: Eqn, ins: tuple[int, ...], outs: tuple[int, ...]) -> Step:
    (a,) = ins
    (o,) = outs

    def run(s: LaneState, env: list[Any]) -> None:
        env[o] = TransposedTile(env[a])

    return run


def _elementwise_step(e: Eqn, ins: tuple[int, ...], outs: tuple[int, ...]) -> Step | None:
    from .impl import _ELEMENTWISE

    t = e.outputs[0].type
    geom = result_geometry(t)
    if geom is None or geom.layout != "ND":
        return None
    ufunc = _ELEMENTWISE[e.primitive.name]
    dt = geom.dtype
    try:  # the op must produce the tile dtype itself (as in fast.py)
        with np.errstate(all="ignore"):
            if ufunc(*(np.ones(1, dt) for _ in ins)).dtype != dt:
                return None
    except TypeError:
        return None
    (o,) = outs

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


def _cast_step(e: Eqn, ins: tuple[int, ...], outs: tuple[int, ...]) -> Step | None:
    """`pl.cast` of an ND tile: every image converted at once, as the per-lane impl converts its
    whole logical matrix. A conversion numpy defines for every value (to a float type, or to an
    integer type that holds the source's) always; a float -> int one (quantisation) only when
    every value converts in range - out of range is undefined in C, and one long conversion need
    not give the bits of many short ones."""
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
    ((a,), (o,)) = ins, outs

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


def _store_step(e: Eqn, ins: tuple[int, ...], outs: tuple[int, ...]) -> Step | None:
    # NZ-20: an Acc tile into the blocked rank-5 NZ view, with its explicit partition; a store that
    # would mis-write (TStoreAccNz2nz ignores the view's strides, hw §4.3) warns, and falls back
    part = e.params.get("nz_partition")
    groups = operand_groups(e, ins)
    (s_tile,), offs, (s_dst,) = groups["tile"], groups["offsets"], groups["dst"]
    attrs = e.params.get("attrs", {})
    flags = dict(atomic_add=bool(attrs.get("atomic")), relu=bool(attrs.get("pre_relu")))
    (o,) = outs

    def run(s: LaneState, env: list[Any]) -> None:
        tile, dst = env[s_tile], env[s_dst]
        if type(dst) not in (TensorVal, LaneTensor) or dst.nz is not None:
            raise Fallback("store target")
        if type(tile) is LaneAcc and not tile.freed:
            vr, vc = tile.valid_row, tile.g.cols
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
        elif type(tile) is LaneAcc and dst.layout == "NZ" and len(dst.shape) == 5 \
                and vc <= 4080 // part[4] * part[4]:  # wider tiles are stored in column chunks
            sizes = tuple(part)
        else:
            raise Fallback("NZ partition store")
        addr = lanes_of(addresses(dst, [env[i] for i in offs], s.L, sizes[-len(dst.shape):]), s.L)
        view0 = GmView._make(int(addr[0]), dst.dtype, sizes, dst.strides, dst.layout)
        probe = get(0)
        plan = runtime.store.store_plan(s.ctx.gm, view0, probe, **flags)
        if plan.warns:
            raise Fallback("the store warns")
        lo, hi = view_span(view0)
        s.stored.append((addr, lo, hi))
        # stop early when this group's own loads meet the store (the run would not be exact); the
        # loads of every group are checked against every store once, before any is applied
        if lane_gm.overlap(s.loaded[s.group_loads :], s.stored[-1:]):
            raise Fallback("a lane loads bytes that the body stores")
        s.stores.append((plan, addr, get))
        env[o] = dst

    return run



# ------------------------------------------------------------------------------------- table
#: The batched step builder of each primitive, ``(eqn, input slots, output slots) -> Step | None``.
STEP_RULES: dict[Any, Callable[[Eqn, tuple[int, ...], tuple[int, ...]], Step | None]] = {
    **{p: _scalar_step for p in P.SCALAR_BINARY.values()},
    **{p: _elementwise_step for p in P.ELEMENTWISE.values()},
    P.get_block_idx_p: _block_idx_step,
    P.get_block_num_p: _block_num_step,
    P.tensor_slice_p: _slice_step,
    P.tile_load_p: _load_step,
    P.tile_transpose_view_p: _transpose_step,
    P.tile_mad_p: lambda e, ins, outs: mad_step(e, ins, outs, False, False),
    P.tile_store_p: _store_step,
    P.tile_cast_p: _cast_step,
}


def make_step(e: Eqn, ins: tuple[int, ...], outs: tuple[int, ...], consumed: frozenset[int],
              window: bool) -> Step | None:
    """The batched step of `e` (not a loop: batched.py builds those), or None. `consumed`: the input
    positions whose value dies here; `window`: a TEXTRACT whose tile only the next mad reads."""
    p = e.primitive
    if p is P.tile_extract_p:  # only a TEXTRACT fused into its mad has a batched form
        return extract_step(e, ins, outs) if window else None
    if p is P.tile_mad_acc_p:  # accumulates in place when the old sums die here
        return mad_step(e, ins, outs, True, 0 in consumed)
    rule = STEP_RULES.get(p)
    return rule(e, ins, outs) if rule is not None else None
