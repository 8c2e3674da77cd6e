"""`pl.create_tensor(shape, dtype)` as a GM scratch tensor inside a kernel (issue 23 item 4; PyPTO:
a tensor created in an InCore function is a GM workspace). Read as a tensor (stored into, loaded
from), ConvertTensorToTileOps keeps it as `tensor.create[scratch=True]`: fresh zeroed GM for each
run of the equation, freed when the kernel returns; the PTO function takes it as a trailing
workspace argument with its tensor view. Created inside a `pl.spmd` launch, each lane has its own;
created outside, the lanes share it, and the lane-race machinery refuses what races (at compile
time when every lane stores one window, at run time otherwise). Exact against numpy on every
execution path and after every pass."""

from __future__ import annotations

import numpy as np
import pytest

import nzjit
import runtime
from nzjit import CompileError, pl
from nzjit.backend.options import Options, using
from runtime.races import LaneRaceError

PATHS = [Options(), Options(batch=False), Options(fast=False), Options(lane_group=1)]
IDS = ["batched", "per-lane", "reference", "lane-group-1"]
X = np.arange(16 * 256, dtype=np.float32).reshape(16, 256) - 2000


@pl.kernel
def through_scratch(x: pl.Tensor[[16, 64], pl.FP32], y: pl.Out[pl.Tensor[[16, 64], pl.FP32]]):
    tmp = pl.create_tensor([16, 64], dtype=pl.FP32)
    tmp[:, :] = pl.load(x, [0, 0], [16, 64])
    y[:, :] = pl.add(pl.load(tmp, [0, 0], [16, 64]), pl.load(tmp, [0, 0], [16, 64]))


@pl.kernel
def transposed_through_scratch(x: pl.Tensor[[16, 64], pl.FP32], y: pl.Out[pl.Tensor[[16, 64], pl.FP32]]):
    # rows written in one order, read back in another: the scratch holds real bytes
    tmp = pl.create_tensor([32, 64], dtype=pl.FP32)
    for i in pl.range(2):
        pl.store(pl.load(x, [i * 8, 0], [8, 64]), [24 - i * 8, 0], tmp)
    for i in pl.range(2):
        pl.store(pl.load(tmp, [16 + i * 8, 0], [8, 64]), [i * 8, 0], y)


@pl.kernel
def per_lane(x: pl.Tensor[[16, 256], pl.FP32], y: pl.Out[pl.Tensor[[16, 256], pl.FP32]]):
    for lane in pl.spmd(4):
        tmp = pl.create_tensor([16, 64], dtype=pl.FP32)  # each lane its own
        pl.store(pl.load(x, [0, lane * 64], [16, 64]), [0, 0], tmp)
        t = pl.load(tmp, [0, 0], [16, 64])
        pl.store(pl.add(t, t), [0, lane * 64], y)


@pl.kernel
def shared_by_window(
    x: pl.Tensor[[16, 256], pl.FP32], y: pl.Out[pl.Tensor[[16, 256], pl.FP32]], step: pl.Scalar[pl.INDEX]
):
    tmp = pl.create_tensor([16, 256], dtype=pl.FP32)  # one for every lane: lane windows from a scalar
    for lane in pl.spmd(4):
        pl.store(pl.load(x, [0, lane * 64], [16, 64]), [0, lane * step], tmp)  # <- scratch store
        t = pl.load(tmp, [0, lane * step], [16, 64])
        pl.store(pl.add(t, t), [0, lane * 64], y)


def test_a_scratch_round_trip_equals_numpy_after_every_pass() -> None:
    x = X[:, :64].copy()
    low = through_scratch.lower(x, np.zeros_like(x))
    final = str(low.ir())
    assert "tmp:f32[16,64]/[64,1] = tensor.create[shape=(16, 64) dtype=f32 scratch=True]" in final
    assert "tile.store a 0 0 tmp" in final and "tile.load[shape=(16, 64) memory=Vec] tmp 0 0" in final
    for after in ["trace", *low.passes]:
        y = np.zeros_like(x)
        low.run(x, y, after=after)
        np.testing.assert_array_equal(y, 2 * x, err_msg=after)
    np.testing.assert_array_equal(through_scratch(x), 2 * x)


