"""Row top-k for MoE routing (k = 16 of 512 experts' scores), on the vector unit as PyPTO builds it:

    idx    = pl.arange(0, [1, 512])                     (TCI)
    pairs  = pl.sort32(scores, idx)                     (TSORT32: 16 sorted runs of 32 (value, index))
    pairs  = pl.mrgsort(pairs, block_len=64)            (TMRGSORT: 4 runs of 128)
    pairs  = pl.mrgsort(pairs, block_len=256)           (1 run of 512)
    top    = pairs[:, 0:2 * K]                          (the first K pairs)
    values = pl.gather(top, mask_pattern=P0101)         (even positions: the values)
    index  = pl.gather(top, mask_pattern=P1010, output_dtype=pl.INT32)   (odd positions: index bits)

One SPMD lane per token. Exact: the k largest scores, descending, and their expert indices (ties:
the smaller index first, as numpy's stable argsort of -score).

    python examples/topk.py
"""

from __future__ import annotations

import numpy as np

from nzjit import pl

TOKENS, EXPERTS, K = 8, 512, 16


@pl.kernel
def topk(
    scores: pl.Tensor[[TOKENS, EXPERTS], pl.FP32],
    values: pl.Out[pl.Tensor[[TOKENS, K], pl.FP32]],
    index: pl.Out[pl.Tensor[[TOKENS, K], pl.INT32]],
):
    for t in pl.spmd(TOKENS):
        s = pl.load(scores, [t, 0], [1, EXPERTS])
        pairs = pl.sort32(s, pl.arange(0, [1, EXPERTS], dtype=pl.INT32))
        pairs = pl.mrgsort(pairs, block_len=64)
        pairs = pl.mrgsort(pairs, block_len=256)
        top = pairs[:, 0 : 2 * K]
        pl.store(pl.gather(top, mask_pattern=pl.tile.MaskPattern.P0101), [t, 0], values)
        pl.store(pl.gather(top, mask_pattern=pl.tile.MaskPattern.P1010, output_dtype=pl.INT32), [t, 0], index)


def reference(scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """numpy: a stable argsort of -score."""
    order = np.argsort(-scores, axis=1, kind="stable")[:, :K]
    return np.take_along_axis(scores, order, 1), order.astype(np.int32)


def main() -> None:
    rng = np.random.default_rng(9)
    scores = rng.standard_normal((TOKENS, EXPERTS)).astype(np.float32)
    scores[0, 100] = scores[0, 7]  # a tie: the smaller expert index comes first
    values, index = topk(scores)
    want_v, want_i = reference(scores)
    assert np.array_equal(values, want_v) and np.array_equal(index, want_i)
    print(f"row top-{K} of {EXPERTS} for {TOKENS} tokens: exact against numpy")


if __name__ == "__main__":
    main()
