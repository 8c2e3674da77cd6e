"""An inner leading axis of an NZ tensor folds into the batch slot with the outer ones (NZ-28), so
the backend's run-time check of the slot cannot see an overhang of that axis alone: its symbolic
offset must be proven in bounds at compile time (NZ-12), or the load would silently read the next
batch. Found by the mutation campaign of issue 29 (docs/verification.md)."""

from __future__ import annotations

import numpy as np
import pytest

import runtime
from nzjit import CompileError, pl

RNG = np.random.default_rng(7)
X = RNG.integers(-3, 4, (16, 32)).astype(np.int8)
W = RNG.integers(-3, 4, (2, 2, 32, 32)).astype(np.int8)


def _ref(b: int, e: int) -> np.ndarray:
    return X.astype(np.int32) @ W[b, e].astype(np.int32).T


def test_an_unbounded_inner_leading_offset_is_refused_at_lower():  # NZ-12, NZ-28
    @pl.kernel
    def k(
        x: pl.Tensor[[16, 32], pl.INT8],
        w: pl.Tensor[[2, 2, 32, 32], pl.INT8, pl.NZ],
        e: pl.Scalar[pl.INT32],
        out: pl.Out[pl.Tensor[[16, 32], pl.INT32]],
    ):
        out[:, :] = pl.matmul(x[:, :], w[0, e, :, :], b_trans=True)

    with pytest.raises(
        CompileError,
        match=r"offset 'e' of leading axis 1 cannot be proven to keep the window of "
        r"1 inside the axis's extent 2",
    ) as info:
        k.lower()
    assert info.value.rule == "NZ-12" and "pl.min(offset, 1)" in str(info.value)
    out = np.full((16, 32), 7, np.int32)
    with pytest.raises(CompileError):
        k(X, runtime.pack_nz(W), 2, out)  # e = 2 would have read W[1, 0]
    assert (out == 7).all()  # refused before anything ran


def test_a_clamped_inner_leading_offset_is_proven_and_exact():  # NZ-12, NZ-28
    @pl.kernel
    def k(
        x: pl.Tensor[[16, 32], pl.INT8],
        w: pl.Tensor[[2, 2, 32, 32], pl.INT8, pl.NZ],
        e: pl.Scalar[pl.INT32],
        out: pl.Out[pl.Tensor[[16, 32], pl.INT32]],
    ):
        out[:, :] = pl.matmul(x[:, :], w[1, pl.max(pl.min(e, 1), 0), :, :], b_trans=True)

    for e in (0, 1):
        np.testing.assert_array_equal(k(X, runtime.pack_nz(W), e), _ref(1, e))


def test_an_unbounded_outermost_offset_is_still_checked_at_run_time():  # NZ-28: the slot is that axis
    @pl.kernel
    def k(
        x: pl.Tensor[[16, 32], pl.INT8],
        w: pl.Tensor[[2, 2, 32, 32], pl.INT8, pl.NZ],
        b: pl.Scalar[pl.INT32],
        out: pl.Out[pl.Tensor[[16, 32], pl.INT32]],
    ):
        out[:, :] = pl.matmul(x[:, :], w[b, 1, :, :], b_trans=True)

    np.testing.assert_array_equal(k(X, runtime.pack_nz(W), 1), _ref(1, 1))
    out = np.full((16, 32), 7, np.int32)
    with pytest.raises(Exception, match="(?i)window|bound|extent|outside"):
        k(X, runtime.pack_nz(W), 2, out)
    assert (out == 7).all()
