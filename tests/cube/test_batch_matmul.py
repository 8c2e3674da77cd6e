"""`pl.batch_matmul` on rank-3 Mat tiles (issue 23 items 1 and 9): `[B, M, K] x [B, K, N] -> [B, M, N]`,
PyPTO's `tile.batch_matmul` (its batch broadcasting; a transposed operand is
`pl.tile.transpose_view`). FlattenTileNdTo2D unrolls it into one 2-D TMATMUL per batch, as PyPTO's
FlattenTileNdTo2D does (pto-isa has no batched TMATMUL), each operand re-loaded per batch: page b
of an ND window is the 2-D window of batch b (ND -> NZ takes 2-D GlobalTensors, hardware-model.md
§3), of an NZ weight its own NZ block at batch slot b (NZ-12, NZ-28).

Float results: the unrolled TMATMULs and the stages' reference rule make the same 2-D BLAS call
per batch, so every stage and path gives the same bits; against numpy (float64) rtol 1e-3,
atol 1e-2 (FP16 / BF16 operands, FP32 accumulation). INT8 is exact (INT32 wrapping)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import runtime
from nzjit import CompileError, pl
from nzjit.backend import batched
from nzjit.backend.options import Options, current, using
from nzjit.passes.pipeline import pipeline

PATHS = (Options(strict=True), Options(batch=False), Options(fast=False))
STAGES = [name for name, _ in pipeline("A2A3")]


def _kernel(B, M, K, N, dtype, *, b_trans=False, nz=False, spelling="view", bb=None):
    """out[b] = a[b] @ b[b] (or b[b]^T); `bb` the rhs's batch extent (1: broadcast)."""
    bb = B if bb is None else bb
    bshape = [bb, N, K] if b_trans else [bb, K, N]
    acc = pl.INT32 if dtype is pl.INT8 else pl.FP32

    @pl.kernel
    def bmm(
        a: pl.Tensor[[B, M, K], dtype],
        b: pl.Tensor[bshape, dtype, pl.NZ if nz else pl.ND],
        out: pl.Out[pl.Tensor[[B, M, N], acc]],
    ):
        ta = pl.load(a, [0, 0, 0], [B, M, K], target_memory=pl.Mem.Mat)
        tb = pl.load(b, [0, 0, 0], bshape, target_memory=pl.Mem.Mat)
        if b_trans and spelling == "view":  # PyPTO's spelling
            c = pl.batch_matmul(ta, pl.tile.transpose_view(tb))
        elif b_trans:
            c = pl.tile.batch_matmul(ta, tb, b_trans=True)
        else:
            c = pl.batch_matmul(ta, tb)
        pl.store(c, [0, 0, 0], out)

    return bmm


def _data(rng, B, M, K, N, np_dtype, b_trans=False, bb=None):
    bb = B if bb is None else bb
    bshape = (bb, N, K) if b_trans else (bb, K, N)
    if np_dtype == np.int8:
        return rng.integers(-128, 128, (B, M, K)).astype(np.int8), rng.integers(-128, 128, bshape).astype(
            np.int8
        )
    return rng.standard_normal((B, M, K)).astype(np_dtype), rng.standard_normal(bshape).astype(np_dtype)


def _ref(a, b, b_trans=False):
    bt = np.swapaxes(b, -1, -2) if b_trans else b
    if a.dtype == np.int8:
        return np.matmul(a.astype(np.int64), bt.astype(np.int64)).astype(np.int32)
    return np.matmul(a.astype(np.float64), bt.astype(np.float64))


def on_every_stage_and_path(k, *args):
    """(the result, the Lowered) of `k(*args)`, after asserting that every stage of the pipeline
    (`low.run(after=...)`) and every execution path gives the same bits."""
    low = k.lower()
    outs = [low.run(*args, after=stage) for stage in STAGES]
    for opts in PATHS:
        with using(opts):
            outs.append(k(*args))
    for got in outs[1:]:
        np.testing.assert_array_equal(got, outs[0])
    return outs[0], low


