"""The ND row-pitch guard (issue 24 item 4; hardware-model.md §3: `srcDValue` = GM row pitch in
elements, a 16-bit field): an ND -> NZ (Mat) load whose rows are more than 65535 elements apart is
refused when the kernel is compiled, naming the field and the fix; nothing runs."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import runtime
from nzjit import CompileError, pl


def _kernel(dtype, K):
    @pl.kernel
    def k(
        x: pl.Tensor[[16, K], dtype],
        w: pl.Tensor[[64, 64], dtype, pl.NZ],
        out: pl.Out[pl.Tensor[[16, 64], pl.INT32 if dtype == pl.INT8 else pl.FP32]],
    ):
        out[:, :] = pl.matmul(x[:, 0:64], w[:, :], b_trans=True)

    return k


def _operands(np_dtype, K):
    rng = np.random.default_rng(0)
    return rng.integers(-3, 3, (16, K)).astype(np_dtype), rng.integers(-3, 3, (64, 64)).astype(np_dtype)


@pytest.mark.parametrize("dtype", [pl.INT8, pl.FP16])
def test_a_row_pitch_past_65535_elements_is_refused_at_compile_time(dtype):
    k = _kernel(dtype, 65536)
    with pytest.raises(
        CompileError,
        match=r"(?s)\[ND2NZ-pitch\] this load of 'x' into a Mat \(NZ\) tile reads ND "
        r"rows 65536 elements apart.*16-bit srcDValue field \(max 65535.*help: keep the row "
        r"pitch <= 65535",
    ) as info:
        k.lower()
    assert info.value.rule == "ND2NZ-pitch" and "test_nd_pitch_guard.py" in str(info.value.source)
    x, w = _operands(dtype.np_dtype, 65536)
    out = np.full((16, 64), 7, np.int32 if dtype == pl.INT8 else np.float32)
    with pytest.raises(CompileError, match="ND2NZ-pitch"):
        k(x, runtime.pack_nz(w), out)
    assert (out == 7).all()  # refused before anything ran


@pytest.mark.parametrize("dtype", [pl.INT8, pl.FP16])
def test_a_row_pitch_of_65535_elements_or_fewer_runs_exactly(dtype):
    K = 65535 if dtype == pl.INT8 else 65520
    x, w = _operands(dtype.np_dtype, K)
    with warnings.catch_warnings():
        warnings.simplefilter("error", runtime.HardwareDefectWarning)  # no wrapped field
        out = _kernel(dtype, K)(x, runtime.pack_nz(w))
    ref = x[:, :64].astype(np.float64) @ w.astype(np.float64).T  # small integers: exact
    np.testing.assert_array_equal(out, ref.astype(out.dtype))


def test_the_fix_split_rows_into_a_leading_axis_runs():
    @pl.kernel
    def k(
        x: pl.Tensor[[2, 16, 32768], pl.INT8],
        w: pl.Tensor[[64, 64], pl.INT8, pl.NZ],
        out: pl.Out[pl.Tensor[[16, 64], pl.INT32]],
    ):
        out[:, :] = pl.matmul(x[1, :, 0:64], w[:, :], b_trans=True)

    x, w = _operands(np.int8, 65536)
    xs = np.ascontiguousarray(x.reshape(16, 2, 32768).transpose(1, 0, 2))
    out = k(xs, runtime.pack_nz(w))
    np.testing.assert_array_equal(out, x[:, 32768 : 32768 + 64].astype(np.int32) @ w.astype(np.int32).T)


def test_an_nz_tensor_with_long_rows_is_not_an_nd2nz_load():
    @pl.kernel
    def k(
        x: pl.Tensor[[16, 64], pl.INT8],
        w: pl.Tensor[[64, 65536], pl.INT8, pl.NZ],
        out: pl.Out[pl.Tensor[[16, 64], pl.INT32]],
    ):
        out[:, :] = pl.matmul(x[:, :], w[:, 0:64], b_trans=True)

    loads = [e for e in k.lower().final.walk() if e.primitive.name == "tile.load"]
    assert [bool(e.params.get("blocked")) for e in loads] == [False, True]  # NZ -> NZ: no srcDValue
