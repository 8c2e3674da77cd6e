"""The grouped NZ matmul both backend test files run (one SPMD lane per (expert, N tile), a
pipelined K loop), its random operands, and the float64 reference check."""

from __future__ import annotations

import numpy as np

from nzjit import pl


def grouped(dtype, out_dtype, E, T, N, K, NT, KT):
    """`out[e] = x[e] @ w[e].T` with `w` NZ, lanes over (expert, N tile), K in KT steps."""

    @pl.kernel
    def gmm(
        x: pl.Tensor[[E, T, K], dtype],
        w: pl.Tensor[[E, N, K], dtype, pl.NZ],
        out: pl.Tensor[[E, T, N], out_dtype],
    ):
        for lane in pl.spmd(E * (N // NT)):
            e = lane // (N // NT)
            n0 = (lane % (N // NT)) * NT
            acc = pl.matmul(x[e, :, 0:KT], w[e, n0 : n0 + NT, 0:KT], b_trans=True)
            for k0 in pl.pipeline(KT, K, KT):
                acc = pl.matmul_acc(
                    acc, x[e, :, k0 : k0 + KT], w[e, n0 : n0 + NT, k0 : k0 + KT], b_trans=True
                )
            out[e, :, n0 : n0 + NT] = acc

    return gmm


def grouped_in_turns(dtype, out_dtype, E, T, N, K, NT, KT):
    """`grouped`, with the lanes taking the experts in turn (lane -> expert lane % E): the lanes'
    windows are not in address order."""

    @pl.kernel
    def gmm_turns(
        x: pl.Tensor[[E, T, K], dtype],
        w: pl.Tensor[[E, N, K], dtype, pl.NZ],
        out: pl.Tensor[[E, T, N], out_dtype],
    ):
        for lane in pl.spmd(E * (N // NT)):
            e = lane % E
            n0 = (lane // E) * NT
            acc = pl.matmul(x[e, :, 0:KT], w[e, n0 : n0 + NT, 0:KT], b_trans=True)
            for k0 in pl.pipeline(KT, K, KT):
                acc = pl.matmul_acc(
                    acc, x[e, :, k0 : k0 + KT], w[e, n0 : n0 + NT, k0 : k0 + KT], b_trans=True
                )
            out[e, :, n0 : n0 + NT] = acc

    return gmm_turns


def gmm_operands(rng, np_dtype, E, T, N, K):
    """Random grouped-matmul operands: full-range int8, or standard normal floats."""
    if np_dtype == np.int8:
        return (
            rng.integers(-128, 128, (E, T, K)).astype(np_dtype),
            rng.integers(-128, 128, (E, N, K)).astype(np_dtype),
        )
    return rng.standard_normal((E, T, K)).astype(np_dtype), rng.standard_normal((E, N, K)).astype(np_dtype)


def check_gmm(res, x, w, np_dtype):
    """`res` against the float64 reference: exact for int8, to float32 accumulation otherwise."""
    ref = np.einsum("etk,enk->etn", x.astype(np.float64), w.astype(np.float64))
    if np_dtype == np.int8:
        np.testing.assert_array_equal(res, ref.astype(np.int64).astype(np.int32))
    else:
        np.testing.assert_allclose(res, ref, rtol=1e-3, atol=1e-2)
