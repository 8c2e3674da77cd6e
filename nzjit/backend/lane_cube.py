"""Lane-batched Cube steps (see batched.py): a TEXTRACT fused into its mad (`LaneWindow`), and the
mad itself as one stacked np.matmul over the lanes, operands converted once per distinct image."""

from __future__ import annotations

from typing import Any

import numpy as np

import runtime
from runtime import TileBuf
from runtime.cube import _F32_EXACT_K, MATMUL_DTYPES, _mov_checks
from runtime.dma import ceil16

from ..core.ir import Eqn
from ..core.types import TileType
from .fast_core import result_geometry
from .lane_state import Fallback, LaneState, Step, uniform
from .lane_values import LaneAcc, LaneTile, LaneWindow
from .values import TransposedTile


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


def extract_step(e: Eqn, ins: tuple[int, ...], outs: tuple[int, ...]) -> Step | None:
    """TEXTRACT of a Left / Right tile that only the next mad reads: checked as the instruction does,
    charged on chip, kept as a `LaneWindow` of its source (no bytes move)."""
    t = e.outputs[0].type
    vr = _valid_rows(t)
    geom = result_geometry(t)
    if geom is None or vr is None:
        return None
    s_src, s_r, s_c = ins
    (o,) = outs
    checked: set[tuple[Any, ...]] = set()  # source geometries and windows that passed the checks

    def run(s: LaneState, env: list[Any]) -> None:
        src, r0, c0 = env[s_src], uniform(env[s_r]), uniform(env[s_c])
        transpose = False
        while type(src) is TransposedTile:
            src, transpose, r0, c0 = src.tile, not transpose, c0, r0
        if type(src) is not LaneTile or src.freed:
            raise Fallback("extract source")
        key = (src.g, src.valid_row, src.valid_col, r0, c0, transpose)
        if key not in checked:  # the instruction's checks depend on these only: once per geometry
            probe_src = TileBuf._from_geometry(src.g, src.valid_row, src.valid_col, None)  # type: ignore[arg-type]
            probe = TileBuf._from_geometry(geom, vr, geom.cols, None)  # type: ignore[arg-type]
            try:
                _mov_checks(probe, probe_src, r0, c0, transpose, False)
                nrows, ncols = (geom.cols, geom.rows) if transpose else (geom.rows, geom.cols)
                probe_src._check_window(r0, c0, nrows, ncols)
            except runtime.DeviceError:
                raise Fallback("refused extract") from None
            if len(checked) < 1024:
                checked.add(key)
        s.reserve(geom)
        env[o] = LaneWindow(geom, src, r0, c0, transpose, vr)

    return run


def _products(s: LaneState, left: LaneWindow, right: LaneWindow, m: int, k: int, n: int,
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


def _float_mad_in_chunks(s: LaneState, left: LaneWindow, right: LaneWindow, m: int, k: int, n: int,
                         data: np.ndarray, accumulate: bool) -> bool:
    """A float mad of a group of more than `MAD_CHUNK` lanes that each have their own Right image:
    its Right operands converted, multiplied and accumulated `MAD_CHUNK` lanes at a time, so
    they are still in cache when BLAS reads them (a large group keeps the interpretation cheap,
    a chunk keeps the data small). The same BLAS call per lane as `_products`: the same bits.
    False (nothing done) when the mad does not have that form."""
    L = s.L
    rx, rw = left.src.row, right.src.row
    if L <= MAD_CHUNK or right.src.n_images != L or not _is_identity(rw, L):
        return False
    xa: Any = left.operands(ceil16(m), k, np.float32, lambda sh, dt: s.scratch(sh, dt, "left"))
    if xa is None:
        return False
    if m % 16:
        xa = xa[:, :m]
    rows = rx.tolist()
    for l0 in range(0, L, MAD_CHUNK):
        l1 = min(L, l0 + MAD_CHUNK)
        bt = right.operands(k, n, np.float32, lambda sh, dt: s.scratch(sh, dt, "right"), (l0, l1))
        if bt is None:  # alignment does not depend on the images: only the first chunk can fail
            return False
        out = s.scratch((l1 - l0, m, n), np.float32, "products") if accumulate else data[l0:l1]
        first = rows[l0]
        if all(u == first for u in rows[l0:l1]):  # the chunk's lanes share one Left image
            np.matmul(xa[first], bt.transpose(0, 2, 1), out=out)
        else:
            np.matmul(xa[rx[l0:l1]], bt.transpose(0, 2, 1), out=out)
        if accumulate:
            np.add(data[l0:l1], out, out=data[l0:l1])
    return True


#: Lanes per chunk of a float mad in a larger lane group (`_float_mad_in_chunks`).
MAD_CHUNK = 16


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


def mad_step(e: Eqn, ins: tuple[int, ...], outs: tuple[int, ...], accumulate: bool,
              in_place: bool) -> Step | None:
    """TMATMUL (`accumulate` False) / TMATMUL_ACC of whole tiles for every lane: one stacked product,
    added into the accumulator in place when its old sums die here (`in_place`) and no deferred
    store still reads them."""
    t = e.outputs[0].type
    acc_rows = _valid_rows(t)  # a decode batch's accumulator has M < 16 valid rows
    geom = result_geometry(t)
    if geom is None or acc_rows is None:
        return None
    (o,) = outs

    def run(s: LaneState, env: list[Any]) -> None:
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
            acc = LaneAcc(geom, s.empty((s.L, geom.rows, n), geom.dtype), acc_rows)
            s.alloc_bytes += acc.data.nbytes
        elif not in_place or id(acc.data) in s.pinned:  # a deferred store still reads the old sums
            s.reserve(geom)
            acc = LaneAcc(geom, s.copy(acc.data), acc_rows)
            s.alloc_bytes += acc.data.nbytes
        data = acc.data if m == geom.rows else acc.data[:, :m]
        if not is_int and _float_mad_in_chunks(s, left, right, m, k, n, data, accumulate):
            pass
        elif not accumulate and not is_int:  # a float mad that starts the accumulator: products in place
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
