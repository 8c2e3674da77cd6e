"""An ND -> NZ load into Mat writes whole 16 x c0 fractals (hardware-model.md §1.3, §3): a window
that is not whole fractals has no Mat tile, and is refused when it is compiled, at its line."""

from __future__ import annotations

import numpy as np
import pytest

import runtime
from nzjit import CompileError, pl


def _decode(M: int, K: int, dtype, layout=pl.NZ):
    @pl.kernel
    def k(x: pl.Tensor[[M, K], dtype], w: pl.Tensor[[32, K], dtype, layout],
          out: pl.Out[pl.Tensor[[M, 32], pl.INT32 if dtype is pl.INT8 else pl.FP32]]):
        out[:, :] = pl.matmul(x, w, b_trans=True)  # the matmul

    return k


@pytest.mark.parametrize("M, K, dtype, layout, what", [(8, 64, pl.FP16, pl.NZ, "[8, 64] FP16"),
                                                       (1, 64, pl.FP16, pl.NZ, "[1, 64] FP16"),
                                                       (16, 16, pl.INT8, pl.ND, "[16, 16] INT8")])
def test_window_that_is_not_whole_fractals_is_refused(M, K, dtype, layout, what, line_of):
    k = _decode(M, K, dtype, layout)
    with pytest.raises(CompileError) as err:
        k.lower()
    msg = str(err.value)
    assert f":{line_of(k.fn, '# the matmul')}:" in msg
    assert f"ND window {what} is not whole 16 x" in msg and "help: pad the operand" in msg


def test_whole_fractal_window_runs():
    rng = np.random.default_rng(0)
    x = rng.integers(-4, 4, (16, 64)).astype(np.float16)
    w = rng.integers(-4, 4, (32, 64)).astype(np.float16)
    out = _decode(16, 64, pl.FP16)(x, runtime.pack_nz(w))
    assert np.array_equal(out, x.astype(np.float32) @ w.astype(np.float32).T)
