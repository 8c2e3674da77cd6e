"""pld collectives and RMA forms end to end, exact against numpy (issue 28; PyPTO 01-collectives,
02-primitives semantics)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from pld_kernels import SIZE, collective_kernels, ints, one_out, two_outs

import runtime
from nzjit import pld
from runtime.comm import UnwrittenWindowReadWarning

N = 3


@pytest.fixture(autouse=True)
def _no_unwritten_reads():
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnwrittenWindowReadWarning)
        yield


@pytest.mark.parametrize(
    "op,ref",
    [
        (pld.ReduceOp.Sum, np.sum),
        (pld.ReduceOp.Max, np.max),
        (pld.ReduceOp.Min, np.min),
        (pld.ReduceOp.Prod, np.prod),
    ],
)
def test_allreduce_every_op(op, ref) -> None:
    k = collective_kernels(N, op)["allreduce"]
    x = ints((N, N, SIZE), seed=1, lo=-3, hi=4)
    y = one_out(k, N, [N, SIZE], [N, SIZE], [N, SIZE])(x, cluster=runtime.Cluster(N))
    np.testing.assert_array_equal(y, np.broadcast_to(ref(x, axis=0), x.shape))


def test_allgather_row_src_is_rank_src_chunk() -> None:
    k = collective_kernels(N)["allgather"]
    x = ints((N, 1, SIZE), seed=2)
    y = one_out(k, N, [1, SIZE], [N, SIZE], [N, SIZE])(x, cluster=runtime.Cluster(N))
    for r in range(N):
        np.testing.assert_array_equal(y[r], x[:, 0, :])


def test_reduce_scatter_row_r_is_the_sum_of_row_r() -> None:
    k = collective_kernels(N)["reduce_scatter"]
    x = ints((N, N, SIZE), seed=3)
    y = one_out(k, N, [N, SIZE], [1, SIZE], [N, SIZE])(x, cluster=runtime.Cluster(N))
    for r in range(N):
        np.testing.assert_array_equal(y[r, 0], x[:, r].sum(axis=0))


def test_all_to_all_row_src_is_what_rank_src_sent_me() -> None:
    k = collective_kernels(N)["all_to_all"]
    x = ints((N, N, SIZE), seed=4)
    y = one_out(k, N, [N, SIZE], [N, SIZE], [N, SIZE])(x, cluster=runtime.Cluster(N))
    for d in range(N):
        np.testing.assert_array_equal(y[d], x[:, d])


def test_remote_store_ring_shift_behind_a_barrier() -> None:
    """PyPTO example 05 (store mode): y[r] = x[(r - 1) % N]."""
    k = collective_kernels(N)["shift_by_store"]
    x = ints((N, 1, SIZE), seed=5)
    y = one_out(k, N, [1, SIZE], [1, SIZE], [1, SIZE])(x, cluster=runtime.Cluster(N))
    np.testing.assert_array_equal(y, np.roll(x, 1, axis=0))


def test_atomic_add_remote_stores_accumulate() -> None:
    k = collective_kernels(N)["atomic_sum"]
    x = ints((N, 1, SIZE), seed=6)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnwrittenWindowReadWarning)  # (only local loads here)
        y = one_out(k, N, [1, SIZE], [1, SIZE], [1, SIZE])(x, cluster=runtime.Cluster(N))
    np.testing.assert_array_equal(y[0, 0], x[:, 0].sum(axis=0))
    assert not y[1:].any()  # the other ranks' accumulators are their zeroed windows


def test_put_then_get() -> None:
    k = collective_kernels(N)["put_get"]
    x = ints((N, 1, SIZE), seed=7)
    y, z = two_outs(k, N)(x, cluster=runtime.Cluster(N))
    np.testing.assert_array_equal(y, np.roll(x, 1, axis=0))  # what rank r - 1 put into my window
    np.testing.assert_array_equal(z, x)  # rank r + 1's window holds what I put there


def test_collective_some_rank_never_enters_is_a_hang() -> None:
    from nzjit import pl

    k = collective_kernels(2)["allreduce"]

    @pl.kernel
    def idle(x: pl.Tensor[[2, SIZE], pl.FP32], y: pl.Out[pl.Tensor[[2, SIZE], pl.FP32]]):
        pl.store(pl.load(x, [0, 0], [2, SIZE]), [0, 0], y)

    @pl.orchestration
    def prog(x: pl.Tensor[[2, 2, SIZE], pl.FP32], y: pl.Out[pl.Tensor[[2, 2, SIZE], pl.FP32]]):
        data = pld.alloc_window_buffer([2, SIZE], dtype=pl.FP32)
        sig = pld.alloc_window_buffer([2, 1], dtype=pl.INT32)
        k(
            x[0],
            y[0],
            pld.window(data, [2, SIZE], dtype=pl.FP32),
            pld.window(sig, [2, 1], dtype=pl.INT32),
            device=0,
        )
        idle(x[1], y[1], device=1)

    with pytest.raises(runtime.comm.CommHangError) as ei:
        prog(ints((2, 2, SIZE)), cluster=runtime.Cluster(2))
    msg = str(ei.value)
    assert "  rank 0: entered allreduce (collective #1) at " in msg
    assert "waiting for rank(s) 1, which never entered it\n  rank 1: finished (its kernels returned)\n" in msg


def test_broadcast_every_rank_gets_the_roots() -> None:
    k = collective_kernels(N)["broadcast"]
    x = ints((N, 1, SIZE), seed=8)
    y = one_out(k, N, [1, SIZE], [1, SIZE], [1, SIZE])(x, cluster=runtime.Cluster(N))
    np.testing.assert_array_equal(y, np.broadcast_to(x[N - 1], x.shape))


def test_remote_load_valid_shape_reads_only_the_valid_part() -> None:
    k = collective_kernels(N)["ragged_tail"]
    x = ints((N, 1, SIZE), seed=9)
    y = np.full((N, 1, SIZE), -100, np.float32)
    y = one_out(k, N, [1, SIZE], [1, SIZE], [1, SIZE])(x, y, cluster=runtime.Cluster(N))
    np.testing.assert_array_equal(y[:, :, :8], np.roll(x, -1, axis=0)[:, :, :8])
    assert (y[:, :, 8:] == -100).all()  # the store writes the tile's valid part only
    text = k.lower().pto()
    assert "sizes = [%c1, %c8] : !pto.tensor_view<?x?xf32> -> !pto.partition_tensor_view<1x8xf32>" in text
