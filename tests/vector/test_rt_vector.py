"""runtime.vector: the Vec unit's instructions on UB bytes (pto-isa semantics, valid region only,
the A2/A3 dtype lists, the documented rounding modes)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from runtime import DeviceError, OnChip, TileBuf
from runtime import vector as V

F16, F32, BF16 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(ml_dtypes.bfloat16)


def vec(a: np.ndarray, valid: tuple[int, int] | None = None) -> TileBuf:
    layout = "DN" if a.shape[1] == 1 and a.shape[0] > 1 else None
    t = TileBuf(
        "Vec",
        a.dtype,
        *a.shape,
        layout=layout,
        valid_row=None if valid is None else valid[0],
        valid_col=None if valid is None else valid[1],
    )
    t.data.view(a.dtype).reshape(a.shape)[...] = a
    return t


def arr(t: TileBuf) -> np.ndarray:
    return t.data.view(t.dtype).reshape(t.rows, t.cols)


rng = np.random.default_rng(0)


@pytest.mark.parametrize("op", sorted(V.BINARY_OPS))
@pytest.mark.parametrize("dtype", [F32, F16])
def test_binary_matches_numpy_rounded_once(op, dtype):
    a = rng.standard_normal((8, 64)).astype(dtype)
    b = (rng.standard_normal((8, 64)) + 3).astype(dtype)
    dst = vec(np.zeros((8, 64), dtype))
    V.binary(op, dst, vec(a), vec(b))
    want = V.BINARY_OPS[op](a.astype(np.float32), b.astype(np.float32)).astype(dtype)
    assert np.array_equal(arr(dst), want)


def test_binary_int32_wraps():
    a = np.full((1, 8), 2**31 - 1, np.int32)
    dst = vec(np.zeros((1, 8), np.int32))
    V.binary("add", dst, vec(a), vec(np.ones((1, 8), np.int32)))
    assert (arr(dst) == -(2**31)).all()


def test_only_the_valid_region_is_written():
    a = np.ones((4, 16), np.float32)
    dst = vec(np.full((4, 16), 7.0, np.float32), (2, 8))
    V.binary("add", dst, vec(a, (2, 8)), vec(a, (2, 8)))
    out = arr(dst)
    assert (out[:2, :8] == 2).all() and (out[2:] == 7).all() and (out[:, 8:] == 7).all()


def test_bf16_has_no_arithmetic_on_a2a3_but_does_on_a5():
    a = np.ones((1, 16), BF16)
    with pytest.raises(DeviceError, match="bfloat16 is not a add dtype of the A2A3 vector unit"):
        V.binary("add", vec(a), vec(a), vec(a))
    dst = vec(np.zeros((1, 16), BF16))
    V.binary("add", dst, vec(a), vec(a), target="A5")
    assert (arr(dst).astype(np.float32) == 2).all()


def test_refusals_valid_shape_dtype_space():
    a = vec(np.ones((2, 8), np.float32))
    with pytest.raises(DeviceError, match="valid shape 1x8 differs"):
        V.binary("add", a, vec(np.ones((2, 8), np.float32), (1, 8)), a)
    with pytest.raises(DeviceError, match="operand dtypes differ"):
        V.binary("add", a, a, vec(np.ones((2, 8), np.int32)))
    with pytest.raises(DeviceError, match="unified buffer"):
        V.binary("add", a, a, TileBuf("Mat", np.float32, 16, 8))
    with pytest.raises(DeviceError, match="int32 is not a div dtype"):
        i = vec(np.ones((1, 8), np.int32))
        V.binary("div", i, i, i)


def test_scalar_forms_convert_the_scalar_to_the_dtype():
    a = np.arange(16, dtype=np.float16).reshape(1, 16)
    dst = vec(np.zeros((1, 16), F16))
    V.binary_scalar("mul", dst, vec(a), 0.1)
    want = (a.astype(np.float32) * np.float32(np.float16(0.1))).astype(F16)
    assert np.array_equal(arr(dst), want)


@pytest.mark.parametrize("op", sorted(V.UNARY_OPS))
def test_unary_fp32(op):
    a = (rng.random((4, 32)) + 0.5).astype(np.float32) * (1 if op in ("log", "sqrt", "rsqrt") else -1)
    dst = vec(np.zeros((4, 32), F32))
    V.unary(op, dst, vec(a))
    np.testing.assert_allclose(arr(dst), V.UNARY_OPS[op](a.astype(np.float64)), rtol=1e-6)


def test_lrelu():
    a = np.linspace(-2, 2, 16, dtype=np.float32).reshape(1, 16)
    dst = vec(np.zeros((1, 16), F32))
    V.lrelu(dst, vec(a), 0.25)
    assert np.array_equal(arr(dst), np.maximum(a, a * np.float32(0.25)))


def test_row_reductions_and_tmp_rule():
    a = rng.standard_normal((8, 40)).astype(np.float32)
    src = vec(np.pad(a, ((0, 0), (0, 24))), (8, 40))  # 64 columns, 40 valid: padding never read
    arr(src)[:, 40:] = 1e30
    tmp = vec(np.zeros((8, 64), F32))
    for op, ref in (("sum", np.sum), ("max", np.max), ("min", np.min)):
        dst = vec(np.zeros((8, 1), F32))
        V.row_reduce(op, dst, src, tmp)
        np.testing.assert_allclose(arr(dst)[:, 0], ref(a, axis=1), rtol=1e-5)
    with pytest.raises(DeviceError, match="A2/A3 needs a tmp tile"):
        V.row_reduce("sum", vec(np.zeros((8, 1), F32)), src)
    with pytest.raises(DeviceError, match="tmp holds 256 bytes"):
        V.row_reduce("sum", vec(np.zeros((8, 1), F32)), src, vec(np.zeros((8, 8), F32)))
    V.row_reduce("sum", vec(np.zeros((8, 1), F32)), src, target="A5")  # A5 ignores tmp


def test_fp16_sum_is_a_tree_in_fp16():
    a = np.full((16, 4096), 1.0, np.float16)
    dst = vec(np.zeros((16, 1), F16))
    V.row_reduce("sum", dst, vec(a), vec(np.zeros((16, 4096), F16)))
    assert (
        arr(dst)[:, 0] == 4096
    ).all()  # a tree of powers of two is exact; sequential fp16 would stop at 2048


def test_col_reductions():
    a = rng.standard_normal((6, 16)).astype(np.float32)
    dst = vec(np.zeros((1, 16), F32))
    V.col_reduce("max", dst, vec(a))
    assert np.array_equal(arr(dst)[0], a.max(axis=0))


def test_row_expand_modes():
    a = rng.standard_normal((8, 32)).astype(np.float32)
    r = rng.standard_normal((8, 1)).astype(np.float32)
    dst = vec(np.zeros((8, 32), F32))
    V.row_expand("sub", dst, vec(a), vec(r))
    assert np.array_equal(arr(dst), a - r)
    block = np.repeat(r, 8, axis=1)  # mode 2: one 32-byte block per row
    V.row_expand("mul", dst, vec(a), vec(block))
    assert np.array_equal(arr(dst), a * r)
    V.row_expand("expand", dst, None, vec(r))
    assert np.array_equal(arr(dst), np.broadcast_to(r, (8, 32)))
    with pytest.raises(DeviceError, match=r"must be \[R, 1\]"):
        V.row_expand("add", dst, vec(a), vec(np.zeros((8, 16), F32)))


def test_col_expand():
    a = rng.standard_normal((4, 32)).astype(np.float32)
    c = rng.standard_normal((1, 32)).astype(np.float32)
    dst = vec(np.zeros((4, 32), F32))
    V.col_expand("div", dst, vec(a), vec(c))
    assert np.array_equal(arr(dst), a / c)


@pytest.mark.parametrize(
    "mode,want",
    [
        ("rint", [2, -2, 4, 0]),
        ("round", [3, -3, 4, 1]),
        ("trunc", [2, -2, 3, 0]),
        ("floor", [2, -3, 3, 0]),
        ("ceil", [3, -2, 4, 1]),
    ],
)
def test_cvt_float_to_int_modes(mode, want):
    src = vec(np.array([[2.5, -2.5, 3.5, 0.5, 0, 0, 0, 0]], np.float32))
    dst = vec(np.zeros((1, 8), np.int32))
    V.cvt(dst, src, mode)
    assert list(arr(dst)[0, :4]) == want


def test_cvt_fp32_to_fp16_ties():
    x = np.array([[1 + 2**-11, 1 + 3 * 2**-11] + [0] * 14], np.float32)  # halfway between fp16 neighbours
    dst = vec(np.zeros((1, 16), F16))
    V.cvt(dst, vec(x), "rint")
    assert list(arr(dst)[0, :2].astype(np.float64)) == [1.0, 1 + 2**-9]
    V.cvt(dst, vec(x), "round")
    assert list(arr(dst)[0, :2].astype(np.float64)) == [1 + 2**-10, 1 + 2**-9]
    V.cvt(dst, vec(x), "trunc")
    assert list(arr(dst)[0, :2].astype(np.float64)) == [1.0, 1 + 2**-10]


def test_cvt_saturates_and_refuses_missing_pairs():
    dst = vec(np.zeros((1, 32), np.int8))
    V.cvt(dst, vec(np.array([[300.0, -300.0] + [0] * 30], F16)), "rint")
    assert list(arr(dst)[0, :2]) == [127, -128]
    with pytest.raises(DeviceError, match="float32 -> int8 is not a conversion of the A2A3 vector unit"):
        V.cvt(vec(np.zeros((1, 32), np.int8)), vec(np.zeros((1, 32), F32)))
    with pytest.raises(DeviceError, match="unknown round mode"):
        V.cvt(vec(np.zeros((1, 8), F32)), vec(np.zeros((1, 8), np.int32)), "nearest")


@pytest.mark.parametrize("pad,want", [("zero", 0.0), ("max", np.inf), ("min", -np.inf)])
def test_fillpad(pad, want):
    src = vec(np.ones((2, 16), np.float32), (1, 5))
    dst = vec(np.zeros((2, 16), np.float32))
    V.fillpad(dst, src, pad)
    out = arr(dst)
    assert (out[0, :5] == 1).all() and (out[0, 5:] == want).all() and (out[1] == want).all()
    assert (dst.valid_row, dst.valid_col) == (2, 16)


def test_fillpad_int_min():
    src = vec(np.ones((1, 8), np.int32), (1, 3))
    dst = vec(np.zeros((1, 8), np.int32))
    V.fillpad(dst, src, "min")
    assert list(arr(dst)[0]) == [1, 1, 1] + [-(2**31)] * 5


def test_expands_and_ub_capacity():
    dst = vec(np.zeros((2, 8), np.float32), (1, 8))
    V.expands(dst, 3.0)
    assert (arr(dst)[0] == 3).all() and (arr(dst)[1] == 0).all()
    assert V.UB_BYTES == 192 * 1024
    oc = OnChip("A2A3")
    oc.alloc_tile("Vec", 512, 96, np.float32)  # 192 KiB exactly
    with pytest.raises(DeviceError):
        oc.alloc_tile("Vec", 1, 8, np.float32)


def test_dn_column_tiles():
    t = TileBuf("Vec", np.float32, 8, 1, layout="DN")  # 8 x 4 bytes: one 32-byte block
    assert t.logical().shape == (8, 1)
    with pytest.raises(DeviceError, match="DN tile column of 4 float32 is 16 bytes"):
        TileBuf("Vec", np.float32, 4, 1, layout="DN")


@pytest.mark.parametrize("op", V.REDUCE_OPS)
@pytest.mark.parametrize("dtype", [F32, F16])
def test_reduce_values_over_lanes_equals_each_lane(op, dtype):
    x = rng.standard_normal((5, 16, 40)).astype(dtype)  # 5 lanes' valid regions
    for axis in (-1, -2):
        batched = V.reduce_values(op, x, axis, dtype)
        for lane in range(5):
            assert np.array_equal(batched[lane], V.reduce_values(op, x[lane], axis, dtype))
