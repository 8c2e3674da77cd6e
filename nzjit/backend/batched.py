"""Lane-batched execution of an SPMD body: every equation runs once for all lanes.

The per-lane semantics is the reference: lane 0 runs the whole body, then lane 1, ... A batched
run gives the same GM bytes when

* the body uses only the primitives below, with 64-bit index scalars, loop bounds and tile
  shapes that are the same in every lane (checked statically and at run time);
* no byte a lane loads is stored by any lane of the body (stores are applied last, lane by lane
  in program order, or as one strided assignment per run of lanes when no byte is written twice,
  so loads must not see them; the sums a deferred store reads are never updated in place);
* no instruction warns (warnings are per lane and per instruction on the reference path).

A group of lanes that disagrees on a value that must be uniform (a trip count, a valid shape: a
ragged last tile) is retried in halves, a bounded number of times. Anything else - an
unsupported primitive, a load / store overlap, a refusal (capacity, bounds, negative offset) -
abandons the attempt before any GM byte is written, and the lanes run one by one (which then
reproduces the refusal exactly).

Values: scalars are ints or int64 arrays over lanes; tensors are `TensorVal` or `LaneTensor`
(one address per lane); tiles are `LaneTile`: the distinct byte images of the lanes (lanes
loading the same window share one image) and the lane -> image map; TEXTRACTs fused into their
mad are `LaneWindow`; accumulators are `LaneAcc` (one logical matrix per lane, as
`runtime.cube.tmatmul` keeps whole-tile accumulators). On-chip accounting is one lane's: every
lane runs the same program, so one lane's allocations and frees are every lane's.

A load that is one plain burst copy filling its tile is not copied: the tile keeps read-only
views of the GM bytes (GM is unchanged while the batch runs) and a mad converts its operands
straight from GM; anything else that needs the bytes materialises them first (the load's copy).

Lanes run in groups of `LANE_GROUP` (their tiles stay in cache); a mad is one stacked np.matmul
over the lanes, which calls the same BLAS routine per lane, on the same operand layouts, as the
per-lane path (the same bits), with its operands converted once per distinct image (lanes that
load the same window share it). One wider BLAS call over lanes that share their Left operand
would be faster, but OpenBLAS does not give bit-identical sums for a wider N, so it is not used.

Values live in lane_values.py, the GM side (burst replays, in-place GM views, the overlap
test) in lane_gm.py.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

import runtime
from runtime import GmView, TileBuf
from runtime._strided import byte_span
from runtime.cube import _F32_EXACT_K, MATMUL_DTYPES, _mov_checks
from runtime.dma import ceil16

from ..core import dtypes as D
from ..core import primitives as P
from ..core.ir import Eqn, Graph, Var
from ..core.types import ScalarType, TensorType, TileType
from . import lane_gm
from .fast_core import _static_shape, operand_groups, result_geometry
from .lane_values import LANE_VALUES, LaneAcc, LaneTensor, LaneTile, LaneWindow
from .values import TensorVal, TransposedTile


class Fallback(Exception):
    """The batched attempt cannot reproduce the per-lane result: run the lanes one by one."""


class LaneDependent(Fallback):
    """A value one batched step needs the same in every lane (a trip count, a valid shape, a tile
    offset) differs between the lanes of a group: smaller groups may agree."""


class _State:
    """One batched attempt: lanes, deferred stores, byte ranges loaded and stored."""

    def __init__(self, ctx: Any, n: int, spmd: bool) -> None:
        self.ctx, self.n, self.spmd = ctx, n, spmd
        self.alloc_bytes = 0
        self.lanes = np.zeros(0, np.int64)
        self.L = self.base = 0
        self.stores: list[tuple[Any, np.ndarray, Callable[[int], TileBuf]]] = []
        self.loaded: list[tuple[np.ndarray, int, int]] = []  # (addresses, lo, hi) relative spans
        self.stored: list[tuple[np.ndarray, int, int]] = []
        self.pool: dict[tuple[int, int], list[np.ndarray]] = {}  # freed LaneTile images
        self.pinned: set[int] = set()  # ids of images and sums a deferred store still reads
        self.bufs: dict[tuple[object, ...], np.ndarray] = {}

    def reserve(self, g: Any) -> None:
        self.ctx.onchip.reserve(g.space, g.nbytes)

    def scratch(self, shape: tuple[int, ...], dtype: type, tag: str = "") -> np.ndarray:
        """A buffer reused for the whole batch (no fresh pages per instruction); `tag` keeps buffers
        of the same shape that are live together apart."""
        key = (shape, np.dtype(dtype).str, tag)
        b = self.bufs.get(key)
        if b is None:
            b = self.bufs[key] = np.empty(shape, dtype)
        return b

    def zeros(self, n: int, nbytes: int, zero: bool = True) -> np.ndarray:
        free = self.pool.get((n, nbytes))
        if free:
            a = free.pop()
            if zero:
                a.fill(0)
            return a
        return np.zeros((n, nbytes), np.uint8)

    def release(self, v: Any) -> None:
        if not v.freed:
            v.freed = True
            self.ctx.onchip.release(v.g.space, v.g.nbytes)
            if type(v) is LaneTile and v._data is not None and id(v._data) not in self.pinned:
                self.pool.setdefault(v._data.shape, []).append(v._data)


# ----------------------------------------------------------------------------------- helpers
def _uniform(x: Any) -> int:
    """A lane-uniform int (an int, or an array whose lanes agree), else Fallback."""
    if isinstance(x, np.ndarray):
        v = x[0]
        if not (x == v).all():
            raise LaneDependent("lane-dependent value where one value is needed")
        return int(v)
    return int(x)


def _lanes_of(x: Any, L: int) -> np.ndarray:
    if isinstance(x, np.ndarray):
        return x
    return np.full(L, int(x), dtype=np.int64)


def _addresses(src: Any, offs: list[Any], L: int, sizes: Any) -> np.ndarray | int:
    """Element offset sum(o*s) added to the base address(es): an int if lane-uniform. A negative
    or out-of-bounds window falls back to the per-lane path, which refuses it with the lane."""
    delta: Any = 0
    for o, s, n, d in zip(offs, src.strides, sizes, src.shape):
        if isinstance(o, np.ndarray):
            if (o < 0).any() or (o + n > d).any():
                raise Fallback("window out of bounds")
        elif o < 0 or o + n > d:
            raise Fallback("window out of bounds")
        delta = delta + o * s
    addr = src.addr + delta * src.dtype.itemsize
    if isinstance(addr, np.ndarray):
        return addr.astype(np.int64)
    return int(addr)


def _distinct(addr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(addr, return_inverse=True)``, without its sort when the lanes' addresses are
    already in order (the common case: lanes in order, consecutive lanes sharing a window)."""
    step = addr[1:] - addr[:-1]
    if (step > 0).all():  # lanes load distinct windows, in order
        return addr, np.arange(len(addr))
    if (step >= 0).all():  # runs of equal addresses share one image
        first = np.empty(len(addr), dtype=bool)
        first[0] = True
        np.not_equal(step, 0, out=first[1:])
        return addr[first], np.cumsum(first) - 1
    return np.unique(addr, return_inverse=True)


