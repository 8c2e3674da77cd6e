"""Lane races on a RayCluster (issue 24 item 2): a rank in another process finds the race with the
same executor and log; the error comes back whole (a runtime.LaneRaceError naming lanes, tensor,
windows and lines) and every rank's outputs are rolled back."""

from __future__ import annotations

import numpy as np
import pytest

from nzjit import pl

pytest.importorskip("ray")


@pl.kernel
def moving(
    x: pl.Tensor[[16, 256], pl.FP32], out: pl.InOut[pl.Tensor[[16, 320], pl.FP32]], step: pl.Scalar[pl.INDEX]
):
    for lane in pl.spmd(4):
        t = pl.load(x, [0, lane * 64], [16, 64])
        pl.store(t + t, [0, lane * step], out)


def test_a_race_in_an_actor_comes_back_whole_and_rolls_every_rank_back(cluster):
    from runtime import LaneRaceError

    steps = [64, 32]  # rank 1's lanes overlap

    @pl.orchestration
    def prog(x: pl.Tensor[[2, 16, 256], pl.FP32], out: pl.InOut[pl.Tensor[[2, 16, 320], pl.FP32]]):
        for r in range(2):
            moving(x[r], out[r], steps[r], device=r)

    x = np.ones((2, 16, 256), np.float32)
    host = np.full((2, 16, 320), 5, np.float32)
    resident = cluster.alloc_stacked_tensor(host)
    for out in (host, resident):
        with pytest.raises(LaneRaceError) as info:
            prog(x, out, cluster=cluster)
        assert info.value.lanes == (0, 1) and info.value.tensor == "'out'"
        assert info.value.windows == (((0, 0), (16, 64)), ((0, 32), (16, 64)))
        assert "test_ray_lane_races.py" in info.value.lines[0]
    assert (host == 5).all() and (cluster.copy_stacked_from(resident) == 5).all()
    steps[1] = 64
    prog(x, resident, cluster=cluster)
    got = cluster.copy_stacked_from(resident)
    assert (got[:, :, :256] == 2).all() and (got[:, :, 256:] == 5).all()
    cluster.free_stacked(resident)
