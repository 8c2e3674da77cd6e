"""TLOAD GM(NZ) -> Mat(NZ): the 16-bit gmGap defect (HW §2, §9.1-9.5, NZ-25, NZ-27)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import rt_reference as ref

import runtime
from runtime import DeviceError, GmView, HardwareDefectWarning, TileBuf
from runtime.isa import tload


def _parent(R, C, dtype, seed=19, lo=-5, hi=5, batch=None):
    """A logical NZ parent uploaded to a fresh worker; returns (worker, tensor, logical, view)."""
    rng = np.random.default_rng(seed)
    shape = (R, C) if batch is None else (batch, R, C)
    logical = rng.integers(lo, hi, size=shape).astype(dtype)
    w = runtime.Worker()
    t = w.alloc_tensor(shape, dtype, init=runtime.pack_nz(logical))
    return w, t, logical, GmView.dense(t.address, shape, dtype, "NZ")


def _load(w, view, rows, cols, dtype, valid_row=None, **kw):
    tile = TileBuf("Mat", dtype, rows, cols, valid_row=valid_row)
    tload(w.gm, view, tile, **kw)
    return tile


def test_issue_317_failing_case_exact_wrong_count():  # HW §9.1, §9.3, NZ-25
    # int16 view <1,2,8,16,16> in parent <1,2,4104,16,16>: gap 65536 blocks is sent as 0.
    w, t, P, parent = _parent(4104 * 16, 32, np.int16)
    assert parent.shape == (1, 2, 4104, 16, 16) and parent.strides[1] == 1050624
    view = parent.partition((0, 0, 0, 0, 0), (1, 2, 8, 16, 16))
    with pytest.warns(HardwareDefectWarning, match="pto-isa#317"):
        tile = _load(w, view, 128, 32, np.int16)
    got = tile.logical()
    # Burst 0 (column block 0) is right; burst 1 reads block 0 rows 128..255.
    np.testing.assert_array_equal(got[:, :16], P[:128, :16])
    np.testing.assert_array_equal(got[:, 16:], P[128:256, :16])
    wrong = int((got != P[:128, :32]).sum())
    predicted = int((P[128:256, :16] != P[:128, 16:32]).sum())
    assert wrong == predicted
    assert (got[:, :16] == P[:128, :16]).all()
    # 2048 wrong-sourced elements, ~10% coincide (randint(-5, 5) has 10 values): 1843 +- 14.
    assert 1843 - 6 * 14 < wrong < 1843 + 6 * 14


def test_single_column_block_is_immune():  # HW §9.2, NZ-27
    w, t, P, parent = _parent(4104 * 16, 16, np.int16)
    view = parent.partition((0, 0, 0, 0, 0), (1, 1, 8, 16, 16))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tile = _load(w, view, 128, 16, np.int16)
    np.testing.assert_array_equal(tile.logical(), P[:128])


def test_generic_wrap_rule_fp16_70000_rows():  # HW §9.4
    w, t, P, parent = _parent(70000, 32, np.float16)
    view = parent.partition((0, 0, 0, 0, 0), (1, 2, 16, 16, 16))
    with pytest.warns(HardwareDefectWarning, match="69744 blocks .* sent as 4208"):
        tile = _load(w, view, 256, 32, np.float16)
    got = tile.logical()
    np.testing.assert_array_equal(got[:, :16], P[:256, :16])
    np.testing.assert_array_equal(got[:, 16:], P[4464 : 4464 + 256, :16])


@pytest.mark.parametrize("R,valid_row", [(65536, 128), (65664, 256)])
def test_passing_neighbours(R, valid_row):  # HW §9.5: gap 65408 fits
    w, t, P, parent = _parent(R, 32, np.int16)
    view = parent.partition((0, 0, 0, 0, 0), (1, 2, valid_row // 16, 16, 16))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tile = _load(w, view, valid_row, 32, np.int16)
    np.testing.assert_array_equal(tile.logical(), P[:valid_row])


@pytest.mark.parametrize("R,tile_rows,wraps", [(65536, 16, False), (65552, 16, True), (65552, 32, False)])
def test_gap_guard_table(R, tile_rows, wraps):  # NZ-25 table, int8 (gap independent of dtype)
    w, t, P, parent = _parent(R, 64, np.int8)
    view = parent.partition((0, 0, 0, 0, 0), (1, 2, tile_rows // 16, 16, 32))
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        tile = _load(w, view, tile_rows, 64, np.int8)
    assert any("pto-isa#317" in str(r.message) for r in rec) == wraps
    assert np.array_equal(tile.logical(), P[:tile_rows]) != wraps


def test_sub_tile_at_offset_and_batch_loop_are_exact():  # HW §1.2 sub-tile views, §2.2 batch
    w, t, P, parent = _parent(64, 96, np.float16, batch=3, lo=-100, hi=100)
    # batch 1..2, rows 16..47, column blocks 2..5 (cols 32..95)
    view = parent.partition((1, 2, 1, 0, 0), (2, 4, 2, 16, 16))
    tile = _load(w, view, 32, 128, np.float16)
    got = tile.logical()
    np.testing.assert_array_equal(got[:, :64], P[1, 16:48, 32:96])
    np.testing.assert_array_equal(got[:, 64:], P[2, 16:48, 32:96])


def test_valid_row_smaller_than_tile_rows_leaves_padding():  # l1Gap = Rows - validRow
    w, t, P, parent = _parent(64, 32, np.float16, lo=1, hi=9)
    view = parent.partition((0, 0, 0, 0, 0), (1, 2, 2, 16, 16))
    tile = _load(w, view, 48, 32, np.float16, valid_row=32)
    got = tile.logical()
    np.testing.assert_array_equal(got[:32], P[:32])
    assert (got[32:] == 0).all()


@pytest.mark.parametrize("seed", range(6))
def test_matches_section8_reference_on_random_geometry(seed):  # HW §8 nz_load
    rng = np.random.default_rng(seed)
    dtype = [np.int8, np.float16, np.float32][seed % 3]
    E = np.dtype(dtype).itemsize
    c0 = 32 // E
    B, RB, KB = int(rng.integers(1, 3)), int(rng.integers(2, 6)), int(rng.integers(1, 4))
    w, t, P, parent = _parent(RB * 16, KB * c0, dtype, seed=seed, batch=B, lo=-50, hi=50)
    b0, k0, r0 = int(rng.integers(0, B)), int(rng.integers(0, KB)), int(rng.integers(0, RB))
    g0, g1, g2 = (
        int(rng.integers(1, B - b0 + 1)),
        int(rng.integers(1, KB - k0 + 1)),
        int(rng.integers(1, RB - r0 + 1)),
    )
    view = parent.partition((b0, k0, r0, 0, 0), (g0, g1, g2, 16, c0))
    rows = g2 * 16 + 16 * int(rng.integers(0, 2))
    tile = _load(w, view, rows, g0 * g1 * c0, dtype, valid_row=g2 * 16)
    gm_bytes = w.gm.read(t.address, t.nbytes)
    l1 = np.zeros(tile.nbytes, np.uint8)
    ref.nz_load(gm_bytes, view.addr - t.address, view.shape, view.strides, E, rows, g2 * 16, l1)
    np.testing.assert_array_equal(tile.data, l1)


def test_static_checks_raise():  # HW §2.1 CheckNzFormat static part
    w, t, P, parent = _parent(32, 32, np.int8)
    bad_g4 = GmView(parent.addr, np.int8, (1, 1, 2, 16, 16), parent.strides, "NZ")
    with pytest.raises(DeviceError, match="CheckNzFormat"):
        _load(w, bad_g4, 32, 32, np.int8)
    rank3 = GmView(parent.addr, np.int8, (1, 32, 32), (1024, 32, 1), "NZ")
    with pytest.raises(DeviceError, match="rank-5"):
        _load(w, rank3, 32, 32, np.int8)
    with pytest.raises(DeviceError, match="sizeof"):
        _load(w, parent, 32, 16, np.int16)
    with pytest.raises(DeviceError, match="Vec or Mat"):
        tload(w.gm, parent, TileBuf("Left", np.int8, 32, 32))


def test_runtime_asserts_warn_in_release_raise_in_debug():  # HW §2.1, [DBG]
    w, t, P, parent = _parent(64, 32, np.int8)
    view = parent.partition((0, 0, 0, 0, 0), (1, 1, 4, 16, 32))
    with pytest.warns(HardwareDefectWarning, match="validRow 32 == gShape2"):
        tile = _load(w, view, 64, 32, np.int8, valid_row=32)  # loads 32 rows only
    np.testing.assert_array_equal(tile.logical()[:32], P[:32])
    with pytest.raises(DeviceError, match="PTO_ASSERT failed"):
        _load(w, view, 64, 32, np.int8, valid_row=32, debug=True)


def test_nburst_out_of_range_raises():  # HW §2.3, §10
    gm = runtime.GlobalMemory()
    big = GmView(gm.alloc(4096 * 512), np.int8, (1, 4096, 1, 16, 32), (0, 512, 512, 32, 1), "NZ")
    with pytest.raises(DeviceError, match="nBurst"):
        tload(gm, big, TileBuf("Mat", np.int8, 16, 32), debug=False)


def test_out_of_bounds_view_is_refused():
    w, t, P, parent = _parent(32, 32, np.int8)
    view = parent.partition((0, 0, 1, 0, 0), (1, 1, 2, 16, 32))  # rows 16..47 of a 32-row parent
    with pytest.raises(DeviceError, match="outside every allocation"):
        _load(w, view, 32, 32, np.int8)


def test_negative_batch_stride_wraps_32_bit_and_faults():  # HW §2.2 i*s0 in uint32
    w, t, P, parent = _parent(32, 32, np.int8, batch=2)
    view = GmView(parent.addr + 1024, np.int8, (2, 1, 2, 16, 32), (-1024, 1024, 512, 32, 1), "NZ")
    with pytest.raises(DeviceError, match="outside every allocation"):
        _load(w, view, 32, 64, np.int8)
