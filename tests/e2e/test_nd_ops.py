"""Tile-level and tensor-level ops on ND tensors, end to end against numpy (api.md)."""

from __future__ import annotations

import numpy as np
import pytest

from nzjit import pl

RNG = np.random.default_rng(7)


def test_vec_elementwise_and_cast():
    @pl.kernel
    def k(
        x: pl.Tensor[[32, 64], pl.FP32],
        y: pl.Tensor[[32, 64], pl.FP32],
        o: pl.Out[pl.Tensor[[32, 64], pl.FP32]],
        h: pl.Out[pl.Tensor[[32, 64], pl.FP16]],
    ):
        for r in pl.range(2):
            xt = pl.load(x, [r * 16, 0], [16, 64])
            yt = pl.load(y, [r * 16, 0], [16, 64], target_memory=pl.Mem.Vec)
            v = pl.add(pl.mul(xt, yt), pl.sub(pl.exp(xt), pl.maximum(xt, yt)))
            pl.store(v + xt * yt - yt, [r * 16, 0], o)
            pl.store(pl.cast(v, pl.FP16), [r * 16, 0], h)

    x = RNG.standard_normal((32, 64)).astype(np.float32)
    y = RNG.standard_normal((32, 64)).astype(np.float32)
    o, h = k(x, y)
    v = x * y + (np.exp(x) - np.maximum(x, y))
    # each op is one fp32 operation per element, as in numpy; only exp may differ (by an ulp or so)
    np.testing.assert_allclose(o, v + x * y - y, rtol=1e-6, atol=1e-6)
    # fp16 keeps 11 significant bits: rounding to nearest is within 2**-11 relative (ignoring subnormals)
    np.testing.assert_allclose(h.astype(np.float32), v, rtol=2**-11, atol=2**-24)


def test_cast_int8_to_fp16_is_exact():
    @pl.kernel
    def k(x: pl.Tensor[[16, 64], pl.INT8], o: pl.Out[pl.Tensor[[16, 64], pl.FP16]]):
        pl.store(pl.cast(pl.load(x, [0, 0], [16, 64]), pl.FP16), [0, 0], o)

    x = RNG.integers(-128, 128, (16, 64), dtype=np.int8)
    np.testing.assert_array_equal(k(x), x.astype(np.float16))


def test_tile_matmul_forms_agree():
    """b given as [K, N], as [N, K] with b_trans, as a transpose_view; then matmul_acc."""
    M, K, N = 32, 64, 48

    @pl.kernel
    def k(
        a: pl.Tensor[[M, K], pl.FP16],
        b: pl.Tensor[[K, N], pl.FP16],
        bt: pl.Tensor[[N, K], pl.FP16],
        o1: pl.Out[pl.Tensor[[M, N], pl.FP32]],
        o2: pl.Out[pl.Tensor[[M, N], pl.FP32]],
        o3: pl.Out[pl.Tensor[[M, N], pl.FP32]],
        o4: pl.Out[pl.Tensor[[M, N], pl.FP32]],
    ):
        at = pl.load(a, [0, 0], [M, K], target_memory=pl.Mem.Mat)
        bm = pl.load(b, [0, 0], [K, N], target_memory=pl.Mem.Mat)
        btm = pl.load(bt, [0, 0], [N, K], target_memory=pl.Mem.Mat)
        pl.store(pl.matmul(at, bm), [0, 0], o1)
        pl.store(pl.matmul(at, btm, b_trans=True), [0, 0], o2)
        pl.store(pl.matmul(at, pl.tile.transpose_view(btm)), [0, 0], o3)
        c = pl.matmul(at, bm)
        c = pl.matmul_acc(c, at, btm, b_trans=True)
        pl.store(c, [0, 0], o4)

    a = RNG.standard_normal((M, K)).astype(np.float16)
    b = RNG.standard_normal((K, N)).astype(np.float16)
    o1, o2, o3, o4 = k(a, b, np.ascontiguousarray(b.T))
    ref = a.astype(np.float64) @ b.astype(np.float64)
    bound = K * 2.0**-24 * (np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))).max()  # fp32 sums
    np.testing.assert_allclose(o1, ref, rtol=0, atol=bound)
    np.testing.assert_array_equal(o1, o2)
    np.testing.assert_array_equal(o1, o3)
    np.testing.assert_allclose(o4, 2 * ref, rtol=0, atol=4 * bound)


