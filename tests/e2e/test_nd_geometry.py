"""An ND -> NZ load into Mat writes whole 16 x c0 fractals (hardware-model.md §1.3, §3). Columns that
are not whole C0 lines, and a Right operand whose rows are not whole fractals, have no Mat tile and
are refused when compiled, at their line. A Left operand of M < 16 rows (a decode batch) is padded
to a 16-row tile instead: tests/e2e/test_decode_matmul.py."""

from __future__ import annotations

import numpy as np
import pytest

import runtime
from nzjit import CompileError, pl


def _decode(M: int, K: int, dtype, layout=pl.NZ):
    @pl.kernel
    def k(
        x: pl.Tensor[[M, K], dtype],
        w: pl.Tensor[[32, K], dtype, layout],
        out: pl.Out[pl.Tensor[[M, 32], pl.INT32 if dtype is pl.INT8 else pl.FP32]],
    ):
        out[:, :] = pl.matmul(x, w, b_trans=True)  # the matmul

    return k


@pytest.mark.parametrize(
    "M, K, dtype, what",
    [
        (16, 16, pl.INT8, "[16, 16] INT8"),  # a C0 line is 32 INT8
        (4, 16, pl.INT8, "[4, 16] INT8"),
        (1, 8, pl.FP16, "[1, 8] FP16"),
    ],
)
def test_columns_that_are_not_whole_c0_lines_are_refused(M, K, dtype, what, line_of):  # hw §3
    k = _decode(M, K, dtype, pl.ND)
    with pytest.raises(CompileError) as err:
        k.lower()
    msg = str(err.value)
    assert f":{line_of(k.fn, '# the matmul')}:" in msg
    assert (
        f"ND window {what} is not whole 16 x" in msg and "columns" in msg and "help: pad the operand" in msg
    )


def test_right_operand_rows_that_are_not_whole_fractals_are_refused(line_of):  # hw §3, §6
    """Only a Left operand's rows may be padded (TMATMUL m = Left.validRow); padding a Right
    operand's N rows would feed the stale rows of the Mat tile to the cube as columns of C."""

    @pl.kernel
    def k(
        x: pl.Tensor[[16, 64], pl.FP16],
        w: pl.Tensor[[8, 64], pl.FP16],
        out: pl.Out[pl.Tensor[[16, 8], pl.FP32]],
    ):
        out[:, :] = pl.matmul(x, w, b_trans=True)  # the matmul

    with pytest.raises(CompileError) as err:
        k.lower()
    msg = str(err.value)
    assert f":{line_of(k.fn, '# the matmul')}:" in msg
    assert "ND window [8, 64] FP16 is not whole 16 x 16 fractals: rows must be a multiple of 16" in msg
    assert "only the Left operand" in msg


def test_whole_fractal_window_runs():
    rng = np.random.default_rng(0)
    x = rng.integers(-4, 4, (16, 64)).astype(np.float16)
    w = rng.integers(-4, 4, (32, 64)).astype(np.float16)
    out = _decode(16, 64, pl.FP16)(x, runtime.pack_nz(w))
    assert np.array_equal(out, x.astype(np.float32) @ w.astype(np.float32).T)