def _view_span(view: GmView) -> tuple[int, int]:
    E = view.dtype.itemsize
    lo, hi = byte_span(0, view.shape, tuple(s * E for s in view.strides))
    return lo, max(hi, lo + E)


# ------------------------------------------------------------------------------------ steps
Step = Callable[[_State, list[Any]], None]


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

    def run(s: _State, env: list[Any]) -> None:
        x, y = env[a], env[b]
        if not isinstance(x, np.ndarray) and not isinstance(y, np.ndarray):
            if checked and y == 0:
                raise Fallback("division by zero")
            env[o] = wrap(min(x, y) if name == "min" else max(x, y) if name == "max" else op(x, y))
            return
        if checked and (np.asarray(y) == 0).any():
            raise Fallback("division by zero")
        with np.errstate(over="ignore"):
            env[o] = np.asarray(op(np.int64(x) if not isinstance(x, np.ndarray) else x,
                                   np.int64(y) if not isinstance(y, np.ndarray) else y), dtype=np.int64)

    return run


def _block_idx_step(e: Eqn, ins: tuple[int, ...], outs: tuple[int, ...]) -> Step:
    (o,) = outs

    def run(s: _State, env: list[Any]) -> None:
        env[o] = s.lanes if s.spmd else s.ctx.block_idx

    return run


