"""Accumulator write-back into NZ end to end (NZ-20..24): kernels run on the simulated A2/A3 NPU,
whose TStoreAccNz2nz model (runtime/store.py) ignores the parent's strides exactly like the device.
Outputs are compared byte for byte with `runtime.pack_nz(reference)`. Run with NZJIT_VERIFY=1.
No `from __future__ import annotations`: kernel annotations use closure values."""

import numpy as np
import pytest

import runtime
import runtime.store
from nzjit import pl
from nzjit.passes import block_nz_store

L0C = 128 * 1024
STALE = -1.0

exact = pytest.mark.filterwarnings("error::runtime.HardwareDefectWarning")


@pytest.fixture
def acc_stores(monkeypatch):
    """Every TStoreAccNz2nz transfer the backend issues (its checks are decoded once per geometry):
    (partition shape, strides, tile rows x cols, bytes)."""
    calls = []
    real = runtime.store._nz_acc_write

    def spy(gm, dst, tile, *args):
        calls.append((dst.shape5, dst.strides5, (tile.rows, tile.cols), tile.rows * tile.cols * 4))
        return real(gm, dst, tile, *args)

    monkeypatch.setattr(runtime.store, "_nz_acc_write", spy)
    return calls


def _ints(rng, shape, dtype=np.float16):
    return rng.integers(-3, 4, shape).astype(dtype)  # small integers: fp16 -> fp32 products are exact


def _mm_kernel(M, K, N):
    @pl.kernel
    def k(
        a: pl.Tensor[[M, K], pl.FP16],
        b: pl.Tensor[[K, N], pl.FP16],
        out: pl.Out[pl.Tensor[[M, N], pl.FP32, pl.NZ]],
    ):
        at = pl.load(a, [0, 0], [M, K], target_memory=pl.Mem.Mat)
        bt = pl.load(b, [0, 0], [K, N], target_memory=pl.Mem.Mat)
        acc = pl.matmul(at, bt)
        pl.store(acc, [0, 0], out, st_phase="Final")

    return k


def _run_exact(k, M, K, N, acc_stores):
    rng = np.random.default_rng(M * 7 + K * 3 + N)
    a, b = _ints(rng, (M, K)), _ints(rng, (K, N))
    ref = a.astype(np.float32) @ b.astype(np.float32)
    out = k(a, b)
    assert out.shape == (M, N) and out.dtype == np.float32
    assert out.tobytes() == runtime.pack_nz(ref).tobytes()
    np.testing.assert_array_equal(runtime.unpack_nz(out), ref)
    stores = list(acc_stores)
    for shape5, strides5, (rows, cols), nbytes in stores:
        assert shape5[0] == 1 and shape5[2] * 16 == rows == M and shape5[1] * 8 == cols
        assert rows <= 65535 and cols <= 4095 and nbytes <= L0C
        assert strides5 == (M * N, M * 8, 128, 8, 1)
    low = k.lower()
    for stage in ("trace", "BlockNzTensorViews", "AutoTileMatmulL0"):  # per-pass bisection agrees
        assert low.run(a, b, after=stage).tobytes() == out.tobytes(), stage
    return stores


# -------------------------------------------------------------------------------- NZ-20
@exact
def test_kernel_example_64x16_bytes_equal_pack_nz(acc_stores):  # NZ-20
    @pl.kernel
    def k(
        a: pl.Tensor[[64, 32], pl.FP16],
        b: pl.Tensor[[16, 32], pl.FP16],
        out: pl.Out[pl.Tensor[[64, 16], pl.FP32, pl.NZ]],
    ):
        at = pl.load(a, [0, 0], [64, 32], target_memory=pl.Mem.Mat)
        bt = pl.load(b, [0, 0], [16, 32], target_memory=pl.Mem.Mat)
        acc = pl.matmul(at, bt, b_trans=True)
        pl.store(acc, [0, 0], out, st_phase="Final")

    rng = np.random.default_rng(20)
    a, b = _ints(rng, (64, 32)), _ints(rng, (16, 32))
    ref = a.astype(np.float32) @ b.astype(np.float32).T
    out = k(a, b)
    assert out.tobytes() == runtime.pack_nz(ref).tobytes()
    np.testing.assert_array_equal(runtime.unpack_nz(out), ref)
    # the backend really issued TStoreAccNz2nz with the explicit rank-5 partition (NZ-20)
    assert acc_stores == [((1, 2, 4, 16, 8), (1024, 512, 128, 8, 1), (64, 16), 4096)]
    (st,) = [e for e in k.lower().ir().walk() if e.primitive.name == "tile.store"]
    assert st.params["attrs"] == {"st_phase": "Final"}


