"""MarkLaneWindows through `tensor.slice` views (issue 24 item 2): an access of `out[e]` is an access
of `out`, its window shifted by the slice's offsets. Disjoint lane windows through slices are
proven (nothing logged: the `lane_log` facts, and the run has no log to pay for), overlapping
ones are still logged and raise LaneRaceError at run time on every path, outputs untouched."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import runtime
from nzjit import pl
from nzjit.backend.options import Options, using
from nzjit.passes.lane_windows import LANE_LOG
from runtime.races import LaneRaceError

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import fused_moe_expert as fm  # noqa: E402

PATHS = [Options(), Options(batch=False), Options(fast=False)]
IDS = ["batched", "per-lane", "reference"]


def _marks(low):
    (launch,) = [e for e in low.final.eqns if e.params.get("kind") == "spmd"]
    body = launch.params["body"].eqns
    return launch.params[LANE_LOG], {
        (e.primitive.name, i): e.params[LANE_LOG] for i, e in enumerate(body) if LANE_LOG in e.params
    }


def test_the_fused_expert_is_proven_race_free_through_its_expert_slices():
    x8, wg, wu, sg, su, wd, xs = fm.data()
    low = fm.moe_expert.lower(
        x8,
        runtime.pack_nz(wg),
        runtime.pack_nz(wu),
        sg,
        su,
        runtime.pack_nz(wd),
        float(xs),
        np.zeros((4, 32, 256)),
    )
    launch, accesses = _marks(low)
    assert launch is False  # no log opened, no snapshot of the launch's tensors
    assert len(accesses) == 7 and not any(accesses.values())  # x[e], wg[e], wu[e], sg, su, wd[e], out[e]


@pl.kernel
def per_lane_slice(x: pl.Tensor[[4, 16, 64], pl.FP32], out: pl.Out[pl.Tensor[[4, 16, 64], pl.FP32]]):
    for lane in pl.spmd(4):
        t = pl.load(x[lane], [0, 0], [16, 64])
        pl.store(pl.add(t, t), [0, 0], out[lane])  # a dropped axis: lane l owns out[l]


@pl.kernel
def shared_slice(x: pl.Tensor[[4, 16, 64], pl.FP32], out: pl.Out[pl.Tensor[[4, 16, 64], pl.FP32]]):
    for lane in pl.spmd(4):
        t = pl.load(x[lane], [0, 0], [16, 64])
        pl.store(t, [0, 0], out[lane // 2])  # lanes 0 and 1 (2 and 3) write the same slice


@pl.kernel
def column_boxes(x: pl.Tensor[[16, 256], pl.FP32], out: pl.Out[pl.Tensor[[16, 256], pl.FP32]]):
    for lane in pl.spmd(4):
        t = pl.load(x, [0, lane * 64], [16, 64])
        box = out[:, 64:256]  # a kept axis: the slice's offset is added to the store's
        pl.store(t, [0, lane * 32], box)  # 64 wide every 32 columns: neighbours overlap


@pl.kernel
def column_tiles(x: pl.Tensor[[16, 256], pl.FP32], out: pl.Out[pl.Tensor[[16, 256], pl.FP32]]):
    for lane in pl.spmd(4):
        t = pl.load(x, [0, lane * 32], [16, 32])
        box = out[:, 128:256]
        pl.store(t, [0, lane * 32], box)  # 32 wide every 32 columns: disjoint


def test_disjoint_windows_through_slices_are_not_logged_and_run_exactly():
    x = np.arange(4 * 16 * 64, dtype=np.float32).reshape(4, 16, 64)
    launch, accesses = _marks(per_lane_slice.lower(x))
    assert launch is False and not any(accesses.values())
    launch, accesses = _marks(column_tiles.lower(x.reshape(16, 256)))
    assert launch is False and not any(accesses.values())
    for o in PATHS:
        with using(o):
            np.testing.assert_array_equal(per_lane_slice(x), 2 * x)
            got = column_tiles(x.reshape(16, 256), np.zeros((16, 256), np.float32))
            np.testing.assert_array_equal(got[:, 128:], x.reshape(16, 256)[:, :128])


@pytest.mark.parametrize("options", PATHS, ids=IDS)
def test_windows_that_overlap_through_slices_are_logged_and_race(options):
    x = np.arange(4 * 16 * 64, dtype=np.float32).reshape(4, 16, 64)
    launch, accesses = _marks(shared_slice.lower(x))
    assert launch and accesses[("tile.store", max(i for _, i in accesses))] == "out"
    dev = runtime.Worker(0)
    out = dev.alloc_tensor(x.shape, x.dtype, init=np.full(x.shape, 7, np.float32))
    with using(options), pytest.raises(LaneRaceError) as info:
        shared_slice(dev.alloc_tensor(x.shape, x.dtype, init=x), out)
    assert set(info.value.lanes) == {0, 1} and info.value.tensor == repr("out")
    assert (dev.copy_from(out) == 7).all()  # nothing written
    y = x.reshape(16, 256)
    launch, accesses = _marks(column_boxes.lower(y))
    assert launch and "out" in accesses.values()
    out = dev.alloc_tensor(y.shape, y.dtype, init=np.full(y.shape, 7, np.float32))
    with using(options), pytest.raises(LaneRaceError) as info:
        column_boxes(dev.alloc_tensor(y.shape, y.dtype, init=y), out)
    assert set(info.value.lanes) == {0, 1}
    assert (dev.copy_from(out) == 7).all()