def _block_num_step(e: Eqn, ins: tuple[int, ...], outs: tuple[int, ...]) -> Step:
    (o,) = outs

    def run(s: _State, env: list[Any]) -> None:
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

    def run(s: _State, env: list[Any]) -> None:
        src = env[s_src]
        if type(src) not in (TensorVal, LaneTensor) or src.nz is not None:
            raise Fallback("tensor value")
        addr = _addresses(src, [env[i] for i in offs], s.L, e.params["shape"])
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

    def run(s: _State, env: list[Any]) -> None:
        src = env[s_src]
        if type(src) not in (TensorVal, LaneTensor) or src.nz is not None:
            raise Fallback("tensor value")
        sizes = tuple(_uniform(env[i]) for i in valid) if valid else shape
        if blocked:
            vr, vc = sizes[2] * sizes[3], sizes[1] * sizes[4]
        else:
            vr = math.prod(sizes[:-1])
            vc = sizes[-1]
        if len(sizes) > 5:
            raise Fallback("rank > 5 window")
        addr = _lanes_of(_addresses(src, [env[i] for i in offs], s.L, sizes), s.L)
        uniq, row = _distinct(addr)
        s.reserve(geom)
        probe = TileBuf._from_geometry(geom, vr, vc, s.scratch((geom.nbytes,), np.uint8, "probe"))
        view0 = GmView._make(int(uniq[0]), src.dtype, sizes, src.strides, src.layout)
        plan = runtime.load.load_plan(s.ctx.gm, view0, probe)
        if plan.warns:
            raise Fallback("the load warns")
        gm = s.ctx.gm
        s.alloc_bytes += len(uniq) * geom.nbytes
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
        lo, hi = _view_span(view0)
        s.loaded.append((uniq, lo, hi))  # checked against every store before any is applied
        env[o] = tile

    return run


def _transpose_step(e: Eqn, ins: tuple[int, ...], outs: tuple[int, ...]) -> Step:
    (a,) = ins
    (o,) = outs

    def run(s: _State, env: list[Any]) -> None:
        env[o] = TransposedTile(env[a])

    return run


def _valid_rows(t: Any) -> int | None:
    """The valid rows of a 2-D tile type whose columns are all valid (a decode batch's Left and Acc
    tiles have M < 16 rows valid, statically), else None."""
    if not isinstance(t, TileType) or len(t.shape) != 2:
        return None
    if t.fully_valid:
        return int(t.shape[0])
    vs = t.valid_shape
    if vs is None or not all(isinstance(v, int) for v in vs) or vs[1] != t.shape[1]:
        return None
    return int(vs[0])  # type: ignore[arg-type]


