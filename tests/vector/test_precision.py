"""Precision of the vector unit (issue 22 items 2, 3 and 7): `high_precision=` where PyPTO has it
(pl.div tile-tile, pl.log, pl.recip, pl.rsqrt) modelled as pto-isa documents each
instruction's PrecisionType per target, and fp16 arithmetic in the precision the device uses.

Facts (pto-isa docs/isa/TDIV.md, TLOG.md, TRECIP.md: "High Precision Algorithm - only available on
A5, PrecisionType option is ignored on A3"; include/pto/npu/a5/TDiv.hpp: HIGH_PRECISION is
Div754's IEEE-754 division; a5/TUnaryOp.hpp: TLOG HIGH_PRECISION is LogPrecisionImpl; PyPTO
pto_ops_elementwise.cpp: `{precisionType = #pto<div_precision high_precision>}` after outs).
"""

from __future__ import annotations

import numpy as np
import pytest

import nzjit
from nzjit import pl
from runtime import TileBuf
from runtime import vector as V
from tests.vector.test_vector_ops import run_all_stages

rng = np.random.default_rng(22)
R, C = 16, 64


def _kernel(target, op, dtype=pl.FP32, high_precision=True):
    @pl.kernel(target=target)
    def k(x: pl.Tensor[[R, C], dtype], z: pl.Tensor[[R, C], dtype], y: pl.Out[pl.Tensor[[R, C], dtype]]):
        t = pl.load(x, [0, 0], [R, C])
        u = pl.load(z, [0, 0], [R, C])
        if op == "div":
            r = pl.div(t, u, high_precision=high_precision)
        else:
            r = getattr(pl, op)(t, high_precision=high_precision)
        pl.store(r, [0, 0], y)

    return k


def _data(dtype):
    x = (rng.random((R, C)) * 4 + 0.1).astype(dtype)
    z = (rng.random((R, C)) * 4 + 0.1).astype(dtype)
    return x, z, np.zeros((R, C), dtype)


@pytest.mark.parametrize(
    "op,attr", [("div", "div_precision"), ("log", "log_precision"), ("recip", "recip_precision")]
)
@pytest.mark.parametrize("target", [pl.A2A3, pl.A5])
def test_high_precision_is_the_ptoas_precision_attribute(op, attr, target):
    x, z, y = _data(np.float32)
    hp = _kernel(target, op).lower(x, z, y)
    (e,) = [e for e in hp.ir().eqns if e.primitive.name == f"tile.{op}"]
    assert e.params["high_precision"] is True
    line = next(ln for ln in hp.pto().splitlines() if f"pto.t{op} " in ln)
    assert line.endswith(f"{{precisionType = #pto<{attr} high_precision>}}")
    default = _kernel(target, op, high_precision=False).lower(x, z, y)
    assert "precisionType" not in default.pto()


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("op", ["div", "log", "recip"])
def test_a2a3_ignores_high_precision(op, dtype):
    """A2/A3: the PrecisionType option is ignored, so both modes give the same bits at every stage."""
    pd = pl.FP32 if dtype is np.float32 else pl.FP16
    x, z, y = _data(dtype)
    _, hp = run_all_stages(_kernel(pl.A2A3, op, pd), x, z, y)
    _, default = run_all_stages(_kernel(pl.A2A3, op, pd, high_precision=False), x, z, y)
    assert np.array_equal(hp, default)
    x64, z64 = x.astype(np.float64), z.astype(np.float64)
    want = {"div": x64 / z64, "log": np.log(x64), "recip": 1 / x64}[op]
    np.testing.assert_allclose(hp, want, rtol=1e-3 if dtype is np.float16 else 1e-6)  # a few ulp


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_a5_high_precision_division_is_ieee_754(dtype):
    """A5's HIGH_PRECISION TDIV / TRECIP (Div754): the correctly rounded quotient, exact bits."""
    pd = pl.FP32 if dtype is np.float32 else pl.FP16
    x, z, y = _data(dtype)
    _, q = run_all_stages(_kernel(pl.A5, "div", pd), x, z, y)
    assert np.array_equal(q, (x.astype(np.float64) / z.astype(np.float64)).astype(dtype))
    _, r = run_all_stages(_kernel(pl.A5, "recip", pd), x, z, y)
    assert np.array_equal(r, (1 / x.astype(np.float64)).astype(dtype))


