"""Every argument of every recorded call is checked before anything runs; a refused or failed
program leaves every output byte-identical (api.md "Calling a kernel", NZ-29)."""

from __future__ import annotations

import numpy as np
import pytest
from orch_kernels import DK, DN, DT, RANKS, E, K, N, T, data, gmm, gmm_dyn, pack, tp, window

import nzjit
import runtime
from nzjit import pl
from runtime import DispatchError


@pytest.fixture(scope="module")
def tp_data():
    return data(0)


class Outputs:
    """A host output and a resident stacked output, both prefilled, to prove they stay untouched."""

    def __init__(self, cluster: runtime.Cluster, shape: tuple[int, ...], dtype=np.int32) -> None:
        self.cluster = cluster
        self.fill = np.arange(np.prod(shape)).reshape(shape).astype(dtype)
        self.host = self.fill.copy()
        self.resident = cluster.alloc_stacked_tensor(self.fill)

    def untouched(self) -> bool:
        return (
            self.host.tobytes() == self.fill.tobytes()
            and self.cluster.copy_stacked_from(self.resident).tobytes() == self.fill.tobytes()
        )


def _uploads(cluster: runtime.Cluster) -> list[int]:
    return [w.gm.uploads for w in cluster.workers]


# --------------------------------------------------------------------- NZ-29 dynamic-batch NZ parameter
@pytest.mark.parametrize("wshape", [(DN, DK), (1, 2, DN, DK)], ids=["rank2", "rank4"])
def test_dynamic_batch_nz_refuses_rank2_and_rank4_direct(wshape):
    # NZ-29: rank-2 and rank-4 arguments are refused even though the blocked shape would match
    assert (
        runtime.nz_blocked_shape(wshape, np.int8) == runtime.nz_blocked_shape((2, DN, DK), np.int8)
        or len(wshape) == 2
    )
    x = np.zeros((2, DT, DK), np.int8)
    out = np.full((2, DT, DN), 5, np.int32)
    with pytest.raises(DispatchError) as e:
        gmm_dyn(x, np.zeros(wshape, np.int8), 2, out)
    assert str(e.value) == (
        f"parameter 'w' expects rank 3 [B, {DN}, {DK}] (NZ-29: a dynamic-batch NZ "
        f"parameter takes a rank-3 argument), got rank {len(wshape)} {wshape}"
    )
    assert (out == 5).all()


@pytest.mark.parametrize("rank", [2, 4])
def test_dynamic_batch_nz_refuses_rank2_and_rank4_in_orchestration(rank):
    # NZ-29: refused before dispatch, the message names the rank, the kernel line, the parameter
    # and the shape it got; rank 0's call was fine and still did not run
    cluster = runtime.Cluster(RANKS)
    wt = cluster.alloc_stacked_tensor(runtime.pack_nz(np.zeros((RANKS, 2, DN, DK), np.int8)))
    bad = cluster.workers[3].alloc_tensor((DN, DK) if rank == 2 else (1, 2, DN, DK), np.int8, layout="NZ")
    outs = Outputs(cluster, (RANKS, 2, DT, DN))

    @pl.orchestration
    def dyn(
        x: pl.Tensor[[RANKS, 2, DT, DK], pl.INT8],
        w: pl.Tensor[[RANKS, 2, DN, DK], pl.INT8, pl.NZ],
        out: pl.Out[pl.Tensor[[RANKS, 2, DT, DN], pl.INT32]],
    ):
        for r in range(RANKS):
            gmm_dyn(x[r], w[r] if r < 3 else bad, 2, out[r], device=r)

    x = np.zeros((RANKS, 2, DT, DK), np.int8)
    before = _uploads(cluster)
    for out in (outs.host, outs.resident):
        with pytest.raises(DispatchError) as e:
            dyn(x, wt, out, cluster=cluster)
        msg = str(e.value)
        assert msg.startswith("rank 3: gmm_dyn (") and "test_orchestration_refusals.py:" in msg
        assert f"parameter 'w' expects rank 3 [B, {DN}, {DK}] (NZ-29" in msg
        assert msg.endswith(f"got rank {rank} {bad.shape}")
    assert _uploads(cluster) == before  # nothing was dispatched: x planes were not even uploaded
    assert outs.untouched()