@exact
def test_out_given_is_written_in_place(acc_stores):  # NZ-20
    k = _mm_kernel(32, 16, 32)
    rng = np.random.default_rng(1)
    a, b = _ints(rng, (32, 16)), _ints(rng, (16, 32))
    out = runtime.pack_nz(np.full((32, 32), STALE, np.float32))
    res = k(a, b, out)
    np.testing.assert_array_equal(runtime.unpack_nz(res), a.astype(np.float32) @ b.astype(np.float32))
    assert len(acc_stores) == 1


# -------------------------------------------------------------------------------- NZ-22
@exact
def test_64x1024_output_of_256_kib_split_into_l0c_blocks(acc_stores):  # NZ-22
    stores = _run_exact(_mm_kernel(64, 32, 1024), 64, 32, 1024, acc_stores)
    assert len(stores) == 2 and all(s[3] == L0C for s in stores)


@exact
def test_n_8192_split_under_the_4095_column_field(acc_stores):  # NZ-22
    stores = _run_exact(_mm_kernel(32, 16, 8192), 32, 16, 8192, acc_stores)
    assert len(stores) == 8 and all(s[2] == (32, 1024) for s in stores)


@exact
def test_n_split_with_k_chunks(acc_stores):  # NZ-22: K tiling still allowed with the full M
    k = _mm_kernel(64, 128, 1024)
    loops = [e for e in k.lower().ir().walk() if e.primitive.name == "for"]
    assert loops  # the K chunks run as a pipelined loop
    stores = _run_exact(k, 64, 128, 1024, acc_stores)
    assert len(stores) == 2


# -------------------------------------------------------------------------------- NZ-24
@exact
def test_four_panels_by_four_stores_literal_batch_offsets(acc_stores):  # NZ-24
    R, C, K = 32, 16, 16

    @pl.kernel
    def k(
        a: pl.Tensor[[4, R, K], pl.FP16],
        b: pl.Tensor[[K, C], pl.FP16],
        out: pl.Out[pl.Tensor[[4, R, C], pl.FP32, pl.NZ]],
    ):
        bt = pl.load(b, [0, 0], [K, C], target_memory=pl.Mem.Mat)
        for p in range(4):  # unrolled: literal batch offsets
            at = pl.load(a, [p, 0, 0], [1, R, K], target_memory=pl.Mem.Mat)
            acc = pl.matmul(at, bt)
            pl.store(acc, [p, 0, 0], out)

    rng = np.random.default_rng(24)
    a, b = _ints(rng, (4, R, K)), _ints(rng, (K, C))
    ref = np.stack([a[p].astype(np.float32) @ b.astype(np.float32) for p in range(4)])
    out = k(a, b)
    assert out.tobytes() == runtime.pack_nz(ref).tobytes()
    assert len(acc_stores) == 4 and all(s[0] == (1, 2, 2, 16, 8) for s in acc_stores)
    offs = [
        [getattr(x, "value", x) for x in e.operands("offsets")]
        for e in k.lower().ir().walk()
        if e.primitive.name == "tile.store"
    ]
    assert offs == [[p, 0, 0, 0, 0] for p in range(4)]


@exact
def test_four_panels_by_a_staged_loop(acc_stores):  # NZ-24, NZ-28: symbolic batch offset folded
    R, C, K = 16, 32, 32

    @pl.kernel
    def k(
        a: pl.Tensor[[4, R, K], pl.FP16],
        b: pl.Tensor[[K, C], pl.FP16],
        out: pl.Out[pl.Tensor[[4, R, C], pl.FP32, pl.NZ]],
    ):
        bt = pl.load(b, [0, 0], [K, C], target_memory=pl.Mem.Mat)
        for p in pl.range(4):
            at = pl.load(a, [p, 0, 0], [1, R, K], target_memory=pl.Mem.Mat)
            acc = pl.matmul(at, bt)
            pl.store(acc, [p, 0, 0], out)

    rng = np.random.default_rng(28)
    a, b = _ints(rng, (4, R, K)), _ints(rng, (K, C))
    ref = np.einsum("prk,kc->prc", a.astype(np.float32), b.astype(np.float32))
    out = k(a, b)
    assert out.tobytes() == runtime.pack_nz(ref).tobytes()
    assert len(acc_stores) == 4


