"""A linear layer with its bias added by the cube: `y = x @ w.T + b` (TMATMUL_BIAS).

The weight is NZ `[N, K]`; the `[1, N]` FP32 bias is loaded into Mat like the operands and moved
into the bias table (1 KiB: 256 FP32 entries), so the 512-column output is split along N into
blocks of 256 when it is stored. A 256 x 256 FP16 block of the weight does not fit L0B (64 KiB):
K runs in two chunks, the first TMATMUL_BIAS, the second TMATMUL_ACC, so the bias is added once.

    python examples/matmul_bias.py
"""

from __future__ import annotations

import numpy as np

import runtime
from nzjit import pl

M, K, N = 64, 256, 512


@pl.kernel
def linear_bias(
    x: pl.Tensor[[M, K], pl.FP16],
    w: pl.Tensor[[N, K], pl.FP16, pl.NZ],
    b: pl.Tensor[[1, N], pl.FP32],
    y: pl.Out[pl.Tensor[[M, N], pl.FP32]],
):
    tx = pl.load(x, [0, 0], [M, K], target_memory=pl.Mem.Mat)
    tw = pl.load(w, [0, 0], [N, K], target_memory=pl.Mem.Mat)
    tb = pl.load(b, [0, 0], [1, N], target_memory=pl.Mem.Mat)
    pl.store(pl.tile.matmul_bias(tx, tw, tb, b_trans=True), [0, 0], y)


def main() -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((M, K)).astype(np.float16)
    w = rng.standard_normal((N, K)).astype(np.float16)
    b = rng.standard_normal((1, N)).astype(np.float32)
    low = linear_bias.lower(x, runtime.pack_nz(w), b)
    print(low.ir())
    print(low.memory())
    y = linear_bias(x, runtime.pack_nz(w), b)
    ref = x.astype(np.float64) @ w.astype(np.float64).T + b
    np.testing.assert_allclose(y, ref, rtol=1e-3, atol=2e-2)  # float32 sums, the cube's order
    print(f"\nlinear_bias {M}x{K} @ {K}x{N} + bias: within float32 accumulation of numpy")


if __name__ == "__main__":
    main()
