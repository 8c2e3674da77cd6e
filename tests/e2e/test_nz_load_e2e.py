"""NZ weight loads end to end (issue 3): kernels run on `runtime.pack_nz` bytes and must equal
`x @ w.T` of the logical weight exactly (int8; fp16 and fp32 holding small integers).

Covered: the full load, an N-sliced load (row-fractal offset), a K-sliced load (C0-block offset),
the seed's 3-D window, a layer of a 3-D weight through `w[layer]` (a tensor.slice, NZ-30), a
folded 4-D weight (NZ-28), a dynamic batch (NZ-29), the whole-tensor flatten (NZ-31) read back as
ND, and a test-only pass that corrupts a blocked offset: the numbers then follow the wrong
fractal, proof that the backend reads the NZ bytes through the blocked view.
No `from __future__ import annotations`: kernel annotations use closure values.
"""

import numpy as np
import pytest

import runtime
from nzjit import pl
from nzjit.core.ir import Graph, Literal
from nzjit.driver import Lowered

RNG = np.random.default_rng(20261129)
DTYPES = {  # pl dtype -> (numpy dtype, accumulator pl dtype)
    pl.INT8: (np.int8, pl.INT32),
    pl.FP16: (np.float16, pl.FP32),
    pl.FP32: (np.float32, pl.FP32),
}


def _data(shape, dtype):
    """Small integers: every product and sum is exact in int32 / float32."""
    return RNG.integers(-8, 8, size=shape).astype(DTYPES[dtype][0])


def _ref(x, w):
    """x @ w.T of the logical weight, exactly (int64 / float64), in the kernel's output dtype."""
    if np.issubdtype(x.dtype, np.integer):
        return (x.astype(np.int64) @ w.T.astype(np.int64)).astype(np.int32)
    return (x.astype(np.float64) @ w.T.astype(np.float64)).astype(np.float32)


def _window_kernel(M, wshape, woffs, wwin, dtype=pl.INT8, xoff=0):
    """out = x[:, xoff:xoff+TK] @ load(w, woffs, wwin)^T."""
    TN, TK = wwin[-2], wwin[-1]
    K = wshape[-1]
    acc = DTYPES[dtype][1]

    @pl.kernel
    def k(
        x: pl.Tensor[[M, K], dtype],
        w: pl.Tensor[list(wshape), dtype, pl.NZ],
        out: pl.Out[pl.Tensor[[M, TN], acc]],
    ):
        wt = pl.load(w, list(woffs), list(wwin), target_memory=pl.Mem.Mat)
        xt = pl.load(x, [0, xoff], [M, TK], target_memory=pl.Mem.Mat)
        pl.store(pl.matmul(xt, wt, b_trans=True), [0, 0], out)

    return k


# ----------------------------------------------------------------------------- rank-2 windows
@pytest.mark.parametrize("dtype", [pl.INT8, pl.FP16, pl.FP32], ids=lambda d: d.name)
def test_full_load(dtype):  # NZ-11, NZ-12: all offsets 0
    N, K = (256, 512) if dtype is not pl.FP32 else (64, 256)
    x, w = _data((32, K), dtype), _data((N, K), dtype)
    out = _window_kernel(32, [N, K], [0, 0], [N, K], dtype)(x, runtime.pack_nz(w))
    np.testing.assert_array_equal(out, _ref(x, w))


@pytest.mark.parametrize("dtype", [pl.INT8, pl.FP16, pl.FP32], ids=lambda d: d.name)
def test_n_sliced_load_reads_a_row_fractal_offset(dtype):  # NZ-12: n0 -> n0 / 16
    N, K, n0, TN = 512, 256, 272, 128
    x, w = _data((32, K), dtype), _data((N, K), dtype)
    out = _window_kernel(32, [N, K], [n0, 0], [TN, K], dtype)(x, runtime.pack_nz(w))
    np.testing.assert_array_equal(out, _ref(x, w[n0 : n0 + TN]))


@pytest.mark.parametrize("dtype", [pl.INT8, pl.FP16, pl.FP32], ids=lambda d: d.name)
def test_k_sliced_load_reads_a_c0_block_offset(dtype):  # NZ-12: k0 -> k0 / c0
    N, K, TK = 64, 1024, 256
    k0 = 512 + {pl.INT8: 32, pl.FP16: 16, pl.FP32: 8}[dtype] * 2  # an odd-looking but aligned block
    x, w = _data((32, K), dtype), _data((N, K), dtype)
    out = _window_kernel(32, [N, K], [0, k0], [N, TK], dtype, xoff=k0)(x, runtime.pack_nz(w))
    np.testing.assert_array_equal(out, _ref(x[:, k0 : k0 + TK], w[:, k0 : k0 + TK]))


def test_seed_window_of_a_3d_weight():  # NZ-12: w[1:2, 256:512, 512:1024] of [E, N, K]
    E, N, K, M = 2, 512, 1024, 32

    @pl.kernel
    def k(
        x: pl.Tensor[[M, 512], pl.INT8],
        w: pl.Tensor[[E, N, K], pl.INT8, pl.NZ],
        out: pl.Out[pl.Tensor[[M, 256], pl.INT32]],
    ):
        out[:, :] = pl.matmul(x, w[1:2, 256:512, 512:1024], b_trans=True)

    x, w = _data((M, 512), pl.INT8), _data((E, N, K), pl.INT8)
    np.testing.assert_array_equal(k(x, runtime.pack_nz(w)), _ref(x, w[1, 256:512, 512:1024]))


