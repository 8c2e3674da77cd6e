"""TSTORE models: Acc (L0C) / Vec (UB) / Mat (L1) -> GM, dispatched like pto-isa ``TSTORE_IMPL``.

* Acc -> NZ GM: ``TStoreAccNz2nz`` (§4) -- the column-block pitch comes from the *partition*
  height, every gStride is ignored, a batch extent is folded into the column count, nSize is a
  12-bit field.  Stores into a dense whole-height NZ tensor are exact; anything else mis-writes
  exactly as the device does (§4.4, §9.6-9.8).
* Acc -> ND GM: ``TStoreAccNz2nd`` (§5) -- honours the row pitch, exact.
* Vec ND -> ND GM: row copy (mirror of ``TLoadGm2ubNd2nd``).
* Mat NZ -> NZ GM: ``TStoreMat2GmNz2Nz`` (§5) -- mirror of the NZ load, same 16-bit gap field.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .convert import check_acc_pair, fixpipe_convert
from .dma import (
    BurstFields,
    InstrPlan,
    ceil16,
    copy_bursts,
    decode,
    defect_warning,
    dma_burst,
    pto_assert,
    record_call,
    recording,
    static_check,
    u16,
    write_in_order,
)
from .errors import DeviceError
from .gmview import GmView
from .load import batch_offsets, check_nz_view, nd_batch
from .memory import GlobalMemory
from .tile import TileBuf

__all__ = [
    "tstore",
    "store_plan",
    "nz_store_acc",
    "nd_store_acc",
    "AccNdTransfer",
    "vec_store_nd",
    "mat_store_nz",
    "read_acc",
]


def tstore(
    gm: GlobalMemory,
    dst: GmView,
    tile: TileBuf,
    *,
    atomic_add: bool = False,
    relu: bool = False,
    compact: bool = False,
    debug: bool = False,
) -> None:
    """TSTORE(dst, tile).  ``compact`` selects ``CompactMode::Normal`` of the Acc tile (srcStride
    = ceil16(validRow) instead of Rows); ``relu`` / ``compact`` exist on the Acc path only.

    The model is decoded once per (view geometry, tile geometry, flags) and replayed."""
    tile._live()
    store_plan(gm, dst, tile, atomic_add=atomic_add, relu=relu, compact=compact, debug=debug).run(
        gm, dst.addr, tile
    )


def store_plan(
    gm: GlobalMemory,
    dst: GmView,
    tile: TileBuf,
    *,
    atomic_add: bool = False,
    relu: bool = False,
    compact: bool = False,
    debug: bool = False,
) -> InstrPlan:
    """The decoded TSTORE of ``tile``'s geometry into ``dst``'s (its address is not part of it)."""
    key = (
        dst.dtype,
        dst.shape,
        dst.strides,
        dst.layout,
        tile._g,
        tile.valid_row,
        tile.valid_col,
        atomic_add,
        relu,
        compact,
        debug,
    )
    plan = _PLANS.get(key)
    if plan is None:
        plan = decode(
            tstore_model,
            gm,
            dst._trusted(0, dst.shape),
            tile,
            atomic_add=atomic_add,
            relu=relu,
            compact=compact,
            debug=debug,
        )
        if len(_PLANS) < 8192:
            _PLANS[key] = plan
    return plan


_PLANS: dict[tuple[object, ...], InstrPlan] = {}


def tstore_model(
    gm: GlobalMemory,
    dst: GmView,
    tile: TileBuf,
    *,
    atomic_add: bool = False,
    relu: bool = False,
    compact: bool = False,
    debug: bool = False,
) -> None:
    """The TSTORE model itself (checks, dispatch, transfers), as pto-isa ``TSTORE_IMPL``."""
    tile._live()
    if tile.space == "Acc" and dst.layout == "NZ":
        m, n, src_stride = _nz_acc_fields(dst, tile, compact, debug)  # decoding: warnings go to the plan
        if recording():  # not a burst copy: each run writes at the view's real address
            shape = dst.shape
            record_call(
                lambda gm, addr, tile: _nz_acc_write(
                    gm, dst._trusted(addr, shape), tile, m, n, src_stride, relu, atomic_add
                )
            )
            return None
        return _nz_acc_write(gm, dst, tile, m, n, src_stride, relu, atomic_add)
    if tile.space == "Acc":
        m, n, src_stride = _nd_acc_fields(dst, tile, compact, debug)  # decoding: warnings go to the plan
        if recording():  # each run writes at the view's real address; the checks are done
            shape = dst.shape

            def write(gm: GlobalMemory, addr: int, tile: TileBuf) -> None:
                _nd_acc_write(gm, dst._trusted(addr, shape), tile, m, n, src_stride, relu, atomic_add)

            write.acc_nd = AccNdTransfer(  # type: ignore[attr-defined]
                m,
                n,
                dst.strides5[3] * dst.itemsize,
                dst.dtype,
                relu,
                atomic_add,
                src_stride == tile.rows and m <= tile.rows and n <= tile.cols,
            )
            record_call(write)
            return None
        return _nd_acc_write(gm, dst, tile, m, n, src_stride, relu, atomic_add)
    static_check(not relu and not compact, lambda: "relu / compact are fixpipe (Acc store) features")
    static_check(
        tile.dtype.itemsize == dst.dtype.itemsize,
        lambda: f"sizeof(tile T) {tile.dtype.itemsize} != sizeof(GM T) {dst.dtype.itemsize}",
    )
    if tile.space == "Vec" and tile.layout == "ND" and dst.layout == "ND":
        return vec_store_nd(gm, dst, tile, atomic_add=atomic_add, debug=debug)
    if tile.space == "Mat" and tile.layout == "NZ" and dst.layout == "NZ" and not atomic_add:
        return mat_store_nz(gm, dst, tile, debug=debug)
    raise DeviceError(
        f"static check failed: TSTORE of a {tile.space} {tile.layout} tile into "
        f"{dst.layout} GM{' with atomic add' if atomic_add else ''} is not supported"
    )


def read_acc(tile: TileBuf, m: int, n: int, src_stride: int) -> np.ndarray:
    """The ``m x n`` values the fixpipe reads from L0C with a column-block pitch of
    ``src_stride*16`` elements (== ``tile.rows`` when the tile is read as declared)."""
    if (
        type(tile) is TileBuf
        and tile._logical
        and src_stride == tile.rows
        and m <= tile.rows
        and n <= tile.cols
    ):
        tile._live()  # the image is the logical matrix (cube.tmatmul): read at the declared pitch
        return tile._data.view(tile.dtype).reshape(tile.rows, tile.cols)[:m, :n]
    nblk = -(-n // 16)
    E = tile.dtype.itemsize
    raw = tile.view(0, (nblk, m, 16 * E), (src_stride * 16 * E, 16 * E, 1)).view(tile.dtype)
    return raw.transpose(1, 0, 2).reshape(m, nblk * 16)[:, :n]


def _acc_fields(tile: TileBuf, out_dtype: np.dtype, compact: bool, debug: bool) -> tuple[int, int, int]:
    """Shared Acc-store register fields: (mSize, nSize, srcStride) after narrowing."""
    static_check(tile.layout == "ACC", lambda: f"Acc tile layout {tile.layout}")
    check_acc_pair(tile.dtype, out_dtype)
    static_check(1 <= tile.cols <= 4095, lambda: f"Acc tile Cols {tile.cols} in [1, 4095]")
    pto_assert(1 <= tile.valid_col <= 4095, lambda: f"validCol {tile.valid_col} in [1, 4095]", debug)
    m, n = u16(tile.valid_row), tile.valid_col & 0xFFF
    if n != tile.valid_col:
        defect_warning(f"Acc store nSize is 12 bits: validCol {tile.valid_col} sent as {n}")
    if m != tile.valid_row:
        defect_warning(f"Acc store mSize is 16 bits: validRow {tile.valid_row} sent as {m}")
    src_stride = u16(ceil16(tile.valid_row) if compact else tile.rows)
    return m, n, src_stride


def nz_store_acc(
    gm: GlobalMemory,
    dst: GmView,
    tile: TileBuf,
    *,
    atomic_add: bool = False,
    relu: bool = False,
    compact: bool = False,
    debug: bool = False,
) -> None:
    """``TStoreAccNz2nz`` (§4): GM byte ``addr + (c//w)*dstStride*32 + r*c0Size + (c%w)*E``.

    ``dstStride = (g2*g3*c0Size) >> 5`` uses the partition height, never ``s1``; ``s0`` is not
    read either, so ``g0 > 1`` folds batches into consecutive column blocks (§4.3).  Channel
    split (fp32, ``g4 == 8``) is the same formula with 32-byte rows (§10: assumed).
    """
    m, n, src_stride = _nz_acc_fields(dst, tile, compact, debug)
    _nz_acc_write(gm, dst, tile, m, n, src_stride, relu, atomic_add)


def _nz_acc_fields(dst: GmView, tile: TileBuf, compact: bool, debug: bool) -> tuple[int, int, int]:
    """The Acc -> NZ store's checks, its defect warning and its register fields (mSize, nSize,
    srcStride)."""
    g0, g1, g2, g3, g4 = dst.shape5
    out, E = dst.dtype, dst.itemsize
    static_check(
        len(dst.shape) == 5,
        lambda: f"TStoreAccNz2nz: layout=nz requires a rank-5 view (NZ-6), got shape {dst.shape}",
    )
    # float may use 8 (channel split) or 16 columns per block, int32 16, half/bf16 32 // E.
    ok_g4 = (8, 16) if out == np.float32 else (16,) if out == np.int32 else (32 // E,)
    static_check(
        g3 == 16 and g4 in ok_g4,
        lambda: (
            f"TStoreAccNz2nz needs shape[3] == 16 and shape[4] in {ok_g4} for {out.name}, got {dst.shape5}"
        ),
    )
    static_check(
        1 <= tile.rows <= 65535 and tile.cols % 16 == 0,
        lambda: f"Acc NZ store needs Rows in [1, 65535] and Cols % 16 == 0, got {tile.rows}x{tile.cols}",
    )
    m, n, src_stride = _acc_fields(tile, out, compact, debug)
    pto_assert(tile.valid_row == g2 * g3, lambda: f"validRow {tile.valid_row} == g2*g3 = {g2 * g3}", debug)
    pto_assert(
        tile.valid_col == g0 * g1 * g4,
        lambda: f"validCol {tile.valid_col} == g0*g1*g4 = {g0 * g1 * g4}",
        debug,
    )
    pto_assert(
        1 <= tile.valid_row <= 65535 and tile.valid_col % 16 == 0,
        lambda: f"validRow {tile.valid_row} in [1, 65535], validCol {tile.valid_col} % 16 == 0",
        debug,
    )
    s0, s1 = dst.strides5[0], dst.strides5[1]
    if m and n > g4 and not ((g1 == 1 or s1 == m * g4) and (g0 == 1 or s0 == g1 * m * g4)):
        defect_warning(
            f"TStoreAccNz2nz ignores the parent strides (HW §4.3): column blocks are written "
            f"{m * g4} elements apart (partition height {m}), the view's strides are s0 = {s0}, "
            f"s1 = {s1}; only a dense whole-height NZ target is stored correctly"
        )
    return m, n, src_stride


def _nz_acc_write(
    gm: GlobalMemory,
    dst: GmView,
    tile: TileBuf,
    m: int,
    n: int,
    src_stride: int,
    relu: bool,
    atomic_add: bool,
) -> None:
    """The Acc -> NZ store's transfer, its checks done (`_nz_acc_fields`). Without the defect
    warning, the bytes written are exactly those of the view."""
    if m == 0 or n == 0:
        return
    g4, out, E = dst.shape5[4], dst.dtype, dst.itemsize
    c0_bytes = E * g4
    dst_stride = ((dst.shape5[2] * dst.shape5[3] * c0_bytes) >> 5) % 2**32
    vals = fixpipe_convert(read_acc(tile, m, n, src_stride), out, relu)
    nfull, rem = divmod(n, g4)
    if nfull:
        d = gm.view(dst.addr, (nfull, m, c0_bytes), (dst_stride * 32, c0_bytes, 1)).view(out)
        write_in_order(d, vals[:, : nfull * g4].reshape(m, nfull, g4).transpose(1, 0, 2), atomic_add)
    if rem:
        d = gm.view(dst.addr + nfull * dst_stride * 32, (m, rem * E), (c0_bytes, 1)).view(out)
        write_in_order(d, vals[:, nfull * g4 :], atomic_add)


def nd_store_acc(
    gm: GlobalMemory,
    dst: GmView,
    tile: TileBuf,
    *,
    atomic_add: bool = False,
    relu: bool = False,
    compact: bool = False,
    debug: bool = False,
) -> None:
    """``TStoreAccNz2nd`` (§5): GM[addr + (r*s3 + c)*E] <- convert(Acc(r, c)); the row pitch
    ``s3`` is honoured, so this path has no mis-write."""
    m, n, src_stride = _nd_acc_fields(dst, tile, compact, debug)
    _nd_acc_write(gm, dst, tile, m, n, src_stride, relu, atomic_add)


class AccNdTransfer(NamedTuple):
    """What a decoded ``TStoreAccNz2nd`` writes, for callers that run it for many addresses at
    once: GM[addr + r*row_pitch + c*E] (+)= convert(Acc(r, c)) for r < m, c < n, in ``out`` after
    pre-ReLU (``relu``).  ``logical`` is True when the fixpipe reads the accumulator's logical
    matrix at its declared pitch (``read_acc``'s first case), i.e. ``Acc[:m, :n]``."""

    m: int
    n: int
    row_pitch: int
    out: np.dtype
    relu: bool
    atomic_add: bool
    logical: bool


def _nd_acc_fields(dst: GmView, tile: TileBuf, compact: bool, debug: bool) -> tuple[int, int, int]:
    """The Acc -> ND store's checks and register fields (mSize, nSize, srcStride)."""
    g0, g1, g2, g3, g4 = dst.shape5
    static_check(tile.rows <= 8192, lambda: f"Acc ND store needs Rows <= 8192, got {tile.rows}")
    m, n, src_stride = _acc_fields(tile, dst.dtype, compact, debug)
    pto_assert(g0 == g1 == g2 == 1, lambda: f"ND store shape[0..2] == 1, got {dst.shape5}", debug)
    pto_assert(
        tile.valid_col == g4 and tile.valid_row == g3,
        lambda: f"valid {tile.valid_row}x{tile.valid_col} == shape {g3}x{g4}",
        debug,
    )
    pto_assert(1 <= tile.valid_row <= 8192, lambda: f"validRow {tile.valid_row} in [1, 8192]", debug)
    return m, n, src_stride


def _nd_acc_write(
    gm: GlobalMemory,
    dst: GmView,
    tile: TileBuf,
    m: int,
    n: int,
    src_stride: int,
    relu: bool,
    atomic_add: bool,
) -> None:
    """The Acc -> ND store's transfer, its checks done (`_nd_acc_fields`): ``AccNdTransfer``."""
    if m == 0 or n == 0:
        return
    out, E = dst.dtype, dst.itemsize
    vals = fixpipe_convert(read_acc(tile, m, n, src_stride), out, relu)
    d = gm.view(dst.addr, (m, n * E), (dst.strides5[3] * E, 1)).view(out)
    write_in_order(d, vals, atomic_add)


def vec_store_nd(
    gm: GlobalMemory, dst: GmView, tile: TileBuf, *, atomic_add: bool = False, debug: bool = False
) -> None:
    """UB ND -> GM ND: ``g3`` bursts of ``validCol*E`` bytes, GM pitch ``s3*E``, UB pitch
    ``Cols*E``, with the same (g0, g1, g2) loops as the load."""
    g0, g1, g2, g3, g4 = dst.shape5
    E = dst.itemsize
    pto_assert(tile.valid_col == g4, lambda: f"validCol {tile.valid_col} == gShape4 {g4}", debug)
    pto_assert(
        tile.valid_row == g0 * g1 * g2 * g3,
        lambda: f"validRow {tile.valid_row} == g0*g1*g2*g3 = {g0 * g1 * g2 * g3}",
        debug,
    )
    if not 1 <= g3 <= 4095:
        raise DeviceError(f"UB ND store: nBurst = gShape3 = {g3} is outside 1..4095")
    batch = [(c, d, s) for c, s, d in nd_batch(dst, tile)]  # swap: source is the tile
    copy_bursts(
        tile,
        0,
        gm,
        dst.addr,
        n_burst=g3,
        nbytes=tile.valid_col * E,
        src_pitch=tile.cols * E,
        dst_pitch=dst.strides5[3] * E,
        batch=batch,
        add_dtype=dst.dtype if atomic_add else None,
    )


def mat_store_nz(gm: GlobalMemory, dst: GmView, tile: TileBuf, debug: bool = False) -> None:
    """``TStoreMat2GmNz2Nz`` (§5): the NZ load's mirror; the GM gap goes through the same 16-bit
    field of ``copy_cbuf_to_gm`` (§8 ``dma_burst``), so it wraps like pto-isa#317."""
    g0, g1, g2, g3, g4 = check_nz_view(dst, "TStoreMat2GmNz2Nz")
    s0, s1 = dst.strides5[0], dst.strides5[1]
    E, rows, vr = dst.itemsize, tile.rows, tile.valid_row
    pto_assert(vr == g2 * g3, lambda: f"validRow {vr} == gShape2*gShape3 = {g2 * g3}", debug)
    gap_true = (((s1 - g2 * g3 * g4) * E) % 2**64) >> 5
    gap_sent = u16(gap_true % 2**32)
    if g1 >= 2 and gap_sent != gap_true:
        defect_warning(f"NZ store GM gap wrapped: {gap_true} blocks of 32 B sent as {gap_sent}")
    src_step = rows * g1 * g4 * E
    fields = BurstFields(n_burst=g1, len_burst=vr, src_gap=(rows - vr) % 2**32, dst_gap=gap_sent)
    offs = batch_offsets(g0, s0)
    if offs is None:
        dma_burst(tile, 0, gm, dst.addr, batch=[(g0, src_step, s0 * E)] if g0 > 1 else [], **fields)
        return
    for i, off in enumerate(offs):
        dma_burst(tile, i * src_step, gm, dst.addr + off * E, **fields)