def _extract_step(e: Eqn, ins: tuple[int, ...], outs: tuple[int, ...]) -> Step | None:
    t = e.outputs[0].type
    vr = _valid_rows(t)
    geom = result_geometry(t)
    if geom is None or vr is None:
        return None
    s_src, s_r, s_c = ins
    (o,) = outs

    def run(s: _State, env: list[Any]) -> None:
        src, r0, c0 = env[s_src], _uniform(env[s_r]), _uniform(env[s_c])
        transpose = False
        while type(src) is TransposedTile:
            src, transpose, r0, c0 = src.tile, not transpose, c0, r0
        if type(src) is not LaneTile or src.freed:
            raise Fallback("extract source")
        probe_src = TileBuf._from_geometry(src.g, src.valid_row, src.valid_col, None)  # type: ignore[arg-type]
        probe = TileBuf._from_geometry(geom, vr, geom.cols, None)  # type: ignore[arg-type]
        try:
            _mov_checks(probe, probe_src, r0, c0, transpose, False)
            nrows, ncols = (geom.cols, geom.rows) if transpose else (geom.rows, geom.cols)
            probe_src._check_window(r0, c0, nrows, ncols)
        except runtime.DeviceError:
            raise Fallback("refused extract") from None
        s.reserve(geom)
        env[o] = LaneWindow(geom, src, r0, c0, transpose, vr)

    return run


def _products(s: _State, left: LaneWindow, right: LaneWindow, m: int, k: int, n: int,
              into: np.ndarray | None = None) -> np.ndarray:
    """The lanes' products, (L, m, n) float32 (int8: exact integers, in float64 when deeper than
    float32 holds them exactly), in `into` or a reused buffer: `runtime.cube._product_windows` of
    every lane, operands converted once per distinct image.  One stacked np.matmul calls the same BLAS routine per lane, on the same operand
    layouts, as one product at a time (the same bits; pinned by the per-lane comparison tests)."""
    # int8: |C| <= k * 2**14, exact in float32 up to k = 1024 and in float64 beyond (k <= 4095)
    ft = np.float64 if left.g.dtype == np.int8 and k > _F32_EXACT_K else np.float32
    prod = into if into is not None else s.scratch((s.L, m, n), ft, "products")
    # all images, one pass; a decode batch's m < 16 valid rows are the first rows of whole fractals
    xa: Any = left.operands(ceil16(m), k, ft, lambda sh, dt: s.scratch(sh, dt, "left"))
    if xa is not None and m % 16:
        xa = xa[:, :m]
    bt: Any = right.operands(k, n, ft, lambda sh, dt: s.scratch(sh, dt, "right"))
    rx, rw = left.src.row, right.src.row
    if xa is not None and bt is not None:
        b = bt if _is_identity(rw, len(bt)) else bt[rw]
        g = _blocks_of(rx, len(xa))
        if g:  # lanes share Left images in consecutive blocks of g: broadcast, no copies
            np.matmul(xa[:, None], b.reshape(len(xa), g, n, k).transpose(0, 1, 3, 2),
                      out=prod.reshape(len(xa), g, m, n))
        else:
            np.matmul(xa[rx], b.transpose(0, 2, 1), out=prod)
        return prod
    if xa is None:
        xa = {u: left.operand(u, m, k, ft) for u in np.unique(rx).tolist()}
    if bt is None:
        bt = {u: right.operand(u, k, n, ft) for u in np.unique(rw).tolist()}
    for lane, (ux, uw) in enumerate(zip(rx.tolist(), rw.tolist())):
        np.matmul(xa[ux], bt[uw].T, out=prod[lane])
    return prod


def _blocks_of(row: np.ndarray, n: int) -> int:
    """g when lanes use images 0, ..., 0, 1, ..., 1, ... in consecutive blocks of g lanes each, else 0."""
    L = len(row)
    if L % n:
        return 0
    g = L // n
    return g if (row.reshape(n, g) == np.arange(n)[:, None]).all() else 0


def _is_identity(row: np.ndarray, n: int) -> bool:
    """Lane i uses image i (every lane its own image, in order)."""
    return len(row) == n and bool((row[1:] > row[:-1]).all()) if n > 1 else len(row) == n


