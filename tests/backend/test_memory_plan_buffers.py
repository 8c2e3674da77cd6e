"""The memory plan's double buffers and bias table (issue 23 item 8): a `pl.pipeline(..., stage=S)`
loop holds S buffers of every tile its body loads from GM (the next trip's loads overlap this
trip's compute; nzjit/backend/double_buffers.py), the plan charges them and the simulator reserves
the same bytes while the loop runs, so the two agree and a pipeline over capacity is refused at
compile time. The bias table (1 KiB on A2/A3, hardware-model.md §7) is planned like the others."""

from __future__ import annotations

import numpy as np
import pytest
from test_memory_plan import planned, runtime_peak

import runtime
from nzjit import CompileError, pl

R, C = 64, 128  # a [64, 128] FP32 Vec tile: 32 KiB


def _pipeline(stage: int, trips: int, rows: int = R, kind: str = "pipeline"):
    @pl.kernel
    def k(x: pl.Tensor[[rows * trips, C], pl.FP32], y: pl.Out[pl.Tensor[[rows * trips, C], pl.FP32]]):
        loop = pl.pipeline(0, trips, 1, stage=stage) if kind == "pipeline" else pl.range(0, trips, 1)
        for i in loop:
            a = pl.load(x, [i * rows, 0], [rows, C])
            pl.store(pl.add(a, a), [i * rows, 0], y)

    return k


def _args(rows: int, trips: int):
    x = np.ones((rows * trips, C), np.float32)
    return x, np.zeros_like(x)


@pytest.mark.parametrize("stage,extra", [(1, 0), (2, 1), (3, 2)])
def test_a_pipeline_holds_stage_buffers_of_what_it_loads(stage, extra):
    k = _pipeline(stage, 4)
    args = _args(R, 4)
    plan = k.lower(*args).memory()
    tile = R * C * 4
    assert plan.peak["Vec"] == 2 * tile + extra * tile  # a, a + a, and the stage buffers of a
    assert planned(k, args) == runtime_peak(k, args)
    names = [b.name for b in plan.at_peak["Vec"]]
    assert names.count("a (stage 2 buffer)") == (1 if extra else 0)
    assert names.count("a (stage 3 buffer)") == (1 if extra == 2 else 0)


def test_a_single_trip_pipeline_overlaps_nothing():
    k = _pipeline(2, 1)
    args = _args(R, 1)
    assert k.lower(*args).memory().peak["Vec"] == 2 * R * C * 4
    assert planned(k, args) == runtime_peak(k, args)


def test_double_buffers_over_capacity_are_refused_at_compile_time():  # UB 192 KiB
    rows = 128  # a 64 KiB tile: a, a + a and a second buffer of a = 192 KiB + a third = 256 KiB
    k = _pipeline(3, 2, rows)
    args = _args(rows, 2)
    with pytest.raises(CompileError) as ei:
        k(*args)
    msg = str(ei.value)
    assert "on-chip memory plan: Vec (UB) needs 262144 bytes" in msg
    assert "'a (stage 3 buffer)'" in msg and "'a (stage 2 buffer)'" in msg
    with pytest.raises(runtime.DeviceError, match=r"Vec \(UB\) capacity exceeded"):
        runtime_peak(k, args)  # the simulator's own accounting refuses it too
    ok = _pipeline(3, 2, rows, kind="range")  # the same body in a plain loop: one buffer each
    np.testing.assert_array_equal(ok(*args), 2 * args[0])


def test_the_bias_table_is_planned():  # hw §7: Bias 1 KiB
    M, K, N = 16, 64, 128

    @pl.kernel
    def mb(
        a: pl.Tensor[[M, K], pl.FP16],
        b: pl.Tensor[[K, N], pl.FP16],
        bias: pl.Tensor[[1, N], pl.FP32],
        out: pl.Out[pl.Tensor[[M, N], pl.FP32]],
    ):
        ta = pl.load(a, [0, 0], [M, K], target_memory=pl.Mem.Mat)
        tb = pl.load(b, [0, 0], [K, N], target_memory=pl.Mem.Mat)
        tbias = pl.load(bias, [0, 0], [1, N], target_memory=pl.Mem.Mat)
        pl.store(pl.tile.matmul_bias(ta, tb, tbias), [0, 0], out)

    args = (
        np.ones((M, K), np.float16),
        np.ones((K, N), np.float16),
        np.ones((1, N), np.float32),
        np.zeros((M, N), np.float32),
    )
    plan = mb.lower(*args).memory()
    assert plan.peak["Bias"] == N * 4
    assert "Bias  (BT )      512 /     1024 B" in str(plan)
    assert planned(mb, args) == runtime_peak(mb, args)
