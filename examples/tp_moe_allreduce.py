"""A 2-rank tensor-parallel MoE layer whose partial outputs are all-reduced with
`pld.tensor.allreduce`, checked against numpy.

    python examples/tp_moe_allreduce.py
    python examples/tp_moe_allreduce.py --ray    # ranks as Ray actors (docs/ray.md)

Tensor parallelism splits every expert's FFN width F across the ranks: rank r holds columns
[r F/2, (r + 1) F/2) of the gate and up projections and the matching rows of down, so each rank
computes a *partial* expert output over its half of F, and the layer output is the sum of the
partials. Each rank runs gate/up (two NZ matmuls), relu(g) * u, down (an NZ matmul), then stages
its partial in a window buffer and all-reduces it with the ranks' other partials in place; every
rank then holds the full expert outputs.

The NZ weights stay local, stacked arguments (`Cluster.alloc_stacked_tensor(pack_nz(w))`, NZ-29):
a window is ND (a distributed NZ tensor is refused: remote loads have no NZ blocking).

Exactness: tokens and weights are small integers (-1, 0, 1): every matmul and every partial sum
is an integer far below 2^24 (exact in fp32) and the fp16 activation stays within 2048 (exact in
fp16), so the result must equal numpy bit for bit.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import runtime
from nzjit import distributed, pl, pld

RANKS, E = 2, 2  # tensor-parallel degree, experts (every rank holds a slice of every expert)
TOKENS, TOP_K = 32, 1
CAP = TOKENS
H, F = 128, 256  # model and FFN width
FL = F // RANKS  # this rank's slice of F
HT = 128


@pl.kernel
def gate_up(
    x: pl.Tensor[[E, CAP, H], pl.FP16],
    wg: pl.Tensor[[E, FL, H], pl.FP16, pl.NZ],
    wu: pl.Tensor[[E, FL, H], pl.FP16, pl.NZ],
    g: pl.Out[pl.Tensor[[E, CAP, FL], pl.FP32]],
    u: pl.Out[pl.Tensor[[E, CAP, FL], pl.FP32]],
):
    for e in pl.spmd(E):
        g[e, :, :] = pl.matmul(x[e, :, :], wg[e, :, :], b_trans=True)
        u[e, :, :] = pl.matmul(x[e, :, :], wu[e, :, :], b_trans=True)


@pl.kernel
def act(
    g: pl.Tensor[[E, CAP, FL], pl.FP32],
    u: pl.Tensor[[E, CAP, FL], pl.FP32],
    h: pl.Out[pl.Tensor[[E, CAP, FL], pl.FP16]],
):
    for e in pl.spmd(E):
        gt = pl.load(g, [e, 0, 0], [1, CAP, FL])
        ut = pl.load(u, [e, 0, 0], [1, CAP, FL])
        relu = pl.maximum(gt, pl.sub(gt, gt))
        pl.store(pl.cast(pl.mul(relu, ut), pl.FP16), [e, 0, 0], h)


@pl.kernel
def down(
    h: pl.Tensor[[E, CAP, FL], pl.FP16],
    wd: pl.Tensor[[E, H, FL], pl.FP16, pl.NZ],
    y: pl.Out[pl.Tensor[[E, CAP, H], pl.FP32]],
):
    for e in pl.spmd(E):
        for hb in pl.range(H // HT):
            h0 = hb * HT
            y[e, :, h0 : h0 + HT] = pl.matmul(h[e, :, :], wd[e, h0 : h0 + HT, :], b_trans=True)


@pl.kernel
def reduce_partials(
    partial: pl.Tensor[[E, CAP, H], pl.FP32],
    out: pl.Out[pl.Tensor[[E, CAP, H], pl.FP32]],
    data: pl.InOut[pld.DistributedTensor[[E, CAP, H], pl.FP32]],
    signal: pl.InOut[pld.DistributedTensor[[RANKS, 1], pl.INT32]],
):
    for e in pl.range(E):
        pl.store(pl.load(partial, [e, 0, 0], [1, CAP, H]), [e, 0, 0], data)
    data = pld.tensor.allreduce(data, signal, op=pld.ReduceOp.Sum)  # every rank: the sum of the partials
    for e in pl.range(E):
        pl.store(pl.load(data, [e, 0, 0], [1, CAP, H]), [e, 0, 0], out)


@pl.orchestration
def tp_moe(
    xe: pl.Tensor[[E, CAP, H], pl.FP16],
    wg: pl.Tensor[[RANKS, E, FL, H], pl.FP16, pl.NZ],
    wu: pl.Tensor[[RANKS, E, FL, H], pl.FP16, pl.NZ],
    wd: pl.Tensor[[RANKS, E, H, FL], pl.FP16, pl.NZ],
    ye: pl.Out[pl.Tensor[[RANKS, E, CAP, H], pl.FP32]],
):
    data_buf = pld.alloc_window_buffer([E, CAP, H], dtype=pl.FP32)
    signal_buf = pld.alloc_window_buffer([pld.world_size(), 1], dtype=pl.INT32)
    for r in range(pld.world_size()):
        g, u = gate_up(xe, wg[r], wu[r], device=r)  # every rank: all tokens, its slice of F
        h = act(g, u, device=r)
        partial = down(h, wd[r], device=r)
        reduce_partials(
            partial,
            ye[r],
            pld.window(data_buf, [E, CAP, H], dtype=pl.FP32),
            pld.window(signal_buf, [RANKS, 1], dtype=pl.INT32),
            device=r,
        )


# ------------------------------------------------------------------------------------ host side
def route(x: np.ndarray, w_router: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The top-1 expert per token (ties to the lower id) and its softmax weight."""
    logits = x.astype(np.float32) @ w_router
    experts = np.argsort(-logits, axis=1, kind="stable")[:, :TOP_K]
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    return experts, np.take_along_axis(p, experts, axis=1).astype(np.float32)


