"""A hand-written all-reduce over 2 ranks with pld notify / wait / remote_load, checked against numpy.

    python examples/allreduce_notify_wait.py
    python examples/allreduce_notify_wait.py --ray    # ranks as Ray actors (docs/ray.md)

Each rank stages its slice in a window buffer, tells its peer with `pld.system.notify` (Set: one
writer per cell), blocks in `pld.system.wait` until the peer has told it, then pulls the peer's
slice with `pld.tile.remote_load` and adds. The ranks are threads of the simulated cluster: the
wait really blocks. The demo then shows what the simulator reports for the two classic bugs (PyPTO
04-debugging): a wait nobody satisfies (the device would hang) and a remote_load without the wait
(on the device: a read that may or may not see the peer's data).

Exactness: small integers in fp32, so every sum is exact and must equal numpy bit for bit.
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np

import runtime
from nzjit import distributed, pl, pld
from runtime.comm import CommHangError, CommRaceError, UnwrittenWindowReadWarning

RANKS, SIZE = 2, 256


@pl.kernel
def allreduce_step(
    x: pl.Tensor[[1, SIZE], pl.FP32],
    y: pl.Out[pl.Tensor[[1, SIZE], pl.FP32]],
    data: pl.InOut[pld.DistributedTensor[[1, SIZE], pl.FP32]],
    signal: pl.InOut[pld.DistributedTensor[[RANKS, 1], pl.INT32]],
):
    ctx = pld.get_comm_ctx(data)
    me = pld.rank(ctx)
    peer = (me + 1) % pld.nranks(ctx)
    local = pl.load(x, [0, 0], [1, SIZE])
    pl.store(local, [0, 0], data)  # stage: the peer reads it from here
    pld.system.notify(signal, peer, [me, 0], 1, op=pld.NotifyOp.Set)  # "my slice is ready"
    pld.system.wait(signal, [peer, 0], 1, cmp=pld.WaitCmp.Ge)  # until the peer's slice is
    other = pld.tile.remote_load(data, peer, [0, 0], [1, SIZE])
    pl.store(pl.add(local, other), [0, 0], y)


@pl.kernel
def forgot_notify(
    x: pl.Tensor[[1, SIZE], pl.FP32],
    y: pl.Out[pl.Tensor[[1, SIZE], pl.FP32]],
    data: pl.InOut[pld.DistributedTensor[[1, SIZE], pl.FP32]],
    signal: pl.InOut[pld.DistributedTensor[[RANKS, 1], pl.INT32]],
):
    ctx = pld.get_comm_ctx(data)
    me = pld.rank(ctx)
    peer = (me + 1) % pld.nranks(ctx)
    local = pl.load(x, [0, 0], [1, SIZE])
    pl.store(local, [0, 0], data)
    pld.system.wait(signal, [peer, 0], 1, cmp=pld.WaitCmp.Ge)  # nobody notifies: every rank waits
    pl.store(pl.add(local, pld.tile.remote_load(data, peer, [0, 0], [1, SIZE])), [0, 0], y)


@pl.kernel
def forgot_wait(
    x: pl.Tensor[[1, SIZE], pl.FP32],
    y: pl.Out[pl.Tensor[[1, SIZE], pl.FP32]],
    data: pl.InOut[pld.DistributedTensor[[1, SIZE], pl.FP32]],
    signal: pl.InOut[pld.DistributedTensor[[RANKS, 1], pl.INT32]],
):
    ctx = pld.get_comm_ctx(data)
    peer = (pld.rank(ctx) + 1) % pld.nranks(ctx)
    local = pl.load(x, [0, 0], [1, SIZE])
    pl.store(local, [0, 0], data)
    pl.store(pl.add(local, pld.tile.remote_load(data, peer, [0, 0], [1, SIZE])), [0, 0], y)  # no wait


def orchestrate(kernel):
    @pl.orchestration
    def allreduce(x: pl.Tensor[[RANKS, 1, SIZE], pl.FP32], y: pl.Out[pl.Tensor[[RANKS, 1, SIZE], pl.FP32]]):
        data_buf = pld.alloc_window_buffer([1, SIZE], dtype=pl.FP32)  # per rank, zeroed
        signal_buf = pld.alloc_window_buffer([RANKS, 1], dtype=pl.INT32)
        for r in range(pld.world_size()):
            data = pld.window(data_buf, [1, SIZE], dtype=pl.FP32)
            signal = pld.window(signal_buf, [RANKS, 1], dtype=pl.INT32)
            kernel(x[r], y[r], data, signal, device=r)

    return allreduce


def demo(cluster: runtime.Cluster | distributed.RayCluster) -> tuple[bool, str, str]:
    """On `cluster` (a runtime.Cluster or a RayCluster of RANKS ranks): whether y == numpy, and the
    first lines of the hang and race reports of the two bugs."""
    x = np.random.default_rng(0).integers(-100, 101, (RANKS, 1, SIZE)).astype(np.float32)
    y = orchestrate(allreduce_step)(x, cluster=cluster)
    ok = np.array_equal(y, np.broadcast_to(x.sum(axis=0), x.shape))
    try:
        orchestrate(forgot_notify)(x, cluster=cluster)
        hang = "no error"
    except CommHangError as e:
        hang = str(e).split("\n")[1].strip()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UnwrittenWindowReadWarning)
            orchestrate(forgot_wait)(x, cluster=cluster)
        race = "no error"
    except CommRaceError as e:
        race = str(e).split("\n")[0].split(": ", 2)[2]
    return ok, hang, race


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="A 2-rank all-reduce with notify / wait / remote_load")
    parser.add_argument(
        "--ray", action="store_true", help="run the ranks as Ray actors (pip install 'nzjit[ray]')"
    )
    if parser.parse_args(argv).ray:
        from nzjit.distributed import RayCluster

        cluster: runtime.Cluster | distributed.RayCluster = RayCluster(
            RANKS, num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False
        )
    else:
        cluster = runtime.Cluster(RANKS)
    ok, hang, race = demo(cluster)
    print(
        f"allreduce_notify_wait: {RANKS} ranks x {SIZE} fp32 on {type(cluster).__name__}, y == numpy on every "
        f"rank: {ok}"
    )
    print(f"  without the notify : {hang}")
    print(f"  without the wait   : {race}")
    if not (ok and hang.startswith("rank 0: waits at") and race.startswith("communication race")):
        raise SystemExit("allreduce_notify_wait: MISMATCH")


if __name__ == "__main__":
    main()
