"""Stacked layer weights `[LAYERS, N, K]` in NZ: one layer is sliced (`w[layer]`, a tensor.slice
narrowing the leading axis only, NZ-30) and read tile by tile. Stacking layers on a leading axis
also keeps the layer stride in the batch stride, away from the 16-bit burst gap (NZ-25).

    python examples/stacked_layers.py
"""

from __future__ import annotations

import numpy as np

import runtime
from nzjit import pl

LAYERS, T, N, K = 6, 32, 256, 512


@pl.kernel
def one_layer(
    x: pl.Tensor[[T, K], pl.FP16],
    w: pl.Tensor[[LAYERS, N, K], pl.FP16, pl.NZ],
    layer: pl.Scalar[pl.INT32],
    out: pl.Out[pl.Tensor[[T, N], pl.FP32]],
):
    wl = w[layer]  # [N, K] NZ view of one layer
    xt = pl.load(x, [0, 0], [T, K], target_memory=pl.Mem.Mat)
    for nb in pl.range(N // 128):
        n0 = nb * 128
        wt = pl.load(wl, [n0, 0], [128, K], target_memory=pl.Mem.Mat)
        pl.store(pl.matmul(xt, wt, b_trans=True), [0, n0], out)


def main() -> None:
    rng = np.random.default_rng(3)
    x = rng.integers(-4, 4, (T, K)).astype(np.float16)
    w = rng.integers(-4, 4, (LAYERS, N, K)).astype(np.float16)
    wp = runtime.pack_nz(w)
    for layer in (0, 3, LAYERS - 1):
        out = one_layer(x, wp, layer)
        ref = x.astype(np.float32) @ w[layer].astype(np.float32).T
        assert np.array_equal(out, ref), f"layer {layer} mismatch"
    print(one_layer.lower().ir("BlockNzTensorViews"))
    print(f"\nstacked_layers: layers 0, 3, {LAYERS - 1} of [{LAYERS}, {N}, {K}] FP16 NZ exact against numpy")


if __name__ == "__main__":
    main()
