"""A 4-rank expert-parallel MoE layer with stacked NZ expert weights, checked against numpy.

    python examples/tp_moe.py          # ranks as threads of this process (runtime.Cluster)
    python examples/tp_moe.py --ray    # ranks as Ray actors (nzjit.distributed.RayCluster, docs/ray.md)

The host routes each token to its top-2 experts and packs the tokens of every expert into a
capacity buffer; rank r owns experts [r * E_LOCAL, (r + 1) * E_LOCAL). Each rank runs
gate/up (two NZ matmuls), the activation relu(g) * u, and down (an NZ matmul) on its own worker;
the host combines the expert outputs with the routing weights.

Expert weights are `[RANKS, E_LOCAL, R, C]` fp16 NZ tensors allocated once on the cluster
(`Cluster.alloc_stacked_tensor(pack_nz(w))`, NZ-29); in the orchestration `wg[r]` is rank r's
shard, resident on worker r, so calls after the first upload only the routed tokens.

Exactness: tokens and weights are small integers (-1, 0, 1), so every matmul sum is an integer
far below 2^24 (exact in fp32), and the fp16 activation is checked to stay within 2048 (every
integer there is exact in fp16). The result must equal numpy bit for bit.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import runtime
from nzjit import distributed, pl

RANKS, E_LOCAL = 4, 2
E = RANKS * E_LOCAL  # experts
TOKENS, TOP_K = 64, 2
CAP = TOKENS  # capacity per expert: a token reaches an expert at most once, so nothing is dropped
H, F = 256, 512  # model and FFN width
FT, HT, FK = 128, 128, 256  # kernel tiles: FFN columns, model columns, FFN reduction


@pl.kernel
def gate_up(
    x: pl.Tensor[[E_LOCAL, CAP, H], pl.FP16],
    wg: pl.Tensor[[E_LOCAL, F, H], pl.FP16, pl.NZ],
    wu: pl.Tensor[[E_LOCAL, F, H], pl.FP16, pl.NZ],
    g: pl.Out[pl.Tensor[[E_LOCAL, CAP, F], pl.FP32]],
    u: pl.Out[pl.Tensor[[E_LOCAL, CAP, F], pl.FP32]],
):
    for e in pl.spmd(E_LOCAL):
        for fb in pl.range(F // FT):
            f0 = fb * FT
            g[e, :, f0 : f0 + FT] = pl.matmul(x[e, :, :], wg[e, f0 : f0 + FT, :], b_trans=True)
            u[e, :, f0 : f0 + FT] = pl.matmul(x[e, :, :], wu[e, f0 : f0 + FT, :], b_trans=True)


@pl.kernel
def act(
    g: pl.Tensor[[E_LOCAL, CAP, F], pl.FP32],
    u: pl.Tensor[[E_LOCAL, CAP, F], pl.FP32],
    h: pl.Out[pl.Tensor[[E_LOCAL, CAP, F], pl.FP16]],
):
    for e in pl.spmd(E_LOCAL):
        for fb in pl.range(F // FT):
            f0 = fb * FT
            gt = pl.load(g, [e, 0, f0], [1, CAP, FT])
            ut = pl.load(u, [e, 0, f0], [1, CAP, FT])
            relu = pl.maximum(gt, pl.sub(gt, gt))
            pl.store(pl.cast(pl.mul(relu, ut), pl.FP16), [e, 0, f0], h)


@pl.kernel
def down(
    h: pl.Tensor[[E_LOCAL, CAP, F], pl.FP16],
    wd: pl.Tensor[[E_LOCAL, H, F], pl.FP16, pl.NZ],
    y: pl.Out[pl.Tensor[[E_LOCAL, CAP, H], pl.FP32]],
):
    for e in pl.spmd(E_LOCAL):
        for hb in pl.range(H // HT):
            h0 = hb * HT
            acc = pl.matmul(h[e, :, 0:FK], wd[e, h0 : h0 + HT, 0:FK], b_trans=True)
            for k0 in pl.pipeline(FK, F, FK):
                acc = pl.matmul_acc(
                    acc, h[e, :, k0 : k0 + FK], wd[e, h0 : h0 + HT, k0 : k0 + FK], b_trans=True
                )
            y[e, :, h0 : h0 + HT] = acc


@pl.orchestration
def moe_experts(
    xe: pl.Tensor[[RANKS, E_LOCAL, CAP, H], pl.FP16],
    wg: pl.Tensor[[RANKS, E_LOCAL, F, H], pl.FP16, pl.NZ],
    wu: pl.Tensor[[RANKS, E_LOCAL, F, H], pl.FP16, pl.NZ],
    wd: pl.Tensor[[RANKS, E_LOCAL, H, F], pl.FP16, pl.NZ],
    ye: pl.Out[pl.Tensor[[RANKS, E_LOCAL, CAP, H], pl.FP32]],
):
    for r in range(RANKS):
        g, u = gate_up(xe[r], wg[r], wu[r], device=r)  # intermediates stay on rank r
        h = act(g, u, device=r)
        down(h, wd[r], ye[r], device=r)


# ------------------------------------------------------------------------------------ host side
def route(x: np.ndarray, w_router: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Top-k experts per token (ties broken by the lower expert id) and softmax weights over them."""
    logits = x.astype(np.float32) @ w_router.astype(np.float32)
    experts = np.argsort(-logits, axis=1, kind="stable")[:, :TOP_K]
    top = np.take_along_axis(logits, experts, axis=1)
    weights = np.exp(top - top.max(axis=1, keepdims=True))
    return experts, (weights / weights.sum(axis=1, keepdims=True)).astype(np.float32)