@exact
def test_panels_stored_through_a_leading_axis_index(acc_stores):  # NZ-24, NZ-30: out[p] is a slice
    R, C, K = 32, 16, 16

    @pl.kernel
    def k(
        a: pl.Tensor[[4, R, K], pl.FP16],
        b: pl.Tensor[[K, C], pl.FP16],
        out: pl.Out[pl.Tensor[[4, R, C], pl.FP32, pl.NZ]],
    ):
        bt = pl.load(b, [0, 0], [K, C], target_memory=pl.Mem.Mat)
        for p in pl.range(4):
            at = pl.load(a, [p, 0, 0], [1, R, K], target_memory=pl.Mem.Mat)
            pl.store(pl.matmul(at, bt), [0, 0], out[p])

    rng = np.random.default_rng(30)
    a, b = _ints(rng, (4, R, K)), _ints(rng, (K, C))
    ref = np.einsum("prk,kc->prc", a.astype(np.float32), b.astype(np.float32))
    assert k(a, b).tobytes() == runtime.pack_nz(ref).tobytes()
    assert len(acc_stores) == 4


@exact
def test_dynamic_batch_panels_leave_other_panels_untouched(acc_stores):  # NZ-24, NZ-29
    R, C, K = 32, 16, 16
    B = pl.dynamic("B")

    @pl.kernel
    def k(
        a: pl.Tensor[[B, R, K], pl.FP16],
        b: pl.Tensor[[K, C], pl.FP16],
        out: pl.Out[pl.Tensor[[B, R, C], pl.FP32, pl.NZ]],
    ):
        bt = pl.load(b, [0, 0], [K, C], target_memory=pl.Mem.Mat)
        for p in pl.range(2):
            at = pl.load(a, [p + 1, 0, 0], [1, R, K], target_memory=pl.Mem.Mat)
            pl.store(pl.matmul(at, bt), [p + 1, 0, 0], out)

    rng = np.random.default_rng(29)
    a, b = _ints(rng, (4, R, K)), _ints(rng, (K, C))
    ref = np.einsum("prk,kc->prc", a.astype(np.float32), b.astype(np.float32))
    ref[[0, 3]] = STALE
    out = k(a, b, runtime.pack_nz(np.full((4, R, C), STALE, np.float32)))
    assert out.tobytes() == runtime.pack_nz(ref).tobytes()
    assert len(acc_stores) == 2


@exact
def test_column_blocks_by_a_staged_loop(acc_stores):  # NZ-16, NZ-20: proven column offset j/8
    @pl.kernel
    def k(
        a: pl.Tensor[[32, 16], pl.FP16],
        b: pl.Tensor[[16, 96], pl.FP16],
        out: pl.Out[pl.Tensor[[32, 96], pl.FP32, pl.NZ]],
    ):
        at = pl.load(a, [0, 0], [32, 16], target_memory=pl.Mem.Mat)
        for j in pl.range(0, 96, 32):
            bt = pl.load(b, [0, j], [16, 32], target_memory=pl.Mem.Mat)
            acc = pl.matmul(at, bt)
            pl.store(acc, [0, j], out)

    rng = np.random.default_rng(16)
    a, b = _ints(rng, (32, 16)), _ints(rng, (16, 96))
    ref = a.astype(np.float32) @ b.astype(np.float32)
    out = k(a, b)
    assert out.tobytes() == runtime.pack_nz(ref).tobytes()
    assert [s[0] for s in acc_stores] == [(1, 4, 2, 16, 8)] * 3


# ------------------------------------------------- NZ-23: what the full-row check prevents
ORDER = [(0, 0), (64, 0), (0, 16), (64, 16)]


def _quadrant_kernel(order):
    @pl.kernel
    def quad(
        t: pl.Tensor[[4, 64, 16], pl.FP16],
        eye: pl.Tensor[[16, 16], pl.FP16],
        out: pl.Out[pl.Tensor[[128, 32], pl.FP32, pl.NZ]],
    ):
        e = pl.load(eye, [0, 0], [16, 16], target_memory=pl.Mem.Mat)
        for i, (r0, c0) in enumerate(order):  # unrolled: four 64 x 16 stores
            ti = pl.load(t, [i, 0, 0], [1, 64, 16], target_memory=pl.Mem.Mat)
            acc = pl.matmul(ti, e)
            pl.store(acc, [r0, c0], out)

    return quad