def test_tensor_slices_full_axes_pl_slice_and_reshape():
    @pl.kernel
    def k(x: pl.Tensor[[4, 32, 64], pl.FP32], o: pl.Out[pl.Tensor[[4, 16, 64], pl.FP32]]):
        a = x[2, 8:24, :]  # integer + window + full axis
        pl.store(pl.load(a, [0, 0], [16, 64]), [0, 0, 0], o)
        s = pl.slice(x, [1, 16, 64], [3, 16, 0])  # shape before offsets
        pl.store(pl.load(s, [0, 0, 0], [1, 16, 64]), [1, 0, 0], o)
        r = pl.reshape(x, [128, 64])
        pl.store(pl.load(r, [40, 0], [16, 64]), [2, 0, 0], o)
        for e in pl.spmd(2):
            row = x[e + 1]  # a traced integer drops the axis
            t = pl.load(row[0:16, 0:32], [0, 0], [16, 32])
            pl.store(t, [3, 0, e * 32], o)

    x = RNG.standard_normal((4, 32, 64)).astype(np.float32)
    o = k(x)
    np.testing.assert_array_equal(o[0], x[2, 8:24])
    np.testing.assert_array_equal(o[1], x[3, 16:32])
    np.testing.assert_array_equal(o[2], x.reshape(128, 64)[40:56])
    np.testing.assert_array_equal(o[3], np.concatenate([x[1, 0:16, 0:32], x[2, 0:16, 0:32]], axis=1))


def test_tensor_matmul_and_assignment_into_windows():
    @pl.kernel
    def k(
        x: pl.Tensor[[32, 64], pl.INT8],
        w: pl.Tensor[[64, 64], pl.INT8],
        out: pl.Out[pl.Tensor[[64, 64], pl.INT32]],
    ):
        out[0:32, 0:32] = pl.matmul(x, w[0:32, :], b_trans=True)
        out[32:64, 32:64] = pl.matmul(x, w[32:64, :], b_trans=True)
        out[32:64, 0:32] = pl.matmul(x[:, 0:32], w[0:32, 32:64], b_trans=True)
        out[0:32, 32:64] = pl.matmul(x[:, 32:64], w[32:64, 0:32], b_trans=True)

    x = RNG.integers(-128, 128, (32, 64), dtype=np.int8)
    w = RNG.integers(-128, 128, (64, 64), dtype=np.int8)
    x32, w32 = x.astype(np.int32), w.astype(np.int32)
    out = k(x, w)
    np.testing.assert_array_equal(out[0:32, 0:32], x32 @ w32[0:32].T)
    np.testing.assert_array_equal(out[32:64, 32:64], x32 @ w32[32:64].T)
    np.testing.assert_array_equal(out[32:64, 0:32], x32[:, 0:32] @ w32[0:32, 32:64].T)
    np.testing.assert_array_equal(out[0:32, 32:64], x32[:, 32:64] @ w32[32:64, 0:32].T)


def test_tensor_view_and_reinterpret_view_on_nd():
    @pl.kernel
    def k(
        x: pl.Tensor[[64, 64], pl.INT8],
        a: pl.Out[pl.Tensor[[32, 128], pl.INT8]],
        b: pl.Out[pl.Tensor[[64, 16], pl.INT32]],
    ):
        v = pl.tensor.view(x, [32, 128])
        pl.store(pl.load(v, [0, 0], [32, 128]), [0, 0], a)
        u = pl.tensor.reinterpret_view(x, pl.INT32)
        pl.store(pl.load(u, [0, 0], [64, 16]), [0, 0], b)

    x = RNG.integers(-128, 128, (64, 64), dtype=np.int8)
    a, b = k(x)
    np.testing.assert_array_equal(a, x.reshape(32, 128))
    np.testing.assert_array_equal(b, x.view(np.int32))


@pytest.mark.parametrize("valid", [16, 24])
def test_partial_vec_load_with_valid_shape(valid):
    @pl.kernel
    def k(x: pl.Tensor[[40, 64], pl.FP32], o: pl.Out[pl.Tensor[[40, 64], pl.FP32]]):
        pl.store(pl.load(x, [16, 0], [32, 64], valid_shape=[valid, 64]), [16, 0], o)

    x = RNG.standard_normal((40, 64)).astype(np.float32)
    o = np.zeros((40, 64), np.float32)
    k(x, o)
    np.testing.assert_array_equal(o[16 : 16 + valid], x[16 : 16 + valid])
    assert not o[:16].any() and not o[16 + valid :].any()


def test_assigning_vec_tiles_into_windows_whose_bounds_are_recomputed():
    @pl.kernel
    def k(x: pl.Tensor[[32, 64], pl.FP32], out: pl.Out[pl.Tensor[[2, 32, 64], pl.FP32]]):
        for i in pl.range(2):
            # start and stop are separate expressions; their difference is still the static 16
            out[1, i * 16 : i * 16 + 16, :] = pl.exp(pl.load(x, [i * 16, 0], [16, 64]))
        out[np.int64(0), 0 : np.int32(16), 0:64] = pl.load(x, [16, 0], [16, 64])

    x = RNG.standard_normal((32, 64)).astype(np.float32)
    o = k(x)
    np.testing.assert_array_equal(o[1], np.exp(x))  # the same fp32 exp as numpy's on this backend
    np.testing.assert_array_equal(o[0, :16], x[16:])
    assert np.isnan(o[0, 16:]).all()  # never written: the poison pattern of fresh memory (NaN)
