"""Kernels and orchestrations shared by the pld tests (issue 28)."""

from __future__ import annotations

import numpy as np

from nzjit import pl, pld

SIZE = 64
NR = pl.dynamic("NR")  # the rank count of a signal / gathered window, read from the window's view


@pl.kernel
def mesh_allreduce(
    x: pl.Tensor[[1, SIZE], pl.FP32],
    y: pl.Out[pl.Tensor[[1, SIZE], pl.FP32]],
    data: pl.InOut[pld.DistributedTensor[[1, SIZE], pl.FP32]],
    signal: pl.InOut[pld.DistributedTensor[[NR, 1], pl.INT32]],
):
    """Stage x, tell every peer, then add every peer's slice once it has told us (any rank count)."""
    ctx = pld.get_comm_ctx(data)
    me = pld.rank(ctx)
    n = pld.nranks(ctx)
    local = pl.load(x, [0, 0], [1, SIZE])
    pl.store(local, [0, 0], data)
    for k in pl.range(1, n):  # rank scalars are INT32 (PyPTO), a loop index is INDEX
        pld.system.notify(signal, (me + pl.cast(k, pl.INT32)) % n, [me, 0], 1, op=pld.NotifyOp.Set)
    acc = local
    for k in pl.range(1, n):
        peer = (me + pl.cast(k, pl.INT32)) % n
        pld.system.wait(signal, [peer, 0], 1, cmp=pld.WaitCmp.Ge)
        acc = pl.add(acc, pld.tile.remote_load(data, peer, [0, 0], [1, SIZE]))
    pl.store(acc, [0, 0], y)


@pl.orchestration
def run_mesh_allreduce(x: pl.Tensor[[NR, 1, SIZE], pl.FP32], y: pl.Out[pl.Tensor[[NR, 1, SIZE], pl.FP32]]):
    n = pld.world_size()
    data_buf = pld.alloc_window_buffer([1, SIZE], dtype=pl.FP32)
    signal_buf = pld.alloc_window_buffer([n, 1], dtype=pl.INT32)
    for r in range(n):
        mesh_allreduce(
            x[r],
            y[r],
            pld.window(data_buf, [1, SIZE], dtype=pl.FP32),
            pld.window(signal_buf, [n, 1], dtype=pl.INT32),
            device=r,
        )


@pl.kernel
def lonely_wait(signal: pl.InOut[pld.DistributedTensor[[NR, 1], pl.INT32]]):
    """Waits for a notify nobody sends."""
    me = pld.rank(pld.get_comm_ctx(signal))
    pld.system.wait(signal, [me, 0], 1, cmp=pld.WaitCmp.Eq)  # HANG-SITE


@pl.kernel
def set_one(signal: pl.InOut[pld.DistributedTensor[[NR, 1], pl.INT32]]):
    """Deposits 1 into rank 0's cell 0 with Set (where AtomicAdd was needed)."""
    pld.system.notify(signal, 0, [0, 0], 1, op=pld.NotifyOp.Set)


@pl.kernel
def add_one(signal: pl.InOut[pld.DistributedTensor[[NR, 1], pl.INT32]]):
    """Adds 1 to rank 0's cell 0."""
    pld.system.notify(signal, 0, [0, 0], 1, op=pld.NotifyOp.AtomicAdd)


@pl.kernel
def wait_for_all(
    signal: pl.InOut[pld.DistributedTensor[[NR, 1], pl.INT32]],
    x: pl.Tensor[[1, 8], pl.INT32],
    out: pl.Out[pl.Tensor[[1, 8], pl.INT32]],
):
    """Rank 0: waits until every other rank has added 1 to its cell 0, then copies x to out."""
    n = pld.nranks(pld.get_comm_ctx(signal))
    pld.system.wait(signal, [0, 0], n - 1, cmp=pld.WaitCmp.Ge)  # COUNT-SITE
    pl.store(pl.load(x, [0, 0], [1, 8]), [0, 0], out)


def run_counter(notifier: object) -> object:
    @pl.orchestration
    def counter(x: pl.Tensor[[1, 8], pl.INT32], out: pl.Out[pl.Tensor[[1, 8], pl.INT32]]):
        n = pld.world_size()
        sig = pld.alloc_window_buffer([n, 1], dtype=pl.INT32)
        for r in range(n):
            view = pld.window(sig, [n, 1], dtype=pl.INT32)
            if r == 0:
                wait_for_all(view, x, out, device=0)
            else:
                notifier(view, device=r)  # type: ignore[operator]

    return counter


