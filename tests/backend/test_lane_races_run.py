"""Lane races at run time (issue 24 item 2; api.md: "a runtime.DeviceError subclass naming the
lanes"): windows the compiler cannot prove disjoint are logged per launch and checked exactly;
two lanes writing overlapping bytes, or one lane reading bytes another writes (either order),
raise runtime.races.LaneRaceError naming the lanes, the tensor, both windows and the kernel
lines, on every execution path, and every output and every other tensor keeps its bytes.
Windows proven disjoint are not logged (a plan fact); atomic stores do not race each other."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import runtime
from nzjit import pl
from nzjit.backend import lane_log
from nzjit.backend.options import Options, using
from nzjit.backend.plan import plan_of
from runtime.races import LaneRaceError

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gmm_kernels import grouped  # noqa: E402

HERE = Path(__file__).name
PATHS = [Options(), Options(batch=False), Options(fast=False), Options(lane_group=1)]
IDS = ["batched", "per-lane", "reference", "lane-group-1"]


@pl.kernel
def strided(
    x: pl.Tensor[[16, 512], pl.FP32], out: pl.Out[pl.Tensor[[16, 512], pl.FP32]], step: pl.Scalar[pl.INDEX]
):
    for lane in pl.spmd(4):
        t = pl.load(x, [0, lane * 64], [16, 64])
        pl.store(pl.add(t, t), [0, lane * step], out)  # a window from a scalar: unproven


@pl.kernel
def clamped(x: pl.Tensor[[16, 256], pl.FP32], out: pl.Out[pl.Tensor[[16, 256], pl.FP32]]):
    for lane in pl.spmd(4):
        t = pl.load(x, [0, lane * 64], [16, 64])
        pl.store(t, [0, pl.min(lane, 2) * 64], out)  # lanes 2 and 3: the same window


@pl.kernel
def neighbour(buf: pl.InOut[pl.Tensor[[16, 256], pl.FP32]], out: pl.Out[pl.Tensor[[16, 256], pl.FP32]]):
    for lane in pl.spmd(4):
        t = pl.load(buf, [0, (lane + 1) % 4 * 64], [16, 64])  # the next lane's block
        pl.store(t, [0, lane * 64], buf)
        pl.store(t, [0, lane * 64], out)


def _expect(e: LaneRaceError, lanes, what1, w1, what2, w2, tensor):
    msg = str(e)
    assert isinstance(e, runtime.DeviceError) and set(e.lanes) == set(lanes)
    assert e.tensor == repr(tensor)
    assert f"lane {lanes[0]} {what1} {w1} ({HERE}" in msg.replace(str(Path(__file__).parent) + "/", "")
    assert f"lane {lanes[1]} {what2} {w2} ({HERE}" in msg.replace(str(Path(__file__).parent) + "/", "")
    assert msg.startswith(str(Path(__file__))) and "help: give each lane its own window" in msg
    assert all(HERE in line for line in e.lines)


@pytest.mark.parametrize("options", PATHS, ids=IDS)
def test_windows_from_a_scalar_overlap_only_when_the_scalar_says_so(options):
    x = np.arange(16 * 512, dtype=np.float32).reshape(16, 512)
    with using(options):
        np.testing.assert_array_equal(
            strided(x, np.zeros((16, 512), np.float32), 64)[:, :256], 2 * x[:, :256]
        )
        dev = runtime.Worker(0)
        out = dev.alloc_tensor((16, 512), np.float32, init=np.full((16, 512), 7, np.float32))
        other = dev.alloc_tensor((4,), np.int32, init=np.arange(4, dtype=np.int32))
        for _ in range(2):  # the general call, then the cached call plan
            with pytest.raises(LaneRaceError) as info:
                strided(dev.alloc_tensor(x.shape, x.dtype, init=x), out, 32)
            _expect(info.value, (0, 1), "writes", "out[0:16, 0:64]", "writes", "out[0:16, 32:96]", "out")
            assert "they share out[0:16, 32:64]" in str(info.value)
            assert info.value.windows == (((0, 0), (16, 64)), ((0, 32), (16, 64)))
            assert (dev.copy_from(out) == 7).all() and (dev.copy_from(other) == np.arange(4)).all()
        host = np.full((16, 512), 5, np.float32)
        with pytest.raises(LaneRaceError):
            strided(x, host, 32)  # a host output: nothing downloaded
        assert (host == 5).all()


@pytest.mark.parametrize("options", PATHS, ids=IDS)
def test_windows_from_min_of_the_lane_race_between_the_clamped_lanes(options):
    x = np.ones((16, 256), np.float32)
    with using(options), pytest.raises(LaneRaceError) as info:
        clamped(x)
    _expect(info.value, (2, 3), "writes", "out[0:16, 128:192]", "writes", "out[0:16, 128:192]", "out")


@pytest.mark.parametrize("options", PATHS, ids=IDS)
def test_a_lane_reading_the_next_lanes_block_races_both_before_and_after_it_is_written(options):
    """Lane i reads block i + 1 (written later in lane order: write-after-read) and lane 3 reads
    block 0 (written earlier: read-after-write): the least pair is reported, the same on every
    path; buf (InOut) and out are unchanged."""
    buf = np.arange(16 * 256, dtype=np.float32).reshape(16, 256)
    dev = runtime.Worker(0)
    d_buf = dev.alloc_tensor(buf.shape, buf.dtype, init=buf)
    d_out = dev.alloc_tensor(buf.shape, buf.dtype, init=np.zeros_like(buf))
    with using(options), pytest.raises(LaneRaceError) as info:
        neighbour(d_buf, d_out)
    _expect(info.value, (0, 1), "reads", "buf[0:16, 64:128]", "writes", "buf[0:16, 64:128]", "buf")
    assert (dev.copy_from(d_buf) == buf).all() and (dev.copy_from(d_out) == 0).all()


def test_read_after_write_alone_is_a_race():
    """Lane i > 0 reads block i - 1, which lane i - 1 wrote before it ran: read-after-write."""

    @pl.kernel
    def previous(buf: pl.InOut[pl.Tensor[[16, 320], pl.FP32]]):
        for lane in pl.spmd(4):
            t = pl.load(buf, [0, lane * 64], [16, 64])
            pl.store(t, [0, lane * 64 + 64], buf)

    buf = np.arange(16 * 320, dtype=np.float32).reshape(16, 320)
    for options in PATHS:
        b = buf.copy()
        with using(options), pytest.raises(LaneRaceError) as info:
            previous(b)
        _expect(info.value, (1, 0), "reads", "buf[0:16, 64:128]", "writes", "buf[0:16, 64:128]", "buf")
        assert (b == buf).all()


def test_an_input_written_in_place_is_restored_after_a_race():
    """`out` is an input the kernel stores into (not an output the calling convention restores):
    the launch's snapshot puts its bytes back."""

    @pl.kernel
    def into_input(
        x: pl.Tensor[[16, 256], pl.FP32], out: pl.Tensor[[16, 256], pl.FP32], step: pl.Scalar[pl.INDEX]
    ):
        for lane in pl.spmd(4):
            pl.store(pl.load(x, [0, lane * 64], [16, 64]), [0, lane * step], out)

    x = np.ones((16, 256), np.float32)
    for options in PATHS:
        dev = runtime.Worker(0)
        out = dev.alloc_tensor((16, 256), np.float32, init=np.full((16, 256), 3, np.float32))
        with using(options), pytest.raises(LaneRaceError, match=r"lane 0 writes out\[0:16, 0:64\]"):
            into_input(dev.alloc_tensor(x.shape, x.dtype, init=x), out, 16)
        assert (dev.copy_from(out) == 3).all()


