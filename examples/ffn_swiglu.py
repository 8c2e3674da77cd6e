"""An FFN with SwiGLU through intermediate tensors, PyPTO's tensor-level style:

    gate = x @ Wg^T,  up = x @ Wu^T          (cube, fp16 NZ weights, fp32 results in GM tensors)
    h    = silu(gate) * up                   (vector unit, lanes over token blocks, fp16 in GM)
    out  = h @ Wd^T                          (cube)

The intermediates are kernel outputs the later stages read back (gate, up, h): each op takes
tensor windows and the compiler places the data (Vec loads and stores for the vector ops, L1 /
L0 for the matmuls).

Tolerance: within 2e-3 of max |out| of a float64 reference that rounds h to fp16 as the kernel
stores it (fp32 matmul sums and the device's fp32 exp).

    python examples/ffn_swiglu.py
"""

from __future__ import annotations

import numpy as np

import runtime
from nzjit import pl

T, H, F, B = 64, 256, 256, 16


@pl.kernel
def ffn(
    x: pl.Tensor[[T, H], pl.FP16],
    wg: pl.Tensor[[F, H], pl.FP16, pl.NZ],
    wu: pl.Tensor[[F, H], pl.FP16, pl.NZ],
    wd: pl.Tensor[[H, F], pl.FP16, pl.NZ],
    gate: pl.Out[pl.Tensor[[T, F], pl.FP32]],
    up: pl.Out[pl.Tensor[[T, F], pl.FP32]],
    h: pl.Out[pl.Tensor[[T, F], pl.FP16]],
    out: pl.Out[pl.Tensor[[T, H], pl.FP32]],
):
    gate[:, :] = pl.matmul(x[:, :], wg[:, :], b_trans=True)
    up[:, :] = pl.matmul(x[:, :], wu[:, :], b_trans=True)
    for lane in pl.spmd(T // B):
        r0 = lane * B
        g = gate[r0 : r0 + B, :]
        silu = pl.div(g, pl.add(pl.exp(pl.neg(g)), 1.0))
        h[r0 : r0 + B, :] = pl.cast(pl.mul(silu, up[r0 : r0 + B, :]), pl.FP16, mode="rint")
    out[:, :] = pl.matmul(h[:, :], wd[:, :], b_trans=True)


def reference(x, wg, wu, wd):
    """float64 numpy; h rounded to fp16 as the kernel stores it."""
    g = x.astype(np.float64) @ wg.T.astype(np.float64)
    u = x.astype(np.float64) @ wu.T.astype(np.float64)
    h = (g / (1 + np.exp(-g)) * u).astype(np.float16).astype(np.float64)
    return h @ wd.T.astype(np.float64)


def main() -> None:
    rng = np.random.default_rng(6)
    x = rng.standard_normal((T, H)).astype(np.float16)
    wg, wu = ((rng.standard_normal((F, H)) * 0.06).astype(np.float16) for _ in range(2))
    wd = (rng.standard_normal((H, F)) * 0.06).astype(np.float16)
    gate, up, h, out = ffn(x, runtime.pack_nz(wg), runtime.pack_nz(wu), runtime.pack_nz(wd))
    ref = reference(x, wg, wu, wd)
    err = np.abs(out - ref).max() / np.abs(ref).max()
    assert err < 2e-3, err
    print(
        f"FFN SwiGLU T={T} H={H} F={F} through intermediate tensors: max error {err:.1e} of max |out| "
        "(tolerance 2e-3)"
    )


if __name__ == "__main__":
    main()