@pl.kernel
def stage(x: pl.Tensor[[1, SIZE], pl.FP32], data: pl.InOut[pld.DistributedTensor[[1, SIZE], pl.FP32]]):
    pl.store(pl.load(x, [0, 0], [1, SIZE]), [0, 0], data)  # STAGE-SITE


@pl.kernel
def read_peer0(
    data: pl.InOut[pld.DistributedTensor[[1, SIZE], pl.FP32]], y: pl.Out[pl.Tensor[[1, SIZE], pl.FP32]]
):
    """Reads rank 0's slice with no wait: nothing orders rank 0's staging before it."""
    pl.store(pld.tile.remote_load(data, 0, [0, 0], [1, SIZE]), [0, 0], y)  # RACE-SITE


@pl.orchestration
def racy(x: pl.Tensor[[1, SIZE], pl.FP32], y: pl.Out[pl.Tensor[[1, SIZE], pl.FP32]]):
    buf = pld.alloc_window_buffer([1, SIZE], dtype=pl.FP32)
    stage(x, pld.window(buf, [1, SIZE], dtype=pl.FP32), device=0)
    read_peer0(pld.window(buf, [1, SIZE], dtype=pl.FP32), y, device=1)


def ints(shape: tuple[int, ...], seed: int = 0, lo: int = -8, hi: int = 9) -> np.ndarray:
    """Small integers as float32: sums and products of a few of them are exact."""
    return np.random.default_rng(seed).integers(lo, hi, shape).astype(np.float32)


