"""`pl.tile.batch_matmul_acc` (PyPTO's `tile.batch_matmul_acc`): TMATMUL_ACC per batch into the
`[B, M, N]` product of an earlier `pl.batch_matmul`: a K split with Python's `range` (unrolled when
traced), or a staged `pl.range` K loop whose carries are the product's B Acc tiles. Tolerances as
in test_batch_matmul.py (INT8 exact; FP16 within rtol 1e-3, atol 1e-2 of float64 numpy; the same
bits on every stage and path)."""

from __future__ import annotations

import numpy as np
import pytest
from test_batch_matmul import PATHS, _check, _data, _ref, _refused, on_every_stage_and_path

import runtime
from nzjit import pl
from nzjit.backend.options import using


# ------------------------------------------------------------------- pl.tile.batch_matmul_acc
def _split_k_kernel(B, M, K, N, KT, dtype, acc_dtype):
    @pl.kernel
    def splitk(
        a: pl.Tensor[[B, M, K], dtype],
        b: pl.Tensor[[B, N, K], dtype, pl.NZ],
        out: pl.Out[pl.Tensor[[B, M, N], acc_dtype]],
    ):
        acc = None
        for k0 in range(0, K, KT):  # Python's range: unrolled when traced
            ta = pl.load(a, [0, 0, k0], [B, M, KT], target_memory=pl.Mem.Mat)
            tb = pl.load(b, [0, 0, k0], [B, N, KT], target_memory=pl.Mem.Mat)
            if acc is None:
                acc = pl.batch_matmul(ta, tb, b_trans=True)
            else:
                acc = pl.tile.batch_matmul_acc(acc, ta, tb, b_trans=True)
        pl.store(acc, [0, 0, 0], out)

    return splitk


@pytest.mark.parametrize("int8", [True, False], ids=["int8", "fp16"])
def test_batch_matmul_acc_splits_k_on_every_stage_and_path(int8):  # TMATMUL then TMATMUL_ACC per batch
    B, M, K, N, KT = 3, 32, 256, 48, 128
    dtype, acc = (pl.INT8, pl.INT32) if int8 else (pl.FP16, pl.FP32)
    k = _split_k_kernel(B, M, K, N, KT, dtype, acc)
    a, b = _data(np.random.default_rng(21), B, M, K, N, np.int8 if int8 else np.float16, b_trans=True)
    got, low = on_every_stage_and_path(k, a, runtime.pack_nz(b))
    _check(got, _ref(a, b, b_trans=True))
    final = str(low.ir())
    assert (
        final.count("tile.mad[") == B and final.count("tile.mad_acc") == B and final.count("tile.store") == B
    )
    assert "tile.batch_matmul_acc" in str(low.ir("LowerCompositeOps"))


def test_batch_matmul_acc_refuses_an_accumulator_of_another_shape():
    def build():
        @pl.kernel
        def k(
            a: pl.Tensor[[2, 32, 64], pl.FP16],
            b: pl.Tensor[[2, 64, 32], pl.FP16],
            c: pl.Tensor[[2, 64, 16], pl.FP16],
        ):
            ta = pl.load(a, [0, 0, 0], [2, 32, 64], target_memory=pl.Mem.Mat)
            tb = pl.load(b, [0, 0, 0], [2, 64, 32], target_memory=pl.Mem.Mat)
            tc = pl.load(c, [0, 0, 0], [2, 64, 16], target_memory=pl.Mem.Mat)
            acc = pl.batch_matmul(ta, tb)
            pl.tile.batch_matmul_acc(acc, ta, tc)  # N = 16

        return k

    msg = _refused(
        build, "pl.tile.batch_matmul_acc: the accumulator f32[2,32,32]@Acc is not the product's", "# N = 16"
    )
    assert "help: accumulate into the [B, M, N] result of pl.batch_matmul" in msg


def test_a_stored_product_can_be_stored_again_and_accumulated_into():
    B, M, K, N = 2, 32, 64, 32

    @pl.kernel
    def twice(
        a: pl.Tensor[[B, M, K], pl.INT8],
        b: pl.Tensor[[B, K, N], pl.INT8],
        o1: pl.Out[pl.Tensor[[B, M, N], pl.INT32]],
        o2: pl.Out[pl.Tensor[[B, M, N], pl.INT32]],
    ):
        ta = pl.load(a, [0, 0, 0], [B, M, K], target_memory=pl.Mem.Mat)
        tb = pl.load(b, [0, 0, 0], [B, K, N], target_memory=pl.Mem.Mat)
        c = pl.batch_matmul(ta, tb)
        pl.store(c, [0, 0, 0], o1)
        pl.store(pl.tile.batch_matmul_acc(c, ta, tb), [0, 0, 0], o2)  # after its store

    a, b = _data(np.random.default_rng(8), B, M, K, N, np.int8)
    for opts in PATHS:
        with using(opts):
            o1, o2 = twice(a, b)
            np.testing.assert_array_equal(o1, _ref(a, b))
            np.testing.assert_array_equal(o2, 2 * _ref(a, b))


