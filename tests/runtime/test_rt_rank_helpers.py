"""runtime.threads with several ranks side by side (issue 25 item 4): helpers only for the cores the
ranks leave idle; the bytes are those of one thread."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import runtime
from runtime import threads


@pytest.mark.parametrize(
    "count, ranks, helped",
    [(2, 1, True), (2, 2, False), (2, 4, False), (4, 2, True), (4, 4, False), (1, 2, False)],
)
def test_ranks_side_by_side_leave_helpers_only_idle_cores(count, ranks, helped, monkeypatch):
    monkeypatch.setattr(threads, "THREADS", count)
    seen: dict[int, bool] = {}
    lock = threading.Lock()

    def rank(r):
        def fn():
            with lock:
                seen[r] = threads.helper_available()
            return r

        return fn

    assert runtime.dispatch.run_ranks({r: rank(r) for r in range(ranks)}) == {r: r for r in range(ranks)}
    # one rank runs on the calling thread and is not counted: it may use every helper
    assert set(seen.values()) == {helped if ranks > 1 else count > 1}
    assert threads.helper_available() == (count > 1)  # counted only while the ranks run


def test_run_keeps_every_part_on_the_rank_thread_when_no_core_is_idle(monkeypatch):
    monkeypatch.setattr(threads, "THREADS", 2)
    monkeypatch.setattr(runtime.nz, "_PARALLEL_BYTES", 0)
    names: list[str] = []
    a = np.arange(4 * 64 * 64, dtype=np.int8).reshape(4, 64, 64)

    def rank():
        caller = threading.current_thread().name
        parts = [lambda i=i: names.append(threading.current_thread().name == caller) for i in range(3)]
        threads.run(parts)
        return runtime.pack_nz(a)

    out = runtime.dispatch.run_ranks({0: rank, 1: rank})
    assert names == [True] * 6  # both ranks: all parts on the rank's own thread
    np.testing.assert_array_equal(out[0], runtime.pack_nz(a))  # the same bytes as with helpers
    np.testing.assert_array_equal(out[1], out[0])