def dispatch(x: np.ndarray, experts: np.ndarray) -> tuple[np.ndarray, list[list[tuple[int, int]]]]:
    """Pack each expert's tokens into its capacity buffer xe[rank, local expert, slot]."""
    xe = np.zeros((RANKS, E_LOCAL, CAP, H), np.float16)
    slots: list[list[tuple[int, int]]] = [[] for _ in range(E)]  # (token, k) per slot
    for t in range(TOKENS):
        for k, ex in enumerate(experts[t]):
            slot = len(slots[ex])
            xe[ex // E_LOCAL, ex % E_LOCAL, slot] = x[t]
            slots[ex].append((t, k))
    return xe, slots


def combine(ye: np.ndarray, slots: list[list[tuple[int, int]]], weights: np.ndarray) -> np.ndarray:
    y = np.zeros((TOKENS, H), np.float32)
    for ex, taken in enumerate(slots):
        for slot, (t, k) in enumerate(taken):
            y[t] += weights[t, k] * ye[ex // E_LOCAL, ex % E_LOCAL, slot]
    return y


def reference_experts(xe: np.ndarray, wg: np.ndarray, wu: np.ndarray, wd: np.ndarray) -> np.ndarray:
    """The expert FFN in numpy, with the same fp16 rounding point as the kernels."""
    f32 = np.float32
    g = np.einsum("rech,refh->recf", xe.astype(f32), wg.astype(f32))
    u = np.einsum("rech,refh->recf", xe.astype(f32), wu.astype(f32))
    h = (np.maximum(g, 0) * u).astype(np.float16)
    assert np.abs(h).max() <= 2048, "activations must stay exact in fp16"
    return np.einsum("recf,rehf->rech", h.astype(f32), wd.astype(f32))


def make_cluster(use_ray: bool) -> tuple[runtime.Cluster | distributed.RayCluster, str]:
    """The cluster and its description: local threads, or one Ray actor per rank (a local Ray)."""
    if not use_ray:
        return runtime.Cluster(RANKS), "runtime.Cluster"
    from nzjit.distributed import RayCluster

    # a local Ray, started by RayCluster (its actors import this checkout's nzjit; keywords go to ray.init)
    cluster = RayCluster(
        RANKS, num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False
    )
    return cluster, "RayCluster (Ray actors)"


def upload_counts(cluster: object) -> list[tuple[int, int]]:
    """(uploads, bytes) per rank so far: counted by each worker's GM, here or in its actor."""
    stats = getattr(cluster, "rank_stats", None)
    if stats is not None:
        return [(s["uploads"], s["upload_bytes"]) for s in stats()]
    return [(w.gm.uploads, w.gm.upload_bytes) for w in cluster.workers]  # type: ignore[attr-defined]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="A 4-rank expert-parallel MoE layer, checked against numpy")
    parser.add_argument(
        "--ray", action="store_true", help="run the ranks as Ray actors (pip install 'nzjit[ray]')"
    )
    opts = parser.parse_args(argv)
    t_start = time.perf_counter()
    rng = np.random.default_rng(7)
    small = lambda *shape: rng.choice(np.array([-1, 0, 1], np.float16), size=shape, p=[0.25, 0.5, 0.25])
    x = small(TOKENS, H)
    w_router = rng.standard_normal((H, E)).astype(np.float32)
    wg, wu, wd = small(RANKS, E_LOCAL, F, H), small(RANKS, E_LOCAL, F, H), small(RANKS, E_LOCAL, H, F)

    cluster, where = make_cluster(opts.ray)
    # NZ-29: [RANKS, E_LOCAL, R, C] weights, packed plane by plane, shard r resident on rank r
    wg_d, wu_d, wd_d = (cluster.alloc_stacked_tensor(runtime.pack_nz(w)) for w in (wg, wu, wd))

    experts, weights = route(x, w_router)
    xe, slots = dispatch(x, experts)
    ye = moe_experts(xe, wg_d, wu_d, wd_d)  # first call: compiles the three kernels
    y = combine(ye, slots, weights)

    ye_ref = reference_experts(xe, wg, wu, wd)
    y_ref = combine(ye_ref, slots, weights)
    experts_ok = np.array_equal(ye, ye_ref)
    layer_ok = np.array_equal(y, y_ref)

    before = upload_counts(cluster)
    t0 = time.perf_counter()
    ye2 = moe_experts(xe, wg_d, wu_d, wd_d)
    t_call = time.perf_counter() - t0
    uploads = [(n1 - n0, b1 - b0) for (n1, b1), (n0, b0) in zip(upload_counts(cluster), before)]
    resident_ok = all(nb == xe[r].nbytes for r, (_, nb) in enumerate(uploads)) and np.array_equal(ye2, ye)

    per_expert = [len(s) for s in slots]
    print(
        f"tp_moe: {RANKS} ranks x {E_LOCAL} experts (E={E}), {TOKENS} tokens top-{TOP_K}, "
        f"H={H} F={F}, fp16 NZ weights {list(wg.shape)}, on {where}"
    )
    print(f"  tokens per expert      : {per_expert}")
    print(f"  expert outputs == numpy: {experts_ok}   (max |y| = {np.abs(ye).max():.0f})")
    print(f"  layer output   == numpy: {layer_ok}")
    print(
        f"  second call            : {t_call:.2f} s, uploads per rank {[n for n, _ in uploads]}, "
        f"bytes {[b for _, b in uploads]} (routed tokens only, no weights): {resident_ok}"
    )
    print(f"  total                  : {time.perf_counter() - t_start:.2f} s")
    if not (experts_ok and layer_ok and resident_ok):
        raise SystemExit("tp_moe: MISMATCH")


if __name__ == "__main__":
    main()
