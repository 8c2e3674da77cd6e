"""An SPMD int8 matmul with a pipelined K loop that carries its accumulator (ND weights).

python examples/matmul_nd.py
"""

from __future__ import annotations

import numpy as np

from nzjit import pl

M, K, N = 128, 1024, 512
N_TILE, K_TILE = 128, 256


@pl.kernel
def matmul_nd(
    x: pl.Tensor[[M, K], pl.INT8], w: pl.Tensor[[N, K], pl.INT8], out: pl.Out[pl.Tensor[[M, N], pl.INT32]]
):
    for nb in pl.spmd(N // N_TILE):  # one lane per N tile
        n0 = nb * N_TILE
        acc = pl.matmul(x[:, 0:K_TILE], w[n0 : n0 + N_TILE, 0:K_TILE], b_trans=True)
        for k0 in pl.pipeline(K_TILE, K, K_TILE, stage=2):
            acc = pl.matmul_acc(
                acc, x[:, k0 : k0 + K_TILE], w[n0 : n0 + N_TILE, k0 : k0 + K_TILE], b_trans=True
            )
        out[:, n0 : n0 + N_TILE] = acc


def main() -> None:
    rng = np.random.default_rng(0)
    x = rng.integers(-128, 128, (M, K), dtype=np.int8)
    w = rng.integers(-128, 128, (N, K), dtype=np.int8)
    low = matmul_nd.lower()
    print("== IR after tracing ==")
    print(low.ir("trace"))
    print("\n== IR after the pipeline ==")
    print(low.ir())
    out = matmul_nd(x, w)
    ref = x.astype(np.int32) @ w.astype(np.int32).T
    assert np.array_equal(out, ref), "mismatch against numpy"
    print(f"\nmatmul_nd {M}x{K} @ {K}x{N} int8 -> int32: exact against numpy ({out.size} elements)")


if __name__ == "__main__":
    main()