def _check(got, ref):
    if got.dtype == np.int32:
        np.testing.assert_array_equal(got, ref)
    else:
        np.testing.assert_allclose(got, ref, rtol=1e-3, atol=1e-2)


CASES = [  # (B, M, K, N, dtype, b_trans, nz)
    (2, 32, 64, 48, pl.FP16, False, False),
    (3, 32, 64, 48, pl.FP16, True, False),
    (3, 32, 64, 48, pl.FP16, True, True),
    (4, 16, 128, 32, pl.INT8, False, False),
    (2, 16, 64, 64, pl.INT8, True, True),
    (2, 16, 32, 32, pl.BF16, True, False),
]


@pytest.mark.parametrize("B,M,K,N,dtype,b_trans,nz", CASES)
def test_batch_matmul_against_numpy_at_every_stage_and_path(B, M, K, N, dtype, b_trans, nz):
    np_dtype = {pl.FP16: np.float16, pl.INT8: np.int8, pl.BF16: ml_dtypes.bfloat16}[dtype]
    rng = np.random.default_rng(B * M + K + N)
    a, b = _data(rng, B, M, K, N, np_dtype, b_trans)
    k = _kernel(B, M, K, N, dtype, b_trans=b_trans, nz=nz)
    arg_b = runtime.pack_nz(b) if nz else b
    ref = _ref(a, b, b_trans)
    _check(on_every_stage_and_path(k, a, arg_b)[0], ref)


def test_the_unrolled_ir_has_one_tmatmul_per_batch_with_its_pages():  # PyPTO's FlattenTileNdTo2D
    low = _kernel(3, 32, 64, 48, pl.FP16, b_trans=True, nz=True).lower()
    flat = str(low.ir("FlattenTileNdTo2D"))
    assert "tile.batch_matmul" not in flat and flat.count("tile.matmul[") == 3
    for i in range(3):  # batch i's pages: the ND window [i, 0, 0] and the NZ block at slot i
        assert f"tile.load[shape=(1, 32, 64) memory=Mat window_2d=True] a {i} 0 0" in flat
        assert f"tile.load[shape=(1, 48, 64) memory=Mat] b {i} 0 0" in flat
        assert "tile.store" in flat and f" {i} 0 0 out" in flat
    assert flat.count("tile.transpose_view") == 3  # each page transposed (a view, no copy)
    final = str(low.ir())
    assert final.count("tile.mad[") == 3 and final.count("tile.store") == 3
    for i in range(3):  # NZ-12: batch slot i, offsets [i, 0, 0, 0, 0], sizes [1, K/c0, N/16, 16, c0]
        assert f"b {i} 0 0 0 0" in final
    traced = str(low.ir("LowerCompositeOps"))  # before the unroll: the rank-3 op itself
    assert (
        "f32[3,32,48]@Acc = tile.batch_matmul" in traced
        and "f16[3,64,48]@Mat = tile.transpose_view" in traced
    )


def test_the_pto_text_is_pto_isa_loads_extracts_and_matmuls():
    text = _kernel(2, 32, 64, 48, pl.FP16, b_trans=True).lower().pto()
    assert text.count("pto.tload") == 4 and text.count("pto.tmatmul ") == 2 and text.count("pto.tstore") == 2
    assert text.count("pto.textract") == 4
    assert "rows=64, cols=64" not in text  # no [B*M, K] tile reaches the text: each tile_buf is one page
    assert "batch_matmul" not in text


def test_memory_plan_holds_one_batch_at_a_time_when_the_store_is_fused():
    B, M, K, N = 4, 64, 128, 64
    plan = _kernel(B, M, K, N, pl.FP16).lower().memory()
    # one batch's pages in L1 (a: 64x128, b: 128x64 f16), its Left / Right / Acc tiles in L0
    assert plan.peak["Mat"] == (M * K + K * N) * 2
    assert plan.peak["Left"] == M * K * 2 and plan.peak["Right"] == K * N * 2
    assert plan.peak["Acc"] == M * N * 4


