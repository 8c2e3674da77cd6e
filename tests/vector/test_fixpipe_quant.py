"""The fixpipe's int32 -> fp16 dequantisation of an Acc -> Vec move (issue 22 item 1), as pto-isa's
reference model computes it (include/pto/cpu/common.hpp, quantize_element): the sum converted to
fp32, times the fp32 scale in fp32, saturated to +-65504, then ReLU, rounded to fp16. DEQF16
takes one scale (`scale=` a float); VDEQF16 one per column (`scale=` an FP32 tensor row), whose
quant parameter keeps 19 bits of the scale (sign, exponent, 10 mantissa bits)."""

from __future__ import annotations

import numpy as np
import pytest

import nzjit
from nzjit import pl
from runtime.crosscore import F16_MAX, dequant_fp16, vector_quant_scale

rng = np.random.default_rng(33)
M, K, N = 16, 32, 64


def test_deqf16_rounds_through_fp32_and_saturates():
    # 2^25 + 2^14 + 1 is no fp32: it rounds to 2^25 + 2^14 first; times 2^-11 that is 16392, the tie
    # between the fp16s 16384 and 16400 (even: 16384). Exact arithmetic would give 16400.
    acc = np.array([[2**25 + 2**14 + 1, -(2**25 + 2**14 + 1), 70000, -70000, 3, -3]], np.int32)
    got = dequant_fp16(acc, 2.0**-11)
    assert got.tolist() == [[16384.0, -16384.0, 34.1875, -34.1875, 0.00146484375, -0.00146484375]]
    assert np.float16((2**25 + 2**14 + 1) * 2.0**-11) == 16400  # what one exact rounding would give
    assert dequant_fp16(np.array([[70000, -70000]], np.int32), 1.0).tolist() == [[F16_MAX, -F16_MAX]]
    big = dequant_fp16(np.array([[2**30]], np.int32), 1.0)
    assert big[0, 0] == np.float16(F16_MAX)  # saturated to the largest finite fp16, not inf
    # the product is an fp32 operation, rounded before the fp16 rounding (two roundings)
    a = np.arange(-5000, 5000, 7, dtype=np.int32).reshape(1, -1)
    s = np.float32(0.0137)
    want = np.clip(a.astype(np.float32) * s, -F16_MAX, F16_MAX).astype(np.float16)
    assert np.array_equal(dequant_fp16(a, float(s)), want)


def test_the_relu_applies_to_the_scaled_value():
    acc = np.array([[100, -100, 0]], np.int32)
    assert dequant_fp16(acc, -0.5, relu=True).tolist() == [[0.0, 50.0, 0.0]]  # after a negative scale
    assert dequant_fp16(acc, 0.5, relu=True).tolist() == [[50.0, 0.0, 0.0]]
    nan = dequant_fp16(np.array([[0, 1]], np.int32), np.float32(np.inf), relu=True)
    assert nan.tolist() == [[0.0, F16_MAX]]  # 0 * inf = NaN: ReLU(NaN) is 0; inf saturates


def test_vector_quant_keeps_eleven_significant_bits():
    s = np.array([0.1, -0.1, 1.0, 3.0e-3, 0.0, -0.0, 1.9999999], np.float32)
    got = vector_quant_scale(s)
    # the low 13 mantissa bits dropped (truncation toward zero in magnitude)
    want = (s.view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)
    want[5] = 0.0  # a zero exponent and mantissa reads as +0 (the sign is not kept)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    assert got[0] != np.float32(0.1) and abs(got[0] - 0.1) < 0.1 * 2**-10


@pytest.mark.parametrize("target", [pl.A2A3, pl.A5])
@pytest.mark.parametrize("relu", [False, True])
def test_per_channel_dequant_of_an_int32_acc_every_stage(target, relu):
    @pl.kernel(target=target)
    def k(
        a: pl.Tensor[[M, K], pl.INT8],
        b: pl.Tensor[[K, N], pl.INT8],
        s: pl.Tensor[[2, N], pl.FP32],
        y: pl.Out[pl.Tensor[[M, N], pl.FP16]],
    ):
        acc = pl.matmul(
            pl.load(a, [0, 0], [M, K], target_memory=pl.Mem.Mat),
            pl.load(b, [0, 0], [K, N], target_memory=pl.Mem.Mat),
        )
        pl.store(pl.move(acc, target_memory=pl.Mem.Vec, dtype=pl.FP16, scale=s[1], relu=relu), [0, 0], y)

    a = rng.integers(-128, 128, (M, K)).astype(np.int8)
    b = rng.integers(-128, 128, (K, N)).astype(np.int8)
    s = ((rng.random((2, N)) - 0.3) * 2e-3).astype(np.float32)
    low = k.lower(a, b, s, np.zeros((M, N), np.float16))
    prim = "tile.tpush_to_aiv" if target is pl.A2A3 else "tile.move_fixpipe"
    (mv,) = [e for e in low.ir().eqns if e.primitive.name == prim]
    assert str(mv.inputs[1].type).startswith("f32[64]")
    outs = []
    for after in ["trace", *low.passes]:
        y = np.zeros((M, N), np.float16)
        low.run(a, b, s, y, after=after)
        outs.append(y)
    y = np.zeros((M, N), np.float16)
    k(a, b, s, y)
    outs.append(y)
    for o in outs[1:]:
        assert o.tobytes() == outs[0].tobytes()
    acc = a.astype(np.int64) @ b.astype(np.int64)  # |acc| < 2^24: exact in fp32
    per = (s[1].view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)  # normal scales: 10 mantissa bits
    v = acc.astype(np.float32) * per[None, :]
    want = (np.maximum(v, 0) if relu else v).astype(np.float16)
    assert np.array_equal(outs[0], want)
    pto = low.pto()
    assert "%s_pview = pto.partition_view %s_view, offsets = [%c1, %c0], sizes = [%c1, %c64]" in pto
    if target is pl.A2A3:
        assert (
            "pre_quant = #pto<quant_mode VDEQF16>" in pto and "!pto.partition_tensor_view<1x64xf32>)" in pto
        )
    else:
        assert "pto.tmov.fp ins(%acc, %s_pview" in pto


def test_per_channel_scale_refusals():
    def lower(scale):
        @pl.kernel
        def k(
            a: pl.Tensor[[M, K], pl.INT8],
            b: pl.Tensor[[K, N], pl.INT8],
            s: pl.Tensor[[2, N], pl.FP32],
            h: pl.Tensor[[1, N], pl.FP16],
        ):
            acc = pl.matmul(
                pl.load(a, [0, 0], [M, K], target_memory=pl.Mem.Mat),
                pl.load(b, [0, 0], [K, N], target_memory=pl.Mem.Mat),
            )
            pl.move(acc, target_memory=pl.Mem.Vec, dtype=pl.FP16, scale=scale(s, h))

        return k.lower(
            np.zeros((M, K), np.int8),
            np.zeros((K, N), np.int8),
            np.zeros((2, N), np.float32),
            np.zeros((1, N), np.float16),
        )

    with pytest.raises(
        nzjit.CompileError, match=r"a per-channel scale= is a \[64\] or \[1, 64\] FP32 tensor"
    ) as ei:
        lower(lambda s, h: s)  # two rows
    assert "scales[e]" in str(ei.value)
    with pytest.raises(nzjit.CompileError, match="per-channel scale= is a"):
        lower(lambda s, h: h)  # fp16
    lower(lambda s, h: s[0])  # one row: accepted