def _quadrants(order):
    """Store four 64 x 16 tiles into the quadrants of a [128, 32] NZ parent, full-row check off."""
    i, j = np.indices((64, 16))
    tiles = np.stack([10 * k + 1 + (i + j) % 5 for k in range(4)]).astype(np.float16)  # tiles differ
    k = _quadrant_kernel(order)
    with block_nz_store.unsafe_skip_full_row_check_for_tests():
        low = k.lower()
    eye = np.eye(16, dtype=np.float16)
    stale = runtime.pack_nz(np.full((128, 32), STALE, np.float32))
    with pytest.warns(runtime.HardwareDefectWarning, match="ignores the parent strides"):
        got = runtime.unpack_nz(low.run(tiles, eye, stale.copy()))
    T = {rc: tiles[n].astype(np.float32) for n, rc in enumerate(order)}
    intended = np.block([[T[(0, 0)], T[(0, 16)]], [T[(64, 0)], T[(64, 16)]]])
    ref = runtime.unpack_nz(low.run(tiles, eye, stale.copy(), after="trace"))
    np.testing.assert_array_equal(ref, intended)  # the logical program is right; the store is not
    return got, T, intended


def test_bypass_64x16_into_128x32_mis_writes_as_hw_4_4():  # NZ-23, hardware-model.md §4.4
    P, T, intended = _quadrants(ORDER)
    wrong = P != intended
    assert int(wrong.sum()) == 2048  # of 4096
    for c0 in (0, 16):
        # left halves (tile cols 0..7) are right: the lower store overwrote the upper store's spill
        np.testing.assert_array_equal(P[:64, c0 : c0 + 8], T[(0, c0)][:, :8])
        np.testing.assert_array_equal(P[64:, c0 : c0 + 8], T[(64, c0)][:, :8])
        # P[0..63, c0+8..c0+15] holds the lower tile's right half (written 512 floats too early)
        np.testing.assert_array_equal(P[:64, c0 + 8 : c0 + 16], T[(64, c0)][:, 8:])
        # P[64..127, c0+8..c0+15] is never written
        assert (P[64:, c0 + 8 : c0 + 16] == STALE).all()
    expect_wrong = np.zeros((128, 32), bool)
    expect_wrong[:, 8:16] = expect_wrong[:, 24:32] = True
    np.testing.assert_array_equal(wrong, expect_wrong)


def test_bypass_reverse_order_is_also_wrong_in_the_left_halves():  # NZ-23: order-dependent
    order = ORDER[::-1]
    P, T, intended = _quadrants(order)
    for c0 in (0, 16):
        # the upper tile (stored later) spills its right half onto the lower tile's left half
        np.testing.assert_array_equal(P[64:, c0 : c0 + 8], T[(0, c0)][:, 8:])
        np.testing.assert_array_equal(P[:64, c0 : c0 + 8], T[(0, c0)][:, :8])
        np.testing.assert_array_equal(P[:64, c0 + 8 : c0 + 16], T[(64, c0)][:, 8:])
        assert (P[64:, c0 + 8 : c0 + 16] == STALE).all()
    assert int((P != intended).sum()) == 3072


@exact
def test_full_height_stores_of_the_same_data_are_exact(acc_stores):  # NZ-23: the supported form
    @pl.kernel
    def k(
        t: pl.Tensor[[2, 128, 16], pl.FP16],
        eye: pl.Tensor[[16, 16], pl.FP16],
        out: pl.Out[pl.Tensor[[128, 32], pl.FP32, pl.NZ]],
    ):
        e = pl.load(eye, [0, 0], [16, 16], target_memory=pl.Mem.Mat)
        for i in range(2):
            ti = pl.load(t, [i, 0, 0], [1, 128, 16], target_memory=pl.Mem.Mat)
            pl.store(pl.matmul(ti, e), [0, 16 * i], out)

    rng = np.random.default_rng(23)
    t = _ints(rng, (2, 128, 16))
    out = k(t, np.eye(16, dtype=np.float16))
    np.testing.assert_array_equal(runtime.unpack_nz(out), np.concatenate(list(t.astype(np.float32)), axis=1))
    assert [s[0] for s in acc_stores] == [(1, 2, 8, 16, 8)] * 2
