"""`pl.tile.matmul_bias(a, b, bias)` (issue 23 item 1): TMATMUL_BIAS adds a `[1, N]` bias row of the
accumulator's dtype to every row of `a @ b` (pto-isa docs/isa/TMATMUL_BIAS.md). The bias is loaded
into Mat like the operands and moved to the bias table (TMOV Mat -> Bias, pto-isa TMOV.md), which
holds 1 KiB on A2/A3 (hardware-model.md §7): 256 FP32 / INT32 entries, so a wider output is split
along N when it is stored directly. A split K adds the bias once (the first chunk's TMATMUL_BIAS,
then TMATMUL_ACC)."""

from __future__ import annotations

import numpy as np
import pytest

import runtime
from nzjit import CompileError, pl
from nzjit.backend.options import Options, using

PATHS = (Options(strict=True), Options(batch=False), Options(fast=False))


def _bias_kernel(M, K, N, dtype, acc_dtype, *, b_trans=False, nz=False):
    bshape = [N, K] if b_trans else [K, N]
    layout = pl.NZ if nz else pl.ND

    @pl.kernel
    def mb(
        a: pl.Tensor[[M, K], dtype],
        b: pl.Tensor[bshape, dtype, layout],
        bias: pl.Tensor[[1, N], acc_dtype],
        out: pl.Out[pl.Tensor[[M, N], acc_dtype]],
    ):
        ta = pl.load(a, [0, 0], [M, K], target_memory=pl.Mem.Mat)
        tb = pl.load(b, [0, 0], bshape, target_memory=pl.Mem.Mat)
        tbias = pl.load(bias, [0, 0], [1, N], target_memory=pl.Mem.Mat)
        pl.store(pl.tile.matmul_bias(ta, tb, tbias, b_trans=b_trans), [0, 0], out)

    return mb


def _data(rng, M, K, N, int8, b_trans=False):
    if int8:
        a = rng.integers(-128, 128, (M, K)).astype(np.int8)
        b = rng.integers(-128, 128, (N, K) if b_trans else (K, N)).astype(np.int8)
        bias = rng.integers(-(2**30), 2**30, (1, N)).astype(np.int32)
    else:
        a = rng.standard_normal((M, K)).astype(np.float16)
        b = rng.standard_normal((N, K) if b_trans else (K, N)).astype(np.float16)
        bias = (100 * rng.standard_normal((1, N))).astype(np.float32)
    return a, b, bias


def _ref(a, b, bias, b_trans=False):
    bb = b.T if b_trans else b
    if a.dtype == np.int8:  # int32 wrapping, as the cube's accumulator
        return (a.astype(np.int64) @ bb.astype(np.int64) + bias).astype(np.int64).astype(np.int32)
    return a.astype(np.float64) @ bb.astype(np.float64) + bias


def _check(got, ref):
    if got.dtype == np.int32:
        np.testing.assert_array_equal(got, ref)
    else:
        np.testing.assert_allclose(got, ref, rtol=1e-3, atol=1e-2)


@pytest.mark.parametrize("int8", [False, True], ids=["fp16", "int8"])
@pytest.mark.parametrize("M,K,N", [(16, 64, 64), (32, 128, 64), (32, 2048, 32), (16, 64, 256)])
def test_matmul_bias_against_numpy_on_every_path(M, K, N, int8):  # pto-isa TMATMUL_BIAS
    rng = np.random.default_rng(M * K + N)
    a, b, bias = _data(rng, M, K, N, int8)
    k = _bias_kernel(M, K, N, pl.INT8 if int8 else pl.FP16, pl.INT32 if int8 else pl.FP32)
    for opts in PATHS:
        with using(opts):
            _check(k(a, b, bias), _ref(a, b, bias))


def test_a_split_k_adds_the_bias_once():  # hw §6 TMATMUL_BIAS then TMATMUL_ACC
    M, K, N = 64, 4096, 32
    k = _bias_kernel(M, K, N, pl.INT8, pl.INT32)
    final = str(k.lower().ir())
    assert final.count("tile.mad_bias") == 1 and final.count("tile.mad_acc") >= 1
    assert "@Bias = tile.extract[shape=(1, 32) memory=Bias] tbias 0 0" in final