def test_orchestration_entry_checks_its_own_annotations(tp_data):
    x, w, ref = tp_data
    out = np.full(ref.shape, 3, np.int32)
    with pytest.raises(
        DispatchError,
        match=r"parameter 'w' expects rank 4 \[4, 2, 256, 512\] \(NZ-29: an NZ "
        r"argument has the parameter's logical rank\), got rank 5",
    ):
        tp(x, runtime.pack_nz(w).reshape(runtime.nz_blocked_shape(w.shape, np.int8)), out)  # pre-blocked
    with pytest.raises(
        DispatchError, match=r"parameter 'x' expects shape \[4, 2, 32, 512\], got \(3, 2, 32, 512\)"
    ):
        tp(x[:3], pack(w), out)
    with pytest.raises(DispatchError, match="parameter 'w' expects dtype int8, got uint8"):
        tp(x, pack(w).view(np.uint8), out)
    assert (out == 3).all()


# ---------------------------------------------------------------------------- shape, dtype, liveness
def _bad_call_orchestration(pick):
    """Rank 2 gets `pick(w)` as its weight, the other ranks their own shard."""

    @pl.orchestration
    def prog(
        x: pl.Tensor[[RANKS, E, T, K], pl.INT8],
        w: pl.Tensor[[RANKS, E, N, K], pl.INT8, pl.NZ],
        out: pl.Out[pl.Tensor[[RANKS, E, T, N], pl.INT32]],
    ):
        for r in range(RANKS):
            gmm(x[r], pick(w) if r == 2 else w[r], out[r], device=r)

    return prog


