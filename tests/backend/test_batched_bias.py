"""TMATMUL_BIAS on the lane-batched path (issue 23 item 9): SPMD lanes over N tiles, each with its
own bias row (TMOV Mat -> Bias per distinct row), K in two chunks (TMATMUL_BIAS then
TMATMUL_ACC), a ragged last N tile: batched, the same bytes as lane by lane and as the reference
impls; strict (tests/backend/conftest.py), so a lane-batched bug fails instead of falling back."""

from __future__ import annotations

import numpy as np
import pytest

from nzjit import backend, pl
from nzjit.backend import batched
from nzjit.backend.options import Options, current, using

M, N, NT = 16, 208, 64  # the last tile: 16 valid columns (a batched mad takes whole 16-column blocks)
L = -(-N // NT)


def make(K):
    @pl.kernel
    def lanes_bias(
        x: pl.Tensor[[M, K], pl.INT8],
        w: pl.Tensor[[K, N], pl.INT8],
        b: pl.Tensor[[1, N], pl.INT32],
        out: pl.Out[pl.Tensor[[M, N], pl.INT32]],
    ):
        for lane in pl.spmd(L):
            n0 = lane * NT
            tx = pl.load(x, [0, 0], [M, K], target_memory=pl.Mem.Mat)
            tw = pl.load(w, [0, n0], [K, NT], target_memory=pl.Mem.Mat, clamp=True)
            tb = pl.load(b, [0, n0], [1, NT], target_memory=pl.Mem.Mat, clamp=True)
            pl.store(pl.tile.matmul_bias(tx, tw, tb), [0, n0], out)

    return lanes_bias


@pytest.mark.parametrize("K", [512, 2048])  # 2048: two K chunks, TMATMUL_BIAS then TMATMUL_ACC
def test_bias_lanes_run_batched_and_agree(monkeypatch, K):
    seen: list = []
    real = batched.try_run_spmd

    def spy(*a, **k):
        r = real(*a, **k)
        if k.get("spmd", True):
            seen.append(r)
        return r

    monkeypatch.setattr(batched, "try_run_spmd", spy)
    lanes_bias = make(K)
    rng = np.random.default_rng(2)
    x = rng.integers(-128, 128, (M, K)).astype(np.int8)
    w = rng.integers(-128, 128, (K, N)).astype(np.int8)
    b = rng.integers(-(2**30), 2**30, (1, N)).astype(np.int32)
    ref = (x.astype(np.int64) @ w.astype(np.int64) + b).astype(np.int64).astype(np.int32)
    got = lanes_bias(x, w, b)
    assert True in seen  # the lanes ran batched (in groups that agree on the valid width)
    np.testing.assert_array_equal(got, ref)
    for opts in (current().with_(batch=False), Options(fast=False)):
        with using(opts):
            np.testing.assert_array_equal(lanes_bias(x, w, b), ref)
    assert "tile.mad_bias" in str(lanes_bias.lower().ir()) and backend is not None
