"""Expert-parallel token dispatch and combine with `pld.tensor.all_to_all` over 4 ranks, checked
against numpy.

    python examples/ep_dispatch_all_to_all.py
    python examples/ep_dispatch_all_to_all.py --ray    # ranks as Ray actors (docs/ray.md)

Rank r holds a batch of tokens and expert r (one expert per rank, its NZ weight a local stacked
argument). The host routes every token to its top-1 expert and packs, on each rank, a send buffer
`[RANKS, CAP, H]`: row d holds the tokens bound for expert d. Then, on every rank:

1. dispatch: `all_to_all(send, recv, signal)`: row s of rank d's window is what rank s sent to d,
   i.e. every token routed to expert d, grouped by the rank it came from;
2. expert: one NZ matmul per source row;
3. combine: `all_to_all` back: row d of rank s's window is expert d's output for rank s's tokens.

The host then scatters the outputs back to token order. (A window parameter is written through
the communication ops whatever its annotation; as in PyPTO's examples it is a plain
`pld.DistributedTensor` here, so a kernel call returns only its Out tensors.) Exactness: small integers in fp16, sums in
fp32, all far below 2^24: the result must equal numpy bit for bit.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import runtime
from nzjit import distributed, pl, pld

RANKS = 4  # = experts, one per rank
TOKENS = 16  # per rank
CAP = TOKENS  # a rank can send all its tokens to one expert
H, N = 128, 128  # model width, expert output width


@pl.kernel
def dispatch(
    send: pl.Tensor[[RANKS, CAP, H], pl.FP16],
    recv_out: pl.Out[pl.Tensor[[RANKS, CAP, H], pl.FP16]],
    recv: pld.DistributedTensor[[RANKS, CAP, H], pl.FP16],
    signal: pld.DistributedTensor[[RANKS, 1], pl.INT32],
):
    recv = pld.tensor.all_to_all(send, recv, signal)
    for s in pl.range(RANKS):
        pl.store(pl.load(recv, [s, 0, 0], [1, CAP, H]), [s, 0, 0], recv_out)


@pl.kernel
def expert(
    xr: pl.Tensor[[RANKS, CAP, H], pl.FP16],
    w: pl.Tensor[[1, N, H], pl.FP16, pl.NZ],
    yo: pl.Out[pl.Tensor[[RANKS, CAP, N], pl.FP32]],
):
    for s in pl.spmd(RANKS):
        yo[s, :, :] = pl.matmul(xr[s, :, :], w[0, :, :], b_trans=True)


@pl.kernel
def combine(
    yo: pl.Tensor[[RANKS, CAP, N], pl.FP32],
    back_out: pl.Out[pl.Tensor[[RANKS, CAP, N], pl.FP32]],
    back: pld.DistributedTensor[[RANKS, CAP, N], pl.FP32],
    signal: pld.DistributedTensor[[RANKS, 1], pl.INT32],
):
    back = pld.tensor.all_to_all(yo, back, signal)
    for d in pl.range(RANKS):
        pl.store(pl.load(back, [d, 0, 0], [1, CAP, N]), [d, 0, 0], back_out)


@pl.orchestration
def ep_layer(
    send: pl.Tensor[[RANKS, RANKS, CAP, H], pl.FP16],
    w: pl.Tensor[[RANKS, 1, N, H], pl.FP16, pl.NZ],
    out: pl.Out[pl.Tensor[[RANKS, RANKS, CAP, N], pl.FP32]],
):
    recv_buf = pld.alloc_window_buffer([RANKS, CAP, H], dtype=pl.FP16)
    back_buf = pld.alloc_window_buffer([RANKS, CAP, N], dtype=pl.FP32)
    signal_buf = pld.alloc_window_buffer([RANKS, 1], dtype=pl.INT32)
    for r in range(pld.world_size()):
        signal = pld.window(signal_buf, [RANKS, 1], dtype=pl.INT32)
        xr = dispatch(send[r], pld.window(recv_buf, [RANKS, CAP, H], dtype=pl.FP16), signal, device=r)
        yo = expert(xr, w[r], device=r)
        combine(yo, out[r], pld.window(back_buf, [RANKS, CAP, N], dtype=pl.FP32), signal, device=r)


# ------------------------------------------------------------------------------------ host side
def pack(x: np.ndarray, experts: np.ndarray) -> tuple[np.ndarray, list[list[list[int]]]]:
    """send[r, d, slot] = rank r's tokens bound for expert d; slots[r][d] = their token indices."""
    send = np.zeros((RANKS, RANKS, CAP, H), np.float16)
    slots: list[list[list[int]]] = [[[] for _ in range(RANKS)] for _ in range(RANKS)]
    for r in range(RANKS):
        for t in range(TOKENS):
            d = int(experts[r, t])
            send[r, d, len(slots[r][d])] = x[r, t]
            slots[r][d].append(t)
    return send, slots


def unpack(out: np.ndarray, slots: list[list[list[int]]]) -> np.ndarray:
    """y[r, t] = the output of token t of rank r from the expert it was routed to."""
    y = np.zeros((RANKS, TOKENS, N), np.float32)
    for r in range(RANKS):
        for d in range(RANKS):
            for slot, t in enumerate(slots[r][d]):
                y[r, t] = out[r, d, slot]
    return y


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description="An expert-parallel token dispatch with pld.tensor.all_to_all"
    )
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
    if not run(cluster):
        raise SystemExit("ep_dispatch_all_to_all: MISMATCH")


def run(cluster: runtime.Cluster | distributed.RayCluster) -> bool:
    """The layer on `cluster` (a runtime.Cluster or a RayCluster of RANKS ranks), printed; True when
    it equals numpy."""
    t_start = time.perf_counter()
    rng = np.random.default_rng(5)
    small = lambda *shape: rng.choice(np.array([-1, 0, 1], np.float16), size=shape, p=[0.25, 0.5, 0.25])
    x = small(RANKS, TOKENS, H)
    w = small(RANKS, N, H)  # expert e's weight [N, H]
    experts = rng.integers(0, RANKS, (RANKS, TOKENS))

    w_d = cluster.alloc_stacked_tensor(runtime.pack_nz(w[:, None]))  # [RANKS, 1, N, H]: expert r on rank r
    send, slots = pack(x, experts)
    y = unpack(ep_layer(send, w_d, cluster=cluster), slots)
    y_ref = np.einsum(
        "rth,rtnh->rtn", x.astype(np.float32), w[experts].astype(np.float32)
    )  # w[experts]: [r, t, N, H]
    ok = np.array_equal(y, y_ref)
    load = np.bincount(experts.reshape(-1), minlength=RANKS)
    print(f"ep_dispatch_all_to_all: {RANKS} ranks = {RANKS} experts, {TOKENS} tokens per rank, H={H} N={N}")
    print(f"  tokens per expert                  : {load.tolist()}")
    print(f"  dispatch -> expert -> combine == numpy: {ok}")
    print(f"  total                              : {time.perf_counter() - t_start:.2f} s")
    return bool(ok)


if __name__ == "__main__":
    main()
