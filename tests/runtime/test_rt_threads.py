"""runtime.threads: the thread count from the environment, the one pool (per process, never shut
down), `run`'s error handling, and `Ahead`'s order, overlap, deferred work and errors."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import runtime
from runtime import threads


def test_an_error_in_a_worker_part_reaches_the_caller_after_every_part_ended():
    finished = []

    def failing():
        time.sleep(0.05)
        raise MemoryError("part 2 failed")

    def slow():
        time.sleep(0.1)
        finished.append("slow")

    with pytest.raises(MemoryError, match="part 2 failed"):
        threads.run([lambda: finished.append("first"), failing, slow])
    assert sorted(finished) == ["first", "slow"]  # run waited for the slow part
    with pytest.raises(ZeroDivisionError):  # the calling thread's own part failing
        threads.run([lambda: 1 / 0, slow])
    assert finished.count("slow") == 2


@pytest.mark.parametrize(
    "value,count",
    [("", None), ("1", 1), ("3", 3), (" 2 ", 2), ("0", "error"), ("-1", "error"), ("two", "error")],
)
def test_threads_from_the_environment(value, count, monkeypatch):
    monkeypatch.setenv("NZJIT_THREADS", value)
    if count == "error":
        with pytest.raises(ValueError, match=r"NZJIT_THREADS must be a whole number >= 1, got"):
            threads._threads_from_env()
    elif count is None:  # unset: the cores this process may use, at most 4
        assert threads._threads_from_env() == max(1, min(len(os.sched_getaffinity(0)), 4))
    else:
        assert threads._threads_from_env() == count


def test_threads_1_in_a_fresh_process_keeps_every_copy_on_the_calling_thread():
    code = (
        "import threading, numpy as np, runtime; from runtime import threads; used = set(); c = np.copyto; "
        "np.copyto = lambda *a, **k: used.add(threading.get_ident()) or c(*a, **k); "
        "s = runtime.nz._native and runtime.nz._native.swap; "
        "s and setattr(runtime.nz._native, 'swap', lambda *a: used.add(threading.get_ident()) or s(*a)); "
        "runtime.pack_nz(np.zeros((2048, 4096), np.int8)); "
        "print(threads.THREADS, used == {threading.get_ident()}, threads._pools)"
    )
    env = dict(os.environ, NZJIT_THREADS="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["1", "True", "None"]


def test_a_pool_stays_usable_when_the_thread_count_changes(monkeypatch):
    # Another thread may hold the pool of the old count and submit to it: nothing shuts it down.
    monkeypatch.setattr(runtime.nz, "_PARALLEL_BYTES", 0)
    a = np.random.default_rng(11).integers(-128, 128, (4, 64, 256), dtype=np.int8)
    monkeypatch.setattr(threads, "THREADS", 2)
    expected = runtime.pack_nz(a)
    old = threads._pool(1)
    monkeypatch.setattr(threads, "THREADS", 4)
    np.testing.assert_array_equal(runtime.pack_nz(a), expected)
    assert threads._pool(3) is not old and old.submit(lambda: 7).result() == 7


def _traced(n: int, log: list, delay: float = 0.0) -> threads.Ahead:
    def item(i):
        log.append(("start", i, threading.get_ident()))
        time.sleep(delay)
        log.append(("item", i))
        return i * 10

    return threads.Ahead(item, n)


@pytest.mark.parametrize("count", [1, 2, 4])
@pytest.mark.parametrize("n", [1, 2, 5])
def test_ahead_gives_every_item_in_order_and_runs_deferred_work_in_order(count, n, monkeypatch):
    monkeypatch.setattr(threads, "THREADS", count)
    log: list = []
    got = []
    with _traced(n, log) as items:
        for x in items:
            got.append(x)
            items.defer(functools.partial(log.append, ("done", x // 10)))
    assert got == [10 * i for i in range(n)]
    # each item's deferred work ran once, in order, after the caller had the item, and before
    # the item after the next was handed out
    done = [e[1] for e in log if e[0] == "done"]
    assert done == list(range(n))
    for i in range(n - 2):
        assert log.index(("done", i)) < log.index(("item", i + 2))


def test_ahead_computes_the_next_item_on_a_helper_while_the_caller_works(monkeypatch):
    # The caller, holding item i, waits until item i + 1 has started: that can only happen if
    # the helper computes it meanwhile (on the caller's thread it would start after the wait).
    monkeypatch.setattr(threads, "THREADS", 2)
    started = [threading.Event() for _ in range(4)]
    where = {}

    def item(i):
        where[i] = threading.get_ident()
        started[i].set()
        return i

    with threads.Ahead(item, 4) as items:
        for i in items:
            if i + 1 < 4:
                assert started[i + 1].wait(timeout=30), (
                    f"item {i + 1} did not start while the caller held item {i}"
                )
    assert where[0] == threading.get_ident()  # the first item: nothing to overlap it with
    assert all(where[i] != threading.get_ident() for i in (1, 2, 3))


def test_ahead_on_one_thread_computes_everything_on_the_caller(monkeypatch):
    monkeypatch.setattr(threads, "THREADS", 1)
    assert not threads.helper_available()
    log: list = []
    with _traced(3, log) as items:
        assert list(items) == [0, 10, 20]
    assert {e[2] for e in log if e[0] == "start"} == {threading.get_ident()}


def test_ahead_a_helper_error_reaches_the_caller_at_that_item(monkeypatch):
    monkeypatch.setattr(threads, "THREADS", 2)

    def item(i):
        if i == 2:
            raise MemoryError("item 2 failed")
        return i

    got = []
    with pytest.raises(MemoryError, match="item 2 failed"):
        with threads.Ahead(item, 4) as items:
            for x in items:
                got.append(x)
    assert got == [0, 1]


def test_ahead_leaving_by_error_waits_for_the_helper_and_drops_the_deferred_work(monkeypatch):
    monkeypatch.setattr(threads, "THREADS", 2)
    log: list = []
    with pytest.raises(ZeroDivisionError):
        with _traced(4, log, delay=0.1) as items:
            for x in items:
                items.defer(functools.partial(log.append, ("done", x)))
                if x == 10:
                    raise ZeroDivisionError("the caller failed")  # while the helper computes item 2
    # the helper's item 2 had ended when the error left the loop; item 1's deferred work was not run
    assert ("item", 2) in log and ("done", 10) not in log
    assert not any(e[1] == 3 for e in log)


def test_ahead_a_deferred_error_reaches_the_caller(monkeypatch):
    monkeypatch.setattr(threads, "THREADS", 2)
    for n in (1, 2, 3):  # the error in the helper's task, or in the work left at the end
        with pytest.raises(ZeroDivisionError):
            with threads.Ahead(lambda i: i, n) as items:
                for _ in items:
                    items.defer(lambda: 1 / 0)


def test_work_handed_on_by_a_helper_runs_on_that_helper(monkeypatch):
    # With every helper busy, a helper waiting for another would wait forever: a helper's own
    # run / Ahead (pack_nz inside a helper's task, say) stays on it.
    monkeypatch.setattr(threads, "THREADS", 2)
    monkeypatch.setattr(runtime.nz, "_PARALLEL_BYTES", 0)
    a = np.random.default_rng(12).integers(-128, 128, (4, 64, 256), dtype=np.int8)
    expected = runtime.pack_nz(a)

    def on_helper():
        assert not threads.helper_available()
        me = threading.get_ident()
        seen = set()
        with threads.Ahead(lambda i: seen.add(threading.get_ident()) or i, 3) as items:
            assert list(items) == [0, 1, 2]
        threads.run([lambda: seen.add(threading.get_ident())] * 3)
        return me, seen, runtime.pack_nz(a)

    assert threads.helper_available()
    me, seen, packed = threads._pool(1).submit(on_helper).result(timeout=60)
    assert me != threading.get_ident() and seen == {me}
    np.testing.assert_array_equal(packed, expected)
