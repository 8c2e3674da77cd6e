"""nzjit.distributed.RayCluster (issue 25, api.md "Distributed"): ranks as Ray actors.

Each test compares with numpy and with the local runtime.Cluster: a RayCluster must give the same
bytes and refuse with the same messages (the program is checked on the driver by the same code)."""

from __future__ import annotations

import time

import numpy as np
import pytest
from pld_kernels import SIZE, run_mesh_allreduce
from ray_kernels import (
    RANKS,
    N,
    T,
    data,
    ffn,
    ffn_created,
    kill_and_wait,
    mm,
    one_mm,
    pack,
    ref_ffn,
    ref_mm,
    window,
)

import runtime
from nzjit import pl
from runtime import DeviceError, DispatchError

ray = pytest.importorskip("ray")


def stats(cluster):
    return cluster.rank_stats()


def test_ranks_are_actors_and_shards_stay_resident(cluster):
    assert cluster.n_ranks == RANKS and len(cluster.actors) == RANKS
    x, wg, _ = data()
    wd = cluster.alloc_stacked_tensor(pack(wg))  # NZ-29: shard r = pack_nz(wg)[r] on rank r
    assert isinstance(wd, runtime.StackedDeviceTensor) and wd.worker_ids == (0, 1)
    assert [s.worker for s in wd.shards] == cluster.workers and wd.shards[0].shape == (N, 64)
    np.testing.assert_array_equal(cluster.copy_stacked_from(wd), pack(wg))  # the bytes as placed
    y = one_mm(x, wd)  # found through wd's shards
    np.testing.assert_array_equal(y, ref_mm(x, wg))
    before = stats(cluster)
    y2 = one_mm(x, wd, cluster=cluster)
    np.testing.assert_array_equal(y2, y)
    after = stats(cluster)
    assert [s["graphs"] for s in after] == [s["graphs"] for s in before]  # a graph is shipped once per actor
    # the shards stay resident: a second call uploads rank r's plane of x and nothing else
    assert [
        (a["uploads"] - b["uploads"], a["upload_bytes"] - b["upload_bytes"]) for a, b in zip(after, before)
    ] == [(1, x[r].nbytes) for r in range(RANKS)]
    local = runtime.Cluster(RANKS)
    np.testing.assert_array_equal(one_mm(x, local.alloc_stacked_tensor(pack(wg))), y)
    cluster.free_stacked(wd)
    with pytest.raises(DispatchError, match=r"parameter 'w': shard 0 .* was freed"):
        one_mm(x, wd)


def test_program_with_intermediates_on_two_ranks(cluster):
    x, wg, wu = data(1)
    held = [s["tensors"] for s in stats(cluster)]
    g_d, u_d = cluster.alloc_stacked_tensor(pack(wg)), cluster.alloc_stacked_tensor(pack(wu))
    h = ffn(x, g_d, u_d)  # per rank: mm -> g, mm -> u, relu_mul(g, u) -> h[r]; g, u never leave the rank
    np.testing.assert_array_equal(h, ref_ffn(x, wg, wu))
    # the intermediates and the uploaded host planes were freed when the program ended: each rank
    # holds just its two shards more than before
    assert [s["tensors"] for s in stats(cluster)] == [n + 2 for n in held]
    np.testing.assert_array_equal(ffn_created(x, g_d, u_d), h)  # pl.create_tensor intermediates
    assert [s["tensors"] for s in stats(cluster)] == [n + 2 for n in held]
    resident_h = cluster.alloc_stacked_tensor(np.zeros((RANKS, T, N), np.float32))
    ffn(x, g_d, u_d, resident_h)
    np.testing.assert_array_equal(cluster.copy_stacked_from(resident_h), h)
    for t in (g_d, u_d, resident_h):
        cluster.free_stacked(t)


def test_direct_call_on_a_remote_shard_runs_in_its_actor(cluster):
    x, wg, _ = data(2)
    wd = cluster.alloc_stacked_tensor(pack(wg))
    runs = [s["programs"] for s in stats(cluster)]
    y1 = mm(x[1], wd[1])  # a direct call: the rank of its resident argument
    y1_again = mm(x[1], wd[1])  # the single-process fast path never takes a remote tensor
    np.testing.assert_array_equal(y1, ref_mm(x, wg)[1])
    np.testing.assert_array_equal(y1_again, y1)
    assert [s["programs"] for s in stats(cluster)] == [runs[0], runs[1] + 2]
    cluster.free_stacked(wd)


