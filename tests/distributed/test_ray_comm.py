"""Ranks that talk, on RayCluster (issue 28 item 2 / 6): each rank a Ray actor owning its windows,
the comm world hosted by the cluster's hub actor. Each test compares with numpy and with the local
runtime.Cluster: the same bytes, the same hang and race reports, the same refusals."""

from __future__ import annotations

import importlib.util
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
from pld_kernels import SIZE, ints, lonely_wait, racy, run_mesh_allreduce
from ray_kernels import kill_and_wait

import runtime
from nzjit import pl, pld
from runtime.comm import CommHangError, CommRaceError, UnwrittenWindowReadWarning

ray = pytest.importorskip("ray")
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def example(name: str):
    spec = importlib.util.spec_from_file_location(f"ray_comm_{name}", EXAMPLES / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def cluster4(ray_session):
    from nzjit.distributed import RayCluster

    c = RayCluster(4)
    yield c
    c.shutdown()


def test_allreduce_notify_wait_example_is_exact_and_diagnosed_as_locally(cluster, line_of):
    ex = example("allreduce_notify_wait")
    ok, hang, race = ex.demo(cluster)
    assert ok
    assert hang == ex.demo(runtime.Cluster(ex.RANKS))[1]  # the very same report line
    store = f"{ex.__file__}:{line_of(ex.forgot_wait, 'pl.store(local')}"
    load = f"{ex.__file__}:{line_of(ex.forgot_wait, '# no wait')}"
    # both ranks store, then read the peer: which pair is caught first depends on timing, the words do not
    assert race in {
        f"communication race on window 'data_buf' of rank {a}, byte 0: rank {a}'s store into its own "
        f"window at {store} and rank {1 - a}'s remote_load at {load} are not ordered; no notify/wait "
        "chain (or collective) orders the two"
        for a in (0, 1)
    }


def test_tp_moe_allreduce_example_is_exact(cluster, capsys):
    assert example("tp_moe_allreduce").run(cluster)
    assert "all-reduced outputs == numpy    : True on every rank" in capsys.readouterr().out


def test_ep_dispatch_all_to_all_example_is_exact(cluster4, capsys):
    assert example("ep_dispatch_all_to_all").run(cluster4)
    assert "dispatch -> expert -> combine == numpy: True" in capsys.readouterr().out


def test_mesh_allreduce_reads_only_staged_bytes_on_four_actors(cluster4):
    x = ints((4, 1, SIZE), seed=4)
    before = [s["tensors"] for s in cluster4.rank_stats()]
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnwrittenWindowReadWarning)  # every byte read was staged
        y = run_mesh_allreduce(x, cluster=cluster4)
    np.testing.assert_array_equal(y, np.broadcast_to(x.sum(axis=0), x.shape))
    assert [s["tensors"] for s in cluster4.rank_stats()] == before  # each actor freed its windows


@pl.orchestration
def all_wait(dummy: pl.Tensor[[1, 8], pl.INT32], out: pl.Out[pl.Tensor[[2, 1, 8], pl.INT32]]):
    n = pld.world_size()
    sig = pld.alloc_window_buffer([n, 1], dtype=pl.INT32)
    for r in range(n):
        lonely_wait(pld.window(sig, [n, 1], dtype=pl.INT32), device=r)
        copy_row(dummy, out[r], device=r)


@pl.kernel
def copy_row(x: pl.Tensor[[1, 8], pl.INT32], y: pl.Out[pl.Tensor[[1, 8], pl.INT32]]):
    pl.store(pl.load(x, [0, 0], [1, 8]), [0, 0], y)


def test_a_hang_is_the_local_report_within_bounded_time_and_writes_no_output(cluster, line_of):
    import pld_kernels as K

    with pytest.raises(CommHangError) as local:
        all_wait(np.zeros((1, 8), np.int32), cluster=runtime.Cluster(2))
    out = np.full((2, 1, 8), -1, np.int32)
    resident = cluster.alloc_stacked_tensor(np.full((2, 1, 8), 7, np.int32))
    for target in (out, resident):
        t0 = time.monotonic()
        with pytest.raises(CommHangError) as ei:
            all_wait(np.ones((1, 8), np.int32), target, cluster=cluster)
        assert time.monotonic() - t0 < 10.0  # every rank blocked: found at once, not after the timeout
        assert str(ei.value) == str(local.value)
    site = f"{K.__file__}:{line_of(K.lonely_wait, 'HANG-SITE')}"
    assert (
        f"  rank 1: waits at {site} for signal[1, 0] of window 'sig' to be == 1 (WaitCmp.Eq); "
        "it holds 0; no rank notified it\n"
    ) in str(local.value)
    assert (out == -1).all()  # outputs commit only when every rank succeeded
    np.testing.assert_array_equal(cluster.copy_stacked_from(resident), 7)
    cluster.free_stacked(resident)


