"""Issue 5 on the device: what the NZ load's 16-bit gmGap does without the guard (NZ-25, NZ-27),
partial loads through valid_shape (NZ-26, §7), and the ragged last tile.

The guard-bypass tests compile with `nz_gap_guard._bypass_for_tests()` and compare the device's
result with the closed form of hardware-model.md §2.3: burst k (column block k) is read from
`base + k*(validRow + (gap mod 65536))*32` bytes instead of `base + k*R*32`. Delete them with the
guard once pto-isa#317 is fixed. A [65552, 64] INT8 weight is 4 MiB.
No `from __future__ import annotations`: kernel annotations use closure values.
"""

import numpy as np
import pytest

import runtime
from nzjit import CompileError, pl
from nzjit.passes.nz_gap_guard import _bypass_for_tests

RNG = np.random.default_rng(5)
R_WRAP = 65552  # gap = R - 16 = 65536 blocks: wraps to 0 in the 16-bit field


def _i8(shape):
    return RNG.integers(-100, 100, size=shape, dtype=np.int8)


def _ref(x, w):
    return (x.astype(np.int64) @ w.T.astype(np.int64)).astype(np.int32)


def _tile_probe(R, C, TR, r0, valid=None):
    """out = I @ load(w, [r0, 0], [TR, C])^T: the loaded Mat tile, transposed, exactly."""

    @pl.kernel
    def k(
        eye: pl.Tensor[[C, C], pl.INT8],
        w: pl.Tensor[[R, C], pl.INT8, pl.NZ],
        out: pl.Out[pl.Tensor[[C, TR], pl.INT32]],
    ):
        wt = pl.load(w, [r0, 0], [TR, C], target_memory=pl.Mem.Mat, valid_shape=valid)
        et = pl.load(eye, [0, 0], [C, C], target_memory=pl.Mem.Mat)
        pl.store(pl.matmul(et, wt, b_trans=True), [0, 0], out)

    return k


