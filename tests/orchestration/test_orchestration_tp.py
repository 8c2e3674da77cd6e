"""@pl.orchestration: tensor-parallel grouped matmul over 4 ranks with stacked NZ weights (issue 7)."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from orch_kernels import DK, DN, DT, RANKS, E, K, N, T, data, gmm, gmm_dyn, pack, tp

import runtime
from nzjit import pl
from nzjit.backend import call as call_mod
from nzjit.backend import launch
from nzjit.backend.options import Options, using


@pytest.fixture(scope="module")
def tp_data():
    return data(0)


def _uploads(cluster: runtime.Cluster) -> list[tuple[int, int]]:
    return [(w.gm.uploads, w.gm.upload_bytes) for w in cluster.workers]


def test_tp_stacked_nz_weight_matches_numpy(tp_data):
    # NZ-29: a rank-4 [RANKS, E, N, K] NZ argument is sliced per rank, w[r] is rank r's shard.
    # NZ-32: each shard arrives logical [E, N, K] and the kernel entry views it blocked.
    x, w, ref = tp_data
    cluster = runtime.Cluster(RANKS)
    ws = cluster.alloc_stacked_tensor(pack(w))
    out = tp(x, ws)  # Out omitted: allocated on the host and returned
    assert out.shape == (RANKS, E, T, N) and out.dtype == np.int32
    np.testing.assert_array_equal(out, ref)


def test_tp_host_arrays_on_default_cluster(tp_data):
    # NZ-29: a numpy [RANKS, ...] argument is split per rank and uploaded to that rank's worker
    x, w, ref = tp_data
    out = np.full(ref.shape, 7, np.int32)
    assert tp(x, pack(w), out) is out  # Out given: written in place and returned
    np.testing.assert_array_equal(out, ref)


def test_direct_calls_per_rank_give_the_same_numbers(tp_data):
    x, w, ref = tp_data
    for r in range(RANKS):
        np.testing.assert_array_equal(gmm(x[r], pack(w[r])), ref[r])  # plane-by-plane packing
    out = np.zeros((E, T, N), np.int32)
    assert gmm(x[1], pack(w)[1], out) is out
    np.testing.assert_array_equal(out, ref[1])


def test_ranks_run_in_parallel_each_on_its_own_worker(tp_data, monkeypatch):
    # ranks as threads (rank_batch=False; by default ranks that run the same program run as one
    # launch, test_rank_batch.py)
    x, w, ref = tp_data
    cluster = runtime.Cluster(RANKS)
    seen: dict[int, tuple[int, runtime.Worker]] = {}
    barrier = threading.Barrier(RANKS, timeout=30)
    real = call_mod.execute

    def spy(plan, worker, vals):
        seen[worker.device_id] = (threading.get_ident(), worker)
        barrier.wait()  # all four ranks must be running at once
        return real(plan, worker, vals)

    monkeypatch.setattr(call_mod, "execute", spy)
    with using(Options(rank_batch=False)):
        out = tp(x, pack(w), cluster=cluster)
    np.testing.assert_array_equal(out, ref)
    assert sorted(seen) == list(range(RANKS))
    assert [seen[r][1] for r in range(RANKS)] == cluster.workers
    assert len({tid for tid, _ in seen.values()}) == RANKS


def test_resident_weights_are_not_uploaded_per_call(tp_data):
    x, w, ref = tp_data
    cluster = runtime.Cluster(RANKS)
    ws = cluster.alloc_stacked_tensor(pack(w))
    tp(x, ws)  # first call (compiles)
    before = _uploads(cluster)
    out = tp(x, ws)  # Out omitted: nothing to upload for it either
    np.testing.assert_array_equal(out, ref)
    after = _uploads(cluster)
    for (n0, b0), (n1, b1) in zip(before, after):
        assert (n1 - n0, b1 - b0) == (1, x[0].nbytes)  # only this rank's x plane, never the weight


def test_all_resident_second_call_uploads_nothing(tp_data):
    x, w, ref = tp_data
    cluster = runtime.Cluster(RANKS)
    xs, ws = cluster.alloc_stacked_tensor(x), cluster.alloc_stacked_tensor(pack(w))
    outs = cluster.alloc_stacked_tensor(np.zeros(ref.shape, np.int32))
    assert tp(xs, ws, outs) is outs
    before = _uploads(cluster)
    live = [wk.gm.live_bytes for wk in cluster.workers]
    tp(xs, ws, outs)
    assert _uploads(cluster) == before
    assert [wk.gm.live_bytes for wk in cluster.workers] == live  # temporaries freed
    np.testing.assert_array_equal(cluster.copy_stacked_from(outs), ref)


def test_device_tensor_arguments_stay_resident(tp_data):
    x, w, ref = tp_data
    worker = runtime.Worker(0)
    wt = worker.alloc_tensor((E, N, K), np.int8, init=pack(w[0]))
    out_t = worker.alloc_tensor((E, T, N), np.int32)
    gmm(x[0], wt, out_t)
    n = worker.gm.uploads
    assert gmm(x[0], wt, out_t) is out_t  # a direct call runs where its DeviceTensors live
    assert worker.gm.uploads == n + 1  # x only
    np.testing.assert_array_equal(worker.copy_from(out_t), ref[0])


def test_cluster_keyword_selects_the_workers(tp_data):
    x, w, ref = tp_data
    cluster = runtime.Cluster(RANKS)
    before = _uploads(cluster)
    np.testing.assert_array_equal(tp(x, pack(w), cluster=cluster), ref)
    assert all(a[0] > b[0] for a, b in zip(_uploads(cluster), before))


def test_nz32_entry_reshape_is_metadata_only(tp_data):
    # NZ-32: the logical [E, N, K] shard is viewed as the blocked rank-5 shape, same address
    _, w, _ = tp_data
    worker = runtime.Worker(0)
    t = worker.alloc_tensor((E, N, K), np.int8, init=pack(w[0]))
    low = gmm.lower()
    v = launch.tensor_value(low.final.params[1].type, t, {}, blocked=True)
    assert v.shape == (E, K // 32, N // 16, 16, 32) == runtime.nz_blocked_shape((E, N, K), np.int8)
    assert v.addr == t.address and v.strides == runtime.isa.row_major_strides(v.shape)


def test_dynamic_batch_nz_parameter_takes_the_shard(tp_data):
    # NZ-29: a [B, R, C] NZ parameter reads B from a rank-3 argument (here each rank's shard)
    rng = np.random.default_rng(1)
    x = rng.integers(-4, 5, (RANKS, 3, DT, DK)).astype(np.int8)
    w = rng.integers(-4, 5, (RANKS, 3, DN, DK)).astype(np.int8)
    ref = np.einsum("rbtk,rbnk->rbtn", x.astype(np.int32), w.astype(np.int32))

    @pl.orchestration
    def dyn(
        x: pl.Tensor[[RANKS, 3, DT, DK], pl.INT8],
        w: pl.Tensor[[RANKS, 3, DN, DK], pl.INT8, pl.NZ],
        out: pl.Out[pl.Tensor[[RANKS, 3, DT, DN], pl.INT32]],
    ):
        for r in range(RANKS):
            gmm_dyn(x[r], w[r], 3, out[r], device=r)

    cluster = runtime.Cluster(RANKS)
    np.testing.assert_array_equal(dyn(x, cluster.alloc_stacked_tensor(pack(w))), ref)


def test_intermediates_chain_kernels_on_a_rank(tp_data):
    # an Out left out of a call inside the body is a device intermediate of that rank
    x, w, ref = tp_data

    @pl.kernel
    def twice(a: pl.Tensor[[E, T, N], pl.INT32], out: pl.Out[pl.Tensor[[E, T, N], pl.INT32]]):
        for e in pl.spmd(E):
            t = pl.load(a, [e, 0, 0], [1, T, N])
            pl.store(pl.add(t, t), [e, 0, 0], out)

    @pl.orchestration
    def chain(
        x: pl.Tensor[[RANKS, E, T, K], pl.INT8],
        w: pl.Tensor[[RANKS, E, N, K], pl.INT8, pl.NZ],
        out: pl.Out[pl.Tensor[[RANKS, E, T, N], pl.INT32]],
    ):
        for r in range(RANKS):
            y = gmm(x[r], w[r], device=r)
            assert y.shape == (E, T, N)
            twice(y, out[r], device=r)

    cluster = runtime.Cluster(RANKS)
    ws = cluster.alloc_stacked_tensor(pack(w))
    live = [wk.gm.live_bytes for wk in cluster.workers]
    np.testing.assert_array_equal(chain(x, ws), 2 * ref)
    assert [wk.gm.live_bytes for wk in cluster.workers] == live  # intermediates freed


def test_lowered_run_after_a_pass_still_works(tp_data):
    x, w, ref = tp_data
    low = gmm.lower()
    for stage in ("trace", "BlockNzTensorViews", None):
        np.testing.assert_array_equal(low.run(x[2], pack(w[2]), after=stage), ref[2])


def test_ranks_share_the_helper_thread_and_stay_exact(tp_data, monkeypatch):
    # Ranks run in parallel threads; with every batched mad shared (lane_cube.OVERLAP_MACS = 0)
    # each rank's mads share their chunks with the helpers when the ranks leave a thread idle
    # (5 threads, 4 ranks: issue 25 item 4): the tasks of four ranks queue on them, and every
    # rank's int32 sums are still exact.
    from nzjit.backend import lane_cube

    x, w, ref = tp_data
    monkeypatch.setattr(runtime.threads, "THREADS", RANKS + 1)
    monkeypatch.setattr(lane_cube, "OVERLAP_MACS", 0)
    monkeypatch.setattr(lane_cube, "MAD_CHUNK", 2)
    helped = []
    real = lane_cube._chunks

    def chunks(L, threaded):
        helped.append(threaded)
        return real(L, threaded)

    monkeypatch.setattr(lane_cube, "_chunks", chunks)
    cluster = runtime.Cluster(RANKS)
    out = tp(x, cluster.alloc_stacked_tensor(pack(w)))
    np.testing.assert_array_equal(out, ref)
    assert len(helped) >= RANKS and any(helped)  # every rank ran batched mads, with the helper
    # as many ranks as threads: no helper at all (it would only compete with a rank for a core)
    monkeypatch.setattr(runtime.threads, "THREADS", RANKS)
    helped.clear()
    np.testing.assert_array_equal(tp(x, cluster.alloc_stacked_tensor(pack(w))), ref)
    assert len(helped) >= RANKS and not any(helped)
