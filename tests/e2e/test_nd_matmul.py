"""End to end on the simulated NPU: ND matmuls traced, lowered through every pass and run on real
bytes, against numpy (issue 2).

- int8 x int8 -> int32 is exact (design.md "Backend and runtime").
- fp16 / bf16 -> fp32: every product of two fp16 (11-bit significand) or bf16 (8-bit) values is
  exact in fp32 (24-bit), so the only error is fp32 summation: |fl(sum) - sum| <= K * 2**-24 *
  sum|a_k b_k| (the standard recursive-summation bound, any order, so any K chunking). The tests
  compare against a float64 reference with that bound as `atol`.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import nzjit
from nzjit import pl
from nzjit import prims as P
from nzjit.core.types import Mem, TileType

M, K, N = 64, 512, 256
NB, KB = 128, 128  # N per SPMD lane, K per pipelined step
DTYPES = {  # pl dtype -> (numpy dtype, accumulator pl dtype)
    "int8": (pl.INT8, np.int8, pl.INT32),
    "fp16": (pl.FP16, np.float16, pl.FP32),
    "bf16": (pl.BF16, ml_dtypes.bfloat16, pl.FP32),
}


def make_kernels(dt, acc_dt):
    """The same SPMD + pipelined-K matmul, tile level and tensor level."""

    @pl.kernel
    def tile_level(
        x: pl.Tensor[[M, K], dt], w: pl.Tensor[[N, K], dt], out: pl.Out[pl.Tensor[[M, N], acc_dt]]
    ):
        for nb in pl.spmd(N // NB):
            n0 = nb * NB
            xt = pl.load(x, [0, 0], [M, KB], target_memory=pl.Mem.Mat)
            wt = pl.load(w, [n0, 0], [NB, KB], target_memory=pl.Mem.Mat)
            acc = pl.matmul(xt, wt, b_trans=True)
            for k0 in pl.pipeline(KB, K, KB):
                xt = pl.load(x, [0, k0], [M, KB], target_memory=pl.Mem.Mat)
                wt = pl.load(w, [n0, k0], [NB, KB], target_memory=pl.Mem.Mat)
                acc = pl.matmul_acc(acc, xt, wt, b_trans=True)
            pl.store(acc, [0, n0], out)

    @pl.kernel
    def tensor_level(
        x: pl.Tensor[[M, K], dt], w: pl.Tensor[[N, K], dt], out: pl.Out[pl.Tensor[[M, N], acc_dt]]
    ):
        for nb in pl.spmd(N // NB):
            n0 = nb * NB
            acc = pl.matmul(x[:, 0:KB], w[n0 : n0 + NB, 0:KB], b_trans=True)
            for k0 in pl.pipeline(KB, K, KB):
                acc = pl.matmul_acc(acc, x[:, k0 : k0 + KB], w[n0 : n0 + NB, k0 : k0 + KB], b_trans=True)
            out[:, n0 : n0 + NB] = acc

    return tile_level, tensor_level


def operands(np_dt, shape_a, shape_b, seed=0):
    rng = np.random.default_rng(seed)
    if np_dt == np.int8:
        return (
            rng.integers(-128, 128, shape_a, dtype=np.int8),
            rng.integers(-128, 128, shape_b, dtype=np.int8),
        )
    return (rng.standard_normal(shape_a).astype(np_dt), rng.standard_normal(shape_b).astype(np_dt))


def check(out, a, b_t, np_dt):
    """`out` == a @ b_t.T: exactly for int8, within the fp32 summation bound otherwise."""
    a64, b64 = a.astype(np.float64), b_t.astype(np.float64).T
    ref = a64 @ b64
    if np_dt == np.int8:
        assert out.dtype == np.int32
        np.testing.assert_array_equal(out, ref.astype(np.int32))  # |ref| < 2**31: exact in int32 and float64
        return
    assert out.dtype == np.float32
    bound = (a.shape[1] * 2.0**-24 * (np.abs(a64) @ np.abs(b64))).max()  # see the module docstring
    np.testing.assert_allclose(out, ref, rtol=0, atol=bound)


@pytest.mark.parametrize("name", list(DTYPES))
def test_spmd_pipelined_matmul_tile_and_tensor_level_agree(name):
    dt, np_dt, acc_dt = DTYPES[name]
    tile_level, tensor_level = make_kernels(dt, acc_dt)
    x, w = operands(np_dt, (M, K), (N, K))
    a = tile_level(x, w)
    b = tensor_level(x, w)
    check(a, x, w, np_dt)
    np.testing.assert_array_equal(a, b)  # the two forms issue the same instructions


def test_the_pipelined_loop_carries_acc_in_both_forms():
    tile_level, tensor_level = make_kernels(pl.INT8, pl.INT32)
    for k in (tile_level, tensor_level):
        g = k.lower().ir("ConvertTensorToTileOps")
        loops = [e for e in g.walk() if e.primitive is P.for_p and e.params["kind"] == "pipeline"]
        (loop,) = loops
        assert [v.hint for v in loop.outputs] == ["acc"]
        assert loop.outputs[0].type == TileType((M, NB), pl.INT32, Mem.Acc)


def test_int8_64x512_by_512x256_chunks_k_to_fit_l0():
    @pl.kernel
    def mm(
        x: pl.Tensor[[64, 512], pl.INT8],
        w: pl.Tensor[[512, 256], pl.INT8],
        out: pl.Out[pl.Tensor[[64, 256], pl.INT32]],
    ):
        out[:, :] = pl.matmul(x, w)

    x, w = operands(np.int8, (64, 512), (512, 256), seed=3)
    check(mm(x, w), x, np.ascontiguousarray(w.T), np.int8)
    g = mm.lower().ir("AutoTileMatmulL0")
    tiles = [v.type for e in g.walk() for v in e.outputs if isinstance(v.type, TileType)]
    left = [t for t in tiles if t.memory is Mem.Left]
    right = [t for t in tiles if t.memory is Mem.Right]
    assert left and right
    assert all(t.nbytes <= 64 * 1024 for t in left + right)  # L0A / L0B are 64 KiB each
    assert max(t.shape[1] for t in left) < 512  # K was chunked...
    assert any(e.primitive is P.for_p for e in g.walk())  # ...by a loop accumulating the chunks


def test_an_accumulator_bigger_than_l0c_stored_to_nd_is_split_and_exact():
    MM, KK, NN = 128, 64, 512  # 128 x 512 int32 = 256 KiB > 128 KiB of L0C

    @pl.kernel
    def big(
        x: pl.Tensor[[MM, KK], pl.INT8],
        w: pl.Tensor[[NN, KK], pl.INT8],
        out: pl.Out[pl.Tensor[[MM, NN], pl.INT32]],
    ):
        xt = pl.load(x, [0, 0], [MM, KK], target_memory=pl.Mem.Mat)
        wt = pl.load(w, [0, 0], [NN, KK], target_memory=pl.Mem.Mat)
        pl.store(pl.matmul(xt, wt, b_trans=True), [0, 0], out)

    x, w = operands(np.int8, (MM, KK), (NN, KK), seed=4)
    check(big(x, w), x, w, np.int8)
    g = big.lower().ir("AutoTileMatmulL0")
    accs = [
        v.type
        for e in g.walk()
        for v in e.outputs
        if isinstance(v.type, TileType) and v.type.memory is Mem.Acc
    ]
    assert len(accs) >= 2 and all(t.nbytes <= 128 * 1024 for t in accs)  # an M/N grid of blocks
    stores = [e for e in g.walk() if e.primitive is P.tile_store_p]
    assert len(stores) >= 2


def test_a_carried_accumulator_that_cannot_fit_l0c_is_refused():
    MM, NN = 128, 512  # 256 KiB: a carried Acc tile cannot be split into blocks

    @pl.kernel
    def carried(
        x: pl.Tensor[[MM, 128], pl.INT8],
        w: pl.Tensor[[NN, 128], pl.INT8],
        out: pl.Out[pl.Tensor[[MM, NN], pl.INT32]],
    ):
        acc = pl.matmul(
            pl.load(x, [0, 0], [MM, 64], target_memory=pl.Mem.Mat),
            pl.load(w, [0, 0], [NN, 64], target_memory=pl.Mem.Mat),
            b_trans=True,
        )
        for k0 in pl.range(64, 128, 64):
            acc = pl.matmul_acc(
                acc,
                pl.load(x, [0, k0], [MM, 64], target_memory=pl.Mem.Mat),
                pl.load(w, [0, k0], [NN, 64], target_memory=pl.Mem.Mat),
                b_trans=True,
            )
        pl.store(acc, [0, 0], out)

    with pytest.raises(nzjit.CompileError) as ei:
        carried.lower()
    msg = str(ei.value)
    assert "L0C" in msg and "256 KiB" in msg and "128 KiB" in msg
    assert msg.startswith(carried.__wrapped__.__code__.co_filename + ":")
    assert ei.value.help


def test_bf16_tensor_level_with_int_and_traced_indexing():
    E, T, KK, NN = 2, 32, 128, 64

    @pl.kernel
    def experts(
        x: pl.Tensor[[E, T, KK], pl.BF16],
        w: pl.Tensor[[E, NN, KK], pl.BF16],
        out: pl.Out[pl.Tensor[[E, T, NN], pl.FP32]],
    ):
        for e in pl.spmd(E):
            xe = x[e]  # a traced integer drops the axis
            acc = pl.matmul(xe[:, 0:64], w[e, :, 0:64], b_trans=True)
            for k0 in pl.pipeline(64, KK, 64):
                acc = pl.matmul_acc(acc, xe[:, k0 : k0 + 64], w[e, 0:NN, k0 : k0 + 64], b_trans=True)
            out[e, :, :] = acc

    x, w = operands(ml_dtypes.bfloat16, (E, T, KK), (E, NN, KK), seed=5)
    out = experts(x, w)
    for e in range(E):
        check(out[e], x[e], w[e], ml_dtypes.bfloat16)
