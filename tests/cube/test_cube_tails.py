"""One-row matmuls (gemv) with K and N tails, ragged N tiles and ragged stores (issue 23, items 1-2).

The device (hardware-model.md §6): TMATMUL computes m = Left.validRow, k = Left.validCol and
n = Right.validCol; the Acc tile's valid region is m x n and TSTORE writes only that (§5). TLOAD
reads only a tile's valid part (§3), so a window may run past the tensor when its valid part does
not; PyPTO's `pl.load(..., clamp=True)` cuts the valid part back to the tensor's edge. INT8 is
exact; float results are compared with the cube's float32 accumulation bound.
"""

from __future__ import annotations

import numpy as np
import pytest

import runtime
from nzjit import CompileError, pl
from nzjit.backend.options import Options, using

PATHS = (Options(strict=True), Options(batch=False), Options(fast=False))
DTYPES = [
    pytest.param(pl.FP16, np.float16, pl.FP32, id="fp16"),
    pytest.param(pl.INT8, np.int8, pl.INT32, id="int8"),
]


def _data(rng, shape, np_dtype):
    if np_dtype == np.int8:
        return rng.integers(-128, 128, shape).astype(np.int8)
    return rng.standard_normal(shape).astype(np_dtype)


def _check(got, ref, np_dtype):
    if np_dtype == np.int8:
        np.testing.assert_array_equal(got, ref.astype(np.int64).astype(np.int32))
    else:
        np.testing.assert_allclose(got, ref, rtol=1e-3, atol=1e-2)


def _gemv(K, N, KV, NV, dtype, out_dtype):
    """A [1, K] row (valid K = KV) times a [K, N] weight window clamped to the [K, NV] tensor."""

    @pl.kernel
    def gemv(
        a: pl.Tensor[[1, K], dtype], b: pl.Tensor[[K, NV], dtype], out: pl.Out[pl.Tensor[[1, NV], out_dtype]]
    ):
        ta = pl.load(a, [0, 0], [1, K], valid_shape=[1, KV], target_memory=pl.Mem.Mat)
        tb = pl.load(b, [0, 0], [K, N], valid_shape=[KV, N], target_memory=pl.Mem.Mat, clamp=True)
        pl.store(pl.tile.gemv(ta, tb), [0, 0], out)

    return gemv


@pytest.mark.parametrize("dtype,np_dtype,out_dtype", DTYPES)
@pytest.mark.parametrize(
    "K,N,KV,NV",
    [(128, 32, 100, 30), (64, 64, 64, 50), (128, 32, 128, 32), (4096, 32, 3000, 9), (5120, 32, 4500, 17)],
)
def test_gemv_with_k_and_n_tails_is_exact_on_every_path(K, N, KV, NV, dtype, np_dtype, out_dtype):  # hw §6
    rng = np.random.default_rng(K + NV)
    a, b = _data(rng, (1, K), np_dtype), _data(rng, (K, NV), np_dtype)
    # only the valid K counts: poison past it in both operands must not reach the result
    if KV < K:
        a[:, KV:] = 99 if np_dtype == np.int8 else np.nan
        b[KV:, :] = 99 if np_dtype == np.int8 else np.nan
    ref = a[:, :KV].astype(np.float64) @ b[:KV, :].astype(np.float64)
    k = _gemv(K, N, KV, NV, dtype, out_dtype)
    for opts in PATHS:
        with using(opts):
            got = k(a, b)
        assert got.shape == (1, NV)
        _check(got, ref, np_dtype)


