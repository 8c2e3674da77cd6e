"""Per-head attention scores with `pl.batch_matmul`: `s[h] = q[h] @ k[h].T` for 16 heads.

Each of 4 SPMD lanes takes 4 heads: a rank-3 `[4, 32, 128]` Mat tile of queries (ND) and a
rank-3 `[4, 64, 128]` Mat tile of the key cache, an NZ tensor `[H, S_kv, D]` whose every head is
its own NZ block. `pl.tile.transpose_view` gives the `[4, 128, 64]` rhs (PyPTO's spelling of a
transposed operand). FlattenTileNdTo2D unrolls the batched matmul into one TMATMUL per head, as
PyPTO does: each head's query window and key block is loaded, multiplied and stored in turn, so
one head's tiles are on chip at a time (the memory plan printed below).

    python examples/batch_matmul.py
"""

from __future__ import annotations

import numpy as np

import runtime
from nzjit import pl

H, S, S_KV, D = 16, 32, 64, 128
LANES = 4
HB = H // LANES  # heads per lane: the batch of each batched matmul


@pl.kernel
def head_scores(
    q: pl.Tensor[[H, S, D], pl.FP16],
    k: pl.Tensor[[H, S_KV, D], pl.FP16, pl.NZ],
    s: pl.Out[pl.Tensor[[H, S, S_KV], pl.FP32]],
):
    for lane in pl.spmd(LANES):
        h0 = lane * HB
        tq = pl.load(q, [h0, 0, 0], [HB, S, D], target_memory=pl.Mem.Mat)
        tk = pl.load(k, [h0, 0, 0], [HB, S_KV, D], target_memory=pl.Mem.Mat)
        pl.store(pl.batch_matmul(tq, pl.tile.transpose_view(tk)), [h0, 0, 0], s)


def main() -> None:
    rng = np.random.default_rng(0)
    q = rng.standard_normal((H, S, D)).astype(np.float16)
    k = rng.standard_normal((H, S_KV, D)).astype(np.float16)
    low = head_scores.lower(q, runtime.pack_nz(k))
    print(low.memory())
    got = head_scores(q, runtime.pack_nz(k))
    ref = np.matmul(q.astype(np.float64), np.swapaxes(k.astype(np.float64), 1, 2))
    np.testing.assert_allclose(got, ref, rtol=1e-3, atol=1e-2)  # float32 sums of FP16 products
    print(f"\nhead_scores {H} x [{S}x{D}] @ [{D}x{S_KV}]: within float32 accumulation of numpy")


if __name__ == "__main__":
    main()