def test_remote_load_before_the_peer_staged_is_the_local_race_report(cluster, line_of):
    import pld_kernels as K

    stage_site = f"{K.__file__}:{line_of(K.stage, 'STAGE-SITE')}"
    read_site = f"{K.__file__}:{line_of(K.read_peer0, 'RACE-SITE')}"
    with warnings.catch_warnings(), pytest.raises(CommRaceError) as ei:
        warnings.simplefilter("ignore", UnwrittenWindowReadWarning)  # when the read ran first
        racy(ints((1, SIZE)), cluster=cluster)
    assert str(ei.value).split(": ", 2)[2] == (
        f"communication race on window 'buf' of rank 0, byte 0: rank 0's store into its own window at "
        f"{stage_site} and rank 1's remote_load at {read_site} are not ordered; no notify/wait chain (or "
        "collective) orders the two\nhelp: make rank 0 notify after its write and rank 1 wait for that notify "
        "before its read (or put a pld.tensor.barrier between them)"
    )


@pl.kernel
def signal_only(
    data: pl.InOut[pld.DistributedTensor[[1, SIZE], pl.FP32]],
    signal: pl.InOut[pld.DistributedTensor[[2, 1], pl.INT32]],
):
    """Rank 0 tells rank 1 its data is ready, but never stores it."""
    pld.system.notify(signal, 1, [0, 0], 1, op=pld.NotifyOp.Set)


@pl.kernel
def wait_then_read(
    data: pl.InOut[pld.DistributedTensor[[1, SIZE], pl.FP32]],
    signal: pl.InOut[pld.DistributedTensor[[2, 1], pl.INT32]],
    y: pl.Out[pl.Tensor[[1, SIZE], pl.FP32]],
):
    pld.system.wait(signal, [0, 0], 1, cmp=pld.WaitCmp.Ge)
    pl.store(pld.tile.remote_load(data, 0, [0, 0], [1, SIZE]), [0, 0], y)  # UNWRITTEN-SITE


@pl.orchestration
def read_unstaged(y: pl.Out[pl.Tensor[[1, SIZE], pl.FP32]]):
    data = pld.alloc_window_buffer([1, SIZE], dtype=pl.FP32)
    sig = pld.alloc_window_buffer([2, 1], dtype=pl.INT32)
    signal_only(pld.window(data, [1, SIZE], dtype=pl.FP32), pld.window(sig, [2, 1], dtype=pl.INT32), device=0)
    wait_then_read(
        pld.window(data, [1, SIZE], dtype=pl.FP32), pld.window(sig, [2, 1], dtype=pl.INT32), y, device=1
    )


def test_an_unwritten_window_read_warns_on_the_driver_as_locally(cluster, line_of):
    said = {}
    for where in (runtime.Cluster(2), cluster):
        with warnings.catch_warnings(record=True) as got:
            warnings.simplefilter("always")
            y = read_unstaged(cluster=where)
        np.testing.assert_array_equal(y, 0)  # the allocation's zeros
        said[type(where).__name__] = [str(w.message) for w in got if w.category is UnwrittenWindowReadWarning]
    site = f"{__file__}:{line_of(wait_then_read, 'UNWRITTEN-SITE')}"
    assert (
        said["RayCluster"]
        == said["Cluster"]
        == [
            f"{site}: rank 1 remote_loads {4 * SIZE} bytes of window 'data' of rank 0 that no rank has written since "
            "allocation (first: element (0, 0)); it reads the allocation's zeros - check that its offsets and shape "
            "match what the peer stored"
        ]
    )


ROW, ALL = [1, SIZE], [2, SIZE]
FORMS = {
    "allgather": (ROW, ALL, ALL),
    "reduce_scatter": (ALL, ROW, ALL),
    "all_to_all": (ALL, ALL, ALL),
    "shift_by_store": (ROW, ROW, ROW),
    "atomic_sum": (ROW, ROW, ROW),
    "broadcast": (ROW, ROW, ROW),
}


@pytest.mark.parametrize("name", sorted(FORMS))
def test_the_collectives_and_rma_forms_give_the_local_bytes(cluster, name):
    """Each form's numbers against numpy are pinned on the local Cluster (test_pld_collectives.py);
    on actors the bytes are the same, and no byte read was unwritten."""
    from pld_kernels import collective_kernels, one_out

    x_row, y_row, data = FORMS[name]
    prog = one_out(collective_kernels(2)[name], 2, x_row, y_row, data)
    x = ints((2, *x_row), seed=len(name))
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnwrittenWindowReadWarning)
        np.testing.assert_array_equal(prog(x, cluster=cluster), prog(x, cluster=runtime.Cluster(2)))


def test_put_then_get_gives_the_local_bytes(cluster):
    from pld_kernels import collective_kernels, two_outs

    prog = two_outs(collective_kernels(2)["put_get"], 2)
    x = ints((2, 1, SIZE), seed=9)
    for got, want in zip(prog(x, cluster=cluster), prog(x, cluster=runtime.Cluster(2))):
        np.testing.assert_array_equal(got, want)


def test_a_dead_hub_is_replaced_by_the_next_program(cluster):
    """The hub keeps nothing from one program to the next: a new one serves the next call."""
    x = ints((2, 1, SIZE), seed=5)
    run_mesh_allreduce(x, cluster=cluster)
    kill_and_wait(ray, cluster.comm_hub(), probe=lambda hub: hub.abort.remote(-1, ""))
    np.testing.assert_array_equal(run_mesh_allreduce(x, cluster=cluster), np.broadcast_to(x.sum(0), x.shape))
