"""pl.move between memories, lowered as each target moves the bytes: A2/A3's cross-core pair
through a GM FIFO slot (tpush_to_aiv / tpop_from_aic, tpush_to_aic / tpop_from_aiv), A5's direct
TMOV; the explicit Mat -> Left / Right moves; runtime.crosscore's FIFO and its deadlock refusals."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import nzjit
from nzjit import pl
from runtime import DeviceError, GlobalMemory, TileBuf
from runtime.crosscore import NO_BYTES, CrossCorePipe

M, K, N = 32, 64, 64
rng = np.random.default_rng(3)


def mm_then_vec(target, out_dtype, relu=False):
    @pl.kernel(target=target)
    def k(
        a: pl.Tensor[[M, K], pl.FP16],
        b: pl.Tensor[[K, N], pl.FP16],
        bias: pl.Tensor[[1, N], pl.FP32],
        y: pl.Out[pl.Tensor[[M, N], pl.FP32]],
    ):
        acc = pl.matmul(
            pl.load(a, [0, 0], [M, K], target_memory=pl.Mem.Mat),
            pl.load(b, [0, 0], [K, N], target_memory=pl.Mem.Mat),
        )
        v = pl.move(acc, target_memory=pl.Mem.Vec, dtype=out_dtype, relu=relu)
        if out_dtype is not pl.FP32:
            v = pl.cast(v, pl.FP32, mode="rint")
        pl.store(pl.col_expand_add(v, pl.load(bias, [0, 0], [1, N])), [0, 0], y)

    return k


def data():
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    bias = rng.standard_normal((1, N)).astype(np.float32)
    return a, b, bias, np.zeros((M, N), np.float32)


def every_stage(low, *args):
    outs = []
    for after in ["trace", *low.passes]:
        copies = [x.copy() if isinstance(x, np.ndarray) else x for x in args]
        low.run(*copies, after=after)
        outs.append(copies[-1])
    for o in outs[1:]:
        assert np.array_equal(o, outs[0])
    return outs[-1]


@pytest.mark.parametrize(
    "out_dtype,np_out", [(pl.FP32, np.float32), (pl.FP16, np.float16), (pl.BF16, ml_dtypes.bfloat16)]
)
def test_acc_to_vec_on_a2a3_is_a_cross_core_pair_through_gm(out_dtype, np_out):
    a, b, bias, y = data()
    low = mm_then_vec(pl.A2A3, out_dtype).lower(a, b, bias, y)
    names = [e.primitive.name for e in low.ir().eqns]
    assert "tile.tpush_to_aiv" in names and "tile.tpop_from_aic" in names and "tile.move" not in names
    (push,) = [e for e in low.ir().eqns if e.primitive.name == "tile.tpush_to_aiv"]
    assert str(push.outputs[0].type).startswith(f"{out_dtype.short}[32,64]")  # the GM slot, converted
    got = every_stage(low, a, b, bias, y)
    acc = a.astype(np.float32) @ b.astype(np.float32)
    want = acc.astype(np_out).astype(np.float32) + bias  # the fixpipe rounds (RNE) before the vector unit
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-5)  # tolerance: the cube's fp32 sum order only
    pto = low.pto()
    assert "pto.tpush_to_aiv" in pto and "pto.tpop_from_aic" in pto and "pto.tfree_from_aic" in pto


def test_acc_to_vec_on_a5_is_the_direct_tmov_with_relu():
    a, b, bias, y = data()
    low = mm_then_vec(pl.A5, pl.FP32, relu=True).lower(a, b, bias, y)
    names = [e.primitive.name for e in low.ir().eqns]
    assert "tile.move_fixpipe" in names and "tile.tpush_to_aiv" not in names
    got = every_stage(low, a, b, bias, y)
    want = np.maximum(a.astype(np.float32) @ b.astype(np.float32), 0) + bias
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-5)
    assert "pto.tmov" in low.pto()


@pytest.mark.parametrize("target", [pl.A2A3, pl.A5])
def test_vec_to_mat_and_explicit_left_right(target):
    @pl.kernel(target=target)
    def k(
        a: pl.Tensor[[M, K], pl.FP16], b: pl.Tensor[[K, N], pl.FP16], y: pl.Out[pl.Tensor[[M, N], pl.FP32]]
    ):
        va = pl.cast(pl.relu(pl.cast(pl.load(a, [0, 0], [M, K]), pl.FP32, mode="rint")), pl.FP16, mode="rint")
        left = pl.move(pl.move(va, target_memory=pl.Mem.Mat), target_memory=pl.Mem.Left)
        right = pl.move(pl.load(b, [0, 0], [K, N], target_memory=pl.Mem.Mat), target_memory=pl.Mem.Right)
        pl.store(pl.matmul(left, right), [0, 0], y)

    a, b, _, y = data()
    low = k.lower(a, b, y)
    names = [e.primitive.name for e in low.ir().eqns]
    if target is pl.A2A3:
        assert names.count("tile.tpush_to_aic") == 1 and names.count("tile.tpop_from_aiv") == 1
    assert names.count("tile.move") == (2 if target is pl.A2A3 else 3) and "tile.mad" in names
    got = every_stage(low, a, b, y)
    np.testing.assert_allclose(
        got, np.maximum(a, 0).astype(np.float32) @ b.astype(np.float32), rtol=0, atol=2e-5
    )


def test_moves_in_spmd_lanes():
    @pl.kernel
    def k(
        a: pl.Tensor[[4 * M, K], pl.FP16],
        b: pl.Tensor[[K, N], pl.FP16],
        y: pl.Out[pl.Tensor[[4 * M, N], pl.FP32]],
    ):
        for lane in pl.spmd(4):
            acc = pl.matmul(
                pl.load(a, [lane * M, 0], [M, K], target_memory=pl.Mem.Mat),
                pl.load(b, [0, 0], [K, N], target_memory=pl.Mem.Mat),
            )
            v = pl.move(acc, target_memory=pl.Mem.Vec)
            pl.store(pl.mul(v, 2.0), [lane * M, 0], y)

    a = rng.standard_normal((4 * M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    y = np.zeros((4 * M, N), np.float32)
    k(a, b, y)
    np.testing.assert_allclose(y, 2 * (a.astype(np.float32) @ b.astype(np.float32)), rtol=0, atol=4e-5)


def test_move_refusals():
    def trace(body, target=pl.A2A3):
        @pl.kernel(target=target)
        def k(a: pl.Tensor[[M, K], pl.INT8], b: pl.Tensor[[K, N], pl.INT8], x: pl.Tensor[[M, N], pl.FP32]):
            acc = pl.matmul(
                pl.load(a, [0, 0], [M, K], target_memory=pl.Mem.Mat),
                pl.load(b, [0, 0], [K, N], target_memory=pl.Mem.Mat),
            )
            body(acc, x)

        return k.lower(np.zeros((M, K), np.int8), np.zeros((K, N), np.int8), np.zeros((M, N), np.float32))

    with pytest.raises(
        nzjit.CompileError, match="converts a pl.INT32 Acc tile to pl.INT32, not pl.FP16"
    ) as ei:
        trace(lambda acc, x: pl.move(acc, target_memory=pl.Mem.Vec, dtype=pl.FP16))
    assert "dequant scale is pl.col_expand_mul" in str(ei.value)
    with pytest.raises(nzjit.CompileError, match="no Acc -> Mat move on A2A3"):
        trace(lambda acc, x: pl.move(acc, target_memory=pl.Mem.Mat))
    with pytest.raises(nzjit.CompileError, match="dtype= / scale= are the fixpipe's conversion"):
        trace(lambda acc, x: pl.move(pl.load(x, [0, 0], [M, N]), target_memory=pl.Mem.Vec, dtype=pl.FP16))
    with pytest.raises(nzjit.CompileError, match=r"a Mat tile is whole 16 x 8 fractals"):
        trace(lambda acc, x: pl.move(pl.load(x, [0, 0], [8, N]), target_memory=pl.Mem.Mat))
    with pytest.raises(nzjit.CompileError, match="no Vec -> Left move"):
        trace(lambda acc, x: pl.move(pl.load(x, [0, 0], [M, N]), target_memory=pl.Mem.Left))


@pytest.mark.parametrize("target", [pl.A2A3, pl.A5])
def test_int32_acc_to_fp16_with_the_fixpipe_dequant_scale(target):
    @pl.kernel(target=target)
    def k(
        a: pl.Tensor[[M, K], pl.INT8],
        b: pl.Tensor[[K, N], pl.INT8],
        s: pl.Scalar[pl.FP32],
        y: pl.Out[pl.Tensor[[M, N], pl.FP16]],
    ):
        acc = pl.matmul(
            pl.load(a, [0, 0], [M, K], target_memory=pl.Mem.Mat),
            pl.load(b, [0, 0], [K, N], target_memory=pl.Mem.Mat),
        )
        pl.store(pl.move(acc, target_memory=pl.Mem.Vec, dtype=pl.FP16, scale=s, relu=True), [0, 0], y)

    a = rng.integers(-128, 128, (M, K)).astype(np.int8)
    b = rng.integers(-128, 128, (K, N)).astype(np.int8)
    y = np.zeros((M, N), np.float16)
    low = k.lower(a, b, 0.001, y)
    prim = "tile.tpush_to_aiv" if target is pl.A2A3 else "tile.move_fixpipe"
    (mv,) = [e for e in low.ir().eqns if e.primitive.name == prim]
    assert len(mv.inputs) == 2 and str(mv.inputs[1].type) == "f32"
    got = every_stage(low, a, b, 0.001, y)
    acc = np.maximum(a.astype(np.int64) @ b.astype(np.int64), 0)
    assert np.array_equal(
        got, (acc * float(np.float32(0.001))).astype(np.float16)
    )  # rounded once: exact bits
    if target is pl.A2A3:
        assert "pre_quant = #pto<quant_mode DEQF16>" in low.pto()


def test_dequant_refusals():
    @pl.kernel
    def k(a: pl.Tensor[[M, K], pl.FP16], b: pl.Tensor[[K, N], pl.FP16]):
        acc = pl.matmul(
            pl.load(a, [0, 0], [M, K], target_memory=pl.Mem.Mat),
            pl.load(b, [0, 0], [K, N], target_memory=pl.Mem.Mat),
        )
        pl.move(acc, target_memory=pl.Mem.Vec, scale=0.5)

    with pytest.raises(nzjit.CompileError, match="dequantises an INT32 Acc tile to pl.FP16, not pl.FP32"):
        k.lower(np.zeros((M, K), np.float16), np.zeros((K, N), np.float16))


def test_a5_fixpipe_row_limit():
    @pl.kernel(target=pl.A5)
    def k(a: pl.Tensor[[16, 32], pl.FP16], b: pl.Tensor[[32, 2048], pl.FP16]):
        acc = pl.matmul(
            pl.load(a, [0, 0], [16, 32], target_memory=pl.Mem.Mat),
            pl.load(b, [0, 0], [32, 2048], target_memory=pl.Mem.Mat),
        )
        pl.move(acc, target_memory=pl.Mem.Vec)

    with pytest.raises(nzjit.CompileError, match="rows of at most 4096 bytes, got 2048 pl.FP32"):
        k.lower(np.zeros((16, 32), np.float16), np.zeros((32, 2048), np.float16))


# ----------------------------------------------------------------------------- runtime.crosscore
def _acc(values: np.ndarray) -> TileBuf:
    t = TileBuf("Acc", np.float32, *values.shape)
    t.set_logical(values)
    return t


def test_pipe_push_pop_converts_and_frees_the_slot():
    gm = GlobalMemory()
    pipe = CrossCorePipe(gm)
    vals = rng.standard_normal((16, 32)).astype(np.float32)
    before = gm.live_bytes
    slot = pipe.push_acc(_acc(vals), np.dtype(np.float16), relu=True)
    assert slot.ready and pipe.in_flight["c2v"] == 1
    vec = TileBuf("Vec", np.float16, 16, 32)
    pipe.pop(slot, vec)
    assert np.array_equal(vec.logical(), np.maximum(vals, 0).astype(np.float16))
    assert pipe.in_flight["c2v"] == 0 and gm.live_bytes == before


def test_a_reserved_slot_is_fifo_accounting_without_gm_bytes():
    # the batched pipe (backend/lane_pipe.py) carries the lanes' values itself: its slot takes a
    # FIFO entry, refused when the FIFO is full, and released once, but allocates no GM
    gm = GlobalMemory()
    pipe = CrossCorePipe(gm, slot_num=2)
    before = gm.live_bytes
    a = pipe.reserve("c2v", (32, 128), np.dtype(np.int32))
    b = pipe.reserve("c2v", (16, 16), np.dtype(np.float16))
    assert a.ready and a.addr == NO_BYTES and pipe.in_flight["c2v"] == 2 and gm.live_bytes == before
    with pytest.raises(DeviceError, match="all 2 FIFO slots hold data nobody popped"):
        pipe.reserve("c2v", (32, 128), np.dtype(np.int32))
    pipe.release(a)
    with pytest.raises(DeviceError, match="data-ready flag is not set"):
        pipe.release(a)
    pipe.release(b)
    assert pipe.in_flight["c2v"] == 0 and gm.live_bytes == before


def test_pipe_deadlocks_are_refused():
    gm = GlobalMemory()
    pipe = CrossCorePipe(gm, slot_num=2)
    acc = _acc(np.ones((16, 16), np.float32))
    slot = pipe.push_acc(acc, np.dtype(np.float32))
    pipe.push_acc(acc, np.dtype(np.float32))
    with pytest.raises(DeviceError, match="all 2 FIFO slots hold data nobody popped"):
        pipe.push_acc(acc, np.dtype(np.float32))
    vec = TileBuf("Vec", np.float32, 16, 16)
    pipe.pop(slot, vec)
    with pytest.raises(DeviceError, match="data-ready flag is not set"):
        pipe.pop(slot, vec)
    with pytest.raises(DeviceError, match="lands in Vec, got a Mat tile"):
        pipe.pop(pipe.push_acc(acc, np.dtype(np.float32)), TileBuf("Mat", np.float32, 16, 16))
    with pytest.raises(DeviceError, match="takes an Acc tile"):
        pipe.push_acc(vec, np.dtype(np.float32))