def _late_store_kernel(B, M, K, N):
    @pl.kernel
    def late(
        a: pl.Tensor[[B, M, K], pl.FP16],
        b: pl.Tensor[[B, K, N], pl.FP16],
        out: pl.Out[pl.Tensor[[2 * B, M, N], pl.FP32]],
    ):
        ta = pl.load(a, [0, 0, 0], [B, M, K], target_memory=pl.Mem.Mat)
        tb = pl.load(b, [0, 0, 0], [B, K, N], target_memory=pl.Mem.Mat)
        c = pl.batch_matmul(ta, tb)
        b0 = pl.get_block_num() * B  # computed after the product: the store cannot be fused
        pl.store(c, [b0, 0, 0], out)

    return late


def test_a_store_after_the_product_keeps_every_batch_in_l0c_and_is_exact():
    B, M, K, N = 3, 32, 64, 32
    k = _late_store_kernel(B, M, K, N)
    low = k.lower()
    assert low.memory().peak["Acc"] == B * M * N * 4  # the B Acc tiles live until the store
    rng = np.random.default_rng(5)
    a, b = _data(rng, B, M, K, N, np.float16)
    got = k(a, b)
    _check(got[B:], _ref(a, b))  # one block: get_block_num() == 1
    for stage in STAGES:
        np.testing.assert_array_equal(low.run(a, b, after=stage), got)


@pytest.mark.parametrize("side", ["lhs", "rhs"])
def test_a_batch_of_one_is_broadcast(side):  # PyPTO's batch broadcasting
    B, M, K, N = 3, 16, 64, 32
    ab, bb = (1, B) if side == "lhs" else (B, 1)

    @pl.kernel
    def bc(
        a: pl.Tensor[[ab, M, K], pl.FP16],
        b: pl.Tensor[[bb, K, N], pl.FP16],
        out: pl.Out[pl.Tensor[[B, M, N], pl.FP32]],
    ):
        ta = pl.load(a, [0, 0, 0], [ab, M, K], target_memory=pl.Mem.Mat)
        tb = pl.load(b, [0, 0, 0], [bb, K, N], target_memory=pl.Mem.Mat)
        pl.store(pl.batch_matmul(ta, tb), [0, 0, 0], out)

    rng = np.random.default_rng(7)
    a = rng.standard_normal((ab, M, K)).astype(np.float16)
    b = rng.standard_normal((bb, K, N)).astype(np.float16)
    got = bc(a, b)
    _check(got, _ref(a, b))
    flat = str(bc.lower().ir("FlattenTileNdTo2D"))
    assert flat.count("tile.load") == B + 1  # the broadcast operand is loaded once


def test_spmd_lanes_each_multiply_their_batches(monkeypatch):
    L, BL, M, K, N = 4, 2, 16, 64, 32
    seen: list = []
    real = batched.try_run_spmd

    def spy(*a, **k):
        r = real(*a, **k)
        if k.get("spmd", True):
            seen.append(r)
        return r

    monkeypatch.setattr(batched, "try_run_spmd", spy)

    @pl.kernel
    def lanes(
        a: pl.Tensor[[L * BL, M, K], pl.INT8],
        b: pl.Tensor[[L * BL, N, K], pl.INT8, pl.NZ],
        out: pl.Out[pl.Tensor[[L * BL, M, N], pl.INT32]],
    ):
        for lane in pl.spmd(L):
            b0 = lane * BL
            ta = pl.load(a, [b0, 0, 0], [BL, M, K], target_memory=pl.Mem.Mat)
            tb = pl.load(b, [b0, 0, 0], [BL, N, K], target_memory=pl.Mem.Mat)
            pl.store(pl.batch_matmul(ta, tb, b_trans=True), [b0, 0, 0], out)

    rng = np.random.default_rng(11)
    a = rng.integers(-128, 128, (L * BL, M, K)).astype(np.int8)
    b = rng.integers(-128, 128, (L * BL, N, K)).astype(np.int8)
    ref = _ref(a, b, b_trans=True)
    np.testing.assert_array_equal(lanes(a, runtime.pack_nz(b)), ref)
    assert True in seen  # the lanes ran batched
    for opts in (current().with_(batch=False), Options(fast=False)):
        with using(opts):
            np.testing.assert_array_equal(lanes(a, runtime.pack_nz(b)), ref)


