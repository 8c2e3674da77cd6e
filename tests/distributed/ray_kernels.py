"""Small two-rank kernels and data for the RayCluster tests (issue 25): every sum an exact integer."""

from __future__ import annotations

import time

import numpy as np

import runtime
from nzjit import pl

RANKS, T, N, K = 2, 16, 64, 64


@pl.kernel
def mm(
    x: pl.Tensor[[T, K], pl.FP16], w: pl.Tensor[[N, K], pl.FP16, pl.NZ], y: pl.Out[pl.Tensor[[T, N], pl.FP32]]
):
    y[:, :] = pl.matmul(x[:, :], w[:, :], b_trans=True)


@pl.kernel
def relu_mul(
    g: pl.Tensor[[T, N], pl.FP32], u: pl.Tensor[[T, N], pl.FP32], h: pl.Out[pl.Tensor[[T, N], pl.FP32]]
):
    gt = pl.load(g, [0, 0], [T, N])
    ut = pl.load(u, [0, 0], [T, N])
    pl.store(pl.mul(pl.maximum(gt, pl.sub(gt, gt)), ut), [0, 0], h)


@pl.kernel
def window(
    x: pl.Tensor[[64, 32], pl.FP32], off: pl.Scalar[pl.INT32], out: pl.InOut[pl.Tensor[[16, 32], pl.FP32]]
):
    """Copies rows [off, off + 16) of x; an `off` past the end faults on the device, not on the host."""
    pl.store(pl.load(x, [off, 0], [16, 32]), [0, 0], out)


@pl.orchestration
def one_mm(
    x: pl.Tensor[[RANKS, T, K], pl.FP16],
    w: pl.Tensor[[RANKS, N, K], pl.FP16, pl.NZ],
    y: pl.Out[pl.Tensor[[RANKS, T, N], pl.FP32]],
):
    for r in range(RANKS):
        mm(x[r], w[r], y[r], device=r)


@pl.orchestration
def ffn(
    x: pl.Tensor[[RANKS, T, K], pl.FP16],
    wg: pl.Tensor[[RANKS, N, K], pl.FP16, pl.NZ],
    wu: pl.Tensor[[RANKS, N, K], pl.FP16, pl.NZ],
    h: pl.Out[pl.Tensor[[RANKS, T, N], pl.FP32]],
):
    """Three kernels per rank; g and u are intermediates resident on their rank."""
    for r in range(RANKS):
        g = mm(x[r], wg[r], device=r)
        u = mm(x[r], wu[r], device=r)
        relu_mul(g, u, h[r], device=r)


def small(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.choice(np.array([-1, 0, 1], np.float16), size=shape, p=[0.25, 0.5, 0.25])


def data(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return small(rng, RANKS, T, K), small(rng, RANKS, N, K), small(rng, RANKS, N, K)


def ref_mm(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    return np.einsum("rtk,rnk->rtn", x.astype(np.float32), w.astype(np.float32))


def ref_ffn(x: np.ndarray, wg: np.ndarray, wu: np.ndarray) -> np.ndarray:
    return np.maximum(ref_mm(x, wg), 0) * ref_mm(x, wu)


pack = runtime.pack_nz


@pl.orchestration
def ffn_created(
    x: pl.Tensor[[RANKS, T, K], pl.FP16],
    wg: pl.Tensor[[RANKS, N, K], pl.FP16, pl.NZ],
    wu: pl.Tensor[[RANKS, N, K], pl.FP16, pl.NZ],
    h: pl.Out[pl.Tensor[[RANKS, T, N], pl.FP32]],
):
    """`ffn` with g made by pl.create_tensor: resident on the rank of its first use."""
    for r in range(RANKS):
        g = pl.create_tensor([T, N], pl.FP32)
        mm(x[r], wg[r], g, device=r)
        relu_mul(g, mm(x[r], wu[r], device=r), h[r], device=r)


KILL_DEADLINE = 60.0


def kill_and_wait(ray, actor, probe=lambda a: a.ping.remote([])) -> None:
    """`ray.kill(actor)` and return once a call to it fails: ray.kill only asks for the kill, so a
    message sent right after it may still be run by the actor, and the call it belongs to succeed."""
    ray.kill(actor, no_restart=True)
    deadline = time.monotonic() + KILL_DEADLINE
    while time.monotonic() < deadline:
        try:
            ray.get(probe(actor), timeout=5)
        except ray.exceptions.RayActorError:
            return  # dead: every later call fails the same way
        except (ray.exceptions.GetTimeoutError, ray.exceptions.ActorUnavailableError):
            pass
        time.sleep(0.05)
    raise AssertionError(f"actor {actor} still answers {KILL_DEADLINE:g} s after ray.kill")