def test_ir_facts_and_pto_text():
    k = _bias_kernel(32, 128, 64, pl.FP16, pl.FP32)
    low = k.lower()
    trace = str(low.ir("trace"))
    assert "tbias:f32[1,64]@Mat = tile.load[shape=(1, 64) memory=Mat] bias 0 0" in trace
    assert "f32[32,64]@Acc = tile.matmul_bias[b_trans=False] ta tb tbias" in trace
    final = str(low.ir())
    assert "tbias:f32[16,64]@Mat<valid 1,64> = tile.load" in final  # one valid row of a Mat fractal
    assert "c:f32[1,64]@Bias = tile.extract[shape=(1, 64) memory=Bias] tbias 0 0" in final
    assert "f:f32[32,64]@Acc = tile.mad_bias[out_dtype=f32] d e c" in final
    pto = low.pto()
    assert "pto.tmatmul.bias ins(" in pto and "loc=bias, dtype=f32, rows=1, cols=64" in pto
    assert "pto.tmov ins(%tbias" in pto
    plan = low.memory()
    assert plan.peak["Bias"] == 256  # the bias table holds the 64 FP32 entries


def test_every_stage_gives_the_same_result():  # low.run(after=PASS)
    rng = np.random.default_rng(5)
    a, b, bias = _data(rng, 32, 128, 64, True)
    low = _bias_kernel(32, 128, 64, pl.INT8, pl.INT32).lower()
    for stage in ["trace", *low.passes]:
        _check(low.run(a, b, bias, after=stage), _ref(a, b, bias))


def test_b_trans_with_an_nz_weight():  # x @ w.T + bias, the weight [N, K] in NZ
    M, K, N = 16, 128, 128
    rng = np.random.default_rng(6)
    a, b, bias = _data(rng, M, K, N, True, b_trans=True)
    k = _bias_kernel(M, K, N, pl.INT8, pl.INT32, b_trans=True, nz=True)
    _check(k(a, runtime.pack_nz(b), bias), _ref(a, b, bias, b_trans=True))


def test_a_wide_stored_output_is_split_along_n_to_fit_the_bias_table():  # hw §7 Bias 1 KiB
    M, K, N = 16, 64, 1024
    rng = np.random.default_rng(7)
    a, b, bias = _data(rng, M, K, N, False)
    k = _bias_kernel(M, K, N, pl.FP16, pl.FP32)
    final = str(k.lower().ir())
    assert final.count("tile.mad_bias") == 4 and "memory=Bias] tbias 0 768" in final  # four 256-column rows
    assert k.lower().memory().peak["Bias"] <= 1024
    for opts in PATHS:
        with using(opts):
            _check(k(a, b, bias), _ref(a, b, bias))


def test_gemv_bias_with_an_n_tail():  # pl.tile.gemv_bias: C[1, N] = a @ b + bias
    K, N, NV = 64, 32, 20

    @pl.kernel
    def k(
        a: pl.Tensor[[1, K], pl.FP16],
        b: pl.Tensor[[K, NV], pl.FP16],
        bias: pl.Tensor[[1, NV], pl.FP32],
        out: pl.Out[pl.Tensor[[1, NV], pl.FP32]],
    ):
        ta = pl.load(a, [0, 0], [1, K], target_memory=pl.Mem.Mat)
        tb = pl.load(b, [0, 0], [K, N], target_memory=pl.Mem.Mat, clamp=True)
        tbias = pl.load(bias, [0, 0], [1, N], target_memory=pl.Mem.Mat, clamp=True)
        pl.store(pl.tile.gemv_bias(ta, tb, tbias, acc_phase="final"), [0, 0], out)

    rng = np.random.default_rng(9)
    a, b = rng.standard_normal((1, K)).astype(np.float16), rng.standard_normal((K, NV)).astype(np.float16)
    bias = rng.standard_normal((1, NV)).astype(np.float32)
    for opts in PATHS:
        with using(opts):
            _check(k(a, b, bias), _ref(a, b, bias))


