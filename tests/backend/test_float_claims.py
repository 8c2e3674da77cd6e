"""The float claim of api.md, as docs/safety.md states it, on whatever BLAS kernel OpenBLAS picks
at run time (run the suite with OPENBLAS_CORETYPE unset and forced, e.g. Haswell, SkylakeX):

- exact: integer results; a float mad whose every partial sum is an integer below 2**24; each
  single product of a mad step (fp16 / bf16 products are exact in float32, a float32 product is
  rounded once);
- deterministic: the same bytes on every execution path (the image fast path, the pitch-view
  path, the partial-block path, the lane-batched stacked mad, the generic interpreter);
- within the float32 accumulation bound of the float64 product: |C - C64| <= gamma_(k+1) *
  (|init| + |A| @ |B|), gamma_j = j u / (1 - j u), u = 2**-24, for any summation order. Not the
  bits of numpy's ``A @ B``: OpenBLAS's AVX-512 kernels sum a C-contiguous B in another order
  than the transposed one the cube uses."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from gmm_kernels import grouped

import runtime
from nzjit import pl
from nzjit.backend.options import current, using
from runtime import TileBuf
from runtime.cube import tmatmul

FLOATS = (np.float16, ml_dtypes.bfloat16, np.float32)
SHAPES = [(16, 32, 16), (16, 32, 24), (128, 128, 256), (64, 256, 128), (32, 64, 48), (48, 96, 40)]
U = 2.0**-24


def _ceil16(v):
    return -(-v // 16) * 16


def _mad(dtype, A, B, init, acc_rows):
    """init + A @ B through tmatmul, with an Acc of `acc_rows` rows (m: the whole-tile logical
    path when n fills the tile; more: the pitch-view path; n % 16: the partial-block path)."""
    m, k = A.shape
    n = B.shape[1]
    left, right = TileBuf("Left", dtype, m, k), TileBuf("Right", dtype, k, _ceil16(n), valid_col=n)
    left.set_logical(A)
    pad = np.zeros((k, _ceil16(n)), dtype)
    pad[:, :n] = B
    right.set_logical(pad)
    acc = TileBuf("Acc", np.float32, acc_rows, _ceil16(n))
    acc.set_logical(np.zeros((acc_rows, _ceil16(n)), np.float32))
    # C(i, j) sits at L0C element (j // 16) * ceil16(m) * 16 + i * 16 + j % 16 (the pitch defect)
    i, j = np.meshgrid(np.arange(m), np.arange(n), indexing="ij")
    at = (j // 16) * _ceil16(m) * 16 + i * 16 + j % 16
    acc.data.view(np.float32)[at] = init
    tmatmul(acc, left, right, accumulate=True, n=n)
    return acc.data.view(np.float32)[at]


def _bound(A, B, init):
    k = A.shape[1]
    g = (k + 1) * U / (1 - (k + 1) * U)
    return g * (np.abs(init).astype(np.float64) + np.abs(A.astype(np.float64)) @ np.abs(B.astype(np.float64)))


@pytest.mark.parametrize("dtype", FLOATS)
def test_tmatmul_float_is_within_the_float32_accumulation_bound(dtype):
    rng = np.random.default_rng(1)
    for m, k, n in SHAPES:
        A = rng.standard_normal((m, k)).astype(dtype)
        B = rng.standard_normal((k, n)).astype(dtype)
        init = rng.standard_normal((m, n)).astype(np.float32)
        got = _mad(dtype, A, B, init, m).astype(np.float64)
        exact = init.astype(np.float64) + A.astype(np.float64) @ B.astype(np.float64)
        err = np.abs(got - exact)
        assert (err <= _bound(A, B, init)).all(), (m, k, n, float(err.max()))
        # a real check: the bound is far below the values, and numpy's own float32 product obeys it
        ours = init + A.astype(np.float32) @ B.astype(np.float32)
        assert (np.abs(ours - exact) <= _bound(A, B, init)).all()


@pytest.mark.parametrize("dtype", FLOATS)
def test_tmatmul_float_gives_the_same_bits_on_every_runtime_path(dtype):
    """The whole-tile logical path (Acc m x n), the pitch-view path (a taller Acc) and, for
    n % 16, the partial-block path: one operand layout for BLAS, so the same bytes."""
    rng = np.random.default_rng(2)
    for m, k, n in SHAPES:
        A = rng.standard_normal((m, k)).astype(dtype)
        B = rng.standard_normal((k, n)).astype(dtype)
        init = rng.standard_normal((m, n)).astype(np.float32)
        whole = _mad(dtype, A, B, init, m)
        taller = _mad(dtype, A, B, init, m + 16)
        assert whole.tobytes() == taller.tobytes(), (m, k, n)
        # the bits every path gives: A @ (B^T C-contiguous)^T in float32
        canon = init + np.matmul(A.astype(np.float32), np.ascontiguousarray(B.T, np.float32).T)
        assert whole.tobytes() == canon.tobytes(), (m, k, n)


@pytest.mark.parametrize("dtype", FLOATS)
def test_tmatmul_float_is_exact_when_every_partial_sum_is_a_small_integer(dtype):
    rng = np.random.default_rng(3)
    for m, k, n in SHAPES:
        A = rng.integers(-8, 8, (m, k)).astype(dtype)
        B = rng.integers(-8, 8, (k, n)).astype(dtype)
        init = rng.integers(-1000, 1000, (m, n)).astype(np.float32)
        for rows in (m, m + 16):
            got = _mad(dtype, A, B, init, rows)
            np.testing.assert_array_equal(got, init + A.astype(np.float32) @ B.astype(np.float32))


@pytest.mark.parametrize("dtype", FLOATS)
def test_each_mad_product_is_exact_for_half_types_and_rounded_once_for_float32(dtype):
    """A one-hot row of A makes C[i, j] one product a * b (plus a zero init): fp16 x fp16 (11 + 11
    significant bits) and bf16 x bf16 (8 + 8) are exact in float32; float32 x float32 is the
    float32 rounding of the exact product."""
    rng = np.random.default_rng(4)
    m, k, n = 32, 64, 48
    A = np.zeros((m, k), dtype)
    A[np.arange(m), rng.integers(0, k, m)] = rng.standard_normal(m).astype(dtype)
    B = rng.standard_normal((k, n)).astype(dtype)
    got = _mad(dtype, A, B, np.zeros((m, n), np.float32), m)
    exact = A.astype(np.float64) @ B.astype(np.float64)  # one nonzero term: exact in float64
    if dtype == np.float32:
        np.testing.assert_array_equal(got, exact.astype(np.float32))
    else:
        np.testing.assert_array_equal(got.astype(np.float64), exact)


def _gmm_bytes(kernel, x, w, out_dtype, E, T, N, fast: bool, batch: bool) -> bytes:
    with using(current().with_(fast=fast, batch=batch)):
        dev = runtime.Worker(0)
        out = dev.alloc_tensor((E, T, N), out_dtype, init=np.zeros((E, T, N), out_dtype))
        kernel(
            dev.alloc_tensor(x.shape, x.dtype, init=x),
            dev.alloc_tensor(w.shape, w.dtype, init=runtime.pack_nz(w)),
            out,
        )
        return dev.copy_from(out).tobytes()


@pytest.mark.parametrize("dtype", [pl.FP16, pl.BF16])
@pytest.mark.parametrize("NT", [16, 48])
def test_a_float_kernel_gives_the_same_bits_on_every_backend_path(dtype, NT):
    """The lane-batched stacked mad (batched.py), the per-trip plans (fast.py) and the generic
    interpreter on random floats: one result, within the accumulation bound of float64."""
    E, T, N, K, KT = 2, 16, 96, 128, 64
    np_dtype = dtype.np_dtype
    rng = np.random.default_rng(5)
    x = rng.standard_normal((E, T, K)).astype(np_dtype)
    w = rng.standard_normal((E, N, K)).astype(np_dtype)
    kernel = grouped(dtype, pl.FP32, E, T, N, K, NT, KT)
    runs = {
        p: _gmm_bytes(kernel, x, w, np.float32, E, T, N, *p)
        for p in ((True, True), (True, False), (False, False))
    }
    assert len(set(runs.values())) == 1, {p: hash(b) for p, b in runs.items()}
    got = np.frombuffer(runs[(True, True)], np.float32).reshape(E, T, N).astype(np.float64)
    exact = np.einsum("etk,enk->etn", x.astype(np.float64), w.astype(np.float64))
    g = (K + 1) * U / (1 - (K + 1) * U)
    bound = g * np.einsum("etk,enk->etn", np.abs(x.astype(np.float64)), np.abs(w.astype(np.float64)))
    assert (np.abs(got - exact) <= bound).all()