def collective_kernels(n: int, op: object = None) -> dict[str, object]:
    """Kernels for `n` ranks (static tile shapes) around each collective and RMA form."""
    op = op if op is not None else pld.ReduceOp.Sum

    @pl.kernel
    def allreduce_k(
        x: pl.Tensor[[n, SIZE], pl.FP32],
        y: pl.Out[pl.Tensor[[n, SIZE], pl.FP32]],
        data: pl.InOut[pld.DistributedTensor[[n, SIZE], pl.FP32]],
        signal: pl.InOut[pld.DistributedTensor[[n, 1], pl.INT32]],
    ):
        pl.store(pl.load(x, [0, 0], [n, SIZE]), [0, 0], data)
        data = pld.tensor.allreduce(data, signal, op=op)
        pl.store(pl.load(data, [0, 0], [n, SIZE]), [0, 0], y)

    @pl.kernel
    def allgather_k(
        x: pl.Tensor[[1, SIZE], pl.FP32],
        y: pl.Out[pl.Tensor[[n, SIZE], pl.FP32]],
        data: pl.InOut[pld.DistributedTensor[[n, SIZE], pl.FP32]],
        signal: pl.InOut[pld.DistributedTensor[[n, 1], pl.INT32]],
    ):
        data = pld.tensor.allgather(x, data, signal)
        pl.store(pl.load(data, [0, 0], [n, SIZE]), [0, 0], y)

    @pl.kernel
    def reduce_scatter_k(
        x: pl.Tensor[[n, SIZE], pl.FP32],
        y: pl.Out[pl.Tensor[[1, SIZE], pl.FP32]],
        data: pl.InOut[pld.DistributedTensor[[n, SIZE], pl.FP32]],
        signal: pl.InOut[pld.DistributedTensor[[n, 1], pl.INT32]],
    ):
        me = pld.rank(pld.get_comm_ctx(data))
        pl.store(pl.load(x, [0, 0], [n, SIZE]), [0, 0], data)
        data = pld.tensor.reduce_scatter(data, signal, op=pld.ReduceOp.Sum)
        pl.store(pl.load(data, [me, 0], [1, SIZE]), [0, 0], y)

    @pl.kernel
    def all_to_all_k(
        x: pl.Tensor[[n, SIZE], pl.FP32],
        y: pl.Out[pl.Tensor[[n, SIZE], pl.FP32]],
        data: pl.InOut[pld.DistributedTensor[[n, SIZE], pl.FP32]],
        signal: pl.InOut[pld.DistributedTensor[[n, 1], pl.INT32]],
    ):
        data = pld.tensor.all_to_all(x, data, signal)
        pl.store(pl.load(data, [0, 0], [n, SIZE]), [0, 0], y)

    @pl.kernel
    def shift_by_store(
        x: pl.Tensor[[1, SIZE], pl.FP32],
        y: pl.Out[pl.Tensor[[1, SIZE], pl.FP32]],
        data: pl.InOut[pld.DistributedTensor[[1, SIZE], pl.FP32]],
        signal: pl.InOut[pld.DistributedTensor[[n, 1], pl.INT32]],
    ):
        ctx = pld.get_comm_ctx(data)
        peer = (pld.rank(ctx) + 1) % pld.nranks(ctx)
        pld.tile.remote_store(pl.load(x, [0, 0], [1, SIZE]), data, peer, [0, 0])
        signal = pld.tensor.barrier(signal)
        pl.store(pl.load(data, [0, 0], [1, SIZE]), [0, 0], y)

    @pl.kernel
    def atomic_sum(
        x: pl.Tensor[[1, SIZE], pl.FP32],
        y: pl.Out[pl.Tensor[[1, SIZE], pl.FP32]],
        data: pl.InOut[pld.DistributedTensor[[1, SIZE], pl.FP32]],
        signal: pl.InOut[pld.DistributedTensor[[n, 1], pl.INT32]],
    ):
        pld.tile.remote_store(pl.load(x, [0, 0], [1, SIZE]), data, 0, [0, 0], atomic=pld.AtomicType.Add)
        signal = pld.tensor.barrier(signal)
        pl.store(pl.load(data, [0, 0], [1, SIZE]), [0, 0], y)

    @pl.kernel
    def put_get(
        x: pl.Tensor[[1, SIZE], pl.FP32],
        y: pl.Out[pl.Tensor[[1, SIZE], pl.FP32]],
        z: pl.Out[pl.Tensor[[1, SIZE], pl.FP32]],
        data: pl.InOut[pld.DistributedTensor[[1, SIZE], pl.FP32]],
        signal: pl.InOut[pld.DistributedTensor[[n, 1], pl.INT32]],
    ):
        """put x into the next rank's window; after a barrier get the previous rank's window."""
        ctx = pld.get_comm_ctx(data)
        me, nr = pld.rank(ctx), pld.nranks(ctx)
        pld.tensor.put(data, (me + 1) % nr, x)
        signal = pld.tensor.barrier(signal)
        pl.store(pl.load(data, [0, 0], [1, SIZE]), [0, 0], y)  # x of rank me - 1
        signal = pld.tensor.barrier(signal)
        pld.tensor.get(z, (me + 1) % nr, data)  # rank me + 1's window: my own x

    @pl.kernel
    def broadcast_k(
        x: pl.Tensor[[1, SIZE], pl.FP32],
        y: pl.Out[pl.Tensor[[1, SIZE], pl.FP32]],
        data: pl.InOut[pld.DistributedTensor[[1, SIZE], pl.FP32]],
        signal: pl.InOut[pld.DistributedTensor[[n, 1], pl.INT32]],
    ):
        pl.store(pl.load(x, [0, 0], [1, SIZE]), [0, 0], data)  # only the root's matters
        data = pld.tensor.broadcast(data, signal, root=n - 1)
        pl.store(pl.load(data, [0, 0], [1, SIZE]), [0, 0], y)

    @pl.kernel
    def ragged_tail(
        x: pl.Tensor[[1, SIZE], pl.FP32],
        y: pl.InOut[pl.Tensor[[1, SIZE], pl.FP32]],
        data: pl.InOut[pld.DistributedTensor[[1, SIZE], pl.FP32]],
        signal: pl.InOut[pld.DistributedTensor[[n, 1], pl.INT32]],
    ):
        """remote_load with a static valid_shape: a fixed [1, SIZE] tile, only 8 columns read."""
        ctx = pld.get_comm_ctx(data)
        peer = (pld.rank(ctx) + 1) % pld.nranks(ctx)
        pl.store(pl.load(x, [0, 0], [1, SIZE]), [0, 0], data)
        signal = pld.tensor.barrier(signal)
        pl.store(pld.tile.remote_load(data, peer, [0, 0], [1, SIZE], valid_shape=[1, 8]), [0, 0], y)

    return {
        "broadcast": broadcast_k,
        "ragged_tail": ragged_tail,
        "allreduce": allreduce_k,
        "allgather": allgather_k,
        "reduce_scatter": reduce_scatter_k,
        "all_to_all": all_to_all_k,
        "shift_by_store": shift_by_store,
        "atomic_sum": atomic_sum,
        "put_get": put_get,
    }


