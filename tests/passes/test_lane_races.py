"""Compile-time lane races (issue 24 item 2; api.md: nzjit.CompileError when provable): a
pl.spmd(n > 1) whose lanes all store the same window (offsets independent of the lane index)
is refused at the store's line; lane-dependent windows, one lane, and the benchmark kernels pass."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import runtime
from nzjit import CompileError, pl

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "backend"))
from gmm_kernels import grouped  # noqa: E402


def test_every_lane_storing_the_same_window_is_refused():
    @pl.kernel
    def k(x: pl.Tensor[[16, 256], pl.FP32], out: pl.Out[pl.Tensor[[16, 256], pl.FP32]]):
        for lane in pl.spmd(4):
            t = pl.load(x, [0, lane * 64], [16, 64])
            out[:, 0:64] = t + t  # every lane: the same 64 columns

    with pytest.raises(
        CompileError,
        match=r"(?s)\[lane-race\] every lane of pl.spmd\(4\) stores this window of the "
        r"same tensor.*help: compute the window from the lane index",
    ) as info:
        k.lower()
    assert "test_lane_races.py" in str(info.value.source)
    out = np.full((16, 256), 7, np.float32)
    with pytest.raises(CompileError, match="lane-race"):
        k(np.ones((16, 256), np.float32), out)
    assert (out == 7).all()


def test_a_window_through_an_inner_loop_independent_of_the_lane_is_refused():
    @pl.kernel
    def k(x: pl.Tensor[[16, 256], pl.FP32], out: pl.Out[pl.Tensor[[16, 256], pl.FP32]]):
        for lane in pl.spmd(2):
            for c in pl.range(2):
                t = pl.load(x, [0, lane * 128 + c * 64], [16, 64])
                pl.store(t, [0, c * 64], out)  # depends on c, not on the lane

    with pytest.raises(CompileError, match=r"pl.spmd\(2\) stores this window"):
        k.lower()


def test_lane_dependent_windows_and_a_single_lane_are_accepted():
    @pl.kernel
    def k(
        x: pl.Tensor[[16, 256], pl.FP32],
        out: pl.Out[pl.Tensor[[16, 256], pl.FP32]],
        one: pl.Out[pl.Tensor[[16, 64], pl.FP32]],
    ):
        for lane in pl.spmd(4):
            idx = pl.get_block_idx()
            t = pl.load(x, [0, idx * 64], [16, 64])
            out[:, lane * 64 : lane * 64 + 64] = t + t
        for _ in pl.spmd(1):
            pl.store(pl.load(x, [0, 0], [16, 64]), [0, 0], one)

    x = np.arange(16 * 256, dtype=np.float32).reshape(16, 256)
    out, one = k(x)
    np.testing.assert_array_equal(out, 2 * x)
    np.testing.assert_array_equal(one, x[:, :64])


def test_the_grouped_matmul_is_not_refused_its_lane_windows_depend_on_the_lane():
    k = grouped(pl.INT8, pl.INT32, 2, 16, 64, 128, 32, 64)
    k.lower()  # the lanes' stores depend on the lane: no refusal
    rng = np.random.default_rng(0)
    x = rng.integers(-128, 128, (2, 16, 128)).astype(np.int8)
    w = rng.integers(-128, 128, (2, 64, 128)).astype(np.int8)
    dev = runtime.Worker(0)
    out = dev.alloc_tensor((2, 16, 64), np.int32)
    k(
        dev.alloc_tensor(x.shape, x.dtype, init=x),
        dev.alloc_tensor(w.shape, w.dtype, init=runtime.pack_nz(w)),
        out,
    )
    ref = np.einsum("etk,enk->etn", x.astype(np.int64), w.astype(np.int64)).astype(np.int32)
    np.testing.assert_array_equal(dev.copy_from(out), ref)


def test_an_offset_proven_constant_across_lanes_is_lane_independent():
    """Found by the safety probes: `lane * 0` is computed from the lane but is 0 in every lane
    (the proofs module's interval is one point), so every lane stores the same window."""
    step = 0

    @pl.kernel
    def k(x: pl.Tensor[[16, 256], pl.FP32], out: pl.Out[pl.Tensor[[16, 256], pl.FP32]]):
        for lane in pl.spmd(4):
            t = pl.load(x, [0, lane * 64], [16, 64])
            pl.store(t + t, [0, lane * step], out)

    with pytest.raises(CompileError, match=r"pl.spmd\(4\) stores this window"):
        k.lower()


def test_a_store_under_lane_dependent_control_is_left_to_the_run_time_check():
    """Found by the campaign (seed 12, program 8): `pl.range(core, 1, ...)` runs only in lane 0, so
    its lane-independent window is stored by one lane only: no race, not refused."""

    @pl.kernel
    def k(x: pl.Tensor[[16, 256], pl.FP32], out: pl.Out[pl.Tensor[[16, 256], pl.FP32]]):
        for core in pl.spmd(4):
            for i in pl.range(core, 1, 1):
                t = pl.load(x, [0, i * 64], [16, 64])
                pl.store(t + t, [0, i * 64], out)

    x = np.arange(16 * 256, dtype=np.float32).reshape(16, 256)
    out = np.full((16, 256), 7, np.float32)
    k(x, out)
    np.testing.assert_array_equal(out[:, :64], 2 * x[:, :64])
    assert (out[:, 64:] == 7).all()


def test_a_kernel_compiled_inside_a_guard_bypass_is_not_served_outside_it():
    """The guards' test bypass is part of the compile-cache key: the unchecked graph compiled
    inside it (and its call plan) never answers a call outside it, which is refused as before."""
    from nzjit.passes import lane_races

    @pl.kernel
    def k(x: pl.Tensor[[16, 256], pl.FP32], out: pl.Out[pl.Tensor[[16, 256], pl.FP32]]):
        for lane in pl.spmd(4):
            t = pl.load(x, [0, lane * 64], [16, 64])
            pl.store(t + t, [0, 0], out)

    x = np.ones((16, 256), np.float32)
    with lane_races._bypass_for_tests():
        with pytest.raises(runtime.LaneRaceError):  # compiled unchecked: the run-time log refuses it
            k(x, np.zeros((16, 256), np.float32))
        low = k.lower(x, np.zeros((16, 256), np.float32))
    for _ in range(2):
        with pytest.raises(CompileError, match="lane-race"):
            k(x, np.zeros((16, 256), np.float32))
        with pytest.raises(CompileError, match="lane-race"):
            k.lower(x, np.zeros((16, 256), np.float32))
    with lane_races._bypass_for_tests():
        assert k.lower(x, np.zeros((16, 256), np.float32)) is low
