"""The elementwise ops that predate the vector unit (`tile.add / sub / mul / maximum / exp / neg /
abs`, `tile.cast`) compute only their destination's valid region, as the device does (issue 22
item 7; pto-isa: every Vec instruction iterates over dst's valid rows x columns, the bytes outside
keep what the destination held - a fresh tile's zeros here) - on every path: the reference impl
(every stage), the specialised step and the all-lanes batch form. Bytes outside a valid region
are invisible to TSTORE, so the tests read them where the next instruction (TFILLPAD) receives
its source tile."""

from __future__ import annotations

import numpy as np
import pytest

import nzjit
import runtime
from nzjit import pl
from nzjit.backend.options import Options, using
from runtime import vector as V

RNG = np.random.default_rng(7)
PATHS = (Options(strict=True), Options(batch=False), Options(fast=False))


@pytest.fixture
def seen(monkeypatch):
    """Every source tile TFILLPAD receives: (valid rows, valid cols, its whole element matrix)."""
    got: list[tuple[int, int, np.ndarray]] = []
    real = V.fillpad

    def spy(dst, src, pad):
        got.append(
            (src.valid_row, src.valid_col, src.data.view(src.dtype).reshape(src.rows, src.cols).copy())
        )
        return real(dst, src, pad)

    monkeypatch.setattr(V, "fillpad", spy)
    return got


def _lanes(seen, rows):
    """The recorded tiles as one [lanes, rows, cols] array (a stacked batch call holds many lanes)."""
    return np.concatenate([m.reshape(-1, rows, m.shape[1]) for _, _, m in seen])


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_partial_tiles_compute_only_their_valid_region(seen, dtype):
    # item 7: exp(0) = 1 and 1 + 1 = 2 would show outside the region if it were computed there
    d = pl.FP32 if dtype is np.float32 else pl.FP16

    @pl.kernel
    def k(x: pl.Tensor[[16, 64], d], y: pl.Out[pl.Tensor[[16, 64], pl.FP32]]):
        t = pl.load(x, [0, 0], [16, 64], valid_shape=[12, 40])
        u = pl.maximum(pl.add(pl.exp(t), pl.neg(t)), pl.abs(pl.mul(t, pl.sub(t, t))))
        pl.store(pl.tile.fillpad(pl.cast(u, pl.FP32), pad_value=pl.PadValue.zero), [0, 0], y)

    x = RNG.standard_normal((16, 64)).astype(dtype)
    low = k.lower(x, np.zeros((16, 64), np.float32))
    (add,) = [e for e in low.ir().eqns if e.primitive.name == "tile.add"]
    assert str(add.outputs[0].type).endswith("@Vec<valid 12,40>")
    v = x[:12, :40]
    want = np.maximum(np.exp(v) + (-v), np.abs(v * (v - v))).astype(np.float32)
    outs = []
    for o in PATHS:  # the specialised steps, one lane at a time, the reference impls
        seen.clear()
        with using(o):
            y = np.full((16, 64), 5, np.float32)
            k(x, y)
        outs.append(y)
        ((vr, vc, m),) = seen
        assert (vr, vc) == (12, 40)
        np.testing.assert_allclose(m[:12, :40], want, rtol=2e-3 if dtype is np.float16 else 1e-6)
        outside = m.copy()
        outside[:12, :40] = 0
        assert not outside.any()  # a fresh tile's zeros, not exp(0) = 1 or any other value
    for after in ["trace", *low.passes]:  # every stage
        seen.clear()
        low.run(x, np.zeros((16, 64), np.float32), after=after)
        assert np.array_equal(seen[0][2][:12, :40], outs[2][:12, :40])
        assert not seen[0][2][12:].any() and not seen[0][2][:, 40:].any()
    for y in outs[1:]:
        assert y.tobytes() == outs[0].tobytes()