def _mad_step(e: Eqn, ins: tuple[int, ...], outs: tuple[int, ...], accumulate: bool,
              in_place: bool) -> Step | None:
    t = e.outputs[0].type
    acc_rows = _valid_rows(t)  # a decode batch's accumulator has M < 16 valid rows
    geom = result_geometry(t)
    if geom is None or acc_rows is None:
        return None
    (o,) = outs

    def run(s: _State, env: list[Any]) -> None:
        if accumulate:
            acc, left, right = (env[i] for i in ins)
            if type(acc) is not LaneAcc or acc.freed:
                raise Fallback("accumulator")
        else:
            left, right = (env[i] for i in ins)
        if type(left) is not LaneWindow or type(right) is not LaneWindow or left.freed or right.freed:
            raise Fallback("mad operands")
        if left.g.space != "Left" or right.g.space != "Right" or left.g.layout != "ZZ" or right.g.layout != "ZN":
            raise Fallback("mad operand spaces")
        if (geom.dtype, left.g.dtype, right.g.dtype) not in MATMUL_DTYPES or geom.layout != "ACC":
            raise Fallback("mad dtypes")
        # m = Left.validRow, as TMATMUL takes it (m == 1 computes a whole fractal); the rows of
        # the accumulator past m keep no defined value, and a store writes its valid rows only
        m, k, n = left.valid_row, left.g.cols, right.g.cols
        if m == 1:
            m = 16
        if max(m, k, n) > 4095 or k > right.g.rows or n % 16 or ceil16(m) != geom.rows or n != geom.cols \
                or acc_rows > m or (accumulate and acc.valid_row != acc_rows):
            raise Fallback("not a whole-tile mad")
        is_int = geom.dtype == np.int32
        if not accumulate:
            s.reserve(geom)
            acc = LaneAcc(geom, np.empty((s.L, geom.rows, n), geom.dtype), acc_rows)
        elif not in_place or id(acc.data) in s.pinned:  # a deferred store still reads the old sums
            s.reserve(geom)
            acc = LaneAcc(geom, acc.data.copy(), acc_rows)
        data = acc.data if m == geom.rows else acc.data[:, :m]
        if not accumulate and not is_int:  # a float mad that starts the accumulator: products in place
            _products(s, left, right, m, k, n, data)
        else:
            prod = _products(s, left, right, m, k, n)
            if is_int:  # exact integers in float32 or float64: converted exactly, then added mod 2**32
                ints = s.scratch(prod.shape, np.int32, "int products")
                np.copyto(ints, prod, casting="unsafe")
                prod = ints
            if accumulate:
                np.add(data, prod, out=data)
            else:
                np.copyto(data, prod)
        env[o] = acc

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

    def run(s: _State, env: list[Any]) -> None:
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
        data = np.empty((len(args[0]), geom.nbytes), np.uint8)
        ufunc(*args, out=data.view(dt).reshape(len(args[0]), geom.rows, geom.cols))
        s.alloc_bytes += data.nbytes
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

    def run(s: _State, env: list[Any]) -> None:
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
        data = np.empty((n, geom.nbytes), np.uint8)
        np.copyto(data.view(dst_dt).reshape(n, geom.rows, geom.cols), src, casting="unsafe")
        s.alloc_bytes += data.nbytes
        env[o] = LaneTile(geom, x.valid_row, x.valid_col, data, x.row)

    return run