# ------------------------------------------------------------------------------------ refusals
def _refusing(bias_dtype=pl.FP32, bias_shape=(1, 64), memory=pl.Mem.Mat, N=64, store=True):
    @pl.kernel
    def k(
        a: pl.Tensor[[16, 64], pl.FP16],
        b: pl.Tensor[[64, N], pl.FP16],
        bias: pl.Tensor[list(bias_shape), bias_dtype],
        out: pl.Out[pl.Tensor[[16, N], pl.FP32]],
    ):
        ta = pl.load(a, [0, 0], [16, 64], target_memory=pl.Mem.Mat)
        tb = pl.load(b, [0, 0], [64, N], target_memory=pl.Mem.Mat)
        tbias = pl.load(bias, [0, 0], list(bias_shape), target_memory=memory)
        c = pl.tile.matmul_bias(ta, tb, tbias)
        if store:
            pl.store(c, [0, 0], out)
        else:
            out[:, :] = pl.matmul_acc(c, ta, tb)

    return k


@pytest.mark.parametrize(
    "kw,msg",
    [
        (dict(bias_dtype=pl.FP16), "the bias .* must have the accumulator's dtype FP32"),
        (dict(bias_shape=(1, 32)), r"the bias must be a \[1, 64\] tile"),
        (dict(bias_shape=(16, 64)), r"the bias must be a \[1, 64\] tile"),
        (dict(memory=pl.Mem.Vec), "the bias .* must be a Mat or Bias tile"),
        (dict(N=512, bias_shape=(1, 512), store=False), "its bias row needs 2048 bytes of the bias table"),
    ],
)
def test_refusals(kw, msg):
    with pytest.raises(CompileError, match=msg):
        _refusing(**kw).lower()


def test_gemv_acc_phase_is_checked():
    @pl.kernel
    def k(
        a: pl.Tensor[[1, 64], pl.FP16],
        b: pl.Tensor[[64, 32], pl.FP16],
        out: pl.Out[pl.Tensor[[1, 32], pl.FP32]],
    ):
        ta = pl.load(a, [0, 0], [1, 64], target_memory=pl.Mem.Mat)
        tb = pl.load(b, [0, 0], [64, 32], target_memory=pl.Mem.Mat)
        pl.store(pl.tile.gemv(ta, tb, acc_phase="later"), [0, 0], out)

    with pytest.raises(CompileError, match="acc_phase must be one of unspecified, partial, final"):
        k.lower()


def test_runtime_tmov_mat_to_bias_and_tmatmul_bias_checks():  # pto-isa TMOV.md, TMATMUL_BIAS.md
    mat = runtime.TileBuf("Mat", np.float32, 16, 64, valid_row=1)
    bias = runtime.TileBuf("Bias", np.float32, 1, 64)
    runtime.isa.tmov(bias, mat)
    two = runtime.TileBuf("Mat", np.float32, 16, 64, valid_row=2)
    with pytest.raises(runtime.DeviceError, match="TMOV Mat -> Bias moves one row"):
        runtime.isa.tmov(bias, two)
    wrong = runtime.TileBuf("Bias", np.float16, 1, 64)
    with pytest.raises(runtime.DeviceError, match="not an allowed pair"):
        runtime.isa.tmov(wrong, runtime.TileBuf("Mat", np.float16, 16, 64, valid_row=1))
    left = runtime.TileBuf("Left", np.float16, 16, 16)
    right = runtime.TileBuf("Right", np.float16, 16, 16)
    acc = runtime.TileBuf("Acc", np.float32, 16, 16)
    with pytest.raises(runtime.DeviceError, match="no accumulating form"):
        runtime.isa.tmatmul(acc, left, right, accumulate=True, bias=bias)
