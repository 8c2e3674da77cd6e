"""One flash-attention block for one head: QK^T on the cube, the online softmax on the vector unit
(row max / row sum of each key block, rescaling the running output), PV back on the cube.

For each key block j (S_KV / BK of them, unrolled):
    s   = (q @ k_j^T) * scale                     cube -> Acc -> Vec (A2/A3: through the GM pipe)
    m'  = max(m, row_max(s));  p = exp(s - m')
    l   = l * exp(m - m') + row_sum(p)
    o   = o * exp(m - m') + p @ v_j               p: Vec -> Mat as fp16, the product back to Vec
out = o / l

Tolerance: within 2e-3 of max |out| of float64 softmax attention (p is rounded to fp16 for the
cube, as a real kernel does).

    python examples/flash_attention.py
"""

from __future__ import annotations

import math

import numpy as np

from nzjit import pl

SQ, SKV, D, BK = 64, 256, 64, 64
SCALE = 1.0 / math.sqrt(D)


@pl.kernel
def attention(
    q: pl.Tensor[[SQ, D], pl.FP16],
    k: pl.Tensor[[SKV, D], pl.FP16],
    v: pl.Tensor[[SKV, D], pl.FP16],
    out: pl.Out[pl.Tensor[[SQ, D], pl.FP32]],
):
    qm = pl.load(q, [0, 0], [SQ, D], target_memory=pl.Mem.Mat)
    m = pl.full([SQ, 1], dtype=pl.FP32, value=-math.inf)
    l = pl.full([SQ, 1], dtype=pl.FP32, value=0.0)  # noqa: E741 - the softmax denominator
    o = pl.full([SQ, D], dtype=pl.FP32, value=0.0)
    for j in range(SKV // BK):  # unrolled at trace time
        km = pl.load(k, [j * BK, 0], [BK, D], target_memory=pl.Mem.Mat)
        s = pl.mul(pl.move(pl.matmul(qm, km, b_trans=True), target_memory=pl.Mem.Vec), SCALE)
        m_new = pl.maximum(m, pl.row_max(s))
        p = pl.exp(pl.row_expand_sub(s, m_new))
        alpha = pl.exp(pl.sub(m, m_new))
        l = pl.add(pl.mul(l, alpha), pl.row_sum(p))  # noqa: E741
        pm = pl.move(pl.cast(p, pl.FP16, mode="rint"), target_memory=pl.Mem.Mat)
        pv = pl.move(
            pl.matmul(pm, pl.load(v, [j * BK, 0], [BK, D], target_memory=pl.Mem.Mat)),
            target_memory=pl.Mem.Vec,
        )
        o = pl.add(pl.row_expand_mul(o, alpha), pv)
        m = m_new
    pl.store(pl.row_expand_div(o, l), [0, 0], out)


def reference(q, k, v):
    """float64 softmax attention."""
    s = q.astype(np.float64) @ k.T.astype(np.float64) * SCALE
    p = np.exp(s - s.max(axis=1, keepdims=True))
    return (p / p.sum(axis=1, keepdims=True)) @ v.astype(np.float64)


def main() -> None:
    rng = np.random.default_rng(8)
    q, k, v = (rng.standard_normal(shape).astype(np.float16) for shape in ((SQ, D), (SKV, D), (SKV, D)))
    out = attention(q, k, v)
    ref = reference(q, k, v)
    err = np.abs(out - ref).max() / np.abs(ref).max()
    assert err < 2e-3, err
    print(
        f"flash attention block SQ={SQ} SKV={SKV} D={D} (blocks of {BK}): max error {err:.1e} of max |out| "
        "(tolerance 2e-3)"
    )


if __name__ == "__main__":
    main()