def _store_step(e: Eqn, ins: tuple[int, ...], outs: tuple[int, ...]) -> Step | None:
    from .impl import impl_rules

    if impl_rules.get(P.tile_store_p) is not _DEFAULT_STORE:
        return None
    # NZ-20: an Acc tile into the blocked rank-5 NZ view, with its explicit partition; a store that
    # would mis-write (TStoreAccNz2nz ignores the view's strides, hw §4.3) warns, and falls back
    part = e.params.get("nz_partition")
    g = operand_groups(e, ins)
    (s_tile,), offs, (s_dst,) = g["tile"], g["offsets"], g["dst"]
    attrs = e.params.get("attrs", {})
    flags = dict(atomic_add=bool(attrs.get("atomic")), relu=bool(attrs.get("pre_relu")))
    (o,) = outs

    def run(s: _State, env: list[Any]) -> None:
        tile, dst = env[s_tile], env[s_dst]
        if type(dst) not in (TensorVal, LaneTensor) or dst.nz is not None:
            raise Fallback("store target")
        if type(tile) is LaneAcc and not tile.freed:
            vr, vc, g = tile.valid_row, tile.g.cols, tile.g
            s.pinned.add(id(tile.data))  # stored at the end: later mads must not update it in place
            get: Callable[[int], TileBuf] = (lambda acc: lambda lane: acc.lane_tile(lane))(tile)
            get.sums = tile.data  # type: ignore[attr-defined]
        elif type(tile) is LaneTile and not tile.freed:
            vr, vc, g = tile.valid_row, tile.valid_col, tile.g
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
        addr = _lanes_of(_addresses(dst, [env[i] for i in offs], s.L, sizes[-len(dst.shape):]), s.L)
        view0 = GmView._make(int(addr[0]), dst.dtype, sizes, dst.strides, dst.layout)
        probe = get(0)
        plan = runtime.store.store_plan(s.ctx.gm, view0, probe, **flags)
        if plan.warns:
            raise Fallback("the store warns")
        lo, hi = _view_span(view0)
        s.stored.append((addr, lo, hi))
        if s.loaded and lane_gm.overlap(s.loaded, s.stored[-1:]):  # stop early: this run will not be exact
            raise Fallback("a lane loads bytes that the body stores")
        s.stores.append((plan, addr, get))
        env[o] = dst
        _ = g

    return run


_DEFAULT_STORE: Any = None


# ------------------------------------------------------------------------------------- plans
@dataclass
class LanePlan:
    """A graph compiled for lane-batched execution: slot template, parameter / output slots and the step
    closures."""

    template: list[Any]
    param_slots: tuple[int, ...]
    out_slots: tuple[int, ...]
    runs: tuple[Step, ...]


def _for_step(e: Eqn, ins: tuple[int, ...], outs: tuple[int, ...], consumed: frozenset[int]) -> Step | None:
    if e.params["kind"] == "spmd":
        return None
    nb, nc, nk = e.params["arity"]
    body = lane_plan(e.params["body"], nk)
    if body is None:
        return None

    def run(s: _State, env: list[Any]) -> None:
        vals = [env[i] for i in ins]
        start, stop, step = (_uniform(x) for x in vals[:3])
        captured = vals[nb : nb + nc]
        carries = []
        for i, c in enumerate(vals[nb + nc :]):
            if (nb + nc + i) not in consumed and type(c) in LANE_VALUES:
                if type(c) is not LaneAcc:
                    raise Fallback("carry copy")
                s.reserve(c.g)
                c = LaneAcc(c.g, c.data.copy(), c.valid_row)
            carries.append(c)
        for i in range(start, stop, step):
            carries = run_lane_plan(s, body, [i, *captured, *carries])
        for slot, v in zip(outs, carries):
            env[slot] = v

    return run


def _make_step(e: Eqn, ins: tuple[int, ...], outs: tuple[int, ...], consumed: frozenset[int],
               window: bool) -> Step | None:
    p = e.primitive
    if p in P.SCALAR_BINARY.values():
        return _scalar_step(e, ins, outs)
    if p is P.get_block_idx_p:
        return _block_idx_step(e, ins, outs)
    if p is P.get_block_num_p:
        return _block_num_step(e, ins, outs)
    if p is P.tensor_slice_p:
        return _slice_step(e, ins, outs)
    if p is P.tile_load_p:
        return _load_step(e, ins, outs)
    if p is P.tile_transpose_view_p:
        return _transpose_step(e, ins, outs)
    if p is P.tile_extract_p and window:
        return _extract_step(e, ins, outs)
    if p is P.tile_mad_p:
        return _mad_step(e, ins, outs, False, False)
    if p is P.tile_mad_acc_p:
        return _mad_step(e, ins, outs, True, 0 in consumed)
    if p is P.tile_store_p:
        return _store_step(e, ins, outs)
    if p in P.ELEMENTWISE.values():
        return _elementwise_step(e, ins, outs)
    if p is P.tile_cast_p:
        return _cast_step(e, ins, outs)
    if p is P.for_p:
        return _for_step(e, ins, outs, consumed)
    return None