def test_a_scratch_holds_bytes_between_loops() -> None:
    x = X[:, :64].copy()
    ref = np.concatenate([x[8:16], x[0:8]])
    np.testing.assert_array_equal(transposed_through_scratch(x), ref)


def test_the_pto_function_takes_a_workspace_argument() -> None:
    x = X[:, :64].copy()
    text = through_scratch.lower(x, np.zeros_like(x)).pto()
    head = text.splitlines()[0]
    assert (
        head
        == "func.func @through_scratch(%arg0: !pto.ptr<f32>, %arg1: !pto.ptr<f32>, %tmp_workspace: !pto.ptr<f32>) {"
    )
    assert (
        "%tmp_view = pto.make_tensor_view %tmp_workspace, shape = [%c16, %c64], strides = [%c64, %c1] "
        "{layout = #pto.layout<nd>}" in text
    )
    assert text.count("outs(%tmp_pview") == 1 and text.count("ins(%tmp_pview") == 2
    nzjit.check_ptoas(text)


def test_the_scratch_is_freed_when_the_kernel_returns() -> None:
    w = runtime.Worker(0)
    x = w.alloc_tensor((16, 64), np.float32, init=X[:, :64].copy())
    y = w.alloc_tensor((16, 64), np.float32)
    through_scratch(x, y)  # compiled and run once: plans and pools settle
    before = w.gm.live_bytes
    through_scratch(x, y)
    assert w.gm.live_bytes == before
    np.testing.assert_array_equal(w.copy_from(y), 2 * X[:, :64])


@pytest.mark.parametrize("options", PATHS, ids=IDS)
def test_each_lane_has_its_own_scratch(options: Options) -> None:
    with using(options):
        np.testing.assert_array_equal(per_lane(X), 2 * X)


@pytest.mark.parametrize("options", PATHS, ids=IDS)
def test_lanes_sharing_a_scratch_in_own_windows_are_exact(options: Options) -> None:
    with using(options):
        np.testing.assert_array_equal(shared_by_window(X, 64), 2 * X)


@pytest.mark.parametrize("options", PATHS, ids=IDS)
def test_lanes_racing_on_a_shared_scratch_are_refused_at_run_time(options: Options, line_of) -> None:
    with using(options), pytest.raises(LaneRaceError) as ei:
        shared_by_window(X, 0)
    line = line_of(shared_by_window.__wrapped__, "# <- scratch store")
    assert f"test_kernel_scratch.py:{line}" in str(ei.value)
    assert "lane 0 writes tmp[0:16, 0:64]" in str(ei.value) and "lane 1 writes tmp[0:16, 0:64]" in str(
        ei.value
    )


def test_every_lane_storing_one_window_of_a_shared_scratch_is_refused_at_compile_time(line_of) -> None:
    @pl.kernel
    def shared(x: pl.Tensor[[16, 256], pl.FP32], y: pl.Out[pl.Tensor[[16, 256], pl.FP32]]):
        tmp = pl.create_tensor([16, 64], dtype=pl.FP32)  # one for all lanes
        for lane in pl.spmd(4):
            pl.store(pl.load(x, [0, lane * 64], [16, 64]), [0, 0], tmp)  # <- every lane
            pl.store(pl.load(tmp, [0, 0], [16, 64]), [0, lane * 64], y)

    with pytest.raises(CompileError) as ei:
        shared.lower()
    assert ei.value.rule == "lane-race" and ei.value.source.line == line_of(shared, "# <- every lane")
    assert "every lane of pl.spmd(4) stores this window of the same tensor" in str(ei.value)
