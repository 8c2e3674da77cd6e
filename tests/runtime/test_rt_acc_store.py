"""TSTORE Acc (L0C) -> GM: NZ mis-write from the partition height (HW §4, §9.6-9.8, NZ-23, NZ-24)."""

from __future__ import annotations

import warnings

import ml_dtypes
import numpy as np
import pytest
import rt_reference as ref

import runtime
from runtime import DeviceError, GmView, HardwareDefectWarning, TileBuf
from runtime.isa import tstore

STALE = -1.0


def _acc(rows, cols, values=None, dtype=np.float32, **kw):
    t = TileBuf("Acc", dtype, rows, cols, **kw)
    if values is not None:
        t.set_logical(np.asarray(values, dtype=dtype))
    return t


def _nz_parent(shape, dtype, fill=STALE):
    w = runtime.Worker()
    t = w.alloc_tensor(shape, dtype, init=runtime.pack_nz(np.full(shape, fill, dtype=dtype)))
    return w, t, GmView.dense(t.address, shape, dtype, "NZ")


def _logical(w, t):
    return runtime.unpack_nz(w.copy_from(t))


def _tile_values(k):
    return (1000 * (k + 1) + np.arange(64 * 16).reshape(64, 16)).astype(np.float32)


def _store_quadrants(order):
    w, t, parent = _nz_parent((128, 32), np.float32)
    assert parent.shape == (1, 4, 8, 16, 8) and parent.strides == (4096, 1024, 128, 8, 1)
    tiles = {}
    for k, (r0, col0) in enumerate(order):
        tiles[(r0, col0)] = _tile_values(k)
        view = parent.partition((0, col0 // 8, r0 // 16, 0, 0), (1, 2, 4, 16, 8))  # NZ-20 partition
        with pytest.warns(HardwareDefectWarning, match="ignores the parent strides"):
            tstore(w.gm, view, _acc(64, 16, tiles[(r0, col0)]))
    return _logical(w, t), tiles


def test_four_store_mis_write_exactly_2048_wrong():  # HW §4.4, §9.6
    P, T = _store_quadrants([(0, 0), (64, 0), (0, 16), (64, 16)])
    intended = np.block([[T[(0, 0)], T[(0, 16)]], [T[(64, 0)], T[(64, 16)]]])
    assert int((P != intended).sum()) == 2048
    for col0 in (0, 16):
        np.testing.assert_array_equal(P[:64, col0 : col0 + 8], T[(0, col0)][:, :8])  # left halves right
        np.testing.assert_array_equal(P[64:, col0 : col0 + 8], T[(64, col0)][:, :8])
        np.testing.assert_array_equal(P[:64, col0 + 8 : col0 + 16], T[(64, col0)][:, 8:])  # lower right half
        assert (P[64:, col0 + 8 : col0 + 16] == STALE).all()  # never written


def test_four_store_mis_write_reverse_order():  # HW §4.4: order-dependent
    P, T = _store_quadrants([(64, 16), (0, 16), (64, 0), (0, 0)])
    intended = np.block([[T[(0, 0)], T[(0, 16)]], [T[(64, 0)], T[(64, 16)]]])
    for col0 in (0, 16):
        np.testing.assert_array_equal(P[64:, col0 : col0 + 8], T[(0, col0)][:, 8:])  # upper spill
        assert (P[64:, col0 + 8 : col0 + 16] == STALE).all()
    assert int((P != intended).sum()) == 3072


def test_single_store_addresses():  # HW §9.6: tile (i, j>=8) at ptr + 512 + i*8 + (j-8)
    w, t, parent = _nz_parent((128, 32), np.float32)
    view = parent.partition((0, 2, 0, 0, 0), (1, 2, 4, 16, 8))  # (r0, col0) = (0, 16)
    vals = _tile_values(0)
    with pytest.warns(HardwareDefectWarning):
        tstore(w.gm, view, _acc(64, 16, vals))
    flat = w.copy_from(t).reshape(-1)
    ptr = 2 * 1024
    i, j = np.meshgrid(np.arange(64), np.arange(16), indexing="ij")
    np.testing.assert_array_equal(flat[ptr + (j // 8) * 512 + i * 8 + j % 8], vals)


def test_batch_folding():  # HW §9.7, NZ-24
    w, t, parent = _nz_parent((2, 64, 16), np.float16, fill=0)
    assert parent.strides[:2] == (1024, 1024)
    view = parent.partition((0, 0, 0, 0, 0), (2, 1, 2, 16, 16))
    vals = np.arange(32 * 32, dtype=np.float32).reshape(32, 32) / 8
    with pytest.warns(HardwareDefectWarning):
        tstore(w.gm, view, _acc(32, 32, vals))
    P = _logical(w, t)
    np.testing.assert_array_equal(P[0, :32], vals[:, :16].astype(np.float16))
    np.testing.assert_array_equal(P[0, 32:], vals[:, 16:].astype(np.float16))  # element 512, not 1024
    assert (P[1] == 0).all()
    assert (w.copy_from(t).reshape(-1)[512:1024] == vals[:, 16:].astype(np.float16).reshape(-1)).all()


def test_immune_whole_height_store():  # HW §9.8: validRow == parent rows
    w, t, parent = _nz_parent((128, 32), np.float32)
    vals = np.arange(128 * 32, dtype=np.float32).reshape(128, 32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for col0 in (16, 0):
            view = parent.partition((0, col0 // 8, 0, 0, 0), (1, 2, 8, 16, 8))
            tstore(w.gm, view, _acc(128, 16, vals[:, col0 : col0 + 16]))
    np.testing.assert_array_equal(_logical(w, t), vals)


def test_immune_single_block_half():  # HW §9.8: 64x16 half, one 16-wide block
    w, t, parent = _nz_parent((128, 32), np.float16, fill=0)
    vals = np.arange(64 * 16, dtype=np.float32).reshape(64, 16)
    view = parent.partition((0, 1, 4, 0, 0), (1, 1, 4, 16, 16))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tstore(w.gm, view, _acc(64, 16, vals))
    P = _logical(w, t)
    np.testing.assert_array_equal(P[64:, 16:], vals.astype(np.float16))
    assert (P[:64] == 0).all() and (P[64:, :16] == 0).all()


def test_immune_float_with_16_column_blocks():  # HW §9.8: float, g4 = 16 (64-byte rows)
    w = runtime.Worker()
    t = w.alloc_tensor((128 * 32,), np.float32, init=np.zeros(128 * 32, np.float32))  # zeroed, not poison
    parent = GmView(t.address, np.float32, (1, 2, 8, 16, 16), (4096, 2048, 256, 16, 1), "NZ")
    vals = np.arange(64 * 16, dtype=np.float32).reshape(64, 16) + 1
    view = parent.partition((0, 1, 4, 0, 0), (1, 1, 4, 16, 16))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tstore(w.gm, view, _acc(64, 16, vals))
    flat = w.copy_from(t)
    r, c = np.meshgrid(np.arange(64, 128), np.arange(16, 32), indexing="ij")
    np.testing.assert_array_equal(flat[(c // 16) * 2048 + r * 16 + c % 16], vals)
    assert int((flat != 0).sum()) == 64 * 16


@pytest.mark.parametrize("out_dtype", [np.float32, np.float16, ml_dtypes.bfloat16])
def test_conversion_is_round_to_nearest_even(out_dtype):  # HW §4.1 F322F16 / F322BF16
    vals = np.random.default_rng(0).standard_normal((16, 32)).astype(np.float32) * 1000
    vals[0, :4] = [1 + 2**-11, 1 + 3 * 2**-11, 1 + 2**-8, 1 + 3 * 2**-8]  # ties
    w, t, parent = _nz_parent((16, 32), out_dtype, fill=0)
    tstore(w.gm, parent, _acc(16, 32, vals))
    P = _logical(w, t)
    np.testing.assert_array_equal(P.view(np.uint8), vals.astype(out_dtype).view(np.uint8))


def test_relu_and_int32():
    vals = np.arange(-256, 256, dtype=np.int32).reshape(16, 32)
    w, t, parent = _nz_parent((16, 32), np.int32, fill=7)
    # int32 NZ destination uses 16 columns per block on the store side (HW §1.1)
    view = GmView(parent.addr, np.int32, (1, 2, 1, 16, 16), (512, 256, 256, 16, 1), "NZ")
    tstore(w.gm, view, _acc(16, 32, vals, dtype=np.int32), relu=True)
    got = w.copy_from(t).reshape(2, 16, 16).transpose(1, 0, 2).reshape(16, 32)
    np.testing.assert_array_equal(got, np.maximum(vals, 0))


def test_atomic_add():
    w, t, parent = _nz_parent((16, 16), np.float32, fill=1.5)
    tstore(w.gm, parent, _acc(16, 16, np.full((16, 16), 2.0)), atomic_add=True)
    assert (_logical(w, t) == 3.5).all()


def test_nsize_wrap_stores_only_low_bits():
    w = runtime.Worker()
    t = w.alloc_tensor((16 * 32,), np.float32, init=np.zeros(16 * 32, np.float32))  # zeroed, not poison
    view = GmView(t.address, np.float32, (1, 2, 1, 16, 8), (0, 128, 128, 8, 1), "NZ")
    acc = _acc(16, 32, np.ones((16, 32)), valid_col=32 + 4096)
    with pytest.warns(HardwareDefectWarning, match="12 bits"):
        tstore(w.gm, view, acc)
    assert (w.copy_from(t) == 1).all()


@pytest.mark.parametrize("seed", range(4))
def test_matches_section8_reference(seed):  # HW §8 nz_store_acc, random partition geometry
    rng = np.random.default_rng(seed)
    out = [np.float32, np.float16, ml_dtypes.bfloat16, np.float32][seed]
    g4 = [8, 16, 16, 16][seed]
    R, C = 64, 64
    w = runtime.Worker()
    t = w.alloc_tensor((2 * R * C,), out, init=np.zeros(2 * R * C, out))  # zeroed, not poison
    strides = (R * C, R * g4, 16 * g4, g4, 1)
    g0, g1, g2 = int(rng.integers(1, 3)), int(rng.integers(1, 3)), int(rng.integers(1, 4))
    off = (0, int(rng.integers(0, C // g4 - g1 + 1)), int(rng.integers(0, R // 16 - g2 + 1)), 0, 0)
    view = GmView(t.address, out, (2, C // g4, R // 16, 16, g4), strides, "NZ").partition(
        off, (g0, g1, g2, 16, g4)
    )
    n = g0 * g1 * g4
    n16 = -(-n // 16) * 16
    acc = TileBuf("Acc", np.float32, g2 * 16 + 16, n16, valid_row=g2 * 16, valid_col=n)
    acc.set_logical(rng.standard_normal((acc.rows, n16)).astype(np.float32))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tstore(w.gm, view, acc)
    gm = np.zeros(t.nbytes, np.uint8)
    ref.nz_store_acc(
        gm,
        view.addr - t.address,
        view.shape,
        out,
        acc.data.view(np.float32),
        acc.rows,
        acc.valid_row,
        acc.valid_col,
    )
    np.testing.assert_array_equal(w.gm.read(t.address, t.nbytes), gm)


def test_static_checks():
    w, t, parent = _nz_parent((16, 32), np.float16, fill=0)
    with pytest.raises(DeviceError, match="shape\\[4\\]"):
        tstore(w.gm, GmView(parent.addr, np.float16, (1, 4, 1, 16, 8), parent.strides, "NZ"), _acc(16, 32))
    with pytest.raises(DeviceError, match="fixpipe conversion"):
        tstore(w.gm, GmView(parent.addr, np.int16, parent.shape, parent.strides, "NZ"), _acc(16, 32))
    with pytest.raises(DeviceError, match="fixpipe conversion"):
        tstore(w.gm, parent, _acc(16, 32, dtype=np.int32))


def test_debug_asserts():
    w, t, parent = _nz_parent((32, 16), np.float32, fill=0)
    view = parent.partition((0, 0, 0, 0, 0), (1, 2, 1, 16, 8))
    with pytest.raises(DeviceError, match="PTO_ASSERT failed: validRow 32 == g2\\*g3"):
        tstore(w.gm, view, _acc(32, 16), debug=True)


def test_acc_to_nd_honours_row_pitch():  # HW §5 TStoreAccNz2nd
    w = runtime.Worker()
    t = w.alloc_tensor((128, 96), np.float16, init=np.zeros((128, 96), np.float16))  # zeroed
    parent = GmView.dense(t.address, (128, 96), np.float16)
    vals = np.arange(64 * 48, dtype=np.float32).reshape(64, 48) / 4
    view = parent.partition((32, 16), (64, 48))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tstore(w.gm, view, _acc(64, 48, vals))
    out = w.copy_from(t)
    np.testing.assert_array_equal(out[32:96, 16:64], vals.astype(np.float16))
    out[32:96, 16:64] = 0
    assert (out == 0).all()


def test_acc_to_nd_compact_reads_ceil16_valid_row():  # HW §5 srcStride = ceil16(validRow)
    w = runtime.Worker()
    t = w.alloc_tensor((16, 32), np.float32, init=np.zeros((16, 32), np.float32))  # zeroed
    acc = _acc(32, 32, valid_row=16)
    acc.data.view(np.float32)[: 16 * 32] = np.arange(16 * 32)  # as mad writes with pitch 16
    tstore(w.gm, GmView.dense(t.address, (16, 32), np.float32), acc, compact=True)
    r, c = np.meshgrid(np.arange(16), np.arange(32), indexing="ij")
    np.testing.assert_array_equal(w.copy_from(t), ((c // 16) * 256 + r * 16 + c % 16).astype(np.float32))