def dispatch(x: np.ndarray, experts: np.ndarray) -> tuple[np.ndarray, list[list[int]]]:
    xe = np.zeros((E, CAP, H), np.float16)
    slots: list[list[int]] = [[] for _ in range(E)]
    for t in range(TOKENS):
        ex = int(experts[t, 0])
        xe[ex, len(slots[ex])] = x[t]
        slots[ex].append(t)
    return xe, slots


def combine(ye: np.ndarray, slots: list[list[int]], weights: np.ndarray) -> np.ndarray:
    y = np.zeros((TOKENS, H), np.float32)
    for ex, taken in enumerate(slots):
        for slot, t in enumerate(taken):
            y[t] = weights[t, 0] * ye[ex, slot]
    return y


def reference(xe: np.ndarray, wg: np.ndarray, wu: np.ndarray, wd: np.ndarray) -> np.ndarray:
    """The unsharded expert FFN: gate/up over all of F, the fp16 activation, down over all of F."""
    f32 = np.float32
    g = np.einsum("ech,efh->ecf", xe.astype(f32), wg.astype(f32))
    u = np.einsum("ech,efh->ecf", xe.astype(f32), wu.astype(f32))
    h = (np.maximum(g, 0) * u).astype(np.float16)
    assert np.abs(h).max() <= 2048, "activations must stay exact in fp16"
    return np.einsum("ecf,ehf->ech", h.astype(f32), wd.astype(f32))


def shard(w: np.ndarray, axis: int) -> np.ndarray:
    """[E, ..F..] -> [RANKS, E, ..F/RANKS..]: rank r's slice of F along `axis`."""
    return np.stack(np.split(w, RANKS, axis=axis))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="A tensor-parallel MoE layer with pld.tensor.allreduce")
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
        raise SystemExit("tp_moe_allreduce: MISMATCH")


def run(cluster: runtime.Cluster | distributed.RayCluster) -> bool:
    """The layer on `cluster` (a runtime.Cluster or a RayCluster of RANKS ranks), printed; True when
    it equals numpy."""
    t_start = time.perf_counter()
    rng = np.random.default_rng(11)
    small = lambda *shape: rng.choice(np.array([-1, 0, 1], np.float16), size=shape, p=[0.25, 0.5, 0.25])
    x = small(TOKENS, H)
    w_router = rng.standard_normal((H, E)).astype(np.float32)
    wg, wu, wd = small(E, F, H), small(E, F, H), small(E, H, F)  # the full (unsharded) experts

    wg_d, wu_d = (cluster.alloc_stacked_tensor(runtime.pack_nz(shard(w, 1))) for w in (wg, wu))
    wd_d = cluster.alloc_stacked_tensor(runtime.pack_nz(shard(wd, 2)))

    experts, weights = route(x, w_router)
    xe, slots = dispatch(x, experts)
    ye = tp_moe(xe, wg_d, wu_d, wd_d, cluster=cluster)
    ye_ref = reference(xe, wg, wu, wd)
    ranks_ok = all(np.array_equal(ye[r], ye_ref) for r in range(RANKS))
    layer_ok = np.array_equal(combine(ye[0], slots, weights), combine(ye_ref, slots, weights))
    print(
        f"tp_moe_allreduce: {RANKS} ranks, {E} experts split along F={F} ({FL} per rank), {TOKENS} tokens "
        f"top-{TOP_K}, H={H}, fp16 NZ weights"
    )
    print(f"  tokens per expert               : {[len(s) for s in slots]}")
    print(f"  all-reduced outputs == numpy    : {ranks_ok} on every rank (max |y| = {np.abs(ye).max():.0f})")
    print(f"  layer output        == numpy    : {layer_ok}")
    print(f"  total                           : {time.perf_counter() - t_start:.2f} s")
    return bool(ranks_ok and layer_ok)


if __name__ == "__main__":
    main()
