"""ND2NZ, ND2ND (L1 / UB), NZ -> UB loads, UB and L1 stores (HW §2.4, §3, §5)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import rt_reference as ref

import runtime
from runtime import DeviceError, GmView, HardwareDefectWarning, TileBuf
from runtime.isa import tload, tstore


def _nd_tensor(shape, dtype, seed=0):
    w = runtime.Worker()
    a = np.random.default_rng(seed).integers(-100, 100, size=shape).astype(dtype)
    t = w.alloc_tensor(shape, dtype, init=a)
    return w, t, a, GmView.dense(t.address, shape, dtype)


def test_nd2nz_zero_fills_tail_columns_and_leaves_rows():  # HW §3
    w, t, a, parent = _nd_tensor((64, 100), np.float16)
    tile = TileBuf("Mat", np.float16, 48, 64)
    tile.set_logical(np.full((48, 64), 9, np.float16))
    tload(w.gm, parent.partition((8, 20), (40, 50)), tile)
    got = tile.logical()
    np.testing.assert_array_equal(got[:40, :50], a[8:48, 20:70])
    assert (got[:40, 50:] == 0).all()  # tail of the last C0 block (cols 50..63) zero-filled
    assert (got[40:] == 9).all()  # rows g3.. not written


def test_nd2nz_matches_reference():  # HW §8 nd2nz_load
    w, t, a, parent = _nd_tensor((40, 70), np.int8, seed=4)
    view = parent.partition((3, 5), (33, 45))
    tile = TileBuf("Mat", np.int8, 48, 64)
    tload(w.gm, view, tile)
    l1 = np.zeros(tile.nbytes, np.uint8)
    ref.nd2nz_load(w.gm.read(t.address, t.nbytes), view.addr - t.address, 33, 45, 70, 1, l1, 48)
    np.testing.assert_array_equal(tile.data, l1)


@pytest.mark.parametrize(
    "rows,cols,tile_rows,dtype", [(32, 64, 32, np.float16), (20, 64, 48, np.int8), (16, 96, 16, np.float32)]
)
def test_nd2nz_whole_lines_declare_their_burst_copy(rows, cols, tile_rows, dtype):  # HW §3
    """An ND2NZ of whole C0 lines is decoded as exactly one burst copy (declared for plan
    consumers that read tile bytes straight from GM): replaying the declared copy writes the same
    tile bytes as the instruction; a partial last C0 line (zero-filled tail) declares nothing."""
    w, t, a, parent = _nd_tensor((64, 128), dtype, seed=3)
    view = parent.partition((5, 32 // np.dtype(dtype).itemsize), (rows, cols))
    tile = TileBuf("Mat", dtype, tile_rows, cols)
    plan = runtime.load.load_plan(w.gm, view, tile)
    ((cp, src_is_gm, so, do),) = plan.copies
    assert (src_is_gm, so, do) == (True, 0, 0)
    by_instr, by_copy = np.full(tile.nbytes, 7, np.uint8), np.full(tile.nbytes, 7, np.uint8)
    plan.run(w.gm, view.addr, TileBuf._from_geometry(tile._g, None, None, by_instr))
    cp.run(w.gm, view.addr, TileBuf._from_geometry(tile._g, None, None, by_copy), 0)
    assert by_instr.tobytes() == by_copy.tobytes()
    assert plan.fills(tile.nbytes) == (rows == tile_rows)
    partial = runtime.load.load_plan(w.gm, parent.partition((0, 0), (rows, cols - 1)), tile)
    assert partial.copies is None


def test_nd2nz_pitch_wraps_to_16_bits():  # HW §3 srcDValue uint16
    w, t, a, parent = _nd_tensor((3, 65552), np.int8)
    tile = TileBuf("Mat", np.int8, 16, 32)
    with pytest.warns(HardwareDefectWarning, match="srcDValue wrapped"):
        tload(w.gm, parent.partition((0, 0), (3, 32)), tile)
    flat = a.reshape(-1)
    got = tile.logical()
    for r in range(3):  # row r read at pitch 65552 & 0xFFFF = 16
        np.testing.assert_array_equal(got[r], flat[r * 16 : r * 16 + 32])


def test_nd2nz_static_two_dims_only():
    w, t, a, parent = _nd_tensor((2, 16, 32), np.int8)
    with pytest.raises(DeviceError, match="only supports 2 dims"):
        tload(w.gm, parent, TileBuf("Mat", np.int8, 16, 32))


def test_nd2nd_into_mat_with_batch_loops():  # HW §5 TLoadGm2L1Nd2nd
    w, t, a, parent = _nd_tensor((3, 32, 64), np.float16)
    view = parent.partition((1, 8, 16), (2, 16, 32))
    tile = TileBuf("Mat", np.float16, 32, 48, layout="ND", valid_col=32)
    tload(w.gm, view, tile)
    got = tile.logical()
    np.testing.assert_array_equal(got[:16, :32], a[1, 8:24, 16:48])
    np.testing.assert_array_equal(got[16:, :32], a[2, 8:24, 16:48])
    assert (got[:, 32:] == 0).all()


def test_nd2nd_into_mat_gap_wraps():  # HW §5: gmGap stored directly in uint16
    w = runtime.Worker()
    pitch = 65536 * 32 + 32
    t = w.alloc_tensor((3 * pitch,), np.int8, init=(np.arange(3 * pitch) % 251).astype(np.int8))
    view = GmView(t.address, np.int8, (3, 32), (pitch, 1))
    tile = TileBuf("Mat", np.int8, 3, 32, layout="ND")
    with pytest.warns(HardwareDefectWarning, match="ND2ND L1 gmGap wrapped"):
        tload(w.gm, view, tile)
    flat = (np.arange(3 * pitch) % 251).astype(np.int8)
    np.testing.assert_array_equal(tile.logical().reshape(-1), flat[:96])  # gap 65536 sent as 0


def test_nd2nd_into_vec_round_trip_via_vec_store():  # HW §5 UB paths
    w, t, a, parent = _nd_tensor((40, 48), np.float32)
    tile = TileBuf("Vec", np.float32, 24, 40, valid_col=24)
    tload(w.gm, parent.partition((8, 16), (24, 24)), tile)
    got = tile.logical()
    np.testing.assert_array_equal(got[:, :24], a[8:32, 16:40])
    out = w.alloc_tensor((24, 64), np.float32, init=np.zeros((24, 64), np.float32))  # zeroed, not poison
    tstore(w.gm, GmView.dense(out.address, (24, 64), np.float32).partition((0, 8), (24, 24)), tile)
    res = w.copy_from(out)
    np.testing.assert_array_equal(res[:, 8:32], a[8:32, 16:40])
    assert (res[:, :8] == 0).all() and (res[:, 32:] == 0).all()


def test_vec_store_atomic_add():
    w, t, a, parent = _nd_tensor((16, 16), np.int32)
    tile = TileBuf("Vec", np.int32, 16, 16)
    tile.set_logical(np.ones((16, 16), np.int32))
    tstore(w.gm, parent, tile, atomic_add=True)
    np.testing.assert_array_equal(w.copy_from(t), a + 1)


def test_vec_tile_rows_limit():
    w, t, a, parent = _nd_tensor((4096, 16), np.float16)
    with pytest.raises(DeviceError, match="Rows 4096 < 4096"):
        tload(w.gm, parent, TileBuf("Vec", np.float16, 4096, 16))


def test_nz_into_vec_tile_has_no_16_bit_wrap():  # HW §2.4
    w = runtime.Worker()
    R = 4104 * 16
    P = np.random.default_rng(1).integers(-5, 5, size=(R, 32)).astype(np.int16)
    t = w.alloc_tensor((R, 32), np.int16, init=runtime.pack_nz(P))
    view = GmView.dense(t.address, (R, 32), np.int16, "NZ").partition((0, 0, 0, 0, 0), (1, 2, 8, 16, 16))
    tile = TileBuf("Vec", np.int16, 128, 32, layout="NZ")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tload(w.gm, view, tile)
    np.testing.assert_array_equal(tile.logical(), P[:128])


def test_mat_store_nz_mirrors_the_load():  # HW §5 TStoreMat2GmNz2Nz
    w = runtime.Worker()
    P = np.arange(64 * 64).reshape(64, 64).astype(np.float16)
    src = w.alloc_tensor((64, 64), np.float16, init=runtime.pack_nz(P))
    dst = w.alloc_tensor((64, 64), np.float16, init=np.zeros((64, 64), np.float16))  # zeroed, not poison
    sview = GmView.dense(src.address, (64, 64), np.float16, "NZ").partition(
        (0, 1, 1, 0, 0), (1, 2, 2, 16, 16)
    )
    dview = GmView.dense(dst.address, (64, 64), np.float16, "NZ").partition(
        (0, 1, 1, 0, 0), (1, 2, 2, 16, 16)
    )
    tile = TileBuf("Mat", np.float16, 32, 32)
    tload(w.gm, sview, tile)
    tstore(w.gm, dview, tile)
    out = runtime.unpack_nz(w.copy_from(dst))
    np.testing.assert_array_equal(out[16:48, 16:48], P[16:48, 16:48])
    out[16:48, 16:48] = 0
    assert (out == 0).all()


def test_mat_store_nz_gap_wraps_too():  # HW §5: same 16-bit field expected
    w = runtime.Worker()
    R = 4104 * 16
    dst = w.alloc_tensor((R, 32), np.int16, init=np.zeros((R, 32), np.int16))  # zeroed, not poison
    view = GmView.dense(dst.address, (R, 32), np.int16, "NZ").partition((0, 0, 0, 0, 0), (1, 2, 8, 16, 16))
    tile = TileBuf("Mat", np.int16, 128, 32)
    tile.set_logical(np.arange(128 * 32).reshape(128, 32).astype(np.int16) + 1)
    with pytest.warns(HardwareDefectWarning, match="wrapped"):
        tstore(w.gm, view, tile)
    out = runtime.unpack_nz(w.copy_from(dst))
    np.testing.assert_array_equal(out[128:256, :16], tile.logical()[:, 16:])  # block 1 lands in block 0
    assert (out[:, 16:] == 0).all()


def test_unsupported_combinations():
    w, t, a, parent = _nd_tensor((16, 32), np.float16)
    with pytest.raises(DeviceError, match="static check"):
        tstore(w.gm, parent, TileBuf("Mat", np.float16, 16, 32))
    with pytest.raises(DeviceError, match="static check"):
        tstore(w.gm, parent, TileBuf("Vec", np.float16, 16, 32), relu=True)
    nzv = GmView.dense(t.address, (16, 32), np.float16, "NZ")
    with pytest.raises(DeviceError, match="NZ GM into a Vec ND tile"):
        tload(w.gm, nzv, TileBuf("Vec", np.float16, 16, 32))