def test_races_inside_an_inner_loop_of_a_lane_are_found_on_the_trip_batched_path():
    """The lane's stores are in a carry-free inner loop (its trips run batched inside the lane)."""

    @pl.kernel
    def inner(
        x: pl.Tensor[[16, 512], pl.FP32],
        out: pl.Out[pl.Tensor[[16, 512], pl.FP32]],
        step: pl.Scalar[pl.INDEX],
    ):
        for lane in pl.spmd(4):
            for c in pl.range(2):
                t = pl.load(x, [0, lane * 64 + c * 32], [16, 32])
                pl.store(t, [0, lane * step + c * 32], out)

    x = np.arange(16 * 512, dtype=np.float32).reshape(16, 512)
    for options in PATHS:
        with using(options):
            np.testing.assert_array_equal(inner(x, np.zeros((16, 512), np.float32), 64)[:, :256], x[:, :256])
            with pytest.raises(LaneRaceError) as info:
                inner(x, np.zeros((16, 512), np.float32), 32)
        _expect(info.value, (0, 1), "writes", "out[0:16, 32:64]", "writes", "out[0:16, 32:64]", "out")


def test_atomic_stores_of_every_lane_into_one_window_do_not_race_but_a_plain_one_does():
    @pl.kernel
    def summed(
        x: pl.Tensor[[64, 32], pl.BF16],
        w: pl.Tensor[[32, 32], pl.BF16, pl.NZ],
        out: pl.InOut[pl.Tensor[[16, 32], pl.FP32]],
    ):
        for lane in pl.spmd(4):
            xt = pl.load(x, [lane * 16, 0], [16, 32], target_memory=pl.Mem.Mat)
            wt = pl.load(w, [0, 0], [32, 32], target_memory=pl.Mem.Mat)
            pl.store(pl.matmul(xt, wt, b_trans=True), [0, 0], out, atomic=True)

    @pl.kernel
    def mixed(
        x: pl.Tensor[[64, 32], pl.BF16],
        w: pl.Tensor[[32, 32], pl.BF16, pl.NZ],
        out: pl.InOut[pl.Tensor[[16, 128], pl.FP32]],
        plain: pl.Scalar[pl.INDEX],
    ):
        for lane in pl.spmd(4):
            xt = pl.load(x, [lane * 16, 0], [16, 32], target_memory=pl.Mem.Mat)
            wt = pl.load(w, [0, 0], [32, 32], target_memory=pl.Mem.Mat)
            acc = pl.matmul(xt, wt, b_trans=True)
            pl.store(acc, [0, 0], out, atomic=True)
            pl.store(acc, [0, lane * plain], out)  # plain = 32: lane 0's is the atomics' window

    import ml_dtypes

    rng = np.random.default_rng(0)
    x = rng.integers(-3, 4, (64, 32)).astype(ml_dtypes.bfloat16)
    w = rng.integers(-3, 4, (32, 32)).astype(ml_dtypes.bfloat16)
    want = sum(x[16 * i : 16 * i + 16].astype(np.float32) @ w.astype(np.float32).T for i in range(4))
    for options in PATHS:
        out = np.zeros((16, 32), np.float32)
        with using(options):
            summed(x, runtime.pack_nz(w), out)
        np.testing.assert_array_equal(out, want)  # integer-valued: exact in any order
        out = np.zeros((16, 128), np.float32)
        with using(options), pytest.raises(LaneRaceError) as info:
            mixed(x, runtime.pack_nz(w), out, 32)
        _expect(
            info.value, (1, 0), "atomically writes", "out[0:16, 0:32]", "writes", "out[0:16, 0:32]", "out"
        )
        assert (out == 0).all()


