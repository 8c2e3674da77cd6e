"""A fused MoE expert on the cube and the vector unit, one SPMD lane per expert:

    gate = dequant(x_q @ Wg_q[e]^T),  up = dequant(x_q @ Wu_q[e]^T)    (int8 NZ weights, int32 Acc)
    h    = silu(gate) * up                                             (SwiGLU on the vector unit)
    out[e] = h @ Wd[e]^T                                               (fp16 NZ weight, fp32 Acc)

Dequantisation: the int32 accumulator is moved to the vector unit (on A2/A3 through the GM pipe
between the cube and the vector core), converted to fp32 and scaled by the per-channel weight
scale (a [1, F] row broadcast down the tokens) and the activation's per-tensor scale (a
pl.Scalar[pl.FP32] parameter). h goes back to the cube as fp16 (Vec -> Mat).

Tolerance: gate / up are exact (int8 products summed in int32, scaled once in fp32); silu's exp
is the device's fp32 exp; h is rounded to fp16 before the down projection, so the result is
within 2e-3 relative (fp16's half ulp plus fp32 sums) of a float64 numpy reference that rounds h
to fp16 the same way.

    python examples/fused_moe_expert.py
"""

from __future__ import annotations

import numpy as np

import runtime
from nzjit import pl

E, T, H, F = 4, 32, 256, 128  # experts, tokens per expert, hidden, intermediate


@pl.kernel
def moe_expert(
    x: pl.Tensor[[E, T, H], pl.INT8],
    wg: pl.Tensor[[E, F, H], pl.INT8, pl.NZ],
    wu: pl.Tensor[[E, F, H], pl.INT8, pl.NZ],
    sg: pl.Tensor[[E, F], pl.FP32],
    su: pl.Tensor[[E, F], pl.FP32],
    wd: pl.Tensor[[E, H, F], pl.FP16, pl.NZ],
    x_scale: pl.Scalar[pl.FP32],
    out: pl.Out[pl.Tensor[[E, T, H], pl.FP32]],
):
    for e in pl.spmd(E):
        xm = pl.load(x[e], [0, 0], [T, H], target_memory=pl.Mem.Mat)
        acc_g = pl.matmul(xm, pl.load(wg[e], [0, 0], [F, H], target_memory=pl.Mem.Mat), b_trans=True)
        acc_u = pl.matmul(xm, pl.load(wu[e], [0, 0], [F, H], target_memory=pl.Mem.Mat), b_trans=True)
        # dequantise: int32 -> fp32, per-channel weight scale, per-tensor activation scale
        gate = pl.col_expand_mul(
            pl.cast(pl.move(acc_g, target_memory=pl.Mem.Vec), pl.FP32, mode="rint"),
            pl.load(sg, [e, 0], [1, F]),
        )
        up = pl.col_expand_mul(
            pl.cast(pl.move(acc_u, target_memory=pl.Mem.Vec), pl.FP32, mode="rint"),
            pl.load(su, [e, 0], [1, F]),
        )
        gate = pl.mul(gate, x_scale)
        up = pl.mul(up, x_scale)
        # SwiGLU: silu(gate) * up, silu(g) = g / (1 + exp(-g))
        h = pl.mul(pl.div(gate, pl.add(pl.exp(pl.neg(gate)), 1.0)), up)
        hm = pl.move(pl.cast(h, pl.FP16, mode="rint"), target_memory=pl.Mem.Mat)
        acc_d = pl.matmul(hm, pl.load(wd[e], [0, 0], [H, F], target_memory=pl.Mem.Mat), b_trans=True)
        pl.store(acc_d, [0, 0], out[e])


def reference(x, wg, wu, sg, su, wd, x_scale):
    """float64 numpy; h rounded to fp16 as the kernel feeds it to the cube."""
    out = np.empty((E, T, H))
    for e in range(E):
        g = (x[e].astype(np.int64) @ wg[e].T.astype(np.int64)) * sg[e][None, :].astype(np.float64) * x_scale
        u = (x[e].astype(np.int64) @ wu[e].T.astype(np.int64)) * su[e][None, :].astype(np.float64) * x_scale
        h = (g / (1 + np.exp(-g)) * u).astype(np.float16).astype(np.float64)
        out[e] = h @ wd[e].T.astype(np.float64)
    return out


def data(seed: int = 5):
    rng = np.random.default_rng(seed)
    x = rng.integers(-127, 128, (E, T, H)).astype(np.int8)
    wg = rng.integers(-127, 128, (E, F, H)).astype(np.int8)
    wu = rng.integers(-127, 128, (E, F, H)).astype(np.int8)
    sg = (rng.random((E, F)) * 2e-3 + 1e-4).astype(np.float32)
    su = (rng.random((E, F)) * 2e-3 + 1e-4).astype(np.float32)
    wd = (rng.standard_normal((E, H, F)) * 0.05).astype(np.float16)
    return x, wg, wu, sg, su, wd, np.float32(0.02)


def main() -> None:
    x, wg, wu, sg, su, wd, xs = data()
    out = moe_expert(x, runtime.pack_nz(wg), runtime.pack_nz(wu), sg, su, runtime.pack_nz(wd), float(xs))
    ref = reference(x, wg, wu, sg, su, wd, float(xs))
    err = np.abs(out - ref).max() / np.abs(ref).max()
    assert err < 2e-3, err
    print(
        f"fused MoE expert E={E} T={T} H={H} F={F} (int8 NZ gate/up + dequant + SwiGLU + fp16 down): "
        f"max error {err:.1e} of max |out| (tolerance 2e-3)"
    )


if __name__ == "__main__":
    main()