def test_partial_lanes_batched_compute_only_their_valid_region(seen, attempts):
    R, C = 16, 64

    @pl.kernel
    def k(x: pl.Tensor[[64, C], pl.FP32], o: pl.Out[pl.Tensor[[64, C], pl.FP16]]):
        for lane in pl.spmd(4):
            t = pl.load(x, [lane * R, 0], [R, C], valid_shape=[10, 24], target_memory=pl.Mem.Vec)
            u = pl.cast(pl.add(pl.exp(t), t), pl.FP16)
            pl.store(pl.tile.fillpad(u, pad_value=pl.PadValue.zero), [lane * R, 0], o)

    x = RNG.standard_normal((64, C)).astype(np.float32)
    v = x.reshape(4, R, C)[:, :10, :24]
    want = np.zeros((4, R, C), np.float16)
    want[:, :10, :24] = (np.exp(v) + v).astype(np.float16)
    outs = []
    for o in PATHS:
        seen.clear()
        attempts.clear()
        with using(o):
            y = np.zeros((64, C), np.float16)
            k(x, y)
        outs.append(y)
        assert np.array_equal(_lanes(seen, R), want)  # zeros outside every lane's region
        if o is PATHS[0]:
            assert attempts and attempts[0] is True  # the batch forms ran (no silent fallback)
    for y in outs[1:]:
        assert y.tobytes() == outs[0].tobytes()


def test_operands_of_different_valid_shapes_are_refused():
    @pl.kernel
    def k(x: pl.Tensor[[16, 64], pl.FP32]):
        a = pl.load(x, [0, 0], [16, 64], valid_shape=[16, 40])
        pl.add(a, pl.load(x, [0, 0], [16, 64]))

    with pytest.raises(nzjit.CompileError, match="pl.add operands have different valid shapes") as ei:
        k.lower(np.zeros((16, 64), np.float32))
    assert "fillpad" in str(ei.value)


def test_dynamic_valid_shapes_that_differ_are_refused_at_run_time():
    @pl.kernel
    def k(
        x: pl.Tensor[[16, 64], pl.FP32],
        n: pl.Scalar[pl.INT32],
        m: pl.Scalar[pl.INT32],
        y: pl.Out[pl.Tensor[[16, 64], pl.FP32]],
    ):
        a = pl.load(x, [0, 0], [16, 64], valid_shape=[n, 64])
        b = pl.load(x, [0, 0], [16, 64], valid_shape=[m, 64])
        pl.store(pl.tile.fillpad(pl.sub(a, b), pad_value=pl.PadValue.zero), [0, 0], y)

    x = RNG.standard_normal((16, 64)).astype(np.float32)
    for o in PATHS:
        with using(o):
            y = np.full((16, 64), 3, np.float32)
            k(x, 8, 8, y)
            assert not y.any()
            with pytest.raises(
                runtime.DeviceError, match="TSUB: source valid shape 4x64 differs from the destination's 8x64"
            ):
                k(x, 8, 4, y)


def test_a_result_in_place_over_a_stored_operand_leaves_the_store_its_bytes(attempts):
    # LaneState.adopt: `t` dies at the add, but its deferred store still reads its images; the
    # result must not take them over (y gets t, z gets t + t), on every path
    R, C = 16, 64

    @pl.kernel
    def k(
        x: pl.Tensor[[64, C], pl.FP32],
        y: pl.Out[pl.Tensor[[64, C], pl.FP32]],
        z: pl.Out[pl.Tensor[[64, C], pl.FP32]],
    ):
        for lane in pl.spmd(4):
            t = pl.exp(pl.load(x, [lane * R, 0], [R, C], target_memory=pl.Mem.Vec))
            pl.store(t, [lane * R, 0], y)
            u = pl.row_expand_sub(t, pl.row_max(t))
            pl.store(pl.add(u, u), [lane * R, 0], z)

    x = RNG.standard_normal((64, C)).astype(np.float32)
    e = np.exp(x)
    u = e - e.max(axis=1, keepdims=True)
    outs = []
    for o in PATHS:
        attempts.clear()
        with using(o):
            y, z = np.zeros_like(x), np.zeros_like(x)
            k(x, y, z)
        if o is PATHS[0]:
            assert attempts and attempts[0] is True
        np.testing.assert_allclose(y, e, rtol=1e-6)
        np.testing.assert_allclose(z, u + u, rtol=1e-6, atol=1e-6)
        outs.append(y.tobytes() + z.tobytes())
    assert outs[0] == outs[1] == outs[2]
