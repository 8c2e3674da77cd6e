"""runtime/blas.py (issue 25 item 4): ranks running side by side run BLAS on their own threads,
the library's setting comes back afterwards, and no product's bytes depend on it."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from runtime import blas, threads

needs_openblas = pytest.mark.skipif(
    blas.blas_threads() is None, reason="no OpenBLAS loaded into this process"
)


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
def test_a_product_s_bytes_do_not_depend_on_the_blas_threads(two_blas_threads):
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((256, 512), np.float32), rng.standard_normal((512, 384), np.float32)
    wide = a @ b
    with blas.one_thread():
        one = a @ b
    np.testing.assert_array_equal(one, wide)


def test_without_openblas_nothing_changes(monkeypatch):
    monkeypatch.setattr(blas, "_api", None)  # as on a platform where none is found
    assert blas.blas_threads() is None and blas.set_blas_threads(3) is None
    with blas.one_thread():
        assert blas.blas_threads() is None