def test_a_product_too_wide_for_l0c_is_split_per_batch():  # NZ-22 / AutoTileMatmulL0's M/N grid
    B, M, K, N = 2, 128, 64, 512  # 128 x 512 f32 = 256 KiB > 128 KiB of L0C
    k = _kernel(B, M, K, N, pl.FP16)
    rng = np.random.default_rng(3)
    a, b = _data(rng, B, M, K, N, np.float16)
    _check(k(a, b), _ref(a, b))
    assert k.lower().memory().peak["Acc"] <= 128 * 1024


def _dynamic_batch_kernel(M, K, N):
    bd = pl.dynamic("Bd")

    @pl.kernel
    def dyn(
        a: pl.Tensor[[bd, M, K], pl.FP16],
        b: pl.Tensor[[bd, N, K], pl.FP16, pl.NZ],
        out: pl.Out[pl.Tensor[[bd, M, N], pl.FP32]],
    ):
        ta = pl.load(a, [1, 0, 0], [2, M, K], target_memory=pl.Mem.Mat)
        tb = pl.load(b, [1, 0, 0], [2, N, K], target_memory=pl.Mem.Mat)
        pl.store(pl.batch_matmul(ta, tb, b_trans=True), [1, 0, 0], out)

    return dyn


def test_an_nz_weight_with_a_dynamic_batch_is_addressed_per_batch_slot():  # NZ-29, NZ-28
    M, K, N = 16, 64, 32
    k = _dynamic_batch_kernel(M, K, N)
    rng = np.random.default_rng(13)
    for bsz in (3, 4):
        a, b = _data(rng, bsz, M, K, N, np.float16, b_trans=True)
        out = np.zeros((bsz, M, N), np.float32)
        got = k(a, runtime.pack_nz(b), out)
        _check(got[1:3], _ref(a, b, b_trans=True)[1:3])
        assert not got[0].any() and not got[3:].any()  # batches 0 and 3 are not written


def test_a_batch_window_past_a_dynamic_batch_is_refused_before_anything_is_written():
    M, K, N = 16, 64, 32
    k = _dynamic_batch_kernel(M, K, N)
    a, b = _data(np.random.default_rng(1), 2, M, K, N, np.float16, b_trans=True)
    with pytest.raises(runtime.DispatchError, match=r"the window \[2, 3\) on axis 0 is out of bounds"):
        k(a, runtime.pack_nz(b))


def test_an_nz_page_that_is_not_whole_fractals_is_refused_by_the_nz_rule():  # NZ-12
    def build():
        @pl.kernel
        def k(
            a: pl.Tensor[[2, 16, 64], pl.FP16],
            b: pl.Tensor[[2, 48, 64], pl.FP16, pl.NZ],
            out: pl.Out[pl.Tensor[[2, 16, 40], pl.FP32]],
        ):
            ta = pl.load(a, [0, 0, 0], [2, 16, 64], target_memory=pl.Mem.Mat)
            tb = pl.load(b, [0, 0, 0], [2, 40, 64], target_memory=pl.Mem.Mat)  # 40 rows
            pl.store(pl.batch_matmul(ta, tb, b_trans=True), [0, 0, 0], out)

        return k

    msg = _refused(
        build, "[NZ-12] load of NZ tensor 'b': the window rows 40 must be a multiple of 16", "# 40 rows"
    )
    assert "help: use a row tile that is a multiple of 16" in msg


