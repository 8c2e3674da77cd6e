"""Scalar access to GM (issue 23 item 5): `pl.read(t, indices)` / `pl.write(t, indices, value)` and
the `pl.tensor.` forms (`tensor.read` / `tensor.write`, PTO `pto.load_scalar` / `pto.store_scalar`).
A value read from GM is unknown when the kernel is compiled: an NZ window built from it is refused
unless it is clamped and aligned by construction (NZ-16 / NZ-18, passes/proofs.py), and an element
index past the tensor is refused at run time (nothing written back)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import runtime
from nzjit import CompileError, pl

rng = np.random.default_rng(5)


@pl.kernel
def gather_rows(
    idx: pl.Tensor[[4], pl.INT32],
    x: pl.Tensor[[1024, 64], pl.FP32],
    y: pl.Out[pl.Tensor[[64, 64], pl.FP32]],
    cnt: pl.Out[pl.Tensor[[2], pl.INT32]],
):
    for i in pl.range(4):
        r = pl.read(idx, [i])
        t = pl.load(x, [pl.cast(r, pl.INDEX) * 16, 0], [16, 64])
        pl.store(t, [i * 16, 0], y)
    pl.write(cnt, 0, pl.read(idx, 3) + 1)
    pl.tensor.write(cnt, [1], 7)


def test_read_and_write_scalars():
    idx = np.array([3, 0, 10, 63], np.int32)
    x = rng.standard_normal((1024, 64)).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # pl.write writes `cnt`: no unwritten-Out warning
        low = gather_rows.lower(idx, x, np.zeros((64, 64), np.float32), np.zeros(2, np.int32))
    g = low.ir()
    reads = [e for e in g.eqns if e.primitive.name == "tensor.read"]
    writes = [e for e in g.eqns if e.primitive.name == "tensor.write"]
    assert [str(e.outputs[0].type) for e in reads] == ["i32"] and len(writes) == 2
    text = low.pto()
    assert "%r = pto.load_scalar %arg0[%i] : !pto.ptr<i32> -> i32" in text
    assert "pto.store_scalar %c7_i32, %arg3[%c1] : !pto.ptr<i32>, i32" in text
    y, c = gather_rows(idx, x)
    assert np.array_equal(y, np.concatenate([x[r * 16 : r * 16 + 16] for r in idx]))
    assert c.tolist() == [64, 7]


def test_a_float_read_and_a_2d_index():
    @pl.kernel
    def k(
        s: pl.Tensor[[2, 8], pl.FP32],
        x: pl.Tensor[[16, 64], pl.FP32],
        y: pl.Out[pl.Tensor[[16, 64], pl.FP32]],
    ):
        pl.store(pl.mul(pl.load(x, [0, 0], [16, 64]), pl.tensor.read(s, [1, 5])), [0, 0], y)

    s = rng.standard_normal((2, 8)).astype(np.float32)
    x = rng.standard_normal((16, 64)).astype(np.float32)
    assert np.array_equal(k(s, x), x * s[1, 5])


E, K, N = 8, 64, 64


def _expert(off_of):
    @pl.kernel
    def k(
        sel: pl.Tensor[[1], pl.INT32],
        x: pl.Tensor[[16, K], pl.FP16],
        w: pl.Tensor[[E * K, N], pl.FP16, pl.NZ],
        y: pl.Out[pl.Tensor[[16, N], pl.FP32]],
    ):
        r = pl.cast(pl.read(sel, [0]), pl.INDEX)
        a = pl.load(x, [0, 0], [16, K], target_memory=pl.Mem.Mat)
        b = pl.load(w, [off_of(r), 0], [K, N], target_memory=pl.Mem.Mat)  # the expert's weight, NZ
        pl.store(pl.matmul(a, b), [0, 0], y)

    return k


def test_an_nz_window_from_a_read_value_clamped_and_aligned_by_construction():
    k = _expert(lambda r: pl.max(pl.min(r, E - 1), 0) * K)
    x = rng.integers(-3, 4, (16, K)).astype(np.float16)
    w = rng.integers(-3, 4, (E * K, N)).astype(np.float16)
    for e in (0, 5, 7):
        y = k(np.array([e], np.int32), x, runtime.pack_nz(w))
        assert np.array_equal(y, x.astype(np.float32) @ w[e * K : (e + 1) * K].astype(np.float32))


@pytest.mark.parametrize(
    "off_of,message",
    [
        (
            lambda r: r * K,
            r"\[NZ-18\] load of NZ tensor 'w': the row offset .* cannot be proven non-negative "
            r"\(.* is read from GM \(pl.read\): its value is the call's, unknown when compiled; clamp it: "
            r"pl.max\(pl.min\(v, hi\), 0\)",
        ),
        (lambda r: pl.min(r, E - 1) * K, r"\[NZ-18\] .* cannot be proven non-negative"),
        (
            lambda r: pl.max(pl.min(r, 56), 0) * 8,
            r"\[NZ-16\] load of NZ tensor 'w': the row offset .* cannot be proven a "
            r"multiple of 16 \(a fractal boundary\)",
        ),
    ],
)
def test_an_nz_window_from_an_unclamped_read_is_refused(off_of, message):
    with pytest.raises(CompileError, match=message):
        _expert(off_of).lower(
            np.zeros(1, np.int32),
            np.zeros((16, K), np.float16),
            runtime.pack_nz(np.zeros((E * K, N), np.float16)),
            np.zeros((16, N), np.float32),
        )


def test_a_window_past_the_tensor_from_a_read_value_is_refused_at_run_time():
    k = _expert(lambda r: pl.max(r, 0) * K)  # non-negative and aligned; the upper bound is the call's
    x = np.zeros((16, K), np.float16)
    with pytest.raises(runtime.DispatchError, match=r"out of bounds .*\(nothing is written back\)"):
        k(np.array([8], np.int32), x, runtime.pack_nz(np.zeros((E * K, N), np.float16)))


def test_an_element_index_past_the_tensor_is_refused_at_run_time():
    @pl.kernel
    def k(idx: pl.Tensor[[2], pl.INT32], t: pl.Tensor[[4], pl.FP32], y: pl.Out[pl.Tensor[[1], pl.FP32]]):
        pl.write(y, 0, pl.read(t, [pl.cast(pl.read(idx, 0), pl.INDEX)]))

    t = np.arange(4, dtype=np.float32)
    assert k(np.array([2, 0], np.int32), t).tolist() == [2.0]
    with pytest.raises(
        runtime.DispatchError, match=r"pl.read at index 4 on axis 0 is outside the view of shape \(4,\)"
    ):
        k(np.array([4, 0], np.int32), t)


def _lower(body, x_ann=pl.Tensor[[4, 8], pl.INT32]):
    @pl.kernel
    def k(x: x_ann, y: pl.Out[pl.Tensor[[4, 8], pl.INT32]]):
        body(x, y)

    return k.lower(
        np.zeros((4, 8), np.int32) if x_ann.dtype is pl.INT32 else np.zeros((4, 8), np.float32),
        np.zeros((4, 8), np.int32),
    )


def test_refusals():
    with pytest.raises(CompileError, match=r"pl.read of a rank-2 tensor takes 2 indices, got 1"):
        _lower(lambda x, y: pl.read(x, [0]))
    with pytest.raises(
        CompileError,
        match=r"pl.write of a f32 into a pl.INT32 tensor: the value is a scalar of the "
        r"tensor's dtype",
    ) as ei:
        _lower(lambda x, y: pl.write(y, [0, 0], 1.5))
    assert "help: pl.cast the value to pl.INT32" in str(ei.value)
    with pytest.raises(CompileError, match=r"the constant 4294967296 does not fit pl.INT32"):
        _lower(lambda x, y: pl.write(y, [0, 0], 1 << 32))
    with pytest.raises(CompileError, match=r"pl.read offsets must be ints or traced integers, got 0.5"):
        _lower(lambda x, y: pl.read(x, [0, 0.5]))
    with pytest.raises(CompileError, match=r"pl.read of a tile is not built") as ei:
        _lower(lambda x, y: pl.read(pl.load(x, [0, 0], [4, 8]), [0, 0]))
    assert "help: pl.store the tile and read the tensor" in str(ei.value)
    with pytest.raises(
        CompileError,
        match=r"\[lane-race\] every lane of pl.spmd\(4\) writes this element of the same "
        r"tensor",
    ):

        def racing(x, y):
            for _lane in pl.spmd(4):
                pl.write(y, [0, 0], pl.read(x, [0, 0]))

        _lower(racing)

    def per_lane(x, y):
        for lane in pl.spmd(4):
            pl.write(y, [lane, 0], pl.read(x, [lane, 1]))

    _lower(per_lane)  # lane-dependent indices: no race proven


def test_an_nz_tensor_is_not_read_by_element():
    @pl.kernel
    def k(w: pl.Tensor[[32, 32], pl.FP16, pl.NZ], y: pl.Out[pl.Tensor[[1], pl.FP16]]):
        pl.write(y, 0, pl.read(w, [0, 0]))

    with pytest.raises(
        CompileError, match=r"\[NZ-14\] pl.read of an NZ tensor: its elements are in NZ order"
    ):
        k.lower(runtime.pack_nz(np.zeros((32, 32), np.float16)), np.zeros(1, np.float16))
