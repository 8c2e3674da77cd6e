"""Lane-batched stores (nzjit/backend/batched.py, lane_gm.py) against the lanes run one by one: Acc -> ND
stores over lanes, strided Vec stores over several address runs, NZ partition stores and the
NZ store that mis-writes; byte-identical GM, or the fallback with its warning."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from batched_checks import compare as _compare
from batched_checks import record as _record
from gmm_kernels import gmm_operands

import runtime
from nzjit import pl
from nzjit.backend import lane_gm
from nzjit.errors import CompileError
from nzjit.passes import lane_races


@pytest.fixture
def acc_store_spy(monkeypatch):
    """Records whether each batched Acc -> ND store over lanes ran as strided assignments."""
    return _record(monkeypatch, lane_gm, "lane_acc_store")


@pytest.mark.parametrize("attrs", [{}, {"atomic": True}, {"pre_relu": True}])
@pytest.mark.parametrize("out_dtype,np_out", [(pl.FP32, np.float32), (pl.BF16, ml_dtypes.bfloat16)])
def test_acc_stores_over_lanes_batched_equal_per_lane(spy, acc_store_spy, attrs, out_dtype, np_out):
    """Lanes of two experts store their accumulators (fixpipe: pre-ReLU, fp32 -> bf16, atomic
    add) as one strided assignment per run of lane addresses: the same bytes as lane by lane."""
    E, T, N, K, NT = 2, 16, 128, 64, 32

    @pl.kernel
    def gmm(
        x: pl.Tensor[[E * T, K], pl.BF16],
        w: pl.Tensor[[E * N, K], pl.BF16, pl.NZ],
        out: pl.Tensor[[E * T, N], out_dtype],
    ):
        for lane in pl.spmd(E * (N // NT)):
            e = lane // (N // NT)
            n0 = (lane % (N // NT)) * NT
            xt = pl.load(x, [e * T, 0], [T, K], target_memory=pl.Mem.Mat)
            wt = pl.load(w, [e * N + n0, 0], [NT, K], target_memory=pl.Mem.Mat)
            pl.store(pl.matmul(xt, wt, b_trans=True), [e * T, n0], out, **attrs)

    x, w = gmm_operands(np.random.default_rng(3), ml_dtypes.bfloat16, E, T, N, K)
    init = np.random.default_rng(4).standard_normal((E, T, N)).astype(np_out)
    got = _compare(gmm, x.reshape(E * T, K), runtime.pack_nz(w.reshape(E * N, K)), init.reshape(E * T, N))
    assert spy == [True] and acc_store_spy == [True]
    prod = np.einsum("etk,enk->etn", x.astype(np.float32), w.astype(np.float32))
    if attrs.get("pre_relu"):
        prod = np.maximum(prod, 0)
    want = (init.astype(np.float32) + prod.astype(np_out).astype(np.float32)) if attrs.get("atomic") else prod
    res = np.frombuffer(got[0][2], np_out).reshape(E, T, N).astype(np.float32)
    np.testing.assert_allclose(res, want.astype(np_out).astype(np.float32), rtol=2e-2, atol=2e-2)


def test_acc_stores_of_lanes_into_one_window_are_refused(spy, acc_store_spy):
    """Every lane stores its accumulator into the same window: a lane race (issue 24 item 2),
    refused on both paths before any store lands (the batched attempt applies no store)."""
    T, K, N, L = 16, 32, 32, 3

    @pl.kernel
    def same_window(
        x: pl.Tensor[[L * T, K], pl.BF16],
        w: pl.Tensor[[N, K], pl.BF16, pl.NZ],
        out: pl.Tensor[[T, N], pl.FP32],
    ):
        for lane in pl.spmd(L):
            xt = pl.load(x, [lane * T, 0], [T, K], target_memory=pl.Mem.Mat)
            wt = pl.load(w, [0, 0], [N, K], target_memory=pl.Mem.Mat)
            pl.store(pl.matmul(xt, wt, b_trans=True), [0, 0], out)

    rng = np.random.default_rng(6)
    x = rng.standard_normal((L, T, K)).astype(ml_dtypes.bfloat16)
    w = rng.standard_normal((N, K)).astype(ml_dtypes.bfloat16)
    with pytest.raises(CompileError, match="lane-race"):  # issue 24: the compiler refuses the race
        same_window.lower()
    with lane_races._bypass_for_tests():  # the run-time check refuses it too
        got = _compare(same_window, x.reshape(L * T, K), runtime.pack_nz(w), np.zeros((T, N), np.float32))
    assert spy == [] and acc_store_spy == []
    assert got[0][2] == np.zeros((T, N), np.float32).tobytes()
    assert "lane race in pl.spmd(3): lane 0 writes out[0:16, 0:32]" in got[1]


def test_vec_stores_over_several_address_runs_are_strided_assignments(spy, monkeypatch):
    """Lanes of two groups (a gap between them in `out`) load, add and store Vec tiles: loads and
    stores run as one strided assignment per run of lane addresses, the same bytes as lane by lane."""
    R, C, L = 16, 32, 8
    copies = _record(monkeypatch, lane_gm, "lane_copy")

    @pl.kernel
    def two_runs(a: pl.Tensor[[L * R, C], pl.FP32], out: pl.Tensor[[(L + 4) * R, C], pl.FP32]):
        for lane in pl.spmd(L):
            t = pl.load(a, [lane * R, 0], [R, C], target_memory=pl.Mem.Vec)
            pl.store(pl.add(t, t), [(lane + (lane // 4) * 4) * R, 0], out)  # lanes 4.. four tiles later

    a = np.arange(L * R * C, dtype=np.float32).reshape(L * R, C)
    got = _compare(two_runs, a, np.full(((L + 4) * R, C), -1, np.float32))
    assert spy == [True] and copies and all(copies)
    res = np.frombuffer(got[0][1], np.float32).reshape((L + 4) * R, C)
    want = np.full_like(res, -1)
    for lane in range(L):
        row = (lane + (lane // 4) * 4) * R
        want[row : row + R] = 2 * a[lane * R : (lane + 1) * R]
    np.testing.assert_array_equal(res, want)


def test_nz_partition_stores_run_batched_equal_per_lane(spy):  # NZ-20, NZ-22
    """Lanes over N tiles store their accumulators into an FP32 NZ output (whole-height column
    panels, each an explicit rank-5 partition): the body runs batched, the stores replay lane by
    lane at the end, and the bytes are those of the lanes one by one - the packed product."""
    M, K, N, NT = 32, 64, 128, 32

    @pl.kernel
    def nz_out(
        a: pl.Tensor[[M, K], pl.FP16],
        b: pl.Tensor[[N, K], pl.FP16, pl.NZ],
        out: pl.Tensor[[M, N], pl.FP32, pl.NZ],
    ):
        for lane in pl.spmd(N // NT):
            n0 = lane * NT
            at = pl.load(a, [0, 0], [M, K], target_memory=pl.Mem.Mat)
            bt = pl.load(b, [n0, 0], [NT, K], target_memory=pl.Mem.Mat)
            pl.store(pl.matmul(at, bt, b_trans=True), [0, n0], out)

    rng = np.random.default_rng(17)
    a = rng.integers(-3, 4, (M, K)).astype(np.float16)
    b = rng.integers(-3, 4, (N, K)).astype(np.float16)
    got = _compare(nz_out, a, runtime.pack_nz(b), runtime.pack_nz(np.full((M, N), 5, np.float32)))
    assert spy == [True]
    ref = a.astype(np.float32) @ b.astype(np.float32).T
    assert got[0][2] == runtime.pack_nz(ref).tobytes()


def test_nz_store_that_mis_writes_falls_back_with_its_warning(spy):  # NZ-23, hw §4.3
    """Lanes store 64 x 16 tiles into the quadrants of a [128, 32] NZ parent (the full-row check
    skipped, as only a test may): TStoreAccNz2nz ignores the parent's strides and mis-writes.
    The store's warning sends the lanes one by one, which reproduce the device's bytes."""
    from nzjit.passes import block_nz_store

    @pl.kernel
    def quad(
        t: pl.Tensor[[4, 64, 16], pl.FP16],
        eye: pl.Tensor[[16, 16], pl.FP16],
        out: pl.Tensor[[128, 32], pl.FP32, pl.NZ],
    ):
        for lane in pl.spmd(4):
            e = pl.load(eye, [0, 0], [16, 16], target_memory=pl.Mem.Mat)
            ti = pl.load(t, [lane, 0, 0], [1, 64, 16], target_memory=pl.Mem.Mat)
            pl.store(pl.matmul(ti, e), [(lane // 2) * 64, (lane % 2) * 16], out)

    i, j = np.indices((64, 16))
    tiles = np.stack([10 * k + 1 + (i + j) % 5 for k in range(4)]).astype(np.float16)
    stale = runtime.pack_nz(np.full((128, 32), -1, np.float32))
    with block_nz_store.unsafe_skip_full_row_check_for_tests():
        quad.lower(tiles, np.eye(16, dtype=np.float16), stale)
        with pytest.warns(runtime.HardwareDefectWarning, match="ignores the parent strides"):
            got = _compare(quad, tiles, np.eye(16, dtype=np.float16), stale)
    assert spy == [False]
    intended = runtime.pack_nz(np.block([[tiles[0], tiles[1]], [tiles[2], tiles[3]]]).astype(np.float32))
    assert got[0][2] != intended.tobytes()  # the device's mis-write, reproduced on both paths
