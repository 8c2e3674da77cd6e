"""Crash: an ND matmul operand window that is not whole 16 x c0 fractals compiles, then the
backend cannot allocate its Mat tile (DeviceError) (found by nzjit.fuzz, tag nd_mat_partial).

x is [8, 64] FP16 (M = 8 rows, e.g. a decode batch); ConvertTensorToTileOps types its Mat tile
[8, 64] and nothing pads it to the 16-row fractal the ND -> NZ load writes (hardware-model.md §3
zero-fills the tail columns and leaves rows past the valid ones unwritten). Same for INT8 windows
of 16 columns (c0 = 32) and M = 1. The compiler should pad the tile (valid_shape = the window) or
refuse with a CompileError; it raised runtime.DeviceError. It was first refused when compiled; now a
Left operand of M < 16 rows gets a 16-row Mat tile with valid_shape (M, K) and runs device-exact
(passes/auto_tile_matmul.py); INT8 windows of 16 columns stay refused (passes/auto_tile_matmul.check_mat_fractals).

    python tests/fuzz/repros/nd_partial_mat_tile.py      # DeviceError until fixed
"""

import numpy as np

import runtime
from nzjit import pl


@pl.kernel
def kernel(
    x: pl.Tensor[[8, 64], pl.FP16],
    w: pl.Tensor[[32, 64], pl.FP16, pl.NZ],
    out: pl.Out[pl.Tensor[[8, 32], pl.FP32]],
):
    out[:, :] = pl.matmul(x, w, b_trans=True)


def main() -> None:
    rng = np.random.default_rng(0)
    x = rng.integers(-4, 5, (8, 64)).astype(np.float16)
    w = rng.integers(-4, 5, (32, 64)).astype(np.float16)
    try:
        out = kernel(x, runtime.pack_nz(w))
    except Exception as e:  # nzjit.CompileError / runtime.DispatchError: the correct outcome
        print(f"refused: {type(e).__name__}: {e}")
        return
    assert np.array_equal(out, x.astype(np.float32) @ w.astype(np.float32).T), "wrong values"
    print("OK")


if __name__ == "__main__":
    main()
