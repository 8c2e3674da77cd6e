"""Kernels for the orchestration-view tests (issue 25 item 1): small NZ and ND matmuls."""

from __future__ import annotations

import numpy as np

from nzjit import pl

RANKS, E, T, N, K = 2, 3, 16, 64, 64


@pl.kernel
def mm_plane(
    x: pl.Tensor[[T, K], pl.INT8],
    w: pl.Tensor[[N, K], pl.INT8, pl.NZ],
    out: pl.Out[pl.Tensor[[T, N], pl.INT32]],
):
    out[:, :] = pl.matmul(x[:, :], w[:, :], b_trans=True)


@pl.kernel
def mm_pair(
    x: pl.Tensor[[2, T, K], pl.INT8],
    w: pl.Tensor[[2, N, K], pl.INT8, pl.NZ],
    out: pl.Out[pl.Tensor[[2, T, N], pl.INT32]],
):
    for e in pl.spmd(2):
        out[e, :, :] = pl.matmul(x[e, :, :], w[e, :, :], b_trans=True)


@pl.kernel
def mm_nd(
    x: pl.Tensor[[T, K], pl.FP32], w: pl.Tensor[[N, K], pl.FP32], out: pl.Out[pl.Tensor[[T, N], pl.FP32]]
):
    out[:, :] = pl.matmul(x[:, :], w[:, :], b_trans=True)


@pl.kernel
def double(x: pl.Tensor[[T, N], pl.FP32], y: pl.Out[pl.Tensor[[T, N], pl.FP32]]):
    t = pl.load(x, [0, 0], [T, N])
    pl.store(pl.add(t, t), [0, 0], y)


def data(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """x [RANKS, E, T, K] and logical w [RANKS, E, N, K], small int8 (sums exact in int32)."""
    rng = np.random.default_rng(seed)
    return (
        rng.integers(-4, 5, (RANKS, E, T, K)).astype(np.int8),
        rng.integers(-4, 5, (RANKS, E, N, K)).astype(np.int8),
    )


def ref(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """x[..., T, K] @ w[..., N, K]^T in int32."""
    return np.einsum("...tk,...nk->...tn", x.astype(np.int32), w.astype(np.int32))


@pl.kernel
def copy_i32(x: pl.Tensor[[T, N], pl.INT32], y: pl.Out[pl.Tensor[[T, N], pl.INT32]]):
    pl.store(pl.load(x, [0, 0], [T, N]), [0, 0], y)
