"""Decode batches: a matmul whose Left operand has M rows, M not a multiple of 16 (1..15 tokens, or
17 / 31 with a partial last fractal), runs device-exact on real NZ weight bytes.

The device (hardware-model.md): the ND -> NZ load writes rows 0..M-1 of a ceil16(M)-row Mat tile
(§3, rows past M are not written), TEXTRACT moves whole fractals into a Left tile whose validRow is
M, TMATMUL computes m = Left.validRow rows (m == 1 is forced to 16, §6) with the L0C column-block
pitch ceil16(m) - the Acc tile's own rows, so no mis-write (§6 "L0C write stride defect") - and the
Acc -> ND store writes validRow = M rows only (§5 TSTORE Acc -> ND). INT8 is exact (int32); float
results are compared with a tolerance (the cube's summation order is target defined, §6).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import runtime
from nzjit import pl

DTYPES = [  # (operand dtype, numpy dtype, accumulator dtype, numpy accumulator)
    pytest.param(pl.BF16, ml_dtypes.bfloat16, pl.FP32, np.float32, id="bf16"),
    pytest.param(pl.FP16, np.float16, pl.FP32, np.float32, id="fp16"),
    pytest.param(pl.INT8, np.int8, pl.INT32, np.int32, id="int8"),
]
ROWS = [1, 2, 4, 8, 15, 17, 31]
SENTINEL = -7


def _data(rng, shape, np_dtype):
    if np_dtype == np.int8:
        return rng.integers(-128, 128, shape).astype(np.int8)
    return rng.standard_normal(shape).astype(np_dtype)


def _check(got, x, w, np_dtype):
    """`got` against x @ w.T in float64 (exact for INT8: |C| < 2**31 here)."""
    ref = x.astype(np.float64) @ w.astype(np.float64).T
    if np_dtype == np.int8:
        np.testing.assert_array_equal(got, ref.astype(np.int64).astype(np.int32))
    else:
        np.testing.assert_allclose(got, ref, rtol=1e-3, atol=1e-2)


def _single(M, K, N, dtype, out_dtype):
    @pl.kernel
    def k(
        x: pl.Tensor[[M, K], dtype],
        w: pl.Tensor[[N, K], dtype, pl.NZ],
        out: pl.Out[pl.Tensor[[M, N], out_dtype]],
    ):
        out[:, :] = pl.matmul(x[:, :], w[:, :], b_trans=True)

    return k


def _k_loop(M, K, N, KT, dtype, out_dtype):
    """K in chunks: TMATMUL then TMATMUL_ACC in a pipelined loop carrying the M-row accumulator."""

    @pl.kernel
    def k(
        x: pl.Tensor[[M, K], dtype],
        w: pl.Tensor[[N, K], dtype, pl.NZ],
        out: pl.Out[pl.Tensor[[M, N], out_dtype]],
    ):
        acc = pl.matmul(x[:, 0:KT], w[:, 0:KT], b_trans=True)
        for k0 in pl.pipeline(KT, K, KT, stage=2):
            acc = pl.matmul_acc(acc, x[:, k0 : k0 + KT], w[:, k0 : k0 + KT], b_trans=True)
        out[:, :] = acc

    return k


@pytest.mark.parametrize("M", ROWS)
@pytest.mark.parametrize("dtype,np_dtype,out_dtype,np_out", DTYPES)
def test_decode_matmul_matches_reference(M, dtype, np_dtype, out_dtype, np_out):  # hw §3, §6
    K, N = 64, 48
    rng = np.random.default_rng(M)
    x, w = _data(rng, (M, K), np_dtype), _data(rng, (N, K), np_dtype)
    out = _single(M, K, N, dtype, out_dtype)(x, runtime.pack_nz(w))
    assert out.shape == (M, N) and out.dtype == np_out
    _check(out, x, w, np_dtype)


@pytest.mark.parametrize("M", [1, 4, 15, 17])
@pytest.mark.parametrize("dtype,np_dtype,out_dtype,np_out", DTYPES)
def test_decode_matmul_with_a_k_loop(M, dtype, np_dtype, out_dtype, np_out):  # hw §6 TMATMUL_ACC
    K, N, KT = 256, 32, 64
    rng = np.random.default_rng(100 + M)
    x, w = _data(rng, (M, K), np_dtype), _data(rng, (N, K), np_dtype)
    _check(_k_loop(M, K, N, KT, dtype, out_dtype)(x, runtime.pack_nz(w)), x, w, np_dtype)


@pytest.mark.parametrize("M", [1, 4, 15, 17])
@pytest.mark.parametrize("dtype,np_dtype,out_dtype,np_out", DTYPES)
def test_rows_past_m_in_gm_are_untouched(M, dtype, np_dtype, out_dtype, np_out):  # hw §5 TSTORE Acc -> ND
    """The Acc tile has ceil16(M) rows, but the store writes validRow = M rows: the GM rows below
    the window (and above it) keep their bytes, even for M == 1 where the mad computes 16 rows."""
    K, N, R0, R = 64, 32, 8, 64

    @pl.kernel
    def k(
        x: pl.Tensor[[M, K], dtype],
        w: pl.Tensor[[N, K], dtype, pl.NZ],
        out: pl.Out[pl.Tensor[[R, N], out_dtype]],
    ):
        out[R0 : R0 + M, :] = pl.matmul(x[:, :], w[:, :], b_trans=True)

    rng = np.random.default_rng(200 + M)
    x, w = _data(rng, (M, K), np_dtype), _data(rng, (N, K), np_dtype)
    out = np.full((R, N), SENTINEL, np_out)
    k(x, runtime.pack_nz(w), out)
    _check(out[R0 : R0 + M], x, w, np_dtype)
    assert (out[:R0] == SENTINEL).all() and (out[R0 + M :] == SENTINEL).all()


@pytest.mark.parametrize("M", [1, 4, 15])
@pytest.mark.parametrize("dtype,np_dtype,out_dtype,np_out", DTYPES)
def test_grouped_spmd_decode(M, dtype, np_dtype, out_dtype, np_out):  # hw §3, §6; lanes as in the MoE kernels
    """Each expert e multiplies its M tokens by its NZ weight, one SPMD lane per (expert, N tile),
    with a pipelined K loop; rows past M of every expert's output block stay untouched."""
    E, T, N, K, NT, KT = 3, 16, 64, 128, 32, 64

    @pl.kernel
    def gmm(
        x: pl.Tensor[[E, M, K], dtype],
        w: pl.Tensor[[E, N, K], dtype, pl.NZ],
        out: pl.Out[pl.Tensor[[E, T, N], out_dtype]],
    ):
        for lane in pl.spmd(E * (N // NT)):
            e = lane // (N // NT)
            n0 = (lane % (N // NT)) * NT
            acc = pl.matmul(x[e, :, 0:KT], w[e, n0 : n0 + NT, 0:KT], b_trans=True)
            for k0 in pl.pipeline(KT, K, KT):
                acc = pl.matmul_acc(
                    acc, x[e, :, k0 : k0 + KT], w[e, n0 : n0 + NT, k0 : k0 + KT], b_trans=True
                )
            out[e, 0:M, n0 : n0 + NT] = acc

    rng = np.random.default_rng(300 + M)
    x, w = _data(rng, (E, M, K), np_dtype), _data(rng, (E, N, K), np_dtype)
    out = np.full((E, T, N), SENTINEL, np_out)
    gmm(x, runtime.pack_nz(w), out)
    for e in range(E):
        _check(out[e, :M], x[e], w[e], np_dtype)
    assert (out[:, M:] == SENTINEL).all()


@pytest.mark.parametrize("M", [5, 17])
def test_decode_accumulator_split_into_an_output_grid(M):  # NZ-22 output grid, hw §6 L0C capacity
    """ceil16(M) x 3072 fp32 does not fit L0C (128 KiB): the stored accumulator is split into
    sub-tiles (for M = 17 also along M, whose second block has 1 valid row: m == 1 forced to 16)."""
    K, N = 64, 3072

    @pl.kernel
    def k(
        x: pl.Tensor[[M, K], pl.BF16],
        w: pl.Tensor[[N, K], pl.BF16, pl.NZ],
        out: pl.Out[pl.Tensor[[M, N], pl.FP32]],
    ):
        out[:, :] = pl.matmul(x[:, :], w[:, :], b_trans=True)

    rng = np.random.default_rng(400 + M)
    x, w = _data(rng, (M, K), ml_dtypes.bfloat16), _data(rng, (N, K), ml_dtypes.bfloat16)
    _check(k(x, runtime.pack_nz(w)), x, w, ml_dtypes.bfloat16)


def test_explicit_mat_load_with_partial_valid_rows():  # hw §3 ND2NZ validRow, §6 TMATMUL m = Left.validRow
    """A 16-row ND window loaded into Mat with valid_shape [4, K]: the load writes 4 rows, the mad
    computes m = 4 rows and the store writes those 4 only (rows 4.. of `out` keep their bytes)."""

    @pl.kernel
    def k(
        x: pl.Tensor[[16, 64], pl.FP16],
        w: pl.Tensor[[32, 64], pl.FP16, pl.NZ],
        out: pl.Out[pl.Tensor[[16, 32], pl.FP32]],
    ):
        xt = pl.load(x, [0, 0], [16, 64], target_memory=pl.Mem.Mat, valid_shape=[4, 64])
        wt = pl.load(w, [0, 0], [32, 64], target_memory=pl.Mem.Mat)
        pl.store(pl.matmul(xt, wt, b_trans=True), [0, 0], out)

    rng = np.random.default_rng(5)
    x, w = _data(rng, (16, 64), np.float16), _data(rng, (32, 64), np.float16)
    out = np.full((16, 32), SENTINEL, np.float32)
    k(x, runtime.pack_nz(w), out)
    _check(out[:4], x[:4], w, np.float16)
    assert (out[4:] == SENTINEL).all()


@pytest.mark.parametrize("M", [1, 4, 17])
def test_every_stage_computes_the_same_rows(M):  # low.run(after=PASS): bisection works on decode kernels
    """Before AutoTileMatmulL0 pads it the Mat tile is typed M x K; the backend runs it on the
    ceil16(M)-row tile the ND -> NZ load writes (hw §3), so every stage gives the same result."""
    K, N = 128, 32
    rng = np.random.default_rng(500 + M)
    x, w = _data(rng, (M, K), np.int8), _data(rng, (N, K), np.int8)
    low = _k_loop(M, K, N, 64, pl.INT8, pl.INT32).lower()
    for stage in low.passes:
        _check(low.run(x, runtime.pack_nz(w), after=stage), x, w, np.int8)