@pytest.mark.parametrize(
    "case,match",
    [
        (
            "shape",
            r"^rank 2: gmm \(.*\): parameter 'w' expects shape \[2, 256, 512\], got \(2, 128, 512\) "
            r"\(axis 1: 128 != 256\)$",
        ),
        ("dtype", r"^rank 2: gmm \(.*\): parameter 'w' expects dtype int8, got int16$"),
        ("freed", r"^rank 2: gmm \(.*\): parameter 'w' got a freed DeviceTensor .* \(use after free\)$"),
        (
            "wrong_shard",
            r"^rank 2: gmm \(.*\): parameter 'w' got w\[1\], a DeviceTensor of worker 1; the call "
            r"runs on worker 2 \(device=2\): pass rank 2's shard or copy it over$",
        ),
        (
            "wrong_worker",
            r"^rank 2: gmm \(.*\): parameter 'w' got a DeviceTensor of worker 0; the call runs on "
            r"worker 2 \(device=2\)",
        ),
        (
            "other_cluster",
            r"^rank 2: gmm \(.*\): parameter 'w' got a DeviceTensor of worker 2 of another cluster; ",
        ),
        (
            "stacked_whole",
            r"^rank 2: gmm \(.*\): parameter 'w' got the whole StackedDeviceTensor w, which spans "
            r"ranks; pass one rank's shard, w\[r\]$",
        ),
    ],
)
def test_refused_call_leaves_outputs_untouched(tp_data, case, match):
    x, w, _ = tp_data
    cluster = runtime.Cluster(RANKS)
    ws = cluster.alloc_stacked_tensor(pack(w))
    w2 = cluster.workers[2]
    bad = {
        "shape": lambda: w2.alloc_tensor((E, N // 2, K), np.int8),
        "dtype": lambda: w2.alloc_tensor((E, N, K), np.int16),
        "freed": lambda: _freed(w2.alloc_tensor((E, N, K), np.int8)),
        "wrong_shard": lambda: None,
        "wrong_worker": lambda: cluster.workers[0].alloc_tensor((E, N, K), np.int8),
        "other_cluster": lambda: runtime.Cluster(RANKS).alloc_stacked_tensor(pack(w))[2],
        "stacked_whole": lambda: None,
    }[case]()
    pick = {"wrong_shard": lambda h: h[1], "stacked_whole": lambda h: h}.get(case, lambda h: bad)
    prog = _bad_call_orchestration(pick)
    outs = Outputs(cluster, (RANKS, E, T, N))
    before = _uploads(cluster)
    for out in (outs.host, outs.resident):
        with pytest.raises(DispatchError, match=match):
            prog(x, ws, out)
    assert _uploads(cluster) == before
    assert outs.untouched()


def _freed(t):
    t.worker.free_tensor(t)
    return t


def test_freed_shard_refused_at_the_entry(tp_data):
    x, w, ref = tp_data
    cluster = runtime.Cluster(RANKS)
    ws = cluster.alloc_stacked_tensor(pack(w))
    out = np.full(ref.shape, 9, np.int32)
    cluster.workers[1].free_tensor(ws[1])
    with pytest.raises(DispatchError, match=r"^parameter 'w': shard 1 of StackedDeviceTensor.* was freed"):
        tp(x, ws, out)
    assert (out == 9).all()


def test_freed_device_tensor_refused_in_a_direct_call(tp_data):
    x, w, _ = tp_data
    worker = runtime.Worker(0)
    wt = _freed(worker.alloc_tensor((E, N, K), np.int8, init=pack(w[0])))
    out = np.full((E, T, N), 4, np.int32)
    with pytest.raises(DispatchError, match=r"^parameter 'w' got a freed DeviceTensor"):
        gmm(x[0], wt, out)
    assert (out == 4).all()


def test_stacked_tensor_whose_shard_shapes_disagree(tp_data):
    x, w, ref = tp_data
    cluster = runtime.Cluster(RANKS)
    shards = [wk.alloc_tensor((E, N, K), np.int8) for wk in cluster.workers]
    shards[3] = cluster.workers[3].alloc_tensor((E, N, K // 2), np.int8)
    with pytest.raises(DispatchError, match=r"shard 3 has shape \(2, 256, 256\), expected full_shape\[1:\]"):
        runtime.StackedDeviceTensor(shards, (RANKS, E, N, K), range(RANKS))
    # a stack whose shards were swapped after it was built is refused at the entry just the same
    ws = cluster.alloc_stacked_tensor(pack(w))
    ws.shards = (*ws.shards[:3], shards[3])
    out = np.full(ref.shape, 2, np.int32)
    with pytest.raises(
        DispatchError,
        match=r"^parameter 'w': shard 3 has shape \(2, 256, 256\), shard shapes "
        r"must all be full_shape\[1:\] = \(2, 256, 512\)$",
    ):
        tp(x, ws, out)
    assert (out == 2).all()


# ---------------------------------------------------------------------------- program-level refusals
def test_every_call_is_checked_before_any_rank_runs(tp_data, monkeypatch):
    x, w, _ = tp_data
    from nzjit.backend import call as call_mod

    ran = []
    monkeypatch.setattr(call_mod, "execute", lambda *a: ran.append(a))
    cluster = runtime.Cluster(RANKS)
    bad = cluster.workers[2].alloc_tensor((E, N, K), np.int16)
    prog = _bad_call_orchestration(lambda h: bad)
    with pytest.raises(DispatchError, match="^rank 2: "):
        prog(x, cluster.alloc_stacked_tensor(pack(w)))
    assert ran == []  # not even rank 0 or 1, whose calls come first and are fine


def test_two_ranks_writing_one_host_plane_refused(tp_data):
    x, w, ref = tp_data

    @pl.orchestration
    def clash(
        x: pl.Tensor[[RANKS, E, T, K], pl.INT8],
        w: pl.Tensor[[RANKS, E, N, K], pl.INT8, pl.NZ],
        out: pl.Out[pl.Tensor[[RANKS, E, T, N], pl.INT32]],
    ):
        for r in range(RANKS):
            gmm(x[r], w[r], out[min(r, 2)], device=r)

    out = np.full(ref.shape, 1, np.int32)
    with pytest.raises(
        DispatchError,
        match=r"^rank 3: gmm .*: parameter 'out': rank 2 writes out\[2\] and rank 3 "
        r"writes out\[2\] of the same host array",
    ):
        clash(x, pack(w), out)
    assert (out == 1).all()


def test_device_outside_the_cluster_refused(tp_data):
    x, w, _ = tp_data
    small = runtime.Cluster(2)
    with pytest.raises(DispatchError, match=r"device=2 is not a rank of the given cluster \(ranks 0\.\.1\)"):
        tp(x, pack(w), cluster=small)
    ws = small.alloc_stacked_tensor(pack(w)[:2])

    @pl.orchestration
    def wide(
        x: pl.Tensor[[RANKS, E, T, K], pl.INT8],
        w: pl.Tensor[[2, E, N, K], pl.INT8, pl.NZ],
        out: pl.Out[pl.Tensor[[RANKS, E, T, N], pl.INT32]],
    ):
        for r in range(RANKS):
            gmm(x[r], w[r % 2], out[r], device=r)

    with pytest.raises(
        DispatchError,
        match=r"device=2 is not a rank of the cluster the StackedDeviceTensor "
        r"arguments live on \(ranks \[0, 1\]\)",
    ):
        wide(x, ws)
    with pytest.raises(DispatchError, match="lives on worker 0 of another cluster, not on the cluster given"):
        wide(x, ws, cluster=runtime.Cluster(RANKS))


def test_stacked_argument_refused_in_a_direct_call(tp_data):
    x, w, _ = tp_data
    ws = runtime.Cluster(RANKS).alloc_stacked_tensor(pack(w))
    with pytest.raises(DispatchError, match=r"parameter 'w' got a StackedDeviceTensor, which spans ranks"):
        gmm(x[0], ws)


def test_body_misuse_is_a_compile_error(tp_data):
    x, w, _ = tp_data

    def orch(body):
        @pl.orchestration
        def o(
            x: pl.Tensor[[RANKS, E, T, K], pl.INT8],
            w: pl.Tensor[[RANKS, E, N, K], pl.INT8, pl.NZ],
            out: pl.Out[pl.Tensor[[RANKS, E, T, N], pl.INT32]],
        ):
            return body(x, w, out)

        return o

    # issue 25: ints and slices of leading axes are views now (tests/orchestration/test_orchestration_views.py);
    # what is still refused:
    with pytest.raises(nzjit.CompileError, match=r"x\[0:4:2\]: a step of 2 on axis 0 is not a dense window"):
        orch(lambda x, w, out: gmm(x[0:4:2], w[0], out[0], device=0))(x, pack(w))
    with pytest.raises(
        nzjit.CompileError, match=r"x\[0\]\[5\] is out of range for the leading axis 2 of x\[0\]"
    ):
        orch(lambda x, w, out: x[0][5])(x, pack(w))
    with pytest.raises(nzjit.CompileError, match=r"indexed by ints and slices of its axes, got str 'a'"):
        orch(lambda x, w, out: x[0, "a"])(x, pack(w))
    with pytest.raises(nzjit.CompileError, match=r"x\[4\] is out of range"):
        orch(lambda x, w, out: x[4])(x, pack(w))
    with pytest.raises(nzjit.CompileError, match="its data exists only once the recorded kernels run"):
        orch(lambda x, w, out: np.asarray(x).sum())(x, pack(w))
    with pytest.raises(nzjit.CompileError, match="returns its results through its Out parameters"):
        orch(lambda x, w, out: out)(x, pack(w))
    with pytest.raises(nzjit.CompileError, match="device= must be a non-negative int rank"):
        orch(lambda x, w, out: gmm(x[0], w[0], out[0], device=-1))(x, pack(w))


# ---------------------------------------------------------------------------- errors while running
def test_error_on_one_rank_names_the_rank_and_writes_nothing():
    offsets = [0, 16, 1000, 48]  # rank 2 reads past the end of x: refused when its window is made

    @pl.orchestration
    def prog(x: pl.Tensor[[RANKS, 64, 32], pl.FP32], out: pl.InOut[pl.Tensor[[RANKS, 16, 32], pl.FP32]]):
        for r in range(RANKS):
            window(x[r], offsets[r], out[r], device=r)

    x = np.arange(RANKS * 64 * 32, dtype=np.float32).reshape(RANKS, 64, 32)
    cluster = runtime.Cluster(RANKS)
    outs = Outputs(cluster, (RANKS, 16, 32), np.float32)
    for out in (outs.host, outs.resident):
        with pytest.raises(
            DispatchError,
            match=r"^rank 2: window \(.*test_orchestration_refusals.py:\d+\): .*"
            r"the window \[1000, 1016\) on axis 0 is out of bounds",
        ):
            prog(x, out, cluster=cluster)
    assert outs.untouched()  # ranks 0, 1 and 3 ran, but their writes were not kept
    offsets[2] = 32
    good = prog(x, outs.resident, cluster=cluster)
    want = np.stack([x[r, o : o + 16] for r, o in enumerate(offsets)])
    np.testing.assert_array_equal(cluster.copy_stacked_from(good), want)


def test_direct_call_errors_have_no_rank_prefix(tp_data):
    x, w, _ = tp_data
    with pytest.raises(
        DispatchError,
        match=r"^gmm takes 3 arguments \(x, w, out\), or 2 with the Out "
        r"parameters omitted; got 1$",
    ):
        gmm(x[0])
    with pytest.raises(DispatchError, match=r"^/.*orch_kernels.py:\d+: the window \[1000, 1016\) on axis 0"):
        window(np.zeros((64, 32), np.float32), 1000, np.zeros((16, 32), np.float32))
