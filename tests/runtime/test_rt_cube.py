"""TMATMUL (mad) and TMOV/TEXTRACT (HW §6): m == 1 forced to 16, L0C write pitch, exact int8."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import rt_reference as ref

import runtime
from runtime import DeviceError, GmView, HardwareDefectWarning, TileBuf
from runtime.cube import _product
from runtime.isa import tmatmul, tmov, tstore


def _operands(m_rows, k, n, dtype, seed=0, lo=-4, hi=4):
    rng = np.random.default_rng(seed)
    A = rng.integers(lo, hi, size=(m_rows, k)).astype(dtype)
    B = rng.integers(lo, hi, size=(k, n)).astype(dtype)
    left = TileBuf("Left", dtype, m_rows, k)
    right = TileBuf("Right", dtype, k, n)
    left.set_logical(A)
    right.set_logical(B)
    return A, B, left, right


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.float32])
def test_float_matmul_in_float32(dtype):  # HW §6
    A, B, left, right = _operands(32, 64, 48, dtype)
    acc = TileBuf("Acc", np.float32, 32, 48)
    tmatmul(acc, left, right, accumulate=False)
    np.testing.assert_array_equal(acc.logical(), A.astype(np.float32) @ B.astype(np.float32))
    tmatmul(acc, left, right, accumulate=True)
    np.testing.assert_array_equal(acc.logical(), 2 * (A.astype(np.float32) @ B.astype(np.float32)))


def test_int8_exact_against_int64_with_large_k():  # HW §6, full int8 range, k near the limit
    A, B, left, right = _operands(16, 4064, 32, np.int8, seed=3, lo=-128, hi=128)
    acc = TileBuf("Acc", np.int32, 16, 32)
    tmatmul(acc, left, right, accumulate=False)
    expect = A.astype(np.int64) @ B.astype(np.int64)
    np.testing.assert_array_equal(acc.logical(), expect.astype(np.int32))
    A[:, :] = -128
    B[:, :] = -128
    left.set_logical(A)
    right.set_logical(B)
    tmatmul(acc, left, right, accumulate=False)
    assert (acc.logical() == 4064 * 16384).all()


def test_int8_accumulator_wraps_mod_2_32():
    A, B, left, right = _operands(16, 32, 16, np.int8, lo=1, hi=2)  # all ones: C = 32
    acc = TileBuf("Acc", np.int32, 16, 16)
    acc.set_logical(np.full((16, 16), 2**31 - 1, np.int32))
    tmatmul(acc, left, right, accumulate=True)
    assert (acc.logical() == -(2**31) + 31).all()


def test_integer_path_for_huge_k_is_exact():
    rng = np.random.default_rng(0)
    a = rng.integers(-128, 128, size=(4, 64)).astype(np.int8)
    b = rng.integers(-128, 128, size=(64, 4)).astype(np.int8)
    np.testing.assert_array_equal(_product(a, b, k=2**40), a.astype(np.int64) @ b.astype(np.int64))


def test_m1_forced_to_16_uses_stale_left_rows():  # HW §6 [MM L48-49]
    A, B, left, right = _operands(16, 32, 16, np.float16, seed=5)
    left.valid_row = 1
    acc = TileBuf("Acc", np.float32, 16, 16)
    tmatmul(acc, left, right, accumulate=False)
    np.testing.assert_array_equal(acc.logical(), A.astype(np.float32) @ B.astype(np.float32))


def test_l0c_write_pitch_defect():  # HW §6 [I253, I2470]: pitch ceil16(m), not Acc.Rows
    A, B, left, right = _operands(16, 32, 32, np.float16, seed=6)
    C = A.astype(np.float32) @ B.astype(np.float32)
    acc = TileBuf("Acc", np.float32, 32, 32)
    acc.set_logical(np.full((32, 32), -7, np.float32))
    tmatmul(acc, left, right, accumulate=False)  # m = 16 into a 32-row Acc tile
    got = acc.logical()
    np.testing.assert_array_equal(got[:16, :16], C[:, :16])
    np.testing.assert_array_equal(got[16:, :16], C[:, 16:])  # block 1 lands in rows 16..31
    assert (got[:, 16:] == -7).all()
    # A store reading the tile as declared (pitch Rows = 32) sees the wrong layout ...
    w = runtime.Worker()
    out = w.alloc_tensor((16, 32), np.float32)
    acc.valid_row = 16
    tstore(w.gm, GmView.dense(out.address, (16, 32), np.float32), acc)
    assert not np.array_equal(w.copy_from(out), C)
    # ... and a Compact store (srcStride = ceil16(validRow)) reads it back right.
    tstore(w.gm, GmView.dense(out.address, (16, 32), np.float32), acc, compact=True)
    np.testing.assert_array_equal(w.copy_from(out), C)


@pytest.mark.parametrize("seed", range(3))
def test_matches_section8_mad(seed):  # HW §8 mad (incl. m padding and accumulate)
    rng = np.random.default_rng(seed)
    m, k, n = [(1, 32, 24), (20, 48, 40), (33, 16, 16)][seed]
    A, B, left, right = _operands(48, 64, 48, np.int8, seed=seed, lo=-128, hi=128)
    acc = TileBuf("Acc", np.int32, 48, 48)
    init = rng.integers(-(2**31), 2**31, size=(48, 48)).astype(np.int32)
    acc.set_logical(init)
    expect = acc.data.view(np.int32).copy()
    tmatmul(acc, left, right, accumulate=True, m=m, k=k, n=n)
    ref.mad(expect, A, B, m, k, n, init=False)
    np.testing.assert_array_equal(acc.data.view(np.int32), expect)


def test_bad_operands():
    A, B, left, right = _operands(16, 32, 16, np.float16)
    with pytest.raises(DeviceError, match="triples"):
        tmatmul(TileBuf("Acc", np.int32, 16, 16), left, right, accumulate=False)
    with pytest.raises(DeviceError, match="Left ZZ"):
        tmatmul(TileBuf("Acc", np.float32, 16, 16), right, right, accumulate=False)
    with pytest.raises(DeviceError, match="exceeds"):
        tmatmul(TileBuf("Acc", np.float32, 16, 16), left, right, accumulate=False, k=64)
    with pytest.raises(DeviceError, match="runs outside the tile"):
        tmatmul(
            TileBuf("Acc", np.float32, 16, 16),
            left,
            TileBuf("Right", np.float16, 32, 32),
            accumulate=False,
            n=32,
        )
    with pytest.warns(HardwareDefectWarning, match="4095"):
        big_l = TileBuf("Left", np.int8, 16, 4096)
        tmatmul(
            TileBuf("Acc", np.int32, 16, 16), big_l, TileBuf("Right", np.int8, 4096, 16), accumulate=False
        )


def test_textract_window_into_left_and_right():  # TMOV Mat -> Left / Right
    L = np.arange(64 * 64).reshape(64, 64).astype(np.float16)
    mat = TileBuf("Mat", np.float16, 64, 64)
    mat.set_logical(L)
    left = TileBuf("Left", np.float16, 32, 32)
    tmov(left, mat, 16, 32)
    np.testing.assert_array_equal(left.logical(), L[16:48, 32:64])
    right = TileBuf("Right", np.float16, 32, 16)
    tmov(right, mat, 32, 16)
    np.testing.assert_array_equal(right.logical(), L[32:64, 16:32])
    with pytest.raises(DeviceError, match="fractal grid"):
        tmov(left, mat, 8, 0)


def test_nz_weight_bytes_are_zn_of_the_transpose():  # why NZ weights need no conversion (NZ-3)
    W = np.arange(32 * 64).reshape(32, 64).astype(np.float16)  # [N, K]
    mat = TileBuf("Mat", np.float16, 32, 64)
    mat.set_logical(W)
    right = TileBuf("Right", np.float16, 64, 32)  # [K, N]
    tmov(right, mat, transpose=True)
    np.testing.assert_array_equal(right.logical(), W.T)
    np.testing.assert_array_equal(right.data, mat.data)


def test_acc_to_vec_converts_and_other_moves():
    acc = TileBuf("Acc", np.float32, 16, 32)
    vals = np.linspace(-3, 3, 16 * 32, dtype=np.float32).reshape(16, 32)
    acc.set_logical(vals)
    vec = TileBuf("Vec", np.float16, 16, 32)
    tmov(vec, acc, relu=True)
    np.testing.assert_array_equal(vec.logical(), np.maximum(vals, 0).astype(np.float16))
    vec2 = TileBuf("Vec", np.float16, 16, 16)
    tmov(vec2, vec, 0, 16)
    mat = TileBuf("Mat", np.float16, 16, 16)
    tmov(mat, vec2)
    np.testing.assert_array_equal(mat.logical(), vec.logical()[:, 16:])
    with pytest.raises(DeviceError, match="not supported"):
        tmov(TileBuf("Left", np.float16, 16, 16), vec2)
    with pytest.raises(DeviceError, match="changes the dtype"):
        tmov(TileBuf("Vec", np.float32, 16, 16), vec2)
