"""RMSNorm and RoPE as in a decode layer, on the vector unit (one SPMD lane per block of tokens):

    n = x * rsqrt(mean_j x^2 + eps) * gamma                  (RMSNorm; gamma is a [1, D] row)
    q = n @ ... (not here); RoPE on a head of D = 2 * HALF:
    r[:, :HALF] = n1 * cos - n2 * sin,  r[:, HALF:] = n2 * cos + n1 * sin

x is fp16 in GM, computed in fp32 (bf16 / fp16 arithmetic is converted first, as on A2/A3) and
written back as fp16. The halves are tile windows (n[:, 0:HALF]) and the result is assembled
with window assignments.

Tolerance: the fp16 output is within one fp16 ulp (rtol 1e-3) of a float64 numpy reference.

    python examples/rmsnorm_rope.py
"""

from __future__ import annotations

import numpy as np

from nzjit import pl

T, D, BLOCK = 64, 128, 16
HALF = D // 2
EPS = 1e-6


@pl.kernel
def rmsnorm_rope(
    x: pl.Tensor[[T, D], pl.FP16],
    gamma: pl.Tensor[[1, D], pl.FP32],
    cos: pl.Tensor[[T, HALF], pl.FP32],
    sin: pl.Tensor[[T, HALF], pl.FP32],
    y: pl.Out[pl.Tensor[[T, D], pl.FP16]],
):
    for lane in pl.spmd(T // BLOCK):
        r0 = lane * BLOCK
        v = pl.cast(pl.load(x, [r0, 0], [BLOCK, D]), pl.FP32, mode="rint")
        ms = pl.mul(pl.row_sum(pl.mul(v, v)), 1.0 / D)
        n = pl.row_expand_mul(v, pl.rsqrt(pl.add(ms, EPS)))
        n = pl.col_expand_mul(n, pl.load(gamma, [0, 0], [1, D]))
        c = pl.load(cos, [r0, 0], [BLOCK, HALF])
        s = pl.load(sin, [r0, 0], [BLOCK, HALF])
        n1, n2 = n[:, 0:HALF], n[:, HALF:D]
        r = pl.create_tile([BLOCK, D], dtype=pl.FP32)
        r[:, 0:HALF] = pl.sub(pl.mul(n1, c), pl.mul(n2, s))
        r[:, HALF:D] = pl.add(pl.mul(n2, c), pl.mul(n1, s))
        pl.store(pl.cast(r, pl.FP16, mode="rint"), [r0, 0], y)


def reference(x, gamma, cos, sin):
    """float64 numpy."""
    v = x.astype(np.float64)
    n = v / np.sqrt((v * v).mean(axis=1, keepdims=True) + EPS) * gamma
    n1, n2 = n[:, :HALF], n[:, HALF:]
    return np.concatenate([n1 * cos - n2 * sin, n2 * cos + n1 * sin], axis=1)


def main() -> None:
    rng = np.random.default_rng(4)
    x = rng.standard_normal((T, D)).astype(np.float16)
    gamma = (1 + 0.1 * rng.standard_normal((1, D))).astype(np.float32)
    ang = np.arange(T)[:, None] * (10000.0 ** (-np.arange(HALF) / HALF))[None, :]
    cos, sin = np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)
    y = rmsnorm_rope(x, gamma, cos, sin)
    np.testing.assert_allclose(y.astype(np.float64), reference(x, gamma, cos, sin), rtol=1e-3, atol=1e-3)
    print(f"RMSNorm + RoPE T={T} D={D} (fp16 in / out, fp32 math): within one fp16 ulp of numpy")


if __name__ == "__main__":
    main()
