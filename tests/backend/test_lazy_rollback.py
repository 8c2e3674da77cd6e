"""The calling convention's rollback (backend/convention.py `Rollback`): a cached call of a kernel
that is one pl.spmd launch snapshots its resident outputs only when the launch is about to write
something a later failure could leave behind. Batched, its stores land in one final assignment,
the last thing that can fail: no snapshot at all. Lane by lane (a fallback, a refusal), the
snapshot is taken first, and a failing lane leaves every output untouched, as before."""

from __future__ import annotations

import numpy as np
import pytest

import runtime
from nzjit import pl
from nzjit.backend import convention
from nzjit.backend.options import Options, using

PATHS = [Options(), Options(batch=False), Options(fast=False), Options(lane_group=1)]
IDS = ["batched", "per-lane", "reference", "lane-group-1"]


@pl.kernel
def rows(x: pl.Tensor[[64, 128], pl.FP32], n: pl.Scalar[pl.INDEX], y: pl.Out[pl.Tensor[[64, 128], pl.FP32]]):
    for lane in pl.spmd(4):
        t = pl.load(x, [lane * n, 0], [16, 128])  # n = 16: lane l's rows; n = 17: lane 3 is out of bounds
        pl.store(pl.add(t, t), [lane * 16, 0], y)


@pl.kernel
def two_stores(x: pl.Tensor[[64, 128], pl.FP32], y: pl.Out[pl.Tensor[[64, 256], pl.FP32]]):
    for lane in pl.spmd(4):
        t = pl.load(x, [lane * 16, 0], [16, 128])
        pl.store(t, [lane * 16, 0], y)
        pl.store(pl.add(t, t), [lane * 16, 128], y)


@pytest.fixture
def snapshots(monkeypatch):
    """How many times a launch snapshotted its resident outputs."""
    taken: list[int] = []
    real = convention.LaunchPlan.snapshot

    def spy(self, gm, args, seen):
        taken.append(1)
        return real(self, gm, args, seen)

    monkeypatch.setattr(convention.LaunchPlan, "snapshot", spy)
    return taken


@pytest.mark.parametrize("options", PATHS, ids=IDS)
def test_a_lane_refused_after_others_stored_leaves_the_output_untouched(options, snapshots):
    x = np.arange(64 * 128, dtype=np.float32).reshape(64, 128)
    w = runtime.Worker(0)
    xd = w.alloc_tensor(x.shape, x.dtype, init=x)
    with using(options):
        rows(xd, 16, w.alloc_tensor(x.shape, x.dtype))  # a successful call: the signature's plan is cached
        for _ in range(2):
            y = w.alloc_tensor(x.shape, x.dtype, init=np.full(x.shape, 7, np.float32))
            with pytest.raises(runtime.DispatchError, match="out of bounds"):
                rows(xd, 17, y)  # lanes 0-2 store before lane 3's load is refused
            assert (w.copy_from(y) == 7).all()
        y = w.alloc_tensor(x.shape, x.dtype, init=np.full(x.shape, 7, np.float32))
        rows(xd, 16, y)
        np.testing.assert_array_equal(w.copy_from(y), 2 * x)


def test_a_batched_launch_that_commits_in_one_assignment_takes_no_snapshot(snapshots):
    x = np.arange(64 * 128, dtype=np.float32).reshape(64, 128)
    w = runtime.Worker(0)
    xd, y = w.alloc_tensor(x.shape, x.dtype, init=x), w.alloc_tensor(x.shape, x.dtype)
    rows(xd, 16, y)  # the general path (its convention snapshots eagerly)
    snapshots.clear()
    for _ in range(3):
        rows(xd, 16, y)
    np.testing.assert_array_equal(w.copy_from(y), 2 * x)
    assert not snapshots  # the output was never copied
    for o in (Options(batch=False), Options(lane_group=1)):  # lane by lane / several commits
        with using(o):
            rows(xd, 16, y)  # its general call
            snapshots.clear()
            rows(xd, 16, y)
        assert len(snapshots) == 1
        np.testing.assert_array_equal(w.copy_from(y), 2 * x)


def test_a_commit_of_several_assignments_is_snapshotted_first(snapshots):
    x = np.arange(64 * 128, dtype=np.float32).reshape(64, 128)
    w = runtime.Worker(0)
    xd, y = w.alloc_tensor(x.shape, x.dtype, init=x), w.alloc_tensor((64, 256), np.float32)
    two_stores(xd, y)
    snapshots.clear()
    two_stores(xd, y)
    assert len(snapshots) == 1  # two stores per lane: two assignments, the snapshot comes first
    got = w.copy_from(y)
    np.testing.assert_array_equal(got[:, :128], x)
    np.testing.assert_array_equal(got[:, 128:], 2 * x)