def _with_frees(step: Step, free: tuple[int, ...], outs: tuple[int, ...], dead: tuple[int, ...] = ()) -> Step:
    """Run `step`, then release the lane values dying there (not one it returned: in place) and
    its results nobody reads (`dead`)."""
    if not free and not dead:
        return step

    def run(s: _State, env: list[Any]) -> None:
        step(s, env)
        res = [env[o] for o in outs]
        for slot in free:
            v = env[slot]
            env[slot] = None
            if type(v) in LANE_VALUES and not any(v is r for r in res):
                s.release(v)
        for slot in dead:
            v = env[slot]
            env[slot] = None
            if type(v) in LANE_VALUES:
                s.release(v)

    return run


_LANE_PLANS: dict[int, tuple[Graph, LanePlan | None]] = {}


def lane_plan(g: Graph, n_owned: int = 0) -> LanePlan | None:
    """The batched plan of `g`, or None when some equation has no lane-batched form."""
    key = id(g) * 8 + n_owned
    hit = _LANE_PLANS.get(key)
    if hit is not None and hit[0] is g:
        return hit[1]
    plan = _build(g, n_owned)
    if len(_LANE_PLANS) > 4096:  # bounded: the cache keeps graphs alive
        _LANE_PLANS.clear()
        _FAILS.clear()
    _LANE_PLANS[key] = (g, plan)
    return plan


def _build(g: Graph, n_owned: int) -> LanePlan | None:
    global _DEFAULT_STORE
    from .executor import _dying_inputs_and_dead_results, _liveness, _window_extracts, slot_allocator
    from .fast import _DEFAULT_IMPLS
    from .impl import impl_rules

    if _DEFAULT_STORE is None:
        _DEFAULT_STORE = _DEFAULT_IMPLS.get(P.tile_store_p)
    for e in g.eqns:  # only the default impls have a batched form
        if e.primitive is not P.for_p and impl_rules.get(e.primitive) is not _DEFAULT_IMPLS.get(e.primitive):
            return None
    free, _ = _liveness(g, n_owned)
    windows = _window_extracts(g, free)
    slot, template, slot_of = slot_allocator()

    param_slots = tuple(slot(p) for p in g.params)
    runs = []
    for i, e in enumerate(g.eqns):
        dying = set(free.get(i, ()))
        consumed = frozenset(j for j, a in enumerate(e.inputs) if isinstance(a, Var) and a in dying
                             and sum(1 for b in e.inputs if b is a) == 1)
        ins = tuple(slot(a) for a in e.inputs)
        outs = tuple(slot(v) for v in e.outputs)
        step = _make_step(e, ins, outs, consumed, i in windows)
        if step is None:
            return None
        dying, dead = _dying_inputs_and_dead_results(e, free.get(i, ()))
        runs.append(_with_frees(step, tuple(slot_of[v] for v in dying), outs, tuple(slot_of[v] for v in dead)))
    return LanePlan(template, param_slots, tuple(slot(a) for a in g.outputs), tuple(runs))


def run_lane_plan(s: _State, plan: LanePlan, args: list[Any]) -> list[Any]:
    """Run `plan` for all lanes at once on `args` (the same slot machine as a per-trip plan, with
    the lanes' state in place of the context); returns the values of its output slots."""
    from .executor import run_plan

    return run_plan(s, plan, args)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------- running
