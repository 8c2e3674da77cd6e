"""Dynamic K tails (issue 23 item 1): a one-row (or small-M) matmul whose valid K is a run-time
value, e.g. `valid_shape=[1, x.shape[1]]` of a `pl.dynamic` K.

TMATMUL takes k from the Left tile's valid columns (hardware-model.md §6: m = Left.validRow,
k = Left.validCol, `C[i,j] = sum_{kk<k} A[i,kk]*B[kk,j]`), so a run-time valid K is exact without
any padding: the Left tile's columns past k (stale Mat bytes past the last C0 line the ND -> NZ
load zero-fills) are never read. What the device would read as garbage is refused:
- the Right rows past the rhs's valid K when it is shorter than k (checked per mad at run time,
  the static case at compile time);
- TGEMV (`pl.tile.gemv`), whose k is the Right tile's valid rows, with a dynamic K;
- a K window that needs several L0 chunks: a chunk past the run-time K would be a TMATMUL with
  k = 0 (the K loop of the help runs one chunk per trip instead).

Float results: FP16 operands, FP32 sums, against numpy (float64) with rtol 1e-3, atol 1e-2; the
stages from AutoTileMatmulL0 on and every path give the same bits."""

from __future__ import annotations

import numpy as np
import pytest

import runtime
from nzjit import CompileError, pl
from nzjit.backend.options import Options, using
from nzjit.passes.pipeline import pipeline

N = 48
PATHS = (Options(strict=True), Options(batch=False), Options(fast=False))
KD = pl.dynamic("Kd")


@pl.kernel
def row_mm(
    x: pl.Tensor[[1, KD], pl.FP16], w: pl.Tensor[[KD, N], pl.FP16], y: pl.Out[pl.Tensor[[1, N], pl.FP32]]
):
    tx = pl.load(x, [0, 0], [1, 512], valid_shape=[1, x.shape[1]], target_memory=pl.Mem.Mat)
    tw = pl.load(w, [0, 0], [512, N], valid_shape=[w.shape[0], N], target_memory=pl.Mem.Mat)
    pl.store(pl.matmul(tx, tw), [0, 0], y)


def _data(k, seed=0):
    rng = np.random.default_rng(seed + k)
    return rng.standard_normal((1, k)).astype(np.float16), rng.standard_normal((k, N)).astype(np.float16)


@pytest.mark.parametrize("k", [1, 7, 33, 100, 500, 512])
def test_a_dynamic_k_tail_is_exact_on_every_path(k):
    x, w = _data(k)
    ref = x.astype(np.float64) @ w.astype(np.float64)
    low = row_mm.lower(x, w)
    stages = [name for name, _ in pipeline("A2A3")]
    runs = {s: low.run(x, w, after=s) for s in stages}
    for s, got in runs.items():
        np.testing.assert_allclose(got, ref, rtol=1e-3, atol=1e-2, err_msg=s)
    final = runs["MaterializeTensorStrides"]
    np.testing.assert_array_equal(runs["AutoTileMatmulL0"], final)
    for opts in PATHS:
        with using(opts):
            np.testing.assert_array_equal(row_mm(x, w), final)


def test_the_ir_and_pto_carry_the_run_time_k():
    x, w = _data(100)
    low = row_mm.lower(x, w)
    ir = str(low.ir())
    assert "tx:f16[16,512]@Mat<valid 1,?> = tile.load" in ir  # one 16-row fractal, K from the argument
    assert "@Left<valid 1,?> = tile.extract[shape=(16, 512) memory=Left valid_shape=(1, None)] tx 0 0" in ir
    assert (
        "@Right<valid ?,48> = tile.extract[shape=(512, 48) memory=Right valid_shape=(None, 48)] tw 0 0" in ir
    )
    assert ir.count("tile.mad[out_dtype=f32 dynamic_k=True]") == 1  # one mad: k = Left.validCol at run time
    text = low.pto()
    assert "%tx = pto.alloc_tile valid_col = %Kd" in text  # the Mat tile's dynamic validCol
    assert text.count("pto.tmatmul ") == 1


def test_the_same_kernel_serves_every_k():
    for k in (64, 300):
        x, w = _data(k, seed=1)
        np.testing.assert_allclose(
            row_mm(x, w), x.astype(np.float64) @ w.astype(np.float64), rtol=1e-3, atol=1e-2
        )


@pl.kernel
def short_rhs(
    x: pl.Tensor[[1, KD], pl.FP16],
    w: pl.Tensor[[512, N], pl.FP16],
    y: pl.Out[pl.Tensor[[1, N], pl.FP32]],
    kw: pl.Scalar[pl.INDEX],
):
    tx = pl.load(x, [0, 0], [1, 512], valid_shape=[1, x.shape[1]], target_memory=pl.Mem.Mat)
    tw = pl.load(w, [0, 0], [512, N], valid_shape=[kw, N], target_memory=pl.Mem.Mat)
    pl.store(pl.matmul(tx, tw), [0, 0], y)  # the product


def test_a_rhs_shorter_than_the_run_time_k_is_refused_and_nothing_is_written():
    x, w = _data(300)
    wpad = np.zeros((512, N), np.float16)
    wpad[:300] = w
    y = np.full((1, N), 7.0, np.float32)
    for opts in PATHS:
        with using(opts):
            with pytest.raises(
                runtime.DeviceError, match=r"the rhs's valid K 200 does not cover the lhs's valid K 300"
            ):
                short_rhs(x, wpad, y, 200)
            assert (y == 7.0).all()  # refused before its output was written back
            np.testing.assert_allclose(
                short_rhs(x, wpad, np.zeros((1, N), np.float32), 300),
                x.astype(np.float64) @ w.astype(np.float64),
                rtol=1e-3,
                atol=1e-2,
            )