def test_a5_high_precision_log_is_rounded_once_from_fp64():
    x, z, y = _data(np.float32)
    x = np.concatenate([x[:8], (1 + rng.random((8, C)) * 1e-3).astype(np.float32)])  # near 1: hard cases
    _, hp = run_all_stages(_kernel(pl.A5, "log"), x, z, y)
    assert np.array_equal(hp, np.log(x.astype(np.float64)).astype(np.float32))
    _, default = run_all_stages(_kernel(pl.A5, "log", high_precision=False), x, z, y)
    assert np.array_equal(default, np.log(x))  # the default vln: the fp32 function


def test_runtime_high_precision_table():
    assert V.HIGH_PRECISION["log"] == {"A2A3": "ignored", "A5": "fp64"}
    assert set(V.HIGH_PRECISION) == {"div", "recip", "log", "rsqrt"}  # PyPTO's high_precision ops
    dst, src = TileBuf("Vec", np.float32, 8, 8), TileBuf("Vec", np.float32, 8, 8)
    vals = (rng.random((8, 8)) + 1).astype(np.float32)
    src.set_logical(vals)
    V.unary("log", dst, src, "A5", high_precision=True)
    assert np.array_equal(dst.logical(), np.log(vals.astype(np.float64)).astype(np.float32))


def test_high_precision_refusals():
    """PyPTO: "pl.div: high_precision requires a Tile rhs" (unified_ops.div); our broadcast forms
    (TROWEXPANDDIV, TCOLEXPANDDIV) have no precision mode in PyPTO either."""

    def trace(body):
        @pl.kernel
        def k(x: pl.Tensor[[R, C], pl.FP32]):
            t = pl.load(x, [0, 0], [R, C])
            body(t, pl.row_sum(t))

        return k.lower(np.ones((R, C), np.float32))

    with pytest.raises(
        nzjit.CompileError, match="pl.div: high_precision requires a Tile rhs of the lhs's shape"
    ) as ei:
        trace(lambda t, r: pl.div(t, 2.0, high_precision=True))
    assert "drop high_precision" in str(ei.value)
    with pytest.raises(nzjit.CompileError, match="high_precision requires a Tile rhs"):
        trace(lambda t, r: pl.div(t, r, high_precision=True))


# ------------------------------------------------------------------------------ fp16 arithmetic
@pytest.mark.parametrize("op", ["add", "sub", "mul", "div"])
def test_fp16_arithmetic_is_the_correctly_rounded_fp16_operation(op):
    """Item 7: the vector unit's half vadd / vsub / vmul / vdiv produce IEEE fp16 results (pto-isa's
    CPU reference computes `half` operations, one rounding each). The simulator computes in fp32
    and rounds once; for + - * / fp32's 24 bits >= 2 * 11 + 2, so the double rounding is innocuous:
    the bits equal the fp64 result rounded once, checked here over every exponent."""
    a = (rng.standard_normal(1 << 14) * np.exp2(rng.integers(-14, 15, 1 << 14))).astype(np.float16)
    b = (rng.standard_normal(1 << 14) * np.exp2(rng.integers(-14, 15, 1 << 14))).astype(np.float16)
    b[b == 0] = 1
    dst, ta, tb = (TileBuf("Vec", np.float16, 128, 128) for _ in range(3))
    ta.set_logical(a.reshape(128, 128))
    tb.set_logical(b.reshape(128, 128))
    V.binary(op, dst, ta, tb)
    f = V.BINARY_OPS[op]
    with np.errstate(over="ignore"):
        want = f(a.astype(np.float64), b.astype(np.float64)).astype(np.float16).reshape(128, 128)
    assert np.array_equal(dst.logical(), want)


def test_fp16_row_sum_accumulates_in_fp16():
    """fp16 sums are fp16 accumulations (a tree rounded to fp16 per level): 1 + 2048 * 2**-11 tiny
    terms is not the fp32 sum rounded once."""
    x = np.full((16, 2048), np.float16(2**-12))
    x[:, 0] = 1
    src, dst = TileBuf("Vec", np.float16, 16, 2048), TileBuf("Vec", np.float16, 16, 1, layout="DN")
    src.set_logical(x)
    V.row_reduce("sum", dst, src, TileBuf("Vec", np.float16, 16, 2048))
    got = dst.logical()[:, 0].astype(np.float64)
    assert np.all(got == got[0]) and np.float16(x[0].astype(np.float64).sum()) == 1.5
    assert 0 < 1.5 - got[0] <= 2**-9  # the small terms a level rounds away: not the fp32 sum's 1.5
