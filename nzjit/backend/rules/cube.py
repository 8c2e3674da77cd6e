"""Rules of the cube family: TEXTRACT (`tile.extract`, fused into its mad as a window when the mad
is its only reader), TMATMUL / TMATMUL_ACC (`tile.mad`, `tile.mad_acc`), the transposed view,
and the un-tiled reference matmuls of the stages before AutoTileMatmulL0.

Batched, a fused TEXTRACT is a `LaneWindow` of its source and a mad is one stacked matmul over
the lanes (lane_cube.py), the same BLAS call per lane as the per-lane path, so the same bits.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import runtime
from runtime import TileBuf
from runtime.cube import MATMUL_DTYPES, mov_checks, textract_window
from runtime.dma import ceil16

from ... import prims as P
from ...core.ir import Eqn
from ...core.types import Mem, TileType
from ..lane_cube import mad_lanes
from ..lane_state import Fallback, LaneState, replays, uniform
from ..lane_values import LaneAcc, LaneTile, LaneWindow
from ..rule import Run, Step, rule
from ..steps import alloc, finish, geometry_of, result_geometry, static_valid, tile_dims
from ..values import TransposedTile
from .tensor import reference_matmul, squeeze2

_tmov, _tmatmul = runtime.isa.tmov, runtime.isa.tmatmul


# ----------------------------------------------------------------------- reference matmuls
def operand_valid(v: Any) -> tuple[int, int]:
    """The run-time valid (rows, cols) of a matmul operand (a transposed view swaps them)."""
    if type(v) is TransposedTile:
        return v.tile.valid_col, v.tile.valid_row
    return v.valid_row, v.valid_col


def reference_product(e: Eqn, a: Any, b: Any) -> tuple[np.ndarray, int, int]:
    """`a @ b` over the valid region only, as TMATMUL computes it (m = lhs valid rows, k = lhs valid
    K, n = rhs valid N; hardware-model.md §6), zero elsewhere: (product of the result tile's shape,
    valid rows, valid cols). A decode batch's Left tile has ceil16(M) rows, the result M."""
    out_t = e.outputs[0].type
    assert isinstance(out_t, TileType)
    b_trans = e.params.get("b_trans", False)
    av, bv = squeeze2(a.logical()), squeeze2(b.logical())
    ar, ak = operand_valid(a)
    bk, bn = operand_valid(b)
    if b_trans:
        bv, bk, bn = bv.T, bn, bk
    rows, cols = out_t.shape[-2], out_t.shape[-1]
    ar, bn = min(ar, rows), min(bn, cols)
    if bk < ak:
        raise runtime.DeviceError(f"{e.source}: the rhs's valid K {bk} does not cover the lhs's valid K {ak}")
    prod = np.zeros((rows, cols), out_t.dtype.np_dtype)
    prod[:ar, :bn] = reference_matmul(av[:ar, :ak], bv[:ak, :bn], False, out_t.dtype.np_dtype)
    return prod, ar, bn


def _tile_matmul_ref(ctx: Any, e: Eqn, acc: np.ndarray | None, a: Any, b: Any) -> TileBuf:
    out_t = e.outputs[0].type
    assert isinstance(out_t, TileType)
    prod, vr, vc = reference_product(e, a, b)
    if acc is not None:
        prod = (acc + prod).astype(prod.dtype)
    t = alloc(ctx, out_t, (vr, vc), virtual=True)
    t.set_logical(prod)
    return t