# ---------------------------------------------------------------------- what is not logged
def _marks(low):
    return [(e.primitive.name, e.params.get("lane_log")) for e in low.final.walk() if "lane_log" in e.params]


def _spmd_body(low):
    return next(e.params["body"] for e in low.final.walk() if e.params.get("kind") == "spmd")


def test_the_grouped_matmul_is_proven_race_free_and_its_plan_logs_nothing(monkeypatch):
    """lane -> (expert lane // 2, N tile lane % 2): no lane pair shares a window of `out` (checked
    for every pair at compile time); x and w are only read. Nothing is marked, no step wraps, and
    no launch opens a log."""
    k = grouped(pl.INT8, pl.INT32, 2, 16, 64, 128, 32, 64)
    low = k.lower()
    assert _marks(low) == [
        ("for", False),
        ("tile.load", False),
        ("tile.load", False),
        ("tile.load", False),
        ("tile.load", False),
        ("tile.store", False),
    ]
    for options in PATHS:
        assert plan_of(_spmd_body(low), 0, options, True).logged == ()
    monkeypatch.setattr(lane_log, "LaneWriteLog", None)  # a log opened would fail the call
    rng = np.random.default_rng(1)
    x = rng.integers(-128, 128, (2, 16, 128)).astype(np.int8)
    w = rng.integers(-128, 128, (2, 64, 128)).astype(np.int8)
    ref = np.einsum("etk,enk->etn", x.astype(np.int64), w.astype(np.int64)).astype(np.int32)
    for options in PATHS:
        dev = runtime.Worker(0)
        out = dev.alloc_tensor((2, 16, 64), np.int32)
        with using(options):
            k(
                dev.alloc_tensor(x.shape, x.dtype, init=x),
                dev.alloc_tensor(w.shape, w.dtype, init=runtime.pack_nz(w)),
                out,
            )
        np.testing.assert_array_equal(dev.copy_from(out), ref)