# --------------------------------------------------------------------------------- refusals
def _refused(build, *needles, at=None):
    with pytest.raises(CompileError) as ei:
        k = build()
        k.lower()
    msg = str(ei.value)
    for n in needles:
        assert n in msg, msg
    if at is not None:
        assert at in msg, msg
    return msg


def _one(lhs_shape, rhs_shape, lhs_dtype=pl.FP16, rhs_dtype=pl.FP16, *, mem=pl.Mem.Mat, op="bmm"):
    def build():
        ld, rd = lhs_dtype, rhs_dtype  # the annotations' names, in the defining frame

        @pl.kernel
        def k(
            a: pl.Tensor[lhs_shape, ld],
            b: pl.Tensor[rhs_shape, rd],
            out: pl.Out[pl.Tensor[[4, 32, 32], pl.FP32]],
        ):
            ta = pl.load(a, [0] * len(lhs_shape), lhs_shape, target_memory=mem)
            tb = pl.load(b, [0] * len(rhs_shape), rhs_shape, target_memory=pl.Mem.Mat)
            pl.store(pl.batch_matmul(ta, tb), [0, 0, 0], out)  # the product

        return k

    return build


def test_refuses_differing_batch_extents():
    msg = _refused(_one([2, 32, 64], [3, 64, 32]), "pl.batch_matmul: batch extents differ", "# the product")
    assert "help: give both operands the same batch extent B (or 1 on one side" in msg


def test_refuses_differing_contraction_sizes():
    msg = _refused(_one([2, 32, 64], [2, 32, 32]), "contraction sizes differ", "[B, M, K] x [B, K, N]")
    assert "pl.tile.transpose_view(rhs) (or b_trans=True)" in msg


def test_refuses_mixed_and_unsupported_dtypes():
    _refused(_one([2, 32, 64], [2, 64, 32], pl.FP16, pl.BF16), "unsupported operand dtypes", "FP16 x FP16")
    _refused(_one([2, 32, 64], [2, 64, 32], pl.INT32, pl.INT32), "unsupported operand dtypes")


def test_refuses_two_2d_operands_and_rank_4():
    _refused(_one([32, 64], [64, 32]), "needs a rank-3 operand", "use pl.matmul for 2-D tiles")

    def rank4():
        @pl.kernel
        def k(a: pl.Tensor[[2, 2, 32, 64], pl.FP16], b: pl.Tensor[[2, 64, 32], pl.FP16]):
            ta = pl.load(a, [0, 0, 0, 0], [2, 2, 32, 64], target_memory=pl.Mem.Mat)
            tb = pl.load(b, [0, 0, 0], [2, 64, 32], target_memory=pl.Mem.Mat)
            pl.batch_matmul(ta, tb)  # rank 4

        return k

    _refused(rank4, "needs rank-3 [B, M, K] x [B, K, N] Mat tiles", "# rank 4")


def test_refuses_a_vec_operand():
    _refused(
        _one([2, 32, 64], [2, 64, 32], mem=pl.Mem.Vec), "`lhs` must be a Mat tile", "target_memory=pl.Mem.Mat"
    )


def test_refuses_a_valid_shape_on_a_batched_operand():
    def build():
        @pl.kernel
        def k(a: pl.Tensor[[2, 32, 60], pl.FP16], b: pl.Tensor[[2, 64, 32], pl.FP16]):
            ta = pl.load(a, [0, 0, 0], [2, 32, 64], target_memory=pl.Mem.Mat, clamp=True)
            tb = pl.load(b, [0, 0, 0], [2, 64, 32], target_memory=pl.Mem.Mat)
            pl.batch_matmul(ta, tb)  # ragged K

        return k

    _refused(build, "has a valid_shape; a batched operand must be fully valid", "# ragged K")