def test_gemv_ir_facts_after_tiling():  # hw §6: m, k, n are the operands' valid extents
    k = _gemv(128, 32, 100, 30, pl.FP16, pl.FP32)
    low = k.lower()
    trace = str(low.ir("trace"))
    assert "tb:f16[128,32]@Mat<valid 100,30> = tile.load[shape=(128, 32) memory=Mat] b 0 0 100 30" in trace
    assert "@Acc<valid 1,30> = tile.matmul" in trace
    final = str(low.ir())
    assert "f16[16,128]@Mat<valid 1,100> = tile.load" in final  # the one-row Left pads to a fractal
    assert "@Left<valid 1,100> = tile.extract[shape=(16, 128) memory=Left valid_shape=(1, 100)]" in final
    # the Right tile's valid rows are the K the cube reads (TGEMV takes k from them)
    assert "@Right<valid 100,30> = tile.extract[shape=(128, 32) memory=Right valid_shape=(100, 30)]" in final
    assert "f32[16,32]@Acc<valid 1,30> = tile.mad[out_dtype=f32 gemv=True]" in final
    assert "pto.tgemv ins(" in low.pto()  # pto-isa TGEMV: m = 1 exactly


def test_a_k_tail_over_chunks_runs_whole_chunks_then_the_tail():  # hw §6: k per mad <= the chunk
    k = _gemv(5120, 32, 4500, 17, pl.FP16, pl.FP32)
    final = str(k.lower().ir())
    # K chunks of 1024 (a [1024, 32] fp16 Right tile fills L0B): 0, a loop over [1024, 4096), the tail
    assert final.count("valid_shape=(1, 1024)") == 2 and "valid_shape=(1, 404)" in final
    assert "for[kind=pipeline stage=2" in final or "pl.pipeline" in final or "kind=pipeline" in final


def test_every_stage_computes_the_same_valid_region():  # low.run(after=PASS)
    K, N, KV, NV = 128, 32, 100, 30
    rng = np.random.default_rng(3)
    a, b = _data(rng, (1, K), np.int8), _data(rng, (K, NV), np.int8)
    ref = a[:, :KV].astype(np.int64) @ b[:KV, :].astype(np.int64)
    low = _gemv(K, N, KV, NV, pl.INT8, pl.INT32).lower()
    for stage in ["trace", *low.passes]:
        _check(low.run(a, b, after=stage), ref, np.int8)


@pytest.mark.parametrize("N", [800, 784, 129])
def test_ragged_store_of_the_last_n_tile_into_an_exact_size_output(N):  # item 2, hw §5 TSTORE valid
    M, K, NT = 16, 64, 128

    @pl.kernel
    def ragged(
        x: pl.Tensor[[M, K], pl.FP16], w: pl.Tensor[[K, N], pl.FP16], out: pl.Out[pl.Tensor[[M, N], pl.FP32]]
    ):
        tx = pl.load(x, [0, 0], [M, K], target_memory=pl.Mem.Mat)
        for j in pl.range(0, N, NT):
            tw = pl.load(w, [0, j], [K, NT], target_memory=pl.Mem.Mat, clamp=True)
            pl.store(pl.matmul(tx, tw), [0, j], out)

    rng = np.random.default_rng(N)
    x, w = _data(rng, (M, K), np.float16), _data(rng, (K, N), np.float16)
    ref = x.astype(np.float64) @ w.astype(np.float64)
    trace = str(ragged.lower().ir("trace"))
    assert "@Mat<valid 64,?> = tile.load" in trace and "@Acc<valid 16,?> = tile.matmul" in trace
    for opts in PATHS:
        with using(opts):
            got = ragged(x, w)
        assert got.shape == (M, N)
        _check(got, ref, np.float16)


