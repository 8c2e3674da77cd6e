"""A tile result nobody reads is freed right after its instruction, on every backend path: its
bytes stay charged to the on-chip capacity otherwise, one tile per trip, until a kernel that fits
the device is refused for capacity (found by the vec_ew fuzz family: an unread load and an unread
add in a 3-trip loop of 16 lanes ran out of UB)."""

from __future__ import annotations

import numpy as np
import pytest

from nzjit import pl
from nzjit.backend import batched
from nzjit.backend.options import current, using

R, C, TRIPS = 16, 64, 200  # 2 KiB fp16 tiles: two kept per trip exceed the 192 KiB UB by trip 48


@pl.kernel
def unread_per_trip(a: pl.Tensor[[R, C], pl.FP16], out: pl.Out[pl.Tensor[[R, C], pl.FP16]]):
    for _i in pl.range(TRIPS):
        t = pl.load(a, [0, 0], [R, C], target_memory=pl.Mem.Vec)
        unread_load = pl.load(a, [0, 0], [R, C], target_memory=pl.Mem.Vec)  # noqa: F841
        unread_sum = pl.add(t, t)  # noqa: F841
        pl.store(pl.mul(t, t), [0, 0], out)


L = 4


@pl.kernel
def unread_per_lane_trip(a: pl.Tensor[[L * R, C], pl.FP16], out: pl.Out[pl.Tensor[[L * R, C], pl.FP16]]):
    for lane in pl.spmd(L):
        for _i in pl.range(TRIPS):
            t = pl.load(a, [lane * R, 0], [R, C], target_memory=pl.Mem.Vec)
            unread_load = pl.load(a, [lane * R, 0], [R, C], target_memory=pl.Mem.Vec)  # noqa: F841
            unread_sum = pl.add(t, t)  # noqa: F841
            pl.store(pl.mul(t, t), [lane * R, 0], out)


@pytest.mark.parametrize("fast,batch", [(True, True), (True, False), (False, False)])
@pytest.mark.parametrize("kernel,rows", [(unread_per_trip, R), (unread_per_lane_trip, L * R)])
def test_results_nobody_reads_are_freed(monkeypatch, fast, batch, kernel, rows):
    a = (np.arange(rows * C) % 7).astype(np.float16).reshape(rows, C)
    with using(current().with_(fast=fast, batch=batch)):
        np.testing.assert_array_equal(kernel(a), a * a)


def test_lanes_with_unread_results_stay_batched(monkeypatch):
    """The lane-batched run releases unread results too, so it does not give up for capacity."""
    seen = []
    real = batched.try_run_spmd
    monkeypatch.setattr(batched, "try_run_spmd", lambda *a, **k: seen.append(real(*a, **k)) or seen[-1])
    a = (np.arange(L * R * C) % 5).astype(np.float16).reshape(L * R, C)
    np.testing.assert_array_equal(unread_per_lane_trip(a), a * a)
    assert seen and seen[0] is True