def test_affine_windows_are_proven_for_a_dynamic_lane_count():
    """`pl.spmd(n)` with n a scalar: no pair check, the affine bound |64| >= 64 proves it."""

    @pl.kernel
    def dyn(
        x: pl.Tensor[[16, 256], pl.FP32], out: pl.Out[pl.Tensor[[16, 256], pl.FP32]], n: pl.Scalar[pl.INDEX]
    ):
        for lane in pl.spmd(n):
            pl.store(pl.load(x, [0, lane * 64], [16, 64]), [0, lane * 64], out)

    assert _marks(dyn.lower()) == [("for", False), ("tile.load", False), ("tile.store", False)]


def test_unproven_windows_are_marked_with_their_tensor_and_their_steps_log():
    low = strided.lower()
    spmd = next(e for e in low.final.eqns if e.params.get("kind") == "spmd")
    nb, nc, _ = spmd.params["arity"]
    written = spmd.inputs[nb : nb + nc][spmd.params["lane_log"][0]]
    assert _marks(low)[1:] == [("tile.load", False), ("tile.store", "out")] and written.hint == "out"
    plan = plan_of(_spmd_body(low), 0, Options(batch=False), True)
    assert [plan.steps[i].eqn.primitive.name for i in plan.logged] == ["tile.store"]
    low = neighbour.lower()
    assert ("tile.load", "buf") in _marks(low)


def test_a_lane_reading_back_its_own_window_is_proven_and_runs():
    @pl.kernel
    def own(buf: pl.InOut[pl.Tensor[[16, 256], pl.FP32]]):
        for lane in pl.spmd(4):
            t = pl.load(buf, [0, lane * 64], [16, 64])
            pl.store(pl.add(t, t), [0, lane * 64], buf)

    assert all(m is False for _, m in _marks(own.lower()))
    buf = np.arange(16 * 256, dtype=np.float32).reshape(16, 256)
    b = buf.copy()
    own(b)
    np.testing.assert_array_equal(b, 2 * buf)


def test_a_race_on_one_rank_of_an_orchestration_leaves_every_output_untouched():
    """Rank 1's call races (step 32), rank 0's does not: the program fails as a whole with the
    lane race, and neither a host output nor a resident stacked output changes."""
    cluster = runtime.Cluster(2)

    @pl.orchestration
    def prog(x: pl.Tensor[[2, 16, 512], pl.FP32], out: pl.Out[pl.Tensor[[2, 16, 512], pl.FP32]]):
        for r in range(2):
            strided(x[r], out[r], 64 if r == 0 else 32, device=r)

    x = np.ones((2, 16, 512), np.float32)
    host = np.full((2, 16, 512), 5, np.float32)
    resident = cluster.alloc_stacked_tensor(np.full((2, 16, 512), 5, np.float32))
    for out in (host, resident):
        with pytest.raises(
            LaneRaceError, match=r"^rank 1: strided .*lane 0 writes out\[0:16, 0:64\]"
        ) as info:
            prog(x, out, cluster=cluster)
        assert info.value.lanes == (0, 1) and info.value.windows == (((0, 0), (16, 64)), ((0, 32), (16, 64)))
    assert (host == 5).all() and (cluster.copy_stacked_from(resident) == 5).all()