def test_refused_program_sends_nothing_and_says_what_local_says(cluster):
    x, wg, _ = data(3)

    @pl.orchestration
    def crossed(
        x: pl.Tensor[[RANKS, T, 64], pl.FP16],
        w: pl.Tensor[[RANKS, N, 64], pl.FP16, pl.NZ],
        y: pl.Out[pl.Tensor[[RANKS, T, N], pl.FP32]],
    ):
        for r in range(RANKS):
            mm(x[r], w[RANKS - 1 - r], y[r], device=r)  # rank 0 given rank 1's shard

    local = runtime.Cluster(RANKS)
    with pytest.raises(DispatchError) as want:
        crossed(x, local.alloc_stacked_tensor(pack(wg)))
    wd = cluster.alloc_stacked_tensor(pack(wg))
    runs = [s["programs"] for s in stats(cluster)]
    y = np.full((RANKS, T, N), 7, np.float32)
    with pytest.raises(DispatchError) as got:
        crossed(x, wd, y)
    assert str(got.value) == str(want.value)
    assert "rank 0: mm" in str(got.value) and "pass rank 0's shard or copy it over" in str(got.value)
    assert (y == 7).all() and [s["programs"] for s in stats(cluster)] == runs  # checked before dispatch
    with pytest.raises(DispatchError, match=r"parameter 'x' expects shape \[2, 16, 64\], got \(2, 16, 32\)"):
        one_mm(np.zeros((RANKS, T, 32), np.float16), wd, y)
    with pytest.raises(DispatchError, match="lives on worker 0 of another cluster, not on the RayCluster"):
        one_mm(x, local.alloc_stacked_tensor(pack(wg)), y, cluster=cluster)
    with pytest.raises(DispatchError, match="lives on worker 0 of another cluster, not on the cluster given"):
        one_mm(x, wd, y, cluster=local)
    assert (y == 7).all() and [s["programs"] for s in stats(cluster)] == runs
    cluster.free_stacked(wd)


def test_error_on_one_rank_rolls_every_rank_back(cluster):
    offsets = [16, 1000]  # rank 1 reads past the end of x: refused on the device

    @pl.orchestration
    def prog(x: pl.Tensor[[RANKS, 64, 32], pl.FP32], out: pl.InOut[pl.Tensor[[RANKS, 2, 16, 32], pl.FP32]]):
        for r in range(RANKS):
            window(x[r], offsets[r], out[r, 1], device=r)  # a view: restored by (handle, offset)

    x = np.arange(RANKS * 64 * 32, dtype=np.float32).reshape(RANKS, 64, 32)
    host = np.full((RANKS, 2, 16, 32), 5, np.float32)
    resident = cluster.alloc_stacked_tensor(host)
    pattern = (
        r"^rank 1: window \(.*test_ray_cluster.py:\d+\): .*"
        r"the window \[1000, 1016\) on axis 0 is out of bounds"
    )
    for out in (host, resident):
        with pytest.raises(DispatchError, match=pattern):
            prog(x, out, cluster=cluster)
    assert (host == 5).all()
    assert (cluster.copy_stacked_from(resident) == 5).all()  # rank 0 ran, its write was rolled back
    offsets[1] = 48
    prog(x, resident)
    want = np.stack([x[r, o : o + 16] for r, o in enumerate(offsets)])
    np.testing.assert_array_equal(cluster.copy_stacked_from(resident)[:, 1], want)
    np.testing.assert_array_equal(cluster.copy_stacked_from(resident)[:, 0], 5)
    cluster.free_stacked(resident)


def test_dead_actor_fails_the_call_and_leaves_every_output_untouched(ray_session):
    from nzjit.distributed import RayCluster

    x, wg, _ = data(4)
    with RayCluster(RANKS) as doomed:
        wd = doomed.alloc_stacked_tensor(pack(wg))
        y_host = np.full((RANKS, T, N), 3, np.float32)
        y_res = doomed.alloc_stacked_tensor(y_host)
        one_mm(x, wd, y_res)  # both ranks alive: it runs
        np.testing.assert_array_equal(doomed.copy_stacked_from(y_res), ref_mm(x, wg))
        before = doomed.workers[0].copy_from(y_res[0])
        kill_and_wait(ray, doomed.actors[1])  # dead before the next call: not a race with ray.kill
        for out in (y_host, y_res):
            with pytest.raises(
                DeviceError,
                match=r"^rank 1: the Ray actor of rank 1 is dead .*no output of this "
                r"call was changed.*make a new RayCluster",
            ):
                one_mm(x * 0, wd, out)
        assert (y_host == 3).all()
        np.testing.assert_array_equal(doomed.workers[0].copy_from(y_res[0]), before)  # rank 0: rolled back
        with pytest.raises(DeviceError, match="rank 1: the Ray actor of rank 1 is dead"):
            doomed.copy_stacked_from(wd)
        # ranks that talk (issue 28): rank 0 waits for rank 1's notify; it is stopped, not left hanging
        xs = np.arange(2 * SIZE, dtype=np.float32).reshape(2, 1, SIZE)
        ys = np.full_like(xs, -1)
        t0 = time.monotonic()
        with pytest.raises(
            DeviceError, match=r"^rank 1: the Ray actor of rank 1 is dead .*no output of this call"
        ):
            run_mesh_allreduce(xs, ys, cluster=doomed)
        assert time.monotonic() - t0 < 30.0  # far below the comm world's no-progress timeout
        assert (ys == -1).all()


