"""runtime/blas.py (issue 25 item 4): ranks running side by side run BLAS on their own threads,
the library's setting comes back afterwards, and every launch that multiplies runs BLAS on one
thread (a product's bits may depend on the thread count)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import runtime
from nzjit import pl
from nzjit.backend.plan import multiplies
from runtime import blas, threads

needs_openblas = pytest.mark.skipif(
    blas.blas_threads() is None, reason="no OpenBLAS loaded into this process"
)


@pl.kernel
def product(
    x: pl.Tensor[[16, 256], pl.FP16],
    w: pl.Tensor[[128, 256], pl.FP16, pl.NZ],
    out: pl.Out[pl.Tensor[[16, 128], pl.FP32]],
):
    out[:, :] = pl.matmul(x[:, :], w[:, :], b_trans=True)


@pl.kernel
def copy(x: pl.Tensor[[16, 256], pl.FP16], out: pl.Out[pl.Tensor[[16, 256], pl.FP16]]):
    out[:, :] = pl.load(x, [0, 0], [16, 256])


@pytest.fixture
def two_blas_threads():
    before = blas.set_blas_threads(2)
    yield
    blas.set_blas_threads(before or 1)


@needs_openblas
def test_ranks_side_by_side_run_blas_on_one_thread_and_restore_it(two_blas_threads):
    assert blas.blas_threads() == 2
    with threads.ranks_running(4):
        assert blas.blas_threads() == 1
        with threads.ranks_running(2):  # nested (a rank's own program of ranks): one setting
            assert blas.blas_threads() == 1
        assert blas.blas_threads() == 1
    assert blas.blas_threads() == 2


@needs_openblas
def test_concurrent_users_share_one_setting(two_blas_threads):
    inside, leave = threading.Barrier(3), threading.Event()
    seen: list[int | None] = []

    def user() -> None:
        with blas.one_thread():
            inside.wait()
            leave.wait(10)
            seen.append(blas.blas_threads())

    ts = [threading.Thread(target=user) for _ in range(2)]
    for t in ts:
        t.start()
    inside.wait()
    assert blas.blas_threads() == 1
    leave.set()
    for t in ts:
        t.join(10)
    assert seen == [1, 1] and blas.blas_threads() == 2


@needs_openblas
def test_a_launch_that_multiplies_runs_blas_on_one_thread(two_blas_threads, monkeypatch):
    # a product's bits may depend on BLAS's thread count (OPENBLAS_CORETYPE=Haswell: 6% of a
    # float32 [256, 512] @ [512, 384] differ between 1 and 2 threads), so a launch multiplies on one
    rng = np.random.default_rng(0)
    x = rng.standard_normal((16, 256)).astype(np.float16)
    w = rng.standard_normal((128, 256)).astype(np.float16)
    seen: list[int | None] = []
    real = np.matmul

    def recording(*a, **k):
        seen.append(blas.blas_threads())
        return real(*a, **k)

    monkeypatch.setattr(np, "matmul", recording)  # numpy's own function: every path's products
    out = product(x, runtime.pack_nz(w))
    monkeypatch.undo()
    ref = x.astype(np.float32) @ w.astype(np.float32).T
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-4)
    assert seen and set(seen) == {1}
    assert blas.blas_threads() == 2  # the library's setting comes back after the launch


def test_only_a_launch_that_multiplies_sets_blas_threads():
    x = np.zeros((16, 256), np.float16)
    assert multiplies(product.lower(x, runtime.pack_nz(np.zeros((128, 256), np.float16))).final)
    assert multiplies(product.lower(x, runtime.pack_nz(np.zeros((128, 256), np.float16))).ir("trace"))
    assert not multiplies(copy.lower(x).final)  # a launch without products leaves BLAS alone


def test_the_products_are_the_rules_marked_multiplies():
    # `Rule.multiplies` is the primitive's: every cube product, and nothing else; an impl-only
    # re-registration (impl_rules[p] = fn) keeps it
    from nzjit import prims as P
    from nzjit.backend.rule import RULES, impl_rules

    marked = {p.name for p, r in RULES.items() if r.multiplies}
    assert marked == {
        "tensor.matmul",
        "tensor.matmul_acc",
        "tile.batch_matmul",
        "tile.batch_matmul_acc",
        "tile.mad",
        "tile.mad_acc",
        "tile.mad_bias",
        "tile.matmul",
        "tile.matmul_acc",
        "tile.matmul_bias",
    }
    old = RULES[P.tile_mad_p]
    try:
        impl_rules[P.tile_mad_p] = old.impl
        assert RULES[P.tile_mad_p].multiplies and RULES[P.tile_mad_p].batch is None
    finally:
        RULES[P.tile_mad_p] = old


def test_without_openblas_nothing_changes(monkeypatch):
    monkeypatch.setattr(blas, "_api", None)  # as on a platform where none is found
    assert blas.blas_threads() is None and blas.set_blas_threads(3) is None
    with blas.one_thread():
        assert blas.blas_threads() is None
