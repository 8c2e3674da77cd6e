"""Grouped (MoE expert) matmul: E experts, an `[E, N, K]` NZ weight, SPMD over experts and N
tiles, pipelined K. Also fp16 weights holding small integers, exact in fp32.

    python examples/grouped_matmul.py
"""

from __future__ import annotations

import numpy as np

import runtime
from nzjit import pl

E, T, N, K = 4, 64, 512, 1024
N_TILE, K_TILE = 256, 256


def make(dtype):  # one kernel per dtype: the annotations are part of the kernel
    out_dtype = pl.INT32 if dtype is pl.INT8 else pl.FP32

    @pl.kernel
    def grouped_matmul(
        x: pl.Tensor[[E, T, K], dtype],
        w: pl.Tensor[[E, N, K], dtype, pl.NZ],
        out: pl.Out[pl.Tensor[[E, T, N], out_dtype]],
    ):
        for lane in pl.spmd(E * (N // N_TILE)):
            e = lane // (N // N_TILE)
            n0 = (lane % (N // N_TILE)) * N_TILE
            acc = pl.matmul(x[e, :, 0:K_TILE], w[e, n0 : n0 + N_TILE, 0:K_TILE], b_trans=True)
            for k0 in pl.pipeline(K_TILE, K, K_TILE):
                acc = pl.matmul_acc(
                    acc, x[e, :, k0 : k0 + K_TILE], w[e, n0 : n0 + N_TILE, k0 : k0 + K_TILE], b_trans=True
                )
            out[e, :, n0 : n0 + N_TILE] = acc

    return grouped_matmul


def main() -> None:
    rng = np.random.default_rng(2)
    for dtype, np_dtype in ((pl.INT8, np.int8), (pl.FP16, np.float16)):
        x = rng.integers(-8, 8, (E, T, K)).astype(np_dtype)
        w = rng.integers(-8, 8, (E, N, K)).astype(np_dtype)
        out = make(dtype)(x, runtime.pack_nz(w))
        ref = np.einsum("etk,enk->etn", x.astype(np.int64), w.astype(np.int64))
        assert np.array_equal(out.astype(np.int64), ref), f"{dtype} mismatch"
        print(f"grouped_matmul E={E} T={T} N={N} K={K} {dtype.name}: exact against numpy")


if __name__ == "__main__":
    main()