def test_ray_cluster_refuses_no_ranks(ray_session):
    from nzjit.distributed import RayCluster

    with pytest.raises(DispatchError, match="RayCluster needs at least one rank, got 0"):
        RayCluster(0)


def test_views_of_remote_shards_are_offsets_in_the_actor(cluster):
    # issue 25 item 1 on a RayCluster: w[r, e] and pl.slice of a remote shard are (handle, offset)
    # views resolved in the actor, exact as on a local cluster
    rng = np.random.default_rng(5)
    x = rng.choice(np.array([-1, 0, 1], np.float16), size=(RANKS, 3, T, 64))
    w = rng.choice(np.array([-1, 0, 1], np.float16), size=(RANKS, 3, N, 64))

    @pl.orchestration
    def planes(
        x: pl.Tensor[[RANKS, 3, T, 64], pl.FP16],
        w: pl.Tensor[[RANKS, 3, N, 64], pl.FP16, pl.NZ],
        y: pl.InOut[pl.Tensor[[RANKS, 3, T, N], pl.FP32]],
    ):
        for r in range(RANKS):
            mm(x[r, 2], w[r, 2], y[r, 0], device=r)
            mm(x[r][1], pl.slice(w[r], [1, N, 64], [1, 0, 0])[0], y[r][1], device=r)

    wd = cluster.alloc_stacked_tensor(pack(w))
    yd = cluster.alloc_stacked_tensor(np.full((RANKS, 3, T, N), 4, np.float32))
    planes(x, wd, yd)
    got = cluster.copy_stacked_from(yd)
    full = np.einsum("rptk,rpnk->rptn", x.astype(np.float32), w.astype(np.float32))
    np.testing.assert_array_equal(got[:, 0], full[:, 2])
    np.testing.assert_array_equal(got[:, 1], full[:, 1])
    np.testing.assert_array_equal(got[:, 2], 4)
    local = runtime.Cluster(RANKS)
    y_local = local.alloc_stacked_tensor(np.full((RANKS, 3, T, N), 4, np.float32))
    planes(x, local.alloc_stacked_tensor(pack(w)), y_local)
    np.testing.assert_array_equal(local.copy_stacked_from(y_local), got)
    for t in (wd, yd):
        cluster.free_stacked(t)


def test_a_rank_is_a_worker_seen_from_the_driver(cluster):
    w1 = cluster.workers[1]
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = w1.alloc_tensor(a.shape, a.dtype, init=a)
    assert t.worker is w1 and t.shape == (3, 4) and not t.freed
    np.testing.assert_array_equal(w1.copy_from(t), a)
    w1.write_tensor(t, a * 2)
    np.testing.assert_array_equal(w1.copy_from(t), a * 2)
    z = w1.alloc_tensor((2, 2), np.int32)  # fresh memory, placed with the next message to the actor
    # issue 24 item 7: fresh device memory holds the poison pattern, on a remote rank as on a local one
    np.testing.assert_array_equal(w1.copy_from(z), runtime.memory.poison_array((2, 2), np.int32))
    with pytest.raises(DispatchError, match="dtype float64 does not match float32"):
        w1.write_tensor(t, a.astype(np.float64))  # refused by the actor's worker, raised here as itself
    with pytest.raises(DispatchError, match="lives on worker 1, not on rank 0 of this RayCluster"):
        cluster.workers[0].copy_from(t)
    for u in (t, z):
        w1.free_tensor(u)
    assert t.freed
    with pytest.raises(DispatchError, match=r"was freed \(use after free\)"):
        w1.copy_from(t)


def test_a_dead_actor_is_named_whichever_reply_arrives_first():
    # the flake of the dead-actor test: rank 0's reply (its wait stopped: "rank 1 is lost: ...")
    # may arrive before rank 1's own; the program's error is the dead actor's either way
    from nzjit.distributed_ray.program import _first_error
    from nzjit.distributed_ray.proxy import actor_died
    from runtime.comm import CommHangError

    dead = actor_died(1, RuntimeError("killed"))
    peer = DeviceError("rank 0: mesh_allreduce: rank 1 is lost: " + str(dead))
    for errors in ({0: peer, 1: dead}, {1: dead, 0: peer}, {0: CommHangError("hang"), 1: dead}):
        assert _first_error(errors, communicating=True) is dead
    assert _first_error({0: peer, 1: dead}, communicating=False) is peer  # independent ranks: the lowest
