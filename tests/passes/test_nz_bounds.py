"""A window that may end past the tensor is refused: in NZ order the rows past R are the next
column block's, so an overhanging load would read wrong fractals silently (NZ-12, NZ-16)."""

from __future__ import annotations

import numpy as np
import pytest

import runtime
from nzjit import CompileError, pl


def _kernel(tiles: int, step: int = 16):
    @pl.kernel
    def k(
        x: pl.Tensor[[16, 32], pl.INT8],
        w: pl.Tensor[[32, 64], pl.INT8, pl.NZ],
        out: pl.Out[pl.Tensor[[16, 64], pl.INT32]],
    ):
        xt = pl.load(x, [0, 0], [16, 32], target_memory=pl.Mem.Mat)
        for nb in pl.range(tiles):
            n0 = nb * step
            wt = pl.load(w, [n0, 0], [16, 32], target_memory=pl.Mem.Mat)  # the load
            pl.store(pl.matmul(xt, wt, b_trans=True), [0, n0], out)

    return k


def test_symbolic_window_inside_the_tensor_runs():  # NZ-12, NZ-16
    rng = np.random.default_rng(0)
    x = rng.integers(-8, 8, (16, 32)).astype(np.int8)
    w = rng.integers(-8, 8, (32, 64)).astype(np.int8)
    out = _kernel(2)(x, runtime.pack_nz(w))
    ref = x.astype(np.int32) @ w[:, :32].astype(np.int32).T
    assert np.array_equal(out[:, :32], ref)


def test_symbolic_window_past_the_last_row_is_refused(line_of):  # NZ-12
    k = _kernel(3)
    with pytest.raises(CompileError) as err:
        k.lower()
    msg = str(err.value)
    assert f":{line_of(k.fn, '# the load')}:" in msg
    assert "up to [32, 48)" in msg and "ends past the tensor's extent 32" in msg and "nb * 16" in msg


def test_loop_step_tightens_the_bound():  # NZ-16: k0 in pipeline(0, 64, 32) reaches 32, not 63
    @pl.kernel
    def k(w: pl.Tensor[[32, 64], pl.INT8, pl.NZ], out: pl.Out[pl.Tensor[[32, 64], pl.INT8]]):
        for k0 in pl.pipeline(0, 64, 32):
            pl.load(w, [0, k0], [32, 32], target_memory=pl.Mem.Mat)

    k.lower()  # [32, 64) fits: no refusal


def test_exact_maximum_not_the_interval_bound():  # NZ-12, NZ-16
    # interval arithmetic says n0 reaches 128 + 64 = 192; enumerating lane < 3 gives 128: it fits
    @pl.kernel
    def k(
        x: pl.Tensor[[16, 128], pl.FP16],
        w: pl.Tensor[[192, 128], pl.FP16, pl.NZ],
        out: pl.Out[pl.Tensor[[16, 192], pl.FP32]],
    ):
        for lane in pl.spmd(3):
            n0 = (lane // 2) * 128 + (lane % 2) * 64
            out[:, n0 : n0 + 64] = pl.matmul(x[:, 0:128], w[n0 : n0 + 64, 0:128], b_trans=True)

    rng = np.random.default_rng(1)
    x = rng.integers(-4, 4, (16, 128)).astype(np.float16)
    w = rng.integers(-4, 4, (192, 128)).astype(np.float16)
    out = k(x, runtime.pack_nz(w))
    ref = x.astype(np.float32) @ w.astype(np.float32).T
    assert np.array_equal(out, ref)  # lanes 0, 1, 2 write columns [0, 64), [64, 128), [128, 192)