def test_logical_bytes_are_not_nz_bytes():  # NZ-1: the annotation never converts bytes
    x, w = _data((32, 512), pl.INT8), _data((256, 512), pl.INT8)
    k = _window_kernel(32, [256, 512], [0, 0], [256, 512])
    # row-major bytes for an NZ parameter: refused (issue 24), no longer read as NZ (wrong)
    with pytest.raises(runtime.DispatchError, match=r"parameter 'w' is NZ .*pack_nz.*as_nz"):
        k(x, w)
    np.testing.assert_array_equal(k(x, runtime.pack_nz(w)), _ref(x, w))
    # as_nz declares bytes to be NZ, without converting them: they are read as NZ (wrong here)
    assert not np.array_equal(k(x, runtime.as_nz(w.copy())), _ref(x, w))


# ------------------------------------------------------------------ leading axes (NZ-28..30)
def test_layers_of_a_3d_weight_through_a_slice():  # NZ-30: w[layer] then pl.load
    L, N, K, M = 3, 128, 256, 32

    @pl.kernel
    def k(
        x: pl.Tensor[[M, K], pl.INT8],
        w: pl.Tensor[[L, N, K], pl.INT8, pl.NZ],
        out: pl.Out[pl.Tensor[[L, M, 64], pl.INT32]],
    ):
        xt = pl.load(x, [0, 0], [M, K], target_memory=pl.Mem.Mat)
        for layer in pl.range(L):
            wl = w[layer]
            wt = pl.load(wl, [64, 0], [64, K], target_memory=pl.Mem.Mat)
            pl.store(pl.matmul(xt, wt, b_trans=True), [layer, 0, 0], out)

    x, w = _data((M, K), pl.INT8), _data((L, N, K), pl.INT8)
    out = k(x, runtime.pack_nz(w))
    for layer in range(L):
        np.testing.assert_array_equal(out[layer], _ref(x, w[layer, 64:128]))
    low = k.lower()
    for stage in ("trace", "FlattenTileNdTo2D", "BlockNzTensorViews"):  # per-pass bisection agrees
        np.testing.assert_array_equal(low.run(x, runtime.pack_nz(w), after=stage), out)


def test_folded_4d_weight():  # NZ-28: batch g*E + e
    G, E, N, K, M = 2, 3, 64, 128, 16

    @pl.kernel
    def k(
        x: pl.Tensor[[M, K], pl.INT8],
        w: pl.Tensor[[G, E, N, K], pl.INT8, pl.NZ],
        out: pl.Out[pl.Tensor[[G, E, M, N], pl.INT32]],
    ):
        xt = pl.load(x, [0, 0], [M, K], target_memory=pl.Mem.Mat)
        for g in pl.range(G):
            for e in pl.range(E):
                wt = pl.load(w, [g, e, 0, 0], [1, 1, N, K], target_memory=pl.Mem.Mat)
                pl.store(pl.matmul(xt, wt, b_trans=True), [g, e, 0, 0], out)

    x, w = _data((M, K), pl.INT8), _data((G, E, N, K), pl.INT8)
    out = k(x, runtime.pack_nz(w))
    for g in range(G):
        for e in range(E):
            np.testing.assert_array_equal(out[g, e], _ref(x, w[g, e]))


def test_folded_4d_weight_through_an_index():  # NZ-28, NZ-30: w[g, e] drops two axes
    G, E, N, K, M = 2, 3, 64, 128, 16

    @pl.kernel
    def k(
        x: pl.Tensor[[M, K], pl.INT8],
        w: pl.Tensor[[G, E, N, K], pl.INT8, pl.NZ],
        out: pl.Out[pl.Tensor[[M, 32], pl.INT32]],
    ):
        xt = pl.load(x, [0, 0], [M, K], target_memory=pl.Mem.Mat)
        wt = pl.load(w[1, 2], [32, 0], [32, K], target_memory=pl.Mem.Mat)
        pl.store(pl.matmul(xt, wt, b_trans=True), [0, 0], out)

    x, w = _data((M, K), pl.INT8), _data((G, E, N, K), pl.INT8)
    np.testing.assert_array_equal(k(x, runtime.pack_nz(w)), _ref(x, w[1, 2, 32:64]))