def try_run_spmd(ctx: Any, body: Graph, lanes: range, n: int, captured: list[Any], spmd: bool = True) -> bool:
    """Run all `lanes` of an SPMD body (or the independent trips of a carry-free loop,
    `spmd=False`: the body's index takes the trip values, the block index stays) batched;
    False (nothing written to GM, on-chip accounting restored) when that cannot be exact."""
    plan = lane_plan(body, 0)
    if plan is None or _FAILS.get(id(body), 0) >= MAX_FAILS:
        return False
    all_lanes = np.asarray(lanes, dtype=np.int64)
    s = _State(ctx, n, spmd)
    onchip = ctx.onchip
    live, peak = dict(onchip.live), dict(onchip.peak)
    groups: list[list[tuple[Any, np.ndarray, Callable[[int], TileBuf]]]] = []
    try:
        with np.errstate(over="ignore", invalid="ignore"):
            # lanes in groups: each group's tiles stay cache-sized; stores wait for every group
            base, size, splits = 0, LANE_GROUP, 0
            while base < len(all_lanes):
                s.lanes = all_lanes[base : base + size]
                s.L, s.base, s.stores, s.alloc_bytes = len(s.lanes), base, [], 0
                group_live, n_loaded, n_stored = dict(onchip.live), len(s.loaded), len(s.stored)
                try:
                    run_lane_plan(s, plan, [s.lanes, *captured])
                except LaneDependent:
                    # e.g. a ragged last tile: retry this group's lanes in halves (nothing of the
                    # attempt reached GM - stores wait for every group), a bounded number of times
                    if s.L == 1 or splits >= MAX_SPLITS:
                        raise
                    splits += 1
                    onchip.live.update(group_live)
                    del s.loaded[n_loaded:], s.stored[n_stored:]
                    size = s.L // 2
                    continue
                groups.append(s.stores)
                base += s.L
                per_lane = max(1, s.alloc_bytes // s.L)
                size = int(min(MAX_GROUP, max(LANE_GROUP, GROUP_BYTES // per_lane)))
        if lane_gm.overlap(s.loaded, s.stored):
            raise Fallback("a lane loads bytes that the body stores")
    except Exception as e:  # anything unexpected too: the per-lane run is the reference
        if STRICT and not isinstance(e, (Fallback, runtime.DeviceError, OverflowError)):
            raise
        onchip.live.update(live)
        onchip.peak.update(peak)
        _FAILS[id(body)] = _FAILS.get(id(body), 0) + 1  # a body that keeps failing is not retried
        return False
    _FAILS.pop(id(body), None)
    # every lane's stores, in per-lane program order (loads never see them: checked above)
    gm = ctx.gm
    for stores in groups:
        if not stores:
            continue
        if len(stores) == 1:  # one store per lane: strided assignments if the lanes' bytes are disjoint
            plan_, addr, get = stores[0]
            images = getattr(get, "images", None)
            if images is not None:
                data, row = images
                imgs = data if len(data) == len(row) and (row == np.arange(len(row))).all() else data[row]
                if lane_gm.lane_copy(plan_, gm, addr, imgs, False):
                    continue
            sums = getattr(get, "sums", None)
            if sums is not None and lane_gm.lane_acc_store(plan_, gm, addr, sums):
                continue
        for lane in range(len(stores[0][1])):
            for plan_, addr, get in stores:
                plan_.run(gm, int(addr[lane]), get(lane))
    return True


#: After this many fallbacks in a row a body is no longer tried batched (its plan keeps the
#: graph alive, so the id is stable).
MAX_FAILS = 3
_FAILS: dict[int, int] = {}
#: Re-raise unexpected errors of a batched attempt instead of falling back (tests set it).
STRICT = False
#: Lane groups split in halves at most this many times per run when their lanes disagree on a
#: value that must be uniform (beyond that the lanes run one by one).
MAX_SPLITS = 16
#: Lanes per batched pass: at least LANE_GROUP, more while their tiles fit in GROUP_BYTES.
LANE_GROUP = 16
MAX_GROUP = 4096
GROUP_BYTES = 4 << 20
