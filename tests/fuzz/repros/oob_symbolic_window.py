"""Silently wrong: a symbolic NZ window past the last row is proven aligned and non-negative, but
never bounded, so it reads the next column block (found by nzjit.fuzz, probe oob_window).

w is [32, 64] INT8 NZ: two column blocks of 32 rows each (c0 = 32). The loop visits 3 row tiles;
the last one, rows [32, 48), does not exist. In NZ order "row 32 of column block 0" is row 0 of
column block 1, inside the same allocation, so nothing faults: the program returns
x @ w[0:16, 32:64]^T where numpy has no value (w[32:48] is empty). It must be refused.

    python tests/fuzz/repros/oob_symbolic_window.py     # AssertionError until fixed
"""

import numpy as np

import runtime
from nzjit import pl


@pl.kernel
def kernel(
    x: pl.Tensor[[16, 32], pl.INT8],
    w: pl.Tensor[[32, 64], pl.INT8, pl.NZ],
    out: pl.Out[pl.Tensor[[16, 48], pl.INT32]],
):
    for nb in pl.range(3):
        n0 = nb * 16  # proven: multiple of 16, >= 0; never proven <= 32 - 16
        xt = pl.load(x, [0, 0], [16, 32], target_memory=pl.Mem.Mat)
        wt = pl.load(w, [n0, 0], [16, 32], target_memory=pl.Mem.Mat)
        pl.store(pl.matmul(xt, wt, b_trans=True), [0, n0], out)


def main() -> None:
    rng = np.random.default_rng(0)
    x = rng.integers(-8, 8, (16, 32)).astype(np.int8)
    w = rng.integers(-8, 8, (32, 64)).astype(np.int8)
    try:
        out = kernel(x, runtime.pack_nz(w))
    except Exception as e:  # nzjit.CompileError / runtime.DispatchError: the correct outcome
        print(f"refused: {type(e).__name__}: {e}")
        return
    ghost = x.astype(np.int32) @ w[0:16, 32:64].astype(np.int32).T
    same = np.array_equal(out[:, 32:48], ghost)
    raise AssertionError(
        "accepted a window past the last row; out[:, 32:48] "
        + ("== x @ w[0:16, 32:64]^T (column block 1 read as rows 32..47)" if same else "is garbage")
    )


if __name__ == "__main__":
    main()