def one_out(kernel: object, n: int, x_row: list[int], y_row: list[int], data_shape: list[int]) -> object:
    """An orchestration running `kernel(x[r], y[r], data, signal, device=r)` on each of `n` ranks."""

    @pl.orchestration
    def prog(x: pl.Tensor[[n, *x_row], pl.FP32], y: pl.Out[pl.Tensor[[n, *y_row], pl.FP32]]):
        data_buf = pld.alloc_window_buffer(data_shape, dtype=pl.FP32)
        signal_buf = pld.alloc_window_buffer([n, 1], dtype=pl.INT32)
        for r in range(pld.world_size()):
            kernel(
                x[r],
                y[r],
                pld.window(data_buf, data_shape, dtype=pl.FP32),  # type: ignore[operator]
                pld.window(signal_buf, [n, 1], dtype=pl.INT32),
                device=r,
            )

    return prog


def two_outs(kernel: object, n: int) -> object:
    """`kernel(x[r], y[r], z[r], data, signal, device=r)` on each rank, rows of SIZE."""

    @pl.orchestration
    def prog(
        x: pl.Tensor[[n, 1, SIZE], pl.FP32],
        y: pl.Out[pl.Tensor[[n, 1, SIZE], pl.FP32]],
        z: pl.Out[pl.Tensor[[n, 1, SIZE], pl.FP32]],
    ):
        data_buf = pld.alloc_window_buffer([1, SIZE], dtype=pl.FP32)
        signal_buf = pld.alloc_window_buffer([n, 1], dtype=pl.INT32)
        for r in range(pld.world_size()):
            kernel(
                x[r],
                y[r],
                z[r],
                pld.window(data_buf, [1, SIZE], dtype=pl.FP32),  # type: ignore[operator]
                pld.window(signal_buf, [n, 1], dtype=pl.INT32),
                device=r,
            )

    return prog


@pl.kernel
def barrier_allreduce(
    x: pl.Tensor[[1, SIZE], pl.FP32],
    y: pl.Out[pl.Tensor[[1, SIZE], pl.FP32]],
    data: pl.InOut[pld.DistributedTensor[[1, SIZE], pl.FP32]],
    signal: pl.InOut[pld.DistributedTensor[[NR, 1], pl.INT32]],
):
    """PyPTO 02-primitives' barrier + remote accumulate, with the one-armed `if peer != my_rank`."""
    ctx = pld.get_comm_ctx(data)
    me = pld.rank(ctx)
    n = pld.nranks(ctx)
    local = pl.load(x, [0, 0], [1, SIZE])
    pl.store(local, [0, 0], data)
    for p in pl.range(n):
        peer = pl.cast(p, pl.INT32)
        if peer != me:
            pld.system.notify(signal, peer, [me, 0], 1, op=pld.NotifyOp.AtomicAdd)
    for p in pl.range(n):
        src = pl.cast(p, pl.INT32)
        if src != me:
            pld.system.wait(signal, [src, 0], 1, cmp=pld.WaitCmp.Ge)
    acc = local
    for p in pl.range(n):
        peer = pl.cast(p, pl.INT32)
        if peer != me:
            acc = pl.add(acc, pld.tile.remote_load(data, peer, [0, 0], [1, SIZE]))
    pl.store(acc, [0, 0], y)


@pl.orchestration
def run_barrier_allreduce(x: pl.Tensor[[NR, 1, SIZE], pl.FP32], y: pl.Out[pl.Tensor[[NR, 1, SIZE], pl.FP32]]):
    n = pld.world_size()
    data_buf = pld.alloc_window_buffer([1, SIZE], dtype=pl.FP32)
    signal_buf = pld.alloc_window_buffer([n, 1], dtype=pl.INT32)
    for r in range(n):
        barrier_allreduce(
            x[r],
            y[r],
            pld.window(data_buf, [1, SIZE], dtype=pl.FP32),
            pld.window(signal_buf, [n, 1], dtype=pl.INT32),
            device=r,
        )
