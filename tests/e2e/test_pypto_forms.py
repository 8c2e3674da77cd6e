"""PyPTO's loop, scope and decorator forms on nzjit (issue 23 item 6): two kernels of our own,
written as a `pypto.language` author writes them (its decorators, loops and scopes), run against
numpy; and each alias's exact meaning and refusals."""

from __future__ import annotations

import numpy as np
import pytest

from nzjit import CompileError, pl
from nzjit.driver.kernel import Kernel
from nzjit.driver.orchestration import Orchestration

M, K, N = 64, 256, 128
K_TILE, N_TILE = 64, 64


@pl.jit.incore
def gemm_blocked(
    a: pl.Tensor[[M, K], pl.FP16], b: pl.Tensor[[K, N], pl.FP16], c: pl.Out[pl.Tensor[[M, N], pl.FP32]]
):
    for nb in pl.parallel(0, N, N_TILE, chunk=2):
        with pl.at(level=pl.Level.CORE_GROUP, optimizations=[], name_hint="gemm"):
            acc = pl.matmul(a[:, 0:K_TILE], b[0:K_TILE, nb : nb + N_TILE], out_dtype=pl.FP32)
            for kb in pl.pipeline(1, K // K_TILE, stage=2):
                k0 = kb * K_TILE
                acc = pl.matmul_acc(acc, a[:, k0 : k0 + K_TILE], b[k0 : k0 + K_TILE, nb : nb + N_TILE])
            c[:, nb : nb + N_TILE] = acc
    return c


@pl.function(type=pl.FunctionType.InCore)
def scaled_rows(x: pl.Tensor[[4, 64], pl.FP32], y: pl.Out[pl.Tensor[[4, 64], pl.FP32]]):
    with pl.incore():
        for r in pl.unroll(4):  # unrolled at trace time: four row loads, four stores
            t = pl.load(x, [r, 0], [1, 64], target_memory=pl.MemorySpace.Vec)
            for _ in pl.unroll(r):
                t = pl.add(t, t)
            pl.store(t, [r, 0], y)
    return y


@pl.jit
def scaled_rows_host(x: pl.Tensor[[4, 64], pl.FP32], y: pl.Out[pl.Tensor[[4, 64], pl.FP32]]):
    scaled_rows(x, y)


def test_the_decorators_are_nzjit_kernels_and_orchestrations() -> None:
    assert isinstance(gemm_blocked, Kernel) and isinstance(scaled_rows, Kernel)
    assert isinstance(scaled_rows_host, Orchestration)

    def host(x: pl.Tensor[[4, 64], pl.FP32]):
        pass

    assert isinstance(pl.jit.host(host), Orchestration)
    assert isinstance(pl.function(type=pl.FunctionType.Orchestration)(host), Orchestration)
    assert pl.MemorySpace is pl.Mem


def test_pypto_form_gemm_matches_numpy() -> None:
    rng = np.random.default_rng(1)
    a = rng.integers(-3, 4, (M, K)).astype(np.float16)
    b = rng.integers(-3, 4, (K, N)).astype(np.float16)
    np.testing.assert_array_equal(gemm_blocked(a, b), a.astype(np.float32) @ b.astype(np.float32))
    ir = str(gemm_blocked.lower().ir("trace"))
    assert "for[kind=range] 0 128 64" in ir  # pl.parallel: a staged loop over independent trips
    assert "for[kind=pipeline stage=2] 1 4 1" in ir  # pl.pipeline(start, stop, stage=)


def test_pypto_form_unrolled_kernel_and_its_host_function() -> None:
    x = np.arange(256, dtype=np.float32).reshape(4, 64)
    ref = x * np.array([1, 2, 4, 8], np.float32)[:, None]
    np.testing.assert_array_equal(scaled_rows(x), ref)
    ir = str(scaled_rows.lower().ir("trace"))
    assert "for[" not in ir and ir.count("tile.store") == 4  # pl.unroll leaves no loop
    np.testing.assert_array_equal(scaled_rows_host(x, np.zeros_like(x)), ref)


def test_pipeline_takes_pyptos_stop_only_form() -> None:
    @pl.kernel
    def k(x: pl.Tensor[[4, 64], pl.FP32], y: pl.Out[pl.Tensor[[4, 64], pl.FP32]]):
        for i in pl.pipeline(4, stage=3):
            pl.store(pl.load(x, [i, 0], [1, 64]), [i, 0], y)

    assert "for[kind=pipeline stage=3] 0 4 1" in str(k.lower().ir("trace"))
    x = np.arange(256, dtype=np.float32).reshape(4, 64)
    np.testing.assert_array_equal(k(x), x)


def test_matmul_a_trans_multiplies_by_the_transpose_of_a_mat_tile() -> None:
    @pl.kernel
    def k(
        at: pl.Tensor[[64, 32], pl.FP16],
        b: pl.Tensor[[64, 64], pl.FP16],
        c: pl.Out[pl.Tensor[[32, 64], pl.FP32]],
    ):
        ta = pl.load(at, [0, 0], [64, 32], target_memory=pl.Mem.Mat)
        tb = pl.load(b, [0, 0], [64, 64], target_memory=pl.Mem.Mat)
        pl.store(pl.matmul(ta, tb, a_trans=True, c_matrix_nz=True), [0, 0], c)

    rng = np.random.default_rng(2)
    at = rng.integers(-3, 4, (64, 32)).astype(np.float16)
    b = rng.integers(-3, 4, (64, 64)).astype(np.float16)
    np.testing.assert_array_equal(k(at, b), at.T.astype(np.float32) @ b.astype(np.float32))
    assert "tile.transpose_view" in str(k.lower().ir("trace"))


def _refusal(fn) -> CompileError:
    with pytest.raises(CompileError) as ei:
        pl.kernel(fn).lower()
    return ei.value


def test_refusals_name_the_form() -> None:
    def bad_level(x: pl.Tensor[[1, 64], pl.FP32]):
        with pl.at(level="core"):
            pass

    def host_level(x: pl.Tensor[[1, 64], pl.FP32]):
        with pl.at(level=pl.Level.HOST):
            pass

    def traced_unroll(x: pl.Tensor[[1, 64], pl.FP32], n: pl.Scalar[pl.INT32]):
        for _ in pl.unroll(pl.cast(n, pl.INDEX)):
            pass

    def a_trans_tensor(a: pl.Tensor[[64, 64], pl.FP16], c: pl.Out[pl.Tensor[[64, 64], pl.FP32]]):
        c[:, :] = pl.matmul(a[:, :], a[:, :], a_trans=True)

    assert "pl.at level must be a pl.Level, got 'core'" in str(_refusal(bad_level))
    assert "pl.at(level=pl.Level.HOST) inside a kernel" in str(_refusal(host_level))
    assert "pl.unroll needs static bounds" in str(_refusal(traced_unroll))
    assert "pl.matmul(a_trans=True) needs `a` as a Mat tile" in str(_refusal(a_trans_tensor))
    with pytest.raises(CompileError, match="@pl.function"):
        pl.function(type=pl.FunctionType.Opaque)(lambda: None)
