"""Issue 22 item 10 (the fused MoE expert's vector side): the fast forms of its non-mad lane steps
give the bytes of every other path - one instruction per lane (`Options(batch=False)`), the
unprepared batch (`Options(prepared=False)`) and the reference impls (`Options(fast=False)`).

- rules/vector.py `_batch_elementwise`: wholly valid operands of the result's geometry sharing one
  lane map run the ufunc over the flat images (in place over a dying operand's); a partial valid
  region, or operands of different lane maps, take the [n, rows, cols] form.
- backend/lane_pipe.py `batch_pop`: a whole ND tile of the slot's dtype takes the pushed values as
  its images (no copy); a pop of the same accumulator twice gives two tiles that do not alias."""

from __future__ import annotations

import numpy as np
import pytest

from nzjit import pl
from nzjit.backend.options import Options, using

RNG = np.random.default_rng(2210)
PATHS = (Options(strict=True), Options(prepared=False), Options(batch=False), Options(fast=False))
R, C = 16, 64
DTYPES = {"fp32": (pl.FP32, np.float32), "fp16": (pl.FP16, np.float16), "int32": (pl.INT32, np.int32)}


def _same_bytes_on_every_path(k, *args):
    outs = []
    for o in PATHS:
        with using(o):
            outs.append(k(*args))
    for out in outs[1:]:
        assert out.tobytes() == outs[0].tobytes()
    return outs[0]


def _data(np_dt, shape):
    if np.dtype(np_dt).kind == "i":
        return RNG.integers(-1000, 1000, shape).astype(np_dt)
    return RNG.standard_normal(shape).astype(np_dt)


@pytest.mark.parametrize("name", sorted(DTYPES))
@pytest.mark.parametrize("valid", [R, 11])  # wholly valid: the flat form; 11 rows: the 3-D form
def test_tile_tile_elementwise_chain_batched_equals_every_path(attempts, name, valid):
    pdt, np_dt = DTYPES[name]
    floats = np.dtype(np_dt).kind == "f"

    @pl.kernel
    def k(x: pl.Tensor[[64, C], pdt], y: pl.Tensor[[64, C], pdt], o: pl.Out[pl.Tensor[[64, C], pdt]]):
        for lane in pl.spmd(4):
            a = pl.load(x, [lane * R, 0], [R, C], valid_shape=[valid, C], target_memory=pl.Mem.Vec)
            b = pl.load(y, [lane * R, 0], [R, C], valid_shape=[valid, C], target_memory=pl.Mem.Vec)
            s = pl.add(a, b)  # both operands live on: a fresh result
            m = pl.maximum(pl.mul(s, b), pl.neg(a))  # dying operands: in place
            d = pl.sub(m, b)
            if floats:  # TABS / TEXP take float tiles only
                d = pl.mul(pl.exp(pl.neg(pl.abs(d))), d)
            pl.store(d, [lane * R, 0], o)

    x, y = _data(np_dt, (64, C)), _data(np_dt, (64, C))
    _same_bytes_on_every_path(k, x, y)
    assert attempts and attempts[0] is True


def test_lanes_sharing_one_image_with_lanes_of_their_own(attempts):
    # one operand loaded by every lane from the same window (one image), the other per lane: the
    # lane maps differ, so the step gathers each lane's image (the 3-D form)
    @pl.kernel
    def k(
        x: pl.Tensor[[R, C], pl.FP32], y: pl.Tensor[[64, C], pl.FP32], o: pl.Out[pl.Tensor[[64, C], pl.FP32]]
    ):
        for lane in pl.spmd(4):
            a = pl.load(x, [0, 0], [R, C], target_memory=pl.Mem.Vec)
            b = pl.load(y, [lane * R, 0], [R, C], target_memory=pl.Mem.Vec)
            pl.store(pl.mul(pl.add(a, b), a), [lane * R, 0], o)

    x, y = _data(np.float32, (R, C)), _data(np.float32, (64, C))
    out = _same_bytes_on_every_path(k, x, y)
    assert attempts and attempts[0] is True
    np.testing.assert_array_equal(out, (np.tile(x, (4, 1)) + y) * np.tile(x, (4, 1)))


def test_two_pops_of_one_accumulator_do_not_alias(attempts):
    # each Acc -> Vec move is its own push and pop: the popped tile takes its slot's values, which
    # the push copied from the accumulator; an in-place add over one must not change the other
    @pl.kernel
    def k(
        a: pl.Tensor[[64, 32], pl.FP16],
        b: pl.Tensor[[32, 32], pl.FP16],
        o: pl.Out[pl.Tensor[[64, 32], pl.FP32]],
    ):
        for lane in pl.spmd(4):
            am = pl.load(a, [lane * R, 0], [R, 32], target_memory=pl.Mem.Mat)
            acc = pl.matmul(am, pl.load(b, [0, 0], [32, 32], target_memory=pl.Mem.Mat))
            v1 = pl.move(acc, target_memory=pl.Mem.Vec)
            v2 = pl.move(acc, target_memory=pl.Mem.Vec)
            pl.store(pl.mul(pl.add(v1, v2), v2), [lane * R, 0], o)

    a, b = _data(np.float16, (64, 32)), _data(np.float16, (32, 32))
    out = _same_bytes_on_every_path(k, a, b)
    assert attempts and attempts[0] is True
    p = a.astype(np.float32) @ b.astype(np.float32)
    np.testing.assert_allclose(out, (p + p) * p, rtol=1e-3, atol=1e-3)
