"""ND activation x NZ weight: the weight's bytes are already in NZ fractal order in GM, so the
cube's B-operand load is NZ -> NZ (no fractal conversion per load). SPMD over N tiles.

    python examples/nz_matmul.py
"""

from __future__ import annotations

import numpy as np

import runtime
from nzjit import pl

M, K, N = 64, 2048, 1024
N_TILE, K_TILE = 256, 512


@pl.kernel
def nz_matmul(
    x: pl.Tensor[[M, K], pl.INT8],
    w: pl.Tensor[[N, K], pl.INT8, pl.NZ],
    out: pl.Out[pl.Tensor[[M, N], pl.INT32]],
):
    for nb in pl.spmd(N // N_TILE):
        n0 = nb * N_TILE  # proven: a multiple of 16 and non-negative -> row fractal n0 // 16
        acc = pl.matmul(x[:, 0:K_TILE], w[n0 : n0 + N_TILE, 0:K_TILE], b_trans=True)
        for k0 in pl.pipeline(K_TILE, K, K_TILE, stage=2):  # k0 // 32 is the C0 column block
            acc = pl.matmul_acc(
                acc, x[:, k0 : k0 + K_TILE], w[n0 : n0 + N_TILE, k0 : k0 + K_TILE], b_trans=True
            )
        out[:, n0 : n0 + N_TILE] = acc


def main() -> None:
    rng = np.random.default_rng(1)
    x = rng.integers(-128, 128, (M, K), dtype=np.int8)
    w = rng.integers(-128, 128, (N, K), dtype=np.int8)
    low = nz_matmul.lower()
    print(low.ir("BlockNzTensorViews"))
    out = nz_matmul(x, runtime.pack_nz(w))  # logical shape, NZ bytes
    ref = x.astype(np.int32) @ w.astype(np.int32).T
    assert np.array_equal(out, ref), "mismatch against numpy"
    w_param = low.ir().params[1].type
    print(f"\nw {N}x{K} INT8 NZ -> blocked {list(w_param.shape)} strides {list(w_param.strides)}")
    print(f"nz_matmul: exact against numpy ({out.size} elements)")


if __name__ == "__main__":
    main()