def test_ragged_nz_weight_with_a_static_valid_tail_and_b_trans():  # NZ weight [N, K], x @ w.T
    M, K, N, NT = 16, 64, 800, 128

    @pl.kernel
    def proj(
        x: pl.Tensor[[M, K], pl.INT8],
        w: pl.Tensor[[N, K], pl.INT8, pl.NZ],
        out: pl.Out[pl.Tensor[[M, N], pl.INT32]],
    ):
        tx = pl.load(x, [0, 0], [M, K], target_memory=pl.Mem.Mat)
        for j in pl.range(0, N - NT, NT):  # the whole tiles
            tw = pl.load(w, [j, 0], [NT, K], target_memory=pl.Mem.Mat)
            pl.store(pl.matmul(tx, tw, b_trans=True), [0, j], out)
        last = (N // NT) * NT  # the 32-row tail of the weight: a [128, K] tile, 32 rows valid
        tw = pl.load(w, [last, 0], [NT, K], valid_shape=[N - last, K], target_memory=pl.Mem.Mat)
        pl.store(pl.matmul(tx, tw, b_trans=True), [0, last], out)

    rng = np.random.default_rng(8)
    x, w = _data(rng, (M, K), np.int8), _data(rng, (N, K), np.int8)
    got = proj(x, runtime.pack_nz(w))
    _check(got, x.astype(np.int64) @ w.astype(np.int64).T, np.int8)


# ------------------------------------------------------------------------------------ refusals
def test_a_window_past_the_tensor_without_a_valid_part_inside_is_refused():
    @pl.kernel
    def k(b: pl.Tensor[[128, 30], pl.FP16], out: pl.Out[pl.Tensor[[128, 32], pl.FP16]]):
        t = pl.load(b, [0, 0], [128, 32], target_memory=pl.Mem.Mat)
        pl.store(t, [0, 0], out)

    with pytest.raises(
        CompileError, match=r"pl.load window \[0, 32\) on axis 1 is out of bounds for the dimension 30"
    ) as ei:
        k.lower()
    assert "clamp=True" in str(ei.value)


def test_a_rhs_whose_valid_k_does_not_cover_the_lhs_is_refused():
    @pl.kernel
    def k(
        a: pl.Tensor[[16, 64], pl.FP16],
        b: pl.Tensor[[64, 32], pl.FP16],
        out: pl.Out[pl.Tensor[[16, 32], pl.FP32]],
    ):
        ta = pl.load(a, [0, 0], [16, 64], target_memory=pl.Mem.Mat)
        tb = pl.load(b, [0, 0], [64, 32], valid_shape=[48, 32], target_memory=pl.Mem.Mat)
        pl.store(pl.matmul(ta, tb), [0, 0], out)

    with pytest.raises(CompileError, match="the rhs's valid K 48 does not cover the lhs's valid K 64"):
        k.lower()


def test_a_dynamic_k_tail_is_the_run_time_k_of_tmatmul():  # hw §6: k = Left.validCol
    # was refused (the cube's k was static here); a K window that fits one L0 chunk now runs with
    # TMATMUL's run-time k (tests/cube/test_dynamic_k.py has the rest)
    @pl.kernel
    def k(
        a: pl.Tensor[[16, 64], pl.FP16],
        b: pl.Tensor[[64, 32], pl.FP16],
        out: pl.Out[pl.Tensor[[2, 16, 32], pl.FP32]],
    ):
        for i in pl.range(1, 3):
            ta = pl.load(a, [0, 0], [16, 64], valid_shape=[16, i * 16], target_memory=pl.Mem.Mat)
            tb = pl.load(b, [0, 0], [64, 32], target_memory=pl.Mem.Mat)
            pl.store(pl.matmul(ta, tb), [i - 1, 0, 0], out)

    rng = np.random.default_rng(4)
    a = rng.standard_normal((16, 64)).astype(np.float16)
    b = rng.standard_normal((64, 32)).astype(np.float16)
    got = k(a, b)
    for i in (1, 2):
        ref = a[:, : i * 16].astype(np.float64) @ b[: i * 16].astype(np.float64)
        np.testing.assert_allclose(got[i - 1], ref, rtol=1e-3, atol=1e-2)
    assert "tile.mad[out_dtype=f32 dynamic_k=True]" in str(k.lower().ir())


def test_gemv_needs_a_one_row_lhs():
    @pl.kernel
    def k(
        a: pl.Tensor[[16, 64], pl.FP16],
        b: pl.Tensor[[64, 32], pl.FP16],
        out: pl.Out[pl.Tensor[[16, 32], pl.FP32]],
    ):
        ta = pl.load(a, [0, 0], [16, 64], target_memory=pl.Mem.Mat)
        tb = pl.load(b, [0, 0], [64, 32], target_memory=pl.Mem.Mat)
        pl.store(pl.tile.gemv(ta, tb), [0, 0], out)

    with pytest.raises(CompileError, match=r"pl.tile.gemv needs a one-row lhs \[1, K\]"):
        k.lower()


def test_pto_text_of_a_ragged_n_tile():  # the valid extents in the text: TMATMUL n = Right.validCol
    M, K, N, NT = 16, 64, 200, 128

    @pl.kernel
    def ragged(
        x: pl.Tensor[[M, K], pl.FP16], w: pl.Tensor[[K, N], pl.FP16], out: pl.Out[pl.Tensor[[M, N], pl.FP32]]
    ):
        tx = pl.load(x, [0, 0], [M, K], target_memory=pl.Mem.Mat)
        for j in pl.range(0, N, NT):
            tw = pl.load(w, [0, j], [K, NT], target_memory=pl.Mem.Mat, clamp=True)
            pl.store(pl.matmul(tx, tw), [0, j], out)

    text = ragged.lower().pto()
    assert "arith.minsi" in text  # the clamped valid columns, then the window's
    assert (
        "loc=right, dtype=f16, rows=64, cols=128, blayout=row_major, slayout=col_major, fractal=512, "
        "v_row=64, v_col=?>" in text
    )
    assert (
        "outs(%t_2 : !pto.tile_buf<loc=acc, dtype=f32, rows=16, cols=128" in text
        and "v_row=16, v_col=?>)" in text
    )
    assert "!pto.partition_tensor_view<16x?xf32>" in text  # the store writes the valid columns only


def test_pto_text_of_a_static_k_tail():
    text = _gemv(128, 32, 100, 30, pl.FP16, pl.FP32).lower().pto()
    assert (
        "loc=left, dtype=f16, rows=16, cols=128, blayout=row_major, slayout=row_major, fractal=512, "
        "v_row=1, v_col=100>" in text
    )
    assert (
        "loc=acc, dtype=f32, rows=16, cols=32, blayout=col_major, slayout=row_major, fractal=1024, "
        "v_row=1, v_col=30>" in text
    )
    assert "!pto.partition_tensor_view<1x30xf32>" in text


def test_gemv_acc_accumulates_a_second_k_half():  # pl.tile.gemv_acc: acc[1, N] += a[1, K] @ b[K, N]
    K, N = 128, 64

    @pl.kernel
    def k(
        a: pl.Tensor[[1, 2 * K], pl.INT8],
        b: pl.Tensor[[2 * K, N], pl.INT8],
        out: pl.Out[pl.Tensor[[1, N], pl.INT32]],
    ):
        acc = pl.tile.gemv(
            pl.load(a, [0, 0], [1, K], target_memory=pl.Mem.Mat),
            pl.load(b, [0, 0], [K, N], target_memory=pl.Mem.Mat),
            acc_phase="partial",
        )
        acc = pl.tile.gemv_acc(
            acc,
            pl.load(a, [0, K], [1, K], target_memory=pl.Mem.Mat),
            pl.load(b, [K, 0], [K, N], target_memory=pl.Mem.Mat),
            acc_phase="final",
        )
        pl.store(acc, [0, 0], out)

    rng = np.random.default_rng(11)
    a, b = _data(rng, (1, 2 * K), np.int8), _data(rng, (2 * K, N), np.int8)
    for opts in PATHS:
        with using(opts):
            _check(k(a, b), a.astype(np.int64) @ b.astype(np.int64), np.int8)