def test_refuses_a_use_of_the_product_other_than_a_store():
    def build():
        @pl.kernel
        def k(a: pl.Tensor[[2, 32, 64], pl.FP16], b: pl.Tensor[[2, 64, 32], pl.FP16]):
            ta = pl.load(a, [0, 0, 0], [2, 32, 64], target_memory=pl.Mem.Mat)
            tb = pl.load(b, [0, 0, 0], [2, 64, 32], target_memory=pl.Mem.Mat)
            c = pl.batch_matmul(ta, tb)
            pl.move(c, target_memory=pl.Mem.Vec)  # not a store

        return k

    msg = _refused(build, "product of pl.batch_matmul can only be stored", "# not a store")
    assert "this line reads it otherwise" in msg


def test_refuses_a_store_into_a_2d_tensor():
    def build():
        @pl.kernel
        def k(
            a: pl.Tensor[[2, 32, 64], pl.FP16],
            b: pl.Tensor[[2, 64, 32], pl.FP16],
            o: pl.Out[pl.Tensor[[64, 32], pl.FP32]],
        ):
            ta = pl.load(a, [0, 0, 0], [2, 32, 64], target_memory=pl.Mem.Mat)
            tb = pl.load(b, [0, 0, 0], [2, 64, 32], target_memory=pl.Mem.Mat)
            pl.store(pl.batch_matmul(ta, tb), [0, 0], o)  # rank 2

        return k

    _refused(build, "stored into a rank-2 tensor", "# rank 2")


def test_refuses_a_batched_mat_tile_used_by_another_op():  # the load as before: one leading index at a time
    def build():
        @pl.kernel
        def k(a: pl.Tensor[[2, 32, 64], pl.FP16], b: pl.Tensor[[2, 64, 32], pl.FP16]):
            ta = pl.load(a, [0, 0, 0], [2, 32, 64], target_memory=pl.Mem.Mat)  # the load
            tb = pl.load(b, [0, 0, 0], [2, 64, 32], target_memory=pl.Mem.Mat)
            pl.batch_matmul(ta, tb)
            pl.move(ta, target_memory=pl.Mem.Left)

        return k

    _refused(build, "an ND->NZ load into Mat takes a 2-D window", "# the load")


def test_refuses_a_batched_operand_captured_by_a_loop():
    def build():
        @pl.kernel
        def k(
            a: pl.Tensor[[2, 32, 64], pl.FP16],
            b: pl.Tensor[[2, 64, 32], pl.FP16],
            o: pl.Out[pl.Tensor[[2, 32, 32], pl.FP32]],
        ):
            ta = pl.load(a, [0, 0, 0], [2, 32, 64], target_memory=pl.Mem.Mat)  # outside the loop
            for _i in pl.range(2):
                tb = pl.load(b, [0, 0, 0], [2, 64, 32], target_memory=pl.Mem.Mat)
                pl.store(pl.batch_matmul(ta, tb), [0, 0, 0], o)

        return k

    msg = _refused(build, "is read by a pl.batch_matmul inside a staged loop or branch", "# outside the loop")
    assert "help: load it in the same block as its pl.batch_matmul (inside the loop or arm)" in msg


def test_the_memory_plan_refuses_b_acc_tiles_that_outlive_l0c_at_compile_time():  # issue 23 item 8
    B, M, K, N = 4, 128, 64, 128  # 4 products of 64 KiB live until the late store: 256 KiB > 128 KiB
    k = _late_store_kernel(B, M, K, N)
    low = k.lower()
    assert low.memory().over() == ["Acc"] and low.memory().peak["Acc"] == B * M * N * 4
    with pytest.raises(CompileError) as ei:
        low.pto()
    msg = str(ei.value)
    assert "on-chip memory plan: Acc (L0C) needs 262144 bytes at its peak but holds 131072 on A2A3" in msg
    assert msg.count("f32[128,128]@Acc (65536 B") == B
    fused = _kernel(B, M, K, N, pl.FP16).lower().memory()  # stored per batch: one product at a time
    assert fused.over() == [] and fused.peak["Acc"] == M * N * 4