def _device_tile(packed, r0, TR, C):
    """hardware-model.md §2.3: the tile TLoadGm2L1Nz2nz produces for rows [r0, r0+TR) of an NZ
    [R, C] INT8 tensor (c0 = 32), the gmGap field truncated to 16 bits."""
    R = packed.shape[0]
    gm = packed.reshape(-1).view(np.uint8)
    gap16 = (R - TR) % 65536
    tile = np.empty((TR, C), np.int8)
    for kb in range(C // 32):
        start = r0 * 32 + kb * (TR + gap16) * 32  # burst kb
        tile[:, kb * 32 : (kb + 1) * 32] = gm[start : start + TR * 32].view(np.int8).reshape(TR, 32)
    return tile


@pytest.fixture(scope="module")
def weight():
    w = _i8((R_WRAP, 64))
    return w, runtime.pack_nz(w)


@pytest.mark.parametrize("r0", [1024, 65536])
def test_without_the_guard_the_device_reads_the_wrong_fractals(weight, r0):  # NZ-25, hw §2.3
    w, packed = weight
    eye = np.eye(64, dtype=np.int8)
    with _bypass_for_tests():  # compiled and called without the guard (the bypass keys its own
        k = _tile_probe(R_WRAP, 64, 16, r0)  # cache entry); the guard itself refuses it (tests/passes)
        k.lower()
        with pytest.warns(runtime.HardwareDefectWarning, match="pto-isa#317"):
            tile = k(eye, packed).T
    with pytest.raises(CompileError, match="NZ-25"):  # outside the bypass: the guard's refusal
        k(eye, packed)
    np.testing.assert_array_equal(tile, _device_tile(packed, r0, 16, 64))  # what the device does
    np.testing.assert_array_equal(tile[:, :32], w[r0 : r0 + 16, :32])  # column block 0: right
    assert not np.array_equal(tile[:, 32:], w[r0 : r0 + 16, 32:])  # column block 1: wrong fractal
    # the wrong fractal is 65536 rows (2 MiB) back: rows r0+16.. of the stream, i.e. of block 0 or,
    # at the end of block 0, the first rows of block 1
    wrong = w[r0 + 16 : r0 + 32, :32] if r0 + 32 <= R_WRAP else w[0:16, 32:]
    np.testing.assert_array_equal(tile[:, 32:], wrong)


def test_a_wider_tile_of_the_same_tensor_is_exact(weight):  # NZ-25: R 65552 / tile 32, gap 65520
    w, packed = weight
    tile = _tile_probe(R_WRAP, 64, 32, 65520)(np.eye(64, dtype=np.int8), packed).T
    np.testing.assert_array_equal(tile, w[65520:65552])


def test_a_single_column_block_is_exact_whatever_the_gap(weight):  # NZ-27: one burst
    w, _ = weight
    w32 = np.ascontiguousarray(w[:, :32])
    tile = _tile_probe(R_WRAP, 32, 16, 65536)(np.eye(32, dtype=np.int8), runtime.pack_nz(w32)).T
    np.testing.assert_array_equal(tile, w32[65536:65552])


def test_narrow_valid_rows_in_65536_rows_are_exact():  # NZ-26: shapes [32, 64], valid [16, 64], gap 65520
    w = _i8((65536, 64))
    tile = _tile_probe(65536, 64, 32, 65504, valid=[16, 64])(np.eye(64, dtype=np.int8), runtime.pack_nz(w)).T
    np.testing.assert_array_equal(tile[:16], w[65504:65520])


# ------------------------------------------------------------------- valid_shape: partial loads
def test_static_partial_load_reads_only_the_valid_rows():  # §7 valid_shape, NZ-26
    R, K, M = 800, 64, 16

    @pl.kernel
    def k(
        x: pl.Tensor[[M, K], pl.INT8],
        w: pl.Tensor[[R, K], pl.INT8, pl.NZ],
        out: pl.Out[pl.Tensor[[M, 256], pl.INT32]],
    ):
        # the tile window [768, 1024) overhangs the tensor: only the 32 valid rows exist
        wt = pl.load(w, [768, 0], [256, K], target_memory=pl.Mem.Mat, valid_shape=[32, K])
        xt = pl.load(x, [0, 0], [M, K], target_memory=pl.Mem.Mat)
        pl.store(pl.matmul(xt, wt, b_trans=True), [0, 0], out)

    x, w = _i8((M, K)), _i8((R, K))
    out = k(x, runtime.pack_nz(w))  # a read of rows 800.. of the last column block would leave GM
    np.testing.assert_array_equal(out[:, :32], _ref(x, w[768:800]))


def test_partial_columns():  # §7 valid_shape, NZ-26: fewer column blocks; hw §6 k = Left.validCol
    """The weight's valid K is 48 of its 64 columns: the lhs says so too (its valid K is the cube's
    k), so the unread columns of the weight tile are never multiplied. A lhs whose valid K is wider
    than the weight's would multiply bytes the load never wrote (garbage on a device, NaN * 0 is
    NaN) and is refused (test_cube_tails.py::test_a_rhs_whose_valid_k_does_not_cover_the_lhs_is_refused)."""
    R, K, M = 64, 128, 16

    @pl.kernel
    def k(
        x: pl.Tensor[[M, 64], pl.FP16],
        w: pl.Tensor[[R, K], pl.FP16, pl.NZ],
        out: pl.Out[pl.Tensor[[M, 32], pl.FP32]],
    ):
        wt = pl.load(w, [32, 32], [32, 64], target_memory=pl.Mem.Mat, valid_shape=[32, 48])
        xt = pl.load(x, [0, 0], [M, 64], target_memory=pl.Mem.Mat, valid_shape=[M, 48])
        pl.store(pl.matmul(xt, wt, b_trans=True), [0, 0], out)

    x = RNG.integers(-4, 4, (M, 64)).astype(np.float16)
    x[:, 48:] = np.nan  # past the valid K: never read
    w = RNG.integers(-4, 4, (R, K)).astype(np.float16)
    ref = x[:, :48].astype(np.float64) @ w[32:64, 32:80].T.astype(np.float64)
    np.testing.assert_array_equal(k(x, runtime.pack_nz(w)), ref.astype(np.float32))


def test_ragged_tail():  # §7 dynamic valid_shape[-2] provably a multiple of 16
    """800 weight rows (N) in tiles of 256 with `valid = pl.min(800 - o0, 256)`: the last tile loads
    32 rows. The output is padded to 1024 columns; columns [800, 1024) are the product of tile
    rows the load never wrote (zeros in the simulator, garbage on a device) and are not compared:
    the matmul has no valid-shape of its own, so the kernel keeps them out of the real result."""
    N, K, M, T = 800, 128, 16, 256

    @pl.kernel
    def k(
        x: pl.Tensor[[M, K], pl.INT8],
        w: pl.Tensor[[N, K], pl.INT8, pl.NZ],
        out: pl.Out[pl.Tensor[[M, 1024], pl.INT32]],
    ):
        xt = pl.load(x, [0, 0], [M, K], target_memory=pl.Mem.Mat)
        for ob in pl.range(4):
            o0 = ob * T
            valid = pl.min(N - o0, T)
            wt = pl.load(w, [o0, 0], [T, K], target_memory=pl.Mem.Mat, valid_shape=[valid, K])
            pl.store(pl.matmul(xt, wt, b_trans=True), [0, o0], out)

    x, w = _i8((M, K)), _i8((N, K))
    out = k(x, runtime.pack_nz(w))
    np.testing.assert_array_equal(out[:, :N], _ref(x, w))
