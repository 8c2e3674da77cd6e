"""Symbolic NZ offsets end to end (issue 4, NZ-16..19): the accepted kernels of
tests/passes/test_nz_proofs.py run on `runtime.pack_nz` bytes and equal `x @ w.T` exactly, and the
blocked coordinate `floordiv(offset, d)` follows the offset's wrapped value (NZ-17).
No `from __future__ import annotations`: kernel annotations use closure values.
"""

import numpy as np
import pytest

import runtime
from nzjit import pl
from nzjit import prims as P
from nzjit.backend.impl import impl_rules
from nzjit.core import dtypes as D
from nzjit.core.ir import Eqn, Literal, Var
from nzjit.core.types import ScalarType

RNG = np.random.default_rng(17)


def _i8(shape):
    return RNG.integers(-8, 8, size=shape, dtype=np.int8)


def _ref(x, w):
    return (x.astype(np.int64) @ w.T.astype(np.int64)).astype(np.int32)


def test_grouped_matmul_spmd_and_pipeline():  # NZ-16: `n0 = nb * 256`, `pl.pipeline(512, K, 512)`
    M, N, K, TN, TK = 32, 1024, 2048, 256, 512

    @pl.kernel
    def k(
        x: pl.Tensor[[M, K], pl.INT8],
        w: pl.Tensor[[N, K], pl.INT8, pl.NZ],
        out: pl.Out[pl.Tensor[[M, N], pl.INT32]],
    ):
        for nb in pl.spmd(N // TN):
            n0 = nb * TN  # -> row fractal n0 // 16
            acc = pl.matmul(x[:, 0:TK], w[n0 : n0 + TN, 0:TK], b_trans=True)
            for k0 in pl.pipeline(TK, K, TK, stage=2):  # -> C0 block k0 // 32
                acc = pl.matmul_acc(acc, x[:, k0 : k0 + TK], w[n0 : n0 + TN, k0 : k0 + TK], b_trans=True)
            out[:, n0 : n0 + TN] = acc

    x, w = _i8((M, K)), _i8((N, K))
    np.testing.assert_array_equal(k(x, runtime.pack_nz(w)), _ref(x, w))


def test_split_k_lanes():  # NZ-16: `(blk % 2) * 512 + kb` and `(blk // 2) * 128`
    M, N, K = 16, 256, 1024

    @pl.kernel
    def k(
        x: pl.Tensor[[M, K], pl.INT8],
        w: pl.Tensor[[N, K], pl.INT8, pl.NZ],
        out: pl.Out[pl.Tensor[[2, M, N], pl.INT32]],
    ):
        for blk in pl.spmd(4):
            n0 = (blk // 2) * 128  # two row halves ...
            half = blk % 2  # ... times two K halves
            kh = (blk % 2) * 512
            acc = pl.matmul(x[:, kh : kh + 256], w[n0 : n0 + 128, kh : kh + 256], b_trans=True)
            for kb in pl.range(256, 512, 256):
                k0 = (blk % 2) * 512 + kb
                acc = pl.matmul_acc(acc, x[:, k0 : k0 + 256], w[n0 : n0 + 128, k0 : k0 + 256], b_trans=True)
            out[half, :, n0 : n0 + 128] = acc

    x, w = _i8((M, K)), _i8((N, K))
    out = k(x, runtime.pack_nz(w))
    for h in range(2):
        np.testing.assert_array_equal(
            out[h], _ref(x[:, 512 * h : 512 * (h + 1)], w[:, 512 * h : 512 * (h + 1)])
        )
    np.testing.assert_array_equal(out.sum(axis=0, dtype=np.int64).astype(np.int32), _ref(x, w))


def test_range_from_the_block_index():  # NZ-16: `pl.range(core, 4, 2)`, `core = pl.get_block_idx()`
    M, N, K = 16, 1024, 256

    @pl.kernel
    def k(
        x: pl.Tensor[[M, K], pl.INT8],
        w: pl.Tensor[[N, K], pl.INT8, pl.NZ],
        out: pl.Out[pl.Tensor[[M, N], pl.INT32]],
    ):
        xt = pl.load(x, [0, 0], [M, K], target_memory=pl.Mem.Mat)
        for _lane in pl.spmd(2):
            core = pl.get_block_idx()
            for ob in pl.range(core, 4, 2):
                o0 = ob * 256
                wt = pl.load(w, [o0, 0], [256, K], target_memory=pl.Mem.Mat)
                pl.store(pl.matmul(xt, wt, b_trans=True), [0, o0], out)

    x, w = _i8((M, K)), _i8((N, K))
    np.testing.assert_array_equal(k(x, runtime.pack_nz(w)), _ref(x, w))


# ------------------------------------------------------------------------------- NZ-17: wrap
def _scalar(prim, a, b, dtype=D.INT32):
    t = ScalarType(dtype)
    e = Eqn(prim, (Var(t), Literal(b, t)), (Var(t),), {"arity": (1, 1)})
    return impl_rules[prim](None, e, [a, b])[0]


def test_backend_wraps_at_the_declared_width():  # NZ-17: (x * 256) // 16 == 0 for x = 1 << 24
    x = 1 << 24
    assert _scalar(P.mul_p, x, 256) == 0  # 2^32 wraps to 0 in INT32
    assert _scalar(P.floordiv_p, _scalar(P.mul_p, x, 256), 16) == 0
    assert _scalar(P.mul_p, x, 256 // 16) == 268435456  # the re-associated form does not wrap
    assert _scalar(P.mul_p, 1 << 23, 256) == -(1 << 31)
    assert _scalar(P.mul_p, x, 256, D.INDEX) == 1 << 32  # INDEX is 64-bit


def test_floor_semantics_in_the_backend():  # NZ-19
    assert _scalar(P.floordiv_p, -16, 16) == -1 and _scalar(P.floordiv_p, -1, 16) == -1
    assert _scalar(P.mod_p, -1, 16) == 15 and _scalar(P.mod_p, -16, 16) == 0


@pytest.mark.parametrize(
    "x,row", [(1 << 24, 0), ((1 << 24) + 1, 256), (1, 256), (2, 512), (1 << 23, 0), (-3, 0)]
)
def test_the_load_reads_the_fractal_the_wrapped_value_names(x, row):  # NZ-17
    M, N, K, TN = 16, 1024, 128, 256

    @pl.kernel
    def k(
        xs: pl.Tensor[[M, K], pl.INT8],
        w: pl.Tensor[[N, K], pl.INT8, pl.NZ],
        s: pl.Scalar[pl.INT32],
        out: pl.Out[pl.Tensor[[M, TN], pl.INT32]],
    ):
        n0 = pl.max(s * 256, 0)  # INT32: wraps; max keeps it non-negative (NZ-16 max row)
        wt = pl.load(w, [n0, 0], [TN, K], target_memory=pl.Mem.Mat)
        xt = pl.load(xs, [0, 0], [M, K], target_memory=pl.Mem.Mat)
        pl.store(pl.matmul(xt, wt, b_trans=True), [0, 0], out)

    xs, w = _i8((M, K)), _i8((N, K))
    assert row == max(D.INT32.wrap(x * 256), 0)
    np.testing.assert_array_equal(k(xs, runtime.pack_nz(w), x), _ref(xs, w[row : row + TN]))
