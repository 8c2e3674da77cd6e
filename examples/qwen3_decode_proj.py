"""A Qwen3-style decode projection: 4 tokens times an NZ weight, K in a loop written as PyPTO's
models write it (`if k0 == 0: acc = pl.matmul(...) else: acc = pl.matmul_acc(acc, ...)`).

One SPMD lane per 128 output columns. The 4-token Left operand is a decode batch: its Mat tile is
one 16-row fractal of which 4 rows are valid, the cube computes m = 4 rows and the store writes
those 4 only (hardware-model.md §3, §6). The branch on `k0` is a real `scf.if` in the PTO text.

    python examples/qwen3_decode_proj.py
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

import runtime
from nzjit import pl

T, HIDDEN, OUT = 4, 2048, 1024  # tokens, hidden size (K), projection width (N)
NT, KT = 128, 512


@pl.kernel
def decode_proj(
    x: pl.Tensor[[T, HIDDEN], pl.BF16],
    w: pl.Tensor[[OUT, HIDDEN], pl.BF16, pl.NZ],
    y: pl.Out[pl.Tensor[[T, OUT], pl.FP32]],
):
    for nb in pl.spmd(OUT // NT):
        n0 = nb * NT
        # the accumulator needs a value of its type before the loop (the arm not taken yields it)
        acc = pl.matmul(
            pl.load(x, [0, 0], [T, KT], target_memory=pl.Mem.Mat),
            pl.load(w, [n0, 0], [NT, KT], target_memory=pl.Mem.Mat),
            b_trans=True,
        )
        for kb in pl.range(HIDDEN // KT):
            k0 = kb * KT
            a = pl.load(x, [0, k0], [T, KT], target_memory=pl.Mem.Mat)
            b = pl.load(w, [n0, k0], [NT, KT], target_memory=pl.Mem.Mat)  # an NZ window: whole fractals
            if k0 == 0:
                acc = pl.matmul(a, b, b_trans=True)
            else:
                acc = pl.matmul_acc(acc, a, b, b_trans=True)
        pl.store(acc, [0, n0], y)


def main() -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((T, HIDDEN)).astype(ml_dtypes.bfloat16)
    w = rng.standard_normal((OUT, HIDDEN)).astype(ml_dtypes.bfloat16)
    y = decode_proj(x, runtime.pack_nz(w))
    ref = x.astype(np.float64) @ w.astype(np.float64).T
    np.testing.assert_allclose(y, ref, rtol=1e-3, atol=5e-2)  # bf16 products summed in float32
    assert "scf.if" in decode_proj.lower(x, runtime.pack_nz(w)).pto()
    print(
        f"decode_proj [{T}, {HIDDEN}] @ [{HIDDEN}, {OUT}] bf16 -> fp32: within float32 accumulation of numpy"
    )


if __name__ == "__main__":
    main()
