"""TLOAD models: GM -> Mat (L1) / Vec (UB), dispatched like pto-isa ``TLOAD_TILE_IMPL``.

Paths (hardware-model.md):

* NZ view -> Mat NZ tile: ``TLoadGm2L1Nz2nz`` (§2) -- the 16-bit ``gmGap`` defect (pto-isa#317).
* NZ view -> Vec NZ tile: ``TLoadGm2ubNz2nz`` (§2.4) -- byte-granular, no 16-bit narrowing.
* ND view -> Mat NZ tile: ``TLoadGm2L1Nd2nz`` (§3) -- zero-filled tail columns, uint16 pitch.
* ND view -> Mat ND tile: ``TLoadGm2L1Nd2nd`` (§5) -- uint16 gap.
* ND view -> Vec ND tile: ``TLoadGm2ubNd2nd`` (§5) -- byte lengths, 32-bit gap.

pto-isa ``static_assert`` s become :class:`DeviceError` (the program would not compile);
``PTO_ASSERT`` s only warn unless ``debug=True`` (they are compiled out in release builds).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from ._strided import byte_span
from .dma import (
    BurstFields,
    CopyFields,
    InstrPlan,
    copy_bursts,
    decode,
    defect_warning,
    dma_burst,
    pto_assert,
    record_call,
    record_copy_call,
    recording,
    static_check,
    u16,
)
from .errors import DeviceError
from .gmview import GmView
from .memory import GlobalMemory
from .tile import TileBuf

__all__ = [
    "tload",
    "load_plan",
    "nz_load",
    "nz_load_ub",
    "nd2nz_load",
    "nd2nd_load_l1",
    "nd2nd_load_ub",
    "TLOAD_DTYPES",
    "batch_offsets",
    "check_nz_view",
    "nd_batch",
]

#: CheckNormalTileData dtype set [TLC L299-330]; fp8 (one byte) is accepted for the A5 target.
TLOAD_DTYPES = frozenset(
    np.dtype(t)
    for t in (
        np.int8,
        np.uint8,
        np.int16,
        np.uint16,
        np.int32,
        np.uint32,
        np.int64,
        np.uint64,
        np.float16,
        np.float32,
        ml_dtypes.bfloat16,
        ml_dtypes.float8_e4m3fn,
        ml_dtypes.float8_e5m2,
    )
)


def _dtype_ok(dt: np.dtype) -> bool:
    return dt in TLOAD_DTYPES


def batch_offsets(g0: int, s0: int) -> list[int] | None:
    """Element offsets ``(i*s0) mod 2^32`` of the batch loop, or None when they are affine.

    pto-isa computes ``i * s0`` in 32-bit unsigned arithmetic (§2.2); only a > 4 G-element
    batch stride (or a negative one) makes that differ from ``i*s0``.
    """
    if s0 >= 0 and (g0 - 1) * s0 < 2**32:
        return None
    return [(i * s0) % 2**32 for i in range(g0)]


def tload(gm: GlobalMemory, src: GmView, tile: TileBuf, debug: bool = False) -> None:
    """TLOAD(tile, src): dispatch on (GM layout, tile space, tile layout) like TLOAD_TILE_IMPL.

    The model is decoded once per (view geometry, tile geometry) and replayed (dma.decode)."""
    tile._live()
    load_plan(gm, src, tile, debug).run(gm, src.addr, tile)


def load_plan(gm: GlobalMemory, src: GmView, tile: TileBuf, debug: bool = False) -> InstrPlan:
    """The decoded TLOAD of ``src``'s geometry into ``tile``'s (its address is not part of it)."""
    key = (src.dtype, src.shape, src.strides, src.layout, tile._g, tile.valid_row, tile.valid_col, debug)
    plan = _PLANS.get(key)
    if plan is None:
        plan = decode(tload_model, gm, src._trusted(0, src.shape), tile, debug=debug)
        if len(_PLANS) < 8192:
            _PLANS[key] = plan
    return plan


_PLANS: dict[tuple[object, ...], InstrPlan] = {}


def tload_model(gm: GlobalMemory, src: GmView, tile: TileBuf, debug: bool = False) -> None:
    """The TLOAD model itself (checks, dispatch, bursts), as pto-isa ``TLOAD_TILE_IMPL``."""
    tile._live()
    static_check(
        tile.space in ("Vec", "Mat"), lambda: f"TLOAD destination must be Vec or Mat, got {tile.space}"
    )
    static_check(
        _dtype_ok(tile.dtype) and _dtype_ok(src.dtype),
        lambda: f"TLOAD dtype {src.dtype.name} -> {tile.dtype.name} not supported",
    )
    static_check(
        tile.dtype.itemsize == src.dtype.itemsize,
        lambda: f"sizeof(tile T) {tile.dtype.itemsize} != sizeof(GM T) {src.dtype.itemsize}",
    )
    static_check(
        src.dtype.itemsize < 8 or (src.layout == "ND" and tile.layout == "ND"),
        lambda: "64-bit dtypes load ND2ND only",
    )
    pto_assert(
        all(g > 0 for g in src.shape5) and tile.valid_row > 0 and tile.valid_col > 0,
        lambda: f"shapes {src.shape5} and valid {tile.valid_row}x{tile.valid_col} must be > 0",
        debug,
    )
    if src.layout == "NZ":
        static_check(
            tile.layout == "NZ", lambda: f"NZ GM into a {tile.space} {tile.layout} tile is not supported"
        )
        if tile.space == "Mat":
            return nz_load(gm, src, tile, debug)
        return nz_load_ub(gm, src, tile, debug)
    if tile.space == "Mat" and tile.layout == "NZ":
        return nd2nz_load(gm, src, tile, debug)
    if tile.layout == "ND":
        if tile.space == "Mat":
            return nd2nd_load_l1(gm, src, tile, debug)
        return nd2nd_load_ub(gm, src, tile, debug)
    raise DeviceError(f"static check failed: ND GM into a {tile.space} {tile.layout} tile")


def check_nz_view(src: GmView, what: str) -> tuple[int, ...]:
    """Static checks of an NZ GM view (rank 5, ``shape[3] == 16``, ``shape[4] == c0``; NZ-6); its shape."""
    c0 = 32 // src.itemsize
    static_check(
        len(src.shape) == 5, lambda: f"{what}: layout=nz requires a rank-5 view (NZ-6), got shape {src.shape}"
    )
    g = src.shape5
    static_check(
        g[3] == 16 and g[4] == c0,
        lambda: (
            f"{what}: CheckNzFormat needs shape[3] == 16 and "
            f"shape[4] == c0 = {c0} for {src.dtype.name}, got {g}"
        ),
    )
    return g


def nz_load(gm: GlobalMemory, src: GmView, tile: TileBuf, debug: bool = False) -> None:
    """``TLoadGm2L1Nz2nz`` + ``TLoadInstrGm2L1`` (§2.2, §2.3), including the gmGap wrap.

    Burst k of batch i reads ``validRow`` 32-B rows from
    ``addr + ((i*s0) mod 2^32)*E + k*(validRow + u16(gap))*32`` where the true gap is
    ``R_parent - validRow`` blocks: once that reaches 65536 and there are >= 2 column blocks,
    bursts 1.. read rows of an earlier column block (pto-isa#317).  gStride2..4 are never read.
    """
    g0, g1, g2, g3, g4 = check_nz_view(src, "TLoadGm2L1Nz2nz")
    s0, s1 = src.strides5[0], src.strides5[1]
    E, rows, vr = src.itemsize, tile.rows, tile.valid_row
    pto_assert(vr == g2 * g3, lambda: f"validRow {vr} == gShape2*gShape3 = {g2 * g3}", debug)
    pto_assert(
        tile.valid_col == g0 * g1 * g4,
        lambda: f"validCol {tile.valid_col} == gShape0*gShape1*gShape4 = {g0 * g1 * g4}",
        debug,
    )
    pto_assert(g1 < 4096, lambda: f"gShape1 {g1} < 4096", debug)
    gap_true = (((s1 - g2 * g3 * g4) * E) % 2**64) >> 5
    gap_sent = u16(gap_true % 2**32)
    if g1 >= 2 and gap_sent != gap_true:
        defect_warning(
            f"NZ gmGap wrapped (pto-isa#317): true gap {gap_true} blocks of 32 B sent "
            f"as {gap_sent}; column blocks 1..{g1 - 1} are read from the wrong rows"
        )
    dst_step = rows * g1 * g4 * E
    fields = BurstFields(n_burst=g1, len_burst=vr, src_gap=gap_sent, dst_gap=(rows - vr) % 2**32)
    offs = batch_offsets(g0, s0)
    if offs is None:
        batch = [(g0, s0 * E, dst_step)] if g0 > 1 else []
        dma_burst(gm, src.addr, tile, 0, batch=batch, **fields)
        return
    for i, off in enumerate(offs):  # 32-bit wrap of i*s0: batches are no longer affine
        dma_burst(gm, src.addr + off * E, tile, i * dst_step, **fields)


def nz_load_ub(gm: GlobalMemory, src: GmView, tile: TileBuf, debug: bool = False) -> None:
    """``TLoadGm2ubNz2nz`` (§2.4): byte lengths and a 32-bit byte gap, so no 16-bit wrap."""
    g0, g1, g2, g3, g4 = check_nz_view(src, "TLoadGm2ubNz2nz")
    s0, s1 = src.strides5[0], src.strides5[1]
    E, rows, vr = src.itemsize, tile.rows, tile.valid_row
    pto_assert(vr == g2 * g3, lambda: f"validRow {vr} == gShape2*gShape3 = {g2 * g3}", debug)
    if not 1 <= g1 <= 4095 or vr < 1:
        raise DeviceError(f"UB NZ load: nBurst {g1} outside 1..4095 or validRow {vr} < 1")
    len_bytes = (vr * 32) % 2**32
    gap_bytes = ((s1 - vr * g4) * E) % 2**32
    ub_gap = u16(rows - vr)
    dst_step = rows * g1 * g4 * E
    offs = batch_offsets(g0, s0)
    kw = CopyFields(
        n_burst=g1, nbytes=len_bytes, src_pitch=len_bytes + gap_bytes, dst_pitch=len_bytes + ub_gap * 32
    )
    if offs is None:
        copy_bursts(gm, src.addr, tile, 0, batch=[(g0, s0 * E, dst_step)] if g0 > 1 else [], **kw)
        return
    for i, off in enumerate(offs):
        copy_bursts(gm, src.addr + off * E, tile, i * dst_step, **kw)


def nd2nz_load(gm: GlobalMemory, src: GmView, tile: TileBuf, debug: bool = False) -> None:
    """``TLoadGm2L1Nd2nz`` (§3): L1 Nz(r, c) <- GM[addr + (r*u16(s3) + c)*E], r < g3, c < g4.

    The tail of the last partial C0 line is zero-filled; rows g3.. are not written.  The GM row
    pitch travels in the 16-bit ``srcDValue`` field, so a pitch >= 65536 elements wraps.
    """
    g0, g1, g2, g3, g4 = src.shape5
    s3 = src.strides5[3]
    E, c0 = src.itemsize, 32 // src.itemsize
    static_check(
        g0 == g1 == g2 == 1, lambda: f"ND2NZ only supports 2 dims (shape[0..2] == 1), got {src.shape5}"
    )
    static_check(tile.rows <= 16384, lambda: f"ND2NZ tile Rows {tile.rows} <= 16384")
    pto_assert(1 <= g3 <= 16384, lambda: f"gShape3 {g3} in [1, 16384]", debug)
    pto_assert(1 <= g4 <= 65535, lambda: f"gShape4 {g4} in [1, 65535]", debug)
    pto_assert(1 <= s3 <= 65535, lambda: f"gStride3 {s3} in [1, 65535]", debug)
    n_rows, n_cols, pitch = u16(g3), u16(g4), u16(s3)
    if pitch != s3:
        defect_warning(f"ND2NZ srcDValue wrapped: GM row pitch {s3} elements sent as {pitch}")
    if n_rows < 1 or n_cols < 1:
        raise DeviceError(f"ND2NZ with nValue {n_rows} / dValue {n_cols}: empty transfer is undefined")
    nblk = -(-n_cols // c0)
    if n_rows > tile.rows or nblk * c0 > tile.cols:
        raise DeviceError(f"ND2NZ of {n_rows}x{n_cols} does not fit the {tile.rows}x{tile.cols} tile")
    s_shape, s_strides = (n_rows, n_cols * E), (pitch * E, 1)
    d_shape, d_strides = (nblk, n_rows, 32), (tile.rows * 32, 32, 1)
    s_lo, s_hi = byte_span(0, s_shape, s_strides)
    d_lo, d_hi = byte_span(0, d_shape, d_strides)
    whole = n_cols * E == nblk * 32

    def copy(gm: GlobalMemory, addr: int, tile: TileBuf) -> None:
        rows_bytes = gm.view_span(addr, s_shape, s_strides, s_lo, s_hi)
        dst = tile.view_span(0, d_shape, d_strides, d_lo, d_hi)
        if whole:  # whole C0 lines: move them as 32-byte items (one strided copy, no padding pass)
            dst.view(_LINE)[..., 0] = rows_bytes.view(_LINE).T
            return
        padded = np.zeros((n_rows, nblk * 32), dtype=np.uint8)
        padded[:, : n_cols * E] = rows_bytes
        dst[...] = padded.reshape(n_rows, nblk, 32).transpose(1, 0, 2)

    if recording():  # decoded: only the copy is replayed (the checks above depend on geometry only)
        if whole:  # then exactly one burst copy: column block b, row r -> tile line (b, r)
            record_copy_call(
                copy,
                n_burst=n_rows,
                nbytes=32,
                src_pitch=pitch * E,
                dst_pitch=32,
                batch=((nblk, 32, tile.rows * 32),),
            )
        else:
            record_call(copy)
        return
    copy(gm, src.addr, tile)


_LINE = np.dtype("V32")


def nd_checks(src: GmView, tile: TileBuf, debug: bool) -> tuple[int, ...]:
    """The ND load's ``pto_assert``s (validCol == g4, validRow == g0*g1*g2*g3, g3 < 4096); the 5-D shape."""
    g0, g1, g2, g3, g4 = src.shape5
    pto_assert(tile.valid_col == g4, lambda: f"validCol {tile.valid_col} == gShape4 {g4}", debug)
    pto_assert(
        tile.valid_row == g0 * g1 * g2 * g3,
        lambda: f"validRow {tile.valid_row} == g0*g1*g2*g3 = {g0 * g1 * g2 * g3}",
        debug,
    )
    pto_assert(g3 < 4096, lambda: f"gShape3 {g3} < 4096", debug)
    return g0, g1, g2, g3, g4


def nd_batch(src: GmView, tile: TileBuf) -> list[tuple[int, int, int]]:
    """The (g0, g1, g2) loops: src ``i*s0 + j*s1 + k*s2``, dst ``((i*g1 + j)*g2 + k)*g3*Cols``."""
    g0, g1, g2, g3, _ = src.shape5
    s0, s1, s2 = src.strides5[:3]
    E, plane = src.itemsize, g3 * tile.cols * src.itemsize
    loops = [(g0, s0 * E, g1 * g2 * plane), (g1, s1 * E, g2 * plane), (g2, s2 * E, plane)]
    return [lp for lp in loops if lp[0] != 1]


def nd2nd_load_l1(gm: GlobalMemory, src: GmView, tile: TileBuf, debug: bool = False) -> None:
    """``TLoadGm2L1Nd2nd`` (§5): lenBurst = validCol*E/32, gmGap = ((s3 - g4)*E) >> 5 in uint16."""
    g0, g1, g2, g3, g4 = nd_checks(src, tile, debug)
    E = src.itemsize
    pto_assert((g4 * E) % 32 == 0, lambda: f"gShape4*sizeof {g4 * E} % 32 == 0", debug)
    gap_true = (((src.strides5[3] - g4) * E) % 2**64) >> 5
    gap_sent = u16(gap_true)
    if g3 >= 2 and gap_sent != gap_true:
        defect_warning(f"ND2ND L1 gmGap wrapped: {gap_true} blocks of 32 B sent as {gap_sent}")
    l1_gap = (((tile.cols - tile.valid_col) * E) % 2**32) >> 5
    dma_burst(
        gm,
        src.addr,
        tile,
        0,
        n_burst=g3,
        len_burst=((tile.valid_col * E) % 2**32) >> 5,
        src_gap=gap_sent,
        dst_gap=l1_gap,
        batch=nd_batch(src, tile),
    )


def nd2nd_load_ub(gm: GlobalMemory, src: GmView, tile: TileBuf, debug: bool = False) -> None:
    """``TLoadGm2ubNd2nd`` (§5): byte-granular bursts, 32-bit byte gap, UB rows of Cols*E bytes."""
    g0, g1, g2, g3, g4 = nd_checks(src, tile, debug)
    static_check(tile.rows < 4096, lambda: f"UB ND tile Rows {tile.rows} < 4096")
    if not 1 <= g3 <= 4095:
        raise DeviceError(f"UB ND load: nBurst = gShape3 = {g3} is outside 1..4095")
    E = src.itemsize
    len_bytes = (tile.valid_col * E) % 2**32
    gap = ((src.strides5[3] - tile.valid_col) * E) % 2**32
    ub_pitch = -(-len_bytes // 32) * 32 + u16((tile.cols * E - -(-len_bytes // 32) * 32) // 32) * 32
    copy_bursts(
        gm,
        src.addr,
        tile,
        0,
        n_burst=g3,
        nbytes=len_bytes,
        src_pitch=len_bytes + gap,
        dst_pitch=ub_pitch,
        batch=nd_batch(src, tile),
    )
