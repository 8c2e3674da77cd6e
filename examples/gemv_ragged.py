"""A one-row matmul (gemv) with a K tail and an N tail, stored into an exact-size output.

`x` is one row of K = 1000 INT8 values, `w` a `[1000, 300]` weight. The kernel reads whole tiles:
a `[1, 1024]` window of `x` and `[1024, 128]` windows of `w`, each clamped to the tensor
(`clamp=True` cuts the valid part back to the edge, as PyPTO's `pl.load` does). The cube reads
only the valid part: k = the row's valid K (1000), n = the weight tile's valid N (128, 128, then
44); the last tile's result is stored into its 44 columns of the `[1, 300]` output.

    python examples/gemv_ragged.py
"""

from __future__ import annotations

import numpy as np

from nzjit import pl

K, N = 1000, 300
KW, NT = 1024, 128  # the tile windows: K rounded up to whole fractals, N in tiles of 128


@pl.kernel
def gemv_ragged(
    x: pl.Tensor[[1, K], pl.INT8], w: pl.Tensor[[K, N], pl.INT8], y: pl.Out[pl.Tensor[[1, N], pl.INT32]]
):
    tx = pl.load(x, [0, 0], [1, KW], target_memory=pl.Mem.Mat, clamp=True)  # valid [1, 1000]
    for n0 in pl.range(0, N, NT):
        tw = pl.load(w, [0, n0], [KW, NT], target_memory=pl.Mem.Mat, clamp=True)  # valid [1000, <= 128]
        pl.store(pl.tile.gemv(tx, tw), [0, n0], y)


def main() -> None:
    rng = np.random.default_rng(0)
    x = rng.integers(-128, 128, (1, K), dtype=np.int8)
    w = rng.integers(-128, 128, (K, N), dtype=np.int8)
    print(gemv_ragged.lower().ir())
    y = gemv_ragged(x, w)
    ref = x.astype(np.int32) @ w.astype(np.int32)
    assert y.shape == (1, N) and np.array_equal(y, ref), "mismatch against numpy"
    print(f"\ngemv_ragged [1, {K}] @ [{K}, {N}] int8 -> int32: exact against numpy")


if __name__ == "__main__":
    main()