@rule(P.tile_matmul_p, multiplies=True)
def _tile_matmul(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    return [_tile_matmul_ref(ctx, e, None, *ins)]


@rule(P.tile_matmul_acc_p, multiplies=True)
def _tile_matmul_acc(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    return [_tile_matmul_ref(ctx, e, ins[0].logical(), ins[1], ins[2])]


@rule(P.tile_matmul_bias_p, multiplies=True)
def _tile_matmul_bias(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    """`a @ b + bias`: the bias row added once to the float32 (wrapping int32) sum, as
    TMATMUL_BIAS does (runtime.cube.tmatmul)."""
    a, b, bias = ins
    out_t = e.outputs[0].type
    assert isinstance(out_t, TileType)
    prod, vr, vc = reference_product(e, a, b)
    prod[:vr, :vc] += bias.logical()[0, :vc].astype(prod.dtype)
    t = alloc(ctx, out_t, (vr, vc), virtual=True)
    t.set_logical(prod)
    return [t]


# ---------------------------------------------------------------------------------- extract
def _dynamic(t: TileType) -> bool:
    return t.valid_shape is not None and any(v is None for v in t.valid_shape)


def _window_valid(t: TileType, src: Any, r0: int, c0: int) -> tuple[int, int]:
    """The valid (rows, cols) of the window (r0, c0) of `src` a TEXTRACT of type `t` moves: the
    type's static entries, and for a dynamic one (None) the source's run-time valid extent past
    the window's start, clipped to the window (a ragged N or M tile; the cube reads only these)."""
    rows, cols = t.shape[-2], t.shape[-1]
    vs = t.valid_shape or (rows, cols)
    sr, sc = operand_valid(src)
    vr = vs[0] if vs[0] is not None else max(0, min(rows, sr - r0))
    vc = vs[1] if vs[1] is not None else max(0, min(cols, sc - c0))
    return vr, vc


def _extract(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    src, r0, c0 = ins
    t = e.outputs[0].type
    assert isinstance(t, TileType)
    dst = alloc(ctx, t, _window_valid(t, src, r0, c0) if _dynamic(t) else None)
    transpose = False
    while isinstance(src, TransposedTile):  # window (r0, c0) of src^T is window (c0, r0) of src
        src, transpose, r0, c0 = src.tile, not transpose, c0, r0
    if transpose:
        runtime.isa.tmov(dst, src, r0, c0, transpose=True)
    else:
        runtime.isa.tmov(dst, src, r0, c0)
    return [dst]


def _specialize_extract(st: Step) -> Run | None:
    e = st.eqn
    t = e.outputs[0].type
    if not isinstance(t, TileType):
        return None
    space, rows, cols, dt = tile_dims(t)
    vr, vc = static_valid(t)  # a decode batch's Left tile: its M valid rows (TMATMUL m, §6)
    dyn = _dynamic(t)  # a ragged tile: valid extents taken from the source at run time
    s_src, s_r, s_c = st.ins

    geom = geometry_of(space, rows, cols, dt)
    if st.window and geom is not None:  # only the next mad reads it: a window of the source, no bytes moved

        def window(ctx: Any, env: list[Any]) -> Any:
            src, r0, c0 = env[s_src], env[s_r], env[s_c]
            valid = _window_valid(t, src, r0, c0) if dyn else (vr, vc)
            transpose = False
            while type(src) is TransposedTile:
                src, transpose, r0, c0 = src.tile, not transpose, c0, r0
            if type(src) is not TileBuf:
                raise runtime.DeviceError(f"{e.source}: TEXTRACT source is a {type(src).__name__}")
            win = textract_window(ctx.onchip, geom, src, r0, c0, transpose)
            v_row, v_col = valid
            if v_row is not None and v_col is not None:  # both or neither (static_valid)
                win.valid_row, win.valid_col = v_row, v_col
            return win

        return finish(st, window)

    def body(ctx: Any, env: list[Any]) -> Any:
        src, r0, c0 = env[s_src], env[s_r], env[s_c]
        v_r, v_c = _window_valid(t, src, r0, c0) if dyn else (vr, vc)
        dst = ctx.onchip.alloc_tile(space, rows, cols, dt, valid_row=v_r, valid_col=v_c)
        transpose = False
        while type(src) is TransposedTile:  # window (r0, c0) of src^T is window (c0, r0) of src
            src, transpose, r0, c0 = src.tile, not transpose, c0, r0
        _tmov(dst, src, r0, c0, transpose=transpose)
        return dst

    return finish(st, body)


def _batch_extract(st: Step) -> Any:
    """TEXTRACT of a Left / Right tile that only the next mad reads: checked as the instruction does,
    charged on chip, kept as a `LaneWindow` of its source (no bytes move). Only a fused TEXTRACT
    has a batched form, and the TMOV of a bias row (`_batch_bias_row`). A ragged tile's valid
    extents come from its source, uniform over the group."""
    t0 = st.eqn.outputs[0].type
    if isinstance(t0, TileType) and t0.memory is Mem.Bias:
        return _batch_bias_row(st)
    if not st.window:
        return None
    t = st.eqn.outputs[0].type
    geom = result_geometry(t)
    if geom is None or not isinstance(t, TileType):
        return None
    dyn = _dynamic(t)
    vr, vc = (geom.rows, geom.cols) if t.fully_valid or dyn else static_valid(t)
    if vr is None:
        return None
    s_src, s_r, s_c = st.ins
    (o,) = st.outs
    checked: set[tuple[Any, ...]] = set()  # source geometries and windows that passed the checks

    def run(s: LaneState, env: list[Any]) -> None:
        src, r0, c0 = env[s_src], uniform(env[s_r]), uniform(env[s_c])
        v_r, v_c = _window_valid(t, src, r0, c0) if dyn else (vr, vc)
        transpose = False
        while type(src) is TransposedTile:
            src, transpose, r0, c0 = src.tile, not transpose, c0, r0
        if type(src) is not LaneTile or src.freed:
            raise Fallback("extract source")
        key = (src.g, src.valid_row, src.valid_col, r0, c0, transpose)
        if key not in checked:  # the instruction's checks depend on these only: once per geometry
            probe_src = TileBuf.from_geometry(src.g, src.valid_row, src.valid_col, None)  # type: ignore[arg-type]
            probe = TileBuf.from_geometry(geom, v_r, v_c, None)  # type: ignore[arg-type]
            try:
                mov_checks(probe, probe_src, r0, c0, transpose, False)
                nrows, ncols = (geom.cols, geom.rows) if transpose else (geom.rows, geom.cols)
                probe_src.check_window(r0, c0, nrows, ncols)
            except runtime.DeviceError:
                raise Fallback("refused extract") from None
            if len(checked) < 1024:
                checked.add(key)
        s.reserve(geom)
        env[o] = LaneWindow(geom, src, r0, c0, transpose, v_r, v_c)

    return replays(run)  # a window on its source: the mad reads it


rule(P.tile_extract_p, specialize=_specialize_extract, batch=_batch_extract)(_extract)


# -------------------------------------------------------------------------------------- mad
def check_dynamic_k(e: Eqn, left: Any, right: Any) -> None:
    """A dynamic K tail (AutoTileMatmulL0's `dynamic_k`): TMATMUL reads k = Left.validCol rows of
    the Right tile, so rows past the Right's valid K would be stale bytes: refused, as the static
    K tail is refused at compile time (prims/cube.product_valid)."""
    if right.valid_row < left.valid_col:
        raise runtime.DeviceError(
            f"{e.source}: the rhs's valid K {right.valid_row} does not cover the lhs's valid K "
            f"{left.valid_col} (a dynamic K tail): TMATMUL would read {left.valid_col - right.valid_row} "
            "stale rows of the Right tile"
        )


def _mad(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    left, right = ins
    if e.params.get("dynamic_k"):
        check_dynamic_k(e, left, right)
    t = e.outputs[0].type
    assert isinstance(t, TileType)
    acc = alloc(ctx, t, (left.valid_row, right.valid_col) if _dynamic(t) else None)
    runtime.isa.tmatmul(acc, left, right, accumulate=False, gemv=bool(e.params.get("gemv")))
    return [acc]


def _mad_acc(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    acc, left, right = ins
    if e.params.get("dynamic_k"):
        check_dynamic_k(e, left, right)
    if not ctx.consumes(e, 0):  # the accumulator is still read later: TMATMUL_ACC on a copy
        t = e.outputs[0].type
        assert isinstance(t, TileType)
        copy = alloc(ctx, t, (acc.valid_row, acc.valid_col))
        copy.data[:] = acc.data
        acc = copy
    runtime.isa.tmatmul(acc, left, right, accumulate=True, gemv=bool(e.params.get("gemv")))
    return [acc]


def _specialize_mad(st: Step) -> Run | None:
    t = st.eqn.outputs[0].type
    if not isinstance(t, TileType):
        return None
    space, rows, cols, dt = tile_dims(t)
    vr, vc = static_valid(t)  # a decode batch's Acc tile: the store writes its M valid rows
    dyn = _dynamic(t)  # a ragged tile's valid extents are its operands' (TMATMUL m, n) at run time
    gemv = bool(st.eqn.params.get("gemv"))  # TGEMV: m = 1 exactly, k = Right.validRow
    if st.eqn.params.get("dynamic_k"):  # the generic impls check the run-time K cover
        return None
    if st.eqn.primitive is P.tile_mad_p:
        s_l, s_r = st.ins

        def body(ctx: Any, env: list[Any]) -> Any:
            left, right = env[s_l], env[s_r]
            if dyn:
                acc = ctx.onchip.alloc_tile(
                    space, rows, cols, dt, valid_row=left.valid_row, valid_col=right.valid_col
                )
            else:
                acc = ctx.onchip.alloc_tile(space, rows, cols, dt, valid_row=vr, valid_col=vc)
            _tmatmul(acc, left, right, accumulate=False, gemv=gemv)
            return acc

        return finish(st, body)
    s_acc, s_l, s_r = st.ins
    in_place = 0 in st.consumed

    def body_acc(ctx: Any, env: list[Any]) -> Any:
        acc = env[s_acc]
        if not in_place:  # the accumulator is still read later: TMATMUL_ACC on a copy
            copy = ctx.onchip.alloc_tile(
                space, rows, cols, dt, valid_row=acc.valid_row, valid_col=acc.valid_col
            )
            copy.data[:] = acc.data
            acc = copy
        _tmatmul(acc, env[s_l], env[s_r], accumulate=True, gemv=gemv)
        return acc

    return finish(st, body_acc)


def _batch_mad(st: Step) -> Any:
    """TMATMUL / TMATMUL_ACC of whole tiles for every lane: one stacked product, added into the
    accumulator in place when its old sums die here and no deferred store still reads them. A
    ragged N tile (n = Right.validCol, whole 16-column blocks) writes its valid columns only."""
    e = st.eqn
    accumulate = e.primitive is P.tile_mad_acc_p
    with_bias = e.primitive is P.tile_mad_bias_p
    in_place = accumulate and 0 in st.consumed
    t = e.outputs[0].type
    geom = result_geometry(t)
    if geom is None or not isinstance(t, TileType):
        return None
    vs = t.valid_shape
    acc_rows = geom.rows if vs is None else vs[0]  # a decode batch's accumulator has M < 16 valid rows
    if acc_rows is None:
        return None
    ins = st.ins
    (o,) = st.outs
    gemv = bool(e.params.get("gemv"))  # TGEMV: m = 1 exactly, k = Right.validRow
    if e.params.get("dynamic_k"):  # a run-time K: lane by lane, where each mad checks its K cover
        return None

    def run(s: LaneState, env: list[Any]) -> None:
        bias = None
        if accumulate:
            acc, left, right = (env[i] for i in ins)
            if type(acc) is not LaneAcc or acc.freed:
                raise Fallback("accumulator")
        elif with_bias:
            left, right, bias = (env[i] for i in ins)
            if (
                type(bias) is not LaneTile
                or bias.freed
                or bias.g.space != "Bias"
                or bias.g.dtype != geom.dtype
            ):
                raise Fallback("bias row")
        else:
            left, right = (env[i] for i in ins)
        if type(left) is not LaneWindow or type(right) is not LaneWindow or left.freed or right.freed:
            raise Fallback("mad operands")
        if (
            left.g.space != "Left"
            or right.g.space != "Right"
            or left.g.layout != "ZZ"
            or right.g.layout != "ZN"
        ):
            raise Fallback("mad operand spaces")
        if (geom.dtype, left.g.dtype, right.g.dtype) not in MATMUL_DTYPES or geom.layout != "ACC":
            raise Fallback("mad dtypes")
        # m = Left.validRow, as TMATMUL takes it (m == 1 computes a whole fractal); the rows of
        # the accumulator past m keep no defined value, and a store writes its valid rows only
        m, k, n = left.valid_row, left.g.cols, right.valid_col
        if m == 1 and not gemv:
            m = 16
        if (
            (gemv and (m != 1 or right.valid_row != k))
            or left.valid_col != k
            or max(m, k, n) > 4095
            or k > right.g.rows
            or n % 16
            or ceil16(m) != geom.rows
            or n > geom.cols
            or acc_rows > m
            or (accumulate and (acc.valid_row, acc.valid_col) != (acc_rows, n))
        ):
            raise Fallback("not a whole-tile mad")
        is_int = geom.dtype == np.int32
        if not accumulate:
            s.reserve(geom)
            acc = LaneAcc(geom, s.empty((s.L, geom.rows, geom.cols), geom.dtype), acc_rows, n)
            if n < geom.cols:  # as the per-lane TMATMUL leaves the fresh tile's other columns
                s.do(acc.data[:, :, n:].fill, 0)
        elif not in_place or id(acc.data) in s.pinned:  # a deferred store still reads the old sums
            s.reserve(geom)
            acc = LaneAcc(geom, s.copy(acc.data), acc_rows, n)
        data = acc.data if m == geom.rows else acc.data[:, :m]
        if n < geom.cols:
            data = data[:, :, :n]
        if bias is not None and n > bias.valid_col:
            raise Fallback("bias row narrower than n")
        # the product (and its operands' conversion) as one recorded call: it writes `data`
        # and the attempt's scratch only, so a replay repeats it whole
        if s.recording:  # the operands as they are now (below)
            left, right = _as_now(left), _as_now(right)
            bias = None if bias is None else _tile_as_now(bias)
        s.do(mad_lanes, s, left, right, m, k, n, data, accumulate, is_int)
        if bias is not None:
            s.do(_add_bias_rows, acc, bias, m, n)
        env[o] = acc

    return replays(run)


rule(P.tile_mad_p, specialize=_specialize_mad, batch=_batch_mad, multiplies=True)(_mad)


def _mad_bias(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    """TMATMUL_BIAS: a fresh accumulator, the one-row Bias tile added to every row."""
    left, right, bias = ins
    if e.params.get("dynamic_k"):
        check_dynamic_k(e, left, right)
    t = e.outputs[0].type
    assert isinstance(t, TileType)
    acc = alloc(ctx, t, (left.valid_row, right.valid_col) if _dynamic(t) else None)
    runtime.isa.tmatmul(acc, left, right, accumulate=False, bias=bias, gemv=bool(e.params.get("gemv")))
    return [acc]


def _specialize_mad_bias(st: Step) -> Run | None:
    """The impl as a step (so its Left / Right TEXTRACTs fuse into it as windows, plan.py)."""
    e = st.eqn

    def body(ctx: Any, env: list[Any]) -> Any:
        return _mad_bias(ctx, e, [env[i] for i in st.ins])[0]

    return finish(st, body)


def _batch_bias_row(st: Step) -> Any:
    """TMOV Mat -> Bias of every lane's bias row: one Bias image per distinct source image (the
    lanes that load the same bias window share it), each moved by the instruction itself."""
    t = st.eqn.outputs[0].type
    geom = result_geometry(t)
    if geom is None or not isinstance(t, TileType):
        return None
    s_src, s_r, s_c = st.ins
    (o,) = st.outs

    def run(s: LaneState, env: list[Any]) -> None:
        src, r0, c0 = env[s_src], uniform(env[s_r]), uniform(env[s_c])
        if type(src) is not LaneTile or src.freed:
            raise Fallback("bias row source")
        vr, vc = _window_valid(t, src, r0, c0) if _dynamic(t) else (geom.rows, geom.cols)
        images = np.zeros((src.n_images, geom.nbytes), np.uint8)
        for u in range(src.n_images):  # one TMOV per distinct bias row (not per element)
            try:
                runtime.isa.tmov(TileBuf.from_geometry(geom, vr, vc, images[u]), src.image(u), r0, c0)
            except runtime.DeviceError:
                raise Fallback("refused bias move") from None
        s.reserve(geom)
        env[o] = LaneTile(geom, vr, vc, images, src.row)

    return run


def _tile_as_now(x: LaneTile) -> LaneTile:
    """A copy of lane tile `x` in its present state, for a recorded call: a tile still lazy now
    (read straight from GM) but materialised by a later step of the recording, or given up to a
    later step's result, would otherwise be read differently when the call is repeated."""
    return LaneTile(x.g, x.valid_row, x.valid_col, x.held, x.row, x.gm_images, x._fill)


def _as_now(w: LaneWindow) -> LaneWindow:
    """`_tile_as_now` of a mad operand's source."""
    return LaneWindow(w.g, _tile_as_now(w.src), w.r0, w.c0, w.transpose, w.valid_row, w.valid_col)


def _add_bias_rows(acc: LaneAcc, bias: Any, m: int, n: int) -> None:
    """Every lane's accumulator += its bias row (after the product, as TMATMUL_BIAS adds it)."""
    rows = np.stack([bias.image(u).window(0, 0, 1, n)[0] for u in range(bias.n_images)])
    acc.data[:, :m, :n] += rows[bias.row][:, None, :]  # int32 wraps like the accumulator


rule(P.tile_mad_bias_p, specialize=_specialize_mad_bias, batch=_batch_mad, multiplies=True)(_mad_bias)
rule(P.tile_mad_acc_p, specialize=_specialize_mad, batch=_batch_mad, multiplies=True)(_mad_acc)


# --------------------------------------------------------------------------- transpose view
def _specialize_transpose_view(st: Step) -> Run | None:
    (a,) = st.ins
    (o,) = st.outs

    def run(ctx: Any, env: list[Any]) -> None:
        env[o] = TransposedTile(env[a])

    return replays(run)  # (also the batch form: a view of its operand, no buffer work)


@rule(P.tile_transpose_view_p, specialize=_specialize_transpose_view, batch=_specialize_transpose_view)
def _transpose_view(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    return [TransposedTile(ins[0])]
