"""A staged `if` inside a lane-batched body (backend/rules/control.py `_batch_cond`, the compare
rules' batch forms): a lane-uniform predicate runs its arm once for every lane, and the bytes equal
one lane at a time (`Options(batch=False)`) and the reference impls (`Options(fast=False)`); a
predicate that differs between lanes falls back to smaller groups and gives the same bytes."""

from __future__ import annotations

import numpy as np

from nzjit import pl
from nzjit.backend.options import Options, using
from tests.vector.conftest import attempts  # noqa: F401 - the fixture (every batched attempt)

RNG = np.random.default_rng(31)
PATHS = (Options(strict=True), Options(batch=False), Options(fast=False))


def _every_path(k, *args):
    outs = []
    for o in PATHS:
        with using(o):
            outs.append(k(*args))
    for o in outs[1:]:
        assert o.tobytes() == outs[0].tobytes()
    return outs[0]


@pl.kernel
def uniform_if(x: pl.Tensor[[64, 64], pl.FP32], y: pl.Out[pl.Tensor[[64, 64], pl.FP32]]):
    for lane in pl.spmd(4):
        acc = pl.load(x, [lane * 16, 0], [16, 64])
        for i in pl.range(3):
            if i == 0:  # the loop index: the same in every lane
                acc = pl.add(acc, 1.0)
            else:
                acc = pl.mul(acc, 2.0)
        pl.store(acc, [lane * 16, 0], y)


def test_a_lane_uniform_if_runs_batched(attempts):  # noqa: F811 - the imported fixture
    x = RNG.standard_normal((64, 64)).astype(np.float32)
    y = _every_path(uniform_if, x)
    assert attempts and attempts[0] is True  # the batched path ran, the `if` included
    assert np.array_equal(y, (x + np.float32(1)) * np.float32(2) * np.float32(2))


@pl.kernel
def lane_if(x: pl.Tensor[[64, 64], pl.FP32], y: pl.Out[pl.Tensor[[64, 64], pl.FP32]]):
    for lane in pl.spmd(4):
        t = pl.load(x, [lane * 16, 0], [16, 64])
        if lane == 2:  # differs between lanes: groups of lanes that agree run it
            t = pl.neg(t)
        pl.store(t, [lane * 16, 0], y)


def test_a_lane_dependent_if_gives_the_per_lane_bytes(attempts):  # noqa: F811
    x = RNG.standard_normal((64, 64)).astype(np.float32)
    y = _every_path(lane_if, x)
    ref = x.copy()
    ref[32:48] = -ref[32:48]
    assert np.array_equal(y, ref)
