"""The all-lanes (batch) forms of the vector unit's rules (backend/rules/vector_lanes.py): an SPMD
body of vector ops runs once for every lane, and gives byte for byte what one instruction per lane
gives (`Options(batch=False)`) and what the reference impls give (`Options(fast=False)`). Each
test also checks that the batched attempt really ran (no silent fallback): stacked row-local
instructions, shared images, and the per-image path (column ops, TRESHAPE, partial valid rows)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from nzjit import pl
from nzjit.backend.options import Options, using

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))

import row_softmax as sm  # noqa: E402

RNG = np.random.default_rng(22)
PATHS = (Options(strict=True), Options(batch=False), Options(fast=False))


def _on_every_path(k, *args):
    outs = []
    for o in PATHS:
        with using(o):
            outs.append(k(*args))
    return outs


def _same_bytes(outs):
    for o in outs[1:]:
        assert o.tobytes() == outs[0].tobytes()


def test_row_softmax_batched_equals_per_lane_byte_for_byte(attempts):
    x = RNG.standard_normal((sm.ROWS, sm.PADDED)).astype(np.float32)
    outs = _on_every_path(sm.row_softmax, x)
    _same_bytes(outs)
    assert attempts and attempts[0] is True  # the batched path ran (the first option)
    np.testing.assert_allclose(outs[0][:, : sm.COLS], sm.reference(x), rtol=1e-6, atol=1e-9)


R, C = 16, 64


@pl.kernel
def _alu(
    x: pl.Tensor[[64, C], pl.FP32],
    s: pl.Scalar[pl.FP32],
    o: pl.Out[pl.Tensor[[64, C], pl.FP32]],
    rs: pl.Out[pl.Tensor[[4, R], pl.FP32]],
    cs: pl.Out[pl.Tensor[[4, C], pl.FP32]],
    q: pl.Out[pl.Tensor[[64, C], pl.INT32]],
):
    for lane in pl.spmd(4):
        t = pl.load(x, [lane * R, 0], [R, C], target_memory=pl.Mem.Vec)
        a = pl.mul(pl.add(t, 1.5), s)  # TADDS, TMULS (a float pl.Scalar)
        b = pl.div(pl.minimum(a, pl.full([R, C], dtype=pl.FP32, value=2.0)), pl.sqrt(pl.abs(t)))
        c = pl.tile.lrelu(pl.recip(pl.add(pl.relu(b), 3.0)), 0.25)
        r = pl.row_sum(c)  # [R, 1] DN
        d = pl.row_expand_mul(c, r)
        col = pl.col_max(d)  # per image (not row-local)
        e = pl.col_expand_sub(d, col)
        pl.store(e, [lane * R, 0], o)
        pl.store(pl.reshape(r, [1, R]), [lane, 0], rs)
        pl.store(col, [lane, 0], cs)
        pl.store(pl.cast(e, pl.INT32, mode="round"), [lane * R, 0], q)


def test_alu_reductions_broadcasts_batched_equal_per_lane(attempts):
    x = RNG.standard_normal((64, C)).astype(np.float32)
    runs = []
    for o in PATHS:
        with using(o):
            runs.append(_alu(x, 0.75))
    for run in runs[1:]:
        for a, b in zip(run, runs[0]):
            assert a.tobytes() == b.tobytes()
    assert attempts and attempts[0] is True
    # and the numbers are numpy's (the per-lane path is checked against numpy in test_vector_ops)
    t = x
    a = (t + np.float32(1.5)) * np.float32(0.75)
    b = np.minimum(a, 2.0) / np.sqrt(np.abs(t))
    c = np.maximum(1 / (np.maximum(b, 0) + 3), 0.25 / (np.maximum(b, 0) + 3)).astype(np.float32)
    np.testing.assert_allclose(runs[0][0].reshape(4, R, C).max(axis=1), 0, atol=1e-6)
    np.testing.assert_allclose(runs[0][1].reshape(64), c.sum(axis=1), rtol=1e-5)


def test_lanes_that_share_an_image_batch_once(attempts):
    # every lane loads the same window: one image for all lanes, the result mapped back to each
    @pl.kernel
    def k(x: pl.Tensor[[R, C], pl.FP16], o: pl.Out[pl.Tensor[[64, C], pl.FP16]]):
        for lane in pl.spmd(4):
            t = pl.load(x, [0, 0], [R, C], target_memory=pl.Mem.Vec)
            pl.store(pl.row_expand_sub(t, pl.row_max(t)), [lane * R, 0], o)

    x = RNG.standard_normal((R, C)).astype(np.float16)
    outs = _on_every_path(k, x)
    _same_bytes(outs)
    assert attempts[0] is True
    np.testing.assert_array_equal(outs[0], np.tile(x - x.max(axis=1, keepdims=True), (4, 1)))


def test_partial_valid_rows_run_per_image(attempts):
    # a valid region of 12 of 16 rows cannot be stacked (the stack's valid rows would not be each
    # image's): the instruction runs once per image, still inside the batched attempt
    @pl.kernel
    def k(x: pl.Tensor[[64, C], pl.FP32], o: pl.Out[pl.Tensor[[64, C], pl.FP32]]):
        for lane in pl.spmd(4):
            t = pl.load(x, [lane * R, 0], [R, C], valid_shape=[12, C], target_memory=pl.Mem.Vec)
            u = pl.row_expand_div(pl.exp(pl.sub(t, 1.0)), pl.row_sum(t))
            pl.store(pl.tile.fillpad(u, pad_value=pl.PadValue.zero), [lane * R, 0], o)

    x = RNG.standard_normal((64, C)).astype(np.float32)
    outs = _on_every_path(k, x)
    _same_bytes(outs)
    assert attempts[0] is True
    v = x.reshape(4, R, C)[:, :12]
    want = np.zeros((4, R, C), np.float32)
    want[:, :12] = np.exp(v - 1) / v.sum(axis=2, keepdims=True)
    np.testing.assert_allclose(outs[0].reshape(4, R, C), want, rtol=1e-5, atol=1e-6)


def test_fused_expert_runs_its_cross_core_moves_batched(attempts):
    # backend/lane_pipe.py: TPUSH / TPOP (Acc -> Vec through the GM pipe, dequant, Vec -> Mat) for
    # all four expert lanes at once, byte for byte the lanes one by one and the reference impls
    import fused_moe_expert as fm

    import runtime

    x, wg, wu, sg, su, wd, xs = fm.data()
    args = (x, runtime.pack_nz(wg), runtime.pack_nz(wu), sg, su, runtime.pack_nz(wd), float(xs))
    outs = _on_every_path(fm.moe_expert, *args)
    _same_bytes(outs)
    assert attempts and attempts[0] is True
    ref = fm.reference(x, wg, wu, sg, su, wd, float(xs))
    assert np.abs(outs[0] - ref).max() <= 2e-3 * np.abs(ref).max()


def test_per_channel_dequant_and_a_vec_to_mat_move_batched(attempts):
    # VDEQF16 with one scale row for every lane, and a partial-valid Acc -> Vec pop, batched
    M, K, N = 16, 32, 64

    @pl.kernel
    def k(
        a: pl.Tensor[[4 * M, K], pl.INT8],
        b: pl.Tensor[[K, N], pl.INT8],
        s: pl.Tensor[[1, N], pl.FP32],
        w: pl.Tensor[[N, N], pl.FP16],
        y: pl.Out[pl.Tensor[[4 * M, N], pl.FP32]],
    ):
        for lane in pl.spmd(4):
            acc = pl.matmul(
                pl.load(a, [lane * M, 0], [M, K], target_memory=pl.Mem.Mat),
                pl.load(b, [0, 0], [K, N], target_memory=pl.Mem.Mat),
            )
            h = pl.move(acc, target_memory=pl.Mem.Vec, dtype=pl.FP16, scale=s, relu=True)
            o = pl.matmul(
                pl.move(h, target_memory=pl.Mem.Mat), pl.load(w, [0, 0], [N, N], target_memory=pl.Mem.Mat)
            )
            pl.store(o, [lane * M, 0], y)

    a = RNG.integers(-128, 128, (4 * M, K)).astype(np.int8)
    b = RNG.integers(-128, 128, (K, N)).astype(np.int8)
    s = (RNG.random((1, N)) * 1e-3).astype(np.float32)
    w = (RNG.standard_normal((N, N)) * 0.1).astype(np.float16)
    outs = _on_every_path(k, a, b, s, w)
    _same_bytes(outs)
    assert attempts and attempts[0] is True
    per = (s[0].view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)
    h = np.maximum((a.astype(np.int64) @ b.astype(np.int64)).astype(np.float32) * per, 0).astype(np.float16)
    np.testing.assert_allclose(outs[0], h.astype(np.float32) @ w.astype(np.float32), rtol=2e-3, atol=1e-3)


def _col_kernel(d, op):
    fn = {
        "expand": lambda t, c: pl.col_expand(t, c),
        "add": pl.col_expand_add,
        "sub": pl.col_expand_sub,
        "mul": pl.col_expand_mul,
        "div": pl.col_expand_div,
    }[op]

    @pl.kernel
    def k(x: pl.Tensor[[64, C], d], col: pl.Tensor[[4, C], d], o: pl.Out[pl.Tensor[[64, C], d]]):
        for lane in pl.spmd(4):
            t = pl.load(x, [lane * R, 0], [R, C], target_memory=pl.Mem.Vec)
            c = pl.load(col, [lane, 0], [1, C], target_memory=pl.Mem.Vec)  # each lane its own column
            pl.store(fn(t, c), [lane * R, 0], o)

    return k


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("op", ["expand", "add", "sub", "mul", "div"])
def test_column_broadcasts_run_once_for_all_lanes_each_with_its_own_column(attempts, monkeypatch, dtype, op):
    # issue 22 item 10: TCOLEXPAND* ran image by image in the batch form (a column operand per
    # lane); stacked along the rows and told the lane count, one instruction serves every lane
    from runtime import vector as V

    lanes_seen: list[int] = []
    real = V.col_expand

    def spy(*a, **k):
        lanes_seen.append(k.get("lanes", a[5] if len(a) > 5 else 1))
        return real(*a, **k)

    monkeypatch.setattr(V, "col_expand", spy)
    d = pl.FP32 if dtype is np.float32 else pl.FP16
    x = RNG.standard_normal((64, C)).astype(dtype)
    col = (RNG.standard_normal((4, C)) + 3).astype(dtype)
    outs = _on_every_path(_col_kernel(d, op), x, col)
    _same_bytes(outs)
    assert attempts and attempts[0] is True
    assert lanes_seen[0] == 4 and lanes_seen[1:] == [1] * 4 * (len(PATHS) - 1)  # batched once, then per lane
    xs, cs = x.reshape(4, R, C).astype(np.float32), col[:, None, :].astype(np.float32)
    want = {
        "expand": np.broadcast_to(cs, xs.shape),
        "add": xs + cs,
        "sub": xs - cs,
        "mul": xs * cs,
        "div": xs / cs,
    }[op].astype(dtype)
    np.testing.assert_array_equal(outs[0].reshape(4, R, C), want)


@pl.kernel
def _valid_rows(
    x: pl.Tensor[[64, C], pl.FP32], n: pl.Scalar[pl.INDEX], o: pl.Out[pl.Tensor[[64, C], pl.FP32]]
):
    for lane in pl.spmd(4):
        t = pl.load(x, [lane * R, 0], [R, C], valid_shape=[n, C], target_memory=pl.Mem.Vec)
        u = pl.col_expand_mul(pl.mul(pl.exp(pl.neg(t)), 0.5), pl.load(x, [lane, 0], [1, C]))
        pl.store(pl.tile.fillpad(u, pad_value=pl.PadValue.zero), [lane * R, 0], o)


def test_a_vector_step_decides_per_valid_shape_not_once(attempts):
    # rules/vector_lanes.py keeps what a step decides from its operands' geometries and valid
    # shapes (stacked or per image, the result's valid shape, zeros outside it) per such key:
    # the same compiled step called with 16, then 12, then 16 valid rows gives each call's bytes
    x = RNG.standard_normal((64, C)).astype(np.float32)
    for n in (R, 12, R, 7):
        outs = _on_every_path(_valid_rows, x, n)
        _same_bytes(outs)
        want = np.zeros((4, R, C), np.float32)
        t = x.reshape(4, R, C)[:, :n]
        want[:, :n] = (np.exp(-t) * np.float32(0.5)) * x[:4, None, :]
        np.testing.assert_allclose(outs[0].reshape(4, R, C), want, rtol=1e-6)
    assert attempts == [True] * 4  # every call ran batched (the other paths do not try)