def test_batch_matmul_acc_refuses_an_accumulator_that_is_not_a_product():
    def build():
        @pl.kernel
        def k(a: pl.Tensor[[2, 32, 64], pl.FP16], b: pl.Tensor[[2, 64, 32], pl.FP16]):
            ta = pl.load(a, [0, 0, 0], [2, 32, 64], target_memory=pl.Mem.Mat)
            tb = pl.load(b, [0, 0, 0], [2, 64, 32], target_memory=pl.Mem.Mat)
            acc = pl.tile.create([2, 32, 32], pl.FP32, target_memory=pl.Mem.Acc)
            pl.tile.batch_matmul_acc(acc, ta, tb)  # a created tile

        return k

    msg = _refused(
        build, "pl.tile.batch_matmul_acc accumulates into the [B, M, N] product", "# a created tile"
    )
    assert "help: split K with Python's range (unrolled when traced) in one block" in msg


def _k_loop_kernel(B, M, K, N, KT, dtype, acc_dtype, lanes=1):
    @pl.kernel
    def kloop(
        a: pl.Tensor[[lanes * B, M, K], dtype],
        b: pl.Tensor[[lanes * B, N, K], dtype, pl.NZ],
        out: pl.Out[pl.Tensor[[lanes * B, M, N], acc_dtype]],
    ):
        for lane in pl.spmd(lanes):
            b0 = lane * B
            acc = pl.batch_matmul(
                pl.load(a, [b0, 0, 0], [B, M, KT], target_memory=pl.Mem.Mat),
                pl.load(b, [b0, 0, 0], [B, N, KT], target_memory=pl.Mem.Mat),
                b_trans=True,
            )
            for k0 in pl.range(KT, K, KT):  # the B Acc tiles are the loop's carries
                ta = pl.load(a, [b0, 0, k0], [B, M, KT], target_memory=pl.Mem.Mat)
                tb = pl.load(b, [b0, 0, k0], [B, N, KT], target_memory=pl.Mem.Mat)
                acc = pl.tile.batch_matmul_acc(acc, ta, tb, b_trans=True)
            pl.store(acc, [b0, 0, 0], out)

    return kloop


@pytest.mark.parametrize("int8,lanes", [(True, 1), (False, 1), (True, 3)], ids=["int8", "fp16", "int8-lanes"])
def test_a_staged_k_loop_carries_the_batches_of_the_product(int8, lanes):
    B, M, K, N, KT = 3, 32, 512, 48, 128
    dtype, acc = (pl.INT8, pl.INT32) if int8 else (pl.FP16, pl.FP32)
    k = _k_loop_kernel(B, M, K, N, KT, dtype, acc, lanes)
    a, b = _data(np.random.default_rng(31), lanes * B, M, K, N, np.int8 if int8 else np.float16, b_trans=True)
    got, low = on_every_stage_and_path(k, a, runtime.pack_nz(b))
    _check(got, _ref(a, b, b_trans=True))
    flat = str(low.ir("FlattenTileNdTo2D"))
    loop = [ln for ln in flat.splitlines() if "= for[kind=range] 128 512 128" in ln]
    assert len(loop) == 1 and loop[0].count("@Acc") == B  # B per-batch carries
    assert flat.count("tile.matmul_acc[") == B and flat.count("tile.store") == B
    assert low.memory().peak["Acc"] == B * M * N * 4  # the B accumulators live across the loop


def test_a_batched_product_bound_in_a_staged_branch_is_refused():
    def build():
        @pl.kernel
        def k(
            a: pl.Tensor[[2, 32, 256], pl.FP16],
            b: pl.Tensor[[2, 256, 32], pl.FP16],
            o: pl.Out[pl.Tensor[[2, 32, 32], pl.FP32]],
        ):
            acc = pl.batch_matmul(
                pl.load(a, [0, 0, 0], [2, 32, 64], target_memory=pl.Mem.Mat),
                pl.load(b, [0, 0, 0], [2, 64, 32], target_memory=pl.Mem.Mat),
            )
            for k0 in pl.range(0, 256, 64):
                ta = pl.load(a, [0, 0, k0], [2, 32, 64], target_memory=pl.Mem.Mat)
                tb = pl.load(b, [0, k0, 0], [2, 64, 32], target_memory=pl.Mem.Mat)
                if k0 == 0:
                    acc = pl.batch_matmul(ta, tb)
                else:
                    acc = pl.tile.batch_matmul_acc(acc, ta, tb)
            pl.store(acc, [0, 0, 0], o)

        return k

    msg = _refused(
        build, "is read by a pl.batch_matmul inside a staged loop or branch", "ta = pl.load(a, [0, 0, k0]"
    )
    assert "help: load it in the same block as its pl.batch_matmul (inside the loop or arm)" in msg