def test_a_dynamic_k_through_tgemv_is_refused_with_the_fix():
    @pl.kernel
    def k(
        x: pl.Tensor[[1, KD], pl.FP16], w: pl.Tensor[[KD, N], pl.FP16], y: pl.Out[pl.Tensor[[1, N], pl.FP32]]
    ):
        tx = pl.load(x, [0, 0], [1, 512], valid_shape=[1, x.shape[1]], target_memory=pl.Mem.Mat)
        tw = pl.load(w, [0, 0], [512, N], valid_shape=[w.shape[0], N], target_memory=pl.Mem.Mat)
        pl.store(pl.tile.gemv(tx, tw), [0, 0], y)  # TGEMV

    x, w = _data(100)
    with pytest.raises(CompileError) as ei:
        k(x, w)
    msg = str(ei.value)
    assert "[k-tail] pl.tile.gemv: a dynamic valid K (contraction) extent of f16[1,512]@Mat<valid 1,?>" in msg
    assert "not supported by TGEMV, whose k is the Right tile's valid rows" in msg and "# TGEMV" in msg
    assert "help: use pl.matmul (TMATMUL takes k from the Left row's valid columns at run time)" in msg


def test_a_dynamic_k_over_several_l0_chunks_is_refused_with_the_k_loop_as_fix():
    @pl.kernel
    def k(
        x: pl.Tensor[[16, KD], pl.FP16],
        w: pl.Tensor[[KD, 256], pl.FP16],
        y: pl.Out[pl.Tensor[[16, 256], pl.FP32]],
    ):
        tx = pl.load(x, [0, 0], [16, 4096], valid_shape=[16, x.shape[1]], target_memory=pl.Mem.Mat)
        tw = pl.load(w, [0, 0], [4096, 256], valid_shape=[w.shape[0], 256], target_memory=pl.Mem.Mat)
        pl.store(pl.matmul(tx, tw), [0, 0], y)  # 4096 columns of K

    with pytest.raises(CompileError) as ei:
        k.lower(np.zeros((16, 3000), np.float16), np.zeros((3000, 256), np.float16))
    msg = str(ei.value)
    assert "[k-tail] matmul [16x4096] x [4096x256] with a dynamic valid K" in msg and "# 4096 columns" in msg
    assert "does not fit one L0 chunk (128 columns fit L0A / L0B)" in msg and "TMATMUL with k = 0" in msg
    assert "help: loop over K in windows of at most 128 columns (pl.range), each with valid_shape" in msg


def test_the_k_loop_of_the_fix_is_exact():  # one chunk per trip, the last trip's K from the argument
    KT = 128

    @pl.kernel
    def k(
        x: pl.Tensor[[16, KD], pl.FP16],
        w: pl.Tensor[[KD, 256], pl.FP16],
        y: pl.Out[pl.Tensor[[16, 256], pl.FP32]],
    ):
        kd = x.shape[1]
        kv = pl.min(KT, kd)  # the first window (the loop's trips accumulate the others)
        tx = pl.load(x, [0, 0], [16, KT], valid_shape=[16, kv], target_memory=pl.Mem.Mat)
        tw = pl.load(w, [0, 0], [KT, 256], valid_shape=[kv, 256], target_memory=pl.Mem.Mat)
        acc = pl.matmul(tx, tw)
        for k0 in pl.range(KT, kd, KT):
            kv = pl.min(KT, kd - k0)
            tx = pl.load(x, [0, k0], [16, KT], valid_shape=[16, kv], target_memory=pl.Mem.Mat)
            tw = pl.load(w, [k0, 0], [KT, 256], valid_shape=[kv, 256], target_memory=pl.Mem.Mat)
            acc = pl.matmul_acc(acc, tx, tw)
        pl.store(acc, [0, 0], y)

    rng = np.random.default_rng(9)
    for kk in (300, 128, 5):
        x = rng.standard_normal((16, kk)).astype(np.float16)
        w = rng.standard_normal((kk, 256)).astype(np.float16)
        np.testing.assert_allclose(k(x, w), x.astype(np.float64) @ w.astype(np.float64), rtol=1e-3, atol=1e-2)


def test_spmd_lanes_with_a_dynamic_k_are_exact_on_every_path():  # each mad checks its own K cover
    lanes_n, n = 4, 64

    @pl.kernel
    def lanes(
        x: pl.Tensor[[1, KD], pl.INT8],
        w: pl.Tensor[[KD, lanes_n * n], pl.INT8],
        y: pl.Out[pl.Tensor[[1, lanes_n * n], pl.INT32]],
    ):
        for lane in pl.spmd(lanes_n):
            n0 = lane * n
            tx = pl.load(x, [0, 0], [1, 512], valid_shape=[1, x.shape[1]], target_memory=pl.Mem.Mat)
            tw = pl.load(w, [0, n0], [512, n], valid_shape=[w.shape[0], n], target_memory=pl.Mem.Mat)
            pl.store(pl.matmul(tx, tw), [0, n0], y)

    rng = np.random.default_rng(17)
    for kk in (77, 512):
        x = rng.integers(-128, 128, (1, kk)).astype(np.int8)
        w = rng.integers(-128, 128, (kk, lanes_n * n)).astype(np.int8)
        ref = (x.astype(np.int64) @ w.astype(np.int64)).astype(np.int32)
        for opts in PATHS:
            with using(opts):
                np.testing.assert_array_equal(lanes(x, w), ref)