def test_folded_batch_of_mixed_integer_dtypes():  # NZ-28: an INT32 scalar and an INDEX loop variable
    G, E, N, K, M = 2, 4, 64, 64, 16

    @pl.kernel
    def k(
        x: pl.Tensor[[M, K], pl.INT8],
        w: pl.Tensor[[G, E, N, K], pl.INT8, pl.NZ],
        g: pl.Scalar[pl.INT32],
        out: pl.Out[pl.Tensor[[E, M, N], pl.INT32]],
    ):
        xt = pl.load(x, [0, 0], [M, K], target_memory=pl.Mem.Mat)
        for e in pl.range(E):
            wt = pl.load(w, [g, e, 0, 0], [1, 1, N, K], target_memory=pl.Mem.Mat)
            pl.store(pl.matmul(xt, wt, b_trans=True), [e, 0, 0], out)

    x, w = _data((M, K), pl.INT8), _data((G, E, N, K), pl.INT8)
    for g in range(G):
        out = k(x, runtime.pack_nz(w), g)
        for e in range(E):
            np.testing.assert_array_equal(out[e], _ref(x, w[g, e]))


def test_dynamic_batch():  # NZ-29: a rank-3 parameter with a dynamic batch takes a rank-3 argument
    N, K, M = 64, 64, 16

    @pl.kernel
    def k(
        x: pl.Tensor[[M, K], pl.INT8],
        w: pl.Tensor[[pl.dynamic("B"), N, K], pl.INT8, pl.NZ],
        out: pl.Out[pl.Tensor[[M, N], pl.INT32]],
    ):
        xt = pl.load(x, [0, 0], [M, K], target_memory=pl.Mem.Mat)
        wt = pl.load(w, [2, 0, 0], [1, N, K], target_memory=pl.Mem.Mat)
        pl.store(pl.matmul(xt, wt, b_trans=True), [0, 0], out)

    x = _data((M, K), pl.INT8)
    for b in (3, 5):
        w = _data((b, N, K), pl.INT8)
        np.testing.assert_array_equal(k(x, runtime.pack_nz(w)), _ref(x, w[2]))


# --------------------------------------------------------------------------- flatten (NZ-31)
def test_whole_tensor_flatten_reads_the_nz_bytes_as_nd():  # NZ-31
    N, K = 64, 128

    @pl.kernel
    def k(w: pl.Tensor[[N, K], pl.INT8, pl.NZ], out: pl.Out[pl.Tensor[[4, 2048], pl.INT8]]):
        flat = pl.reshape(w, [N * K])
        for i in range(4):
            t = pl.load(flat, [i * 2048], [2048])  # an ND load (Vec) of the flat view
            pl.store(t, [i, 0], out)

    w = _data((N, K), pl.INT8)
    packed = runtime.pack_nz(w)
    out = k(packed)
    np.testing.assert_array_equal(out.reshape(-1), packed.reshape(-1))  # memory order, unchanged
    np.testing.assert_array_equal(runtime.unpack_nz(out.reshape(N, K)), w)
    np.testing.assert_array_equal(k.lower().run(packed, after="trace"), out)


# ---------------------------------------------------------------- the backend reads NZ bytes
def _corrupt_row_offset(delta):
    """A test-only pass: add `delta` row fractals to every blocked load's row coordinate."""

    def corrupt(g):
        eqns = []
        for e in g.eqns:
            if e.params.get("blocked"):
                ins = list(e.inputs)
                row = ins[3]  # inputs: src, then offsets [b, col, row, 0, 0]
                ins[3] = Literal(row.value + delta, row.type)
                e = e.replace(inputs=tuple(ins))
            eqns.append(e)
        return Graph(g.params, eqns, g.outputs, dict(g.attrs), g.name)

    return corrupt


def _corrupt_col_offset(delta):
    def corrupt(g):
        eqns = []
        for e in g.eqns:
            if e.params.get("blocked"):
                ins = list(e.inputs)
                ins[2] = Literal(ins[2].value + delta, ins[2].type)
                e = e.replace(inputs=tuple(ins))
            eqns.append(e)
        return Graph(g.params, eqns, g.outputs, dict(g.attrs), g.name)

    return corrupt


def test_a_wrong_blocked_offset_reads_the_wrong_fractal():  # NZ-8, NZ-12: no hidden logical path
    N, K, TN = 512, 512, 256
    x, w = _data((32, K), pl.INT8), _data((N, K), pl.INT8)
    k = _window_kernel(32, [N, K], [0, 0], [TN, K])
    traced = k.lower().ir(after="trace")
    good = Lowered(k, traced).run(x, runtime.pack_nz(w))
    np.testing.assert_array_equal(good, _ref(x, w[:TN]))
    bad = Lowered(k, traced, extra=[("Corrupt", _corrupt_row_offset(1))]).run(x, runtime.pack_nz(w))
    assert not np.array_equal(bad, good)
    np.testing.assert_array_equal(bad, _ref(x, w[16 : 16 + TN]))  # exactly one fractal (16 rows) down


def test_a_wrong_column_block_reads_the_wrong_c0_lines():  # NZ-8, NZ-12
    N, K, TK = 64, 1024, 256
    x, w = _data((32, K), pl.INT8), _data((N, K), pl.INT8)
    k = _window_kernel(32, [N, K], [0, 0], [N, TK])
    traced = k.lower().ir(after="trace")
    bad = Lowered(k, traced, extra=[("Corrupt", _corrupt_col_offset(2))]).run(x, runtime.pack_nz(w))
    np.testing.assert_array_equal(bad, _ref(x[:, :TK], w[:, 64 : 64 + TK]))  # two C0 blocks = 64 columns
