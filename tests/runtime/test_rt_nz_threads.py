"""pack_nz / unpack_nz on several threads (NZ-8): the parts of one call write disjoint lines that
cover the output, large arrays really use the threads, errors and forks are handled."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_rt_nz import _random_bytes

import runtime
from runtime import nz


@pytest.mark.parametrize(
    "shape,gather,n,n_parts",
    [
        ((4, 32, 256), True, 3, 3),  # 4 planes gathered: planes 0 | 1 | 2-3
        ((1, 64, 256), True, 2, 2),  # one plane gathered: two ranges of its output lines
        ((2, 64, 256), True, 3, 3),  # fewer planes than threads: ranges of every plane
        ((2, 64, 256), False, 3, 3),  # tiled: the tile list cut in three
        ((1, 16, 32), False, 4, 1),  # one tile: one part, however many threads
    ],
)
@pytest.mark.parametrize("to_nz", [True, False])
def test_parts_write_disjoint_lines_that_cover_the_output(shape, gather, n, n_parts, to_nz, monkeypatch):  # NZ-8
    monkeypatch.setattr(nz, "_PACK_GATHER_LINES", 1 << 20 if gather else 0)
    monkeypatch.setattr(nz, "_UNPACK_GATHER_LINES", 1 << 20 if gather else 0)
    monkeypatch.setattr(nz, "_PACK_TILE", (16, 4))
    monkeypatch.setattr(nz, "_UNPACK_TILE", (16, 4))
    B, R, C = shape
    J = C // 32
    logical = _random_bytes(shape, np.int8, seed=1)
    packed = logical.reshape(B, R, J, 32).swapaxes(1, 2).reshape(shape).copy()
    src, expected = (logical, packed) if to_nz else (packed, logical)
    # the parts of one call, each run alone into an output prefilled twice with different bytes:
    # a byte it writes differs from one of the two fills (and equals the expected byte)
    written = []
    for fill in (0x55, 0xAA):
        out = np.full(shape, fill, np.uint8).view(np.int8)
        lg, z = (logical, out) if to_nz else (out, packed)
        parts = nz._parts(nz._as_lines(lg, R, J), nz._as_lines(z, J, R), to_nz, n)
        assert len(parts) == n_parts
        masks = []
        for part in parts:
            out.view(np.uint8)[...] = fill
            part()
            masks.append(out.view(np.uint8) != fill)
            np.testing.assert_array_equal(out[masks[-1]], expected[masks[-1]])
        written.append(masks)
    masks = [a | b for a, b in zip(*written)]
    lines = [m.reshape(-1, 32) for m in masks]
    for m in lines:  # a part writes whole 32-byte lines
        assert np.all(m.all(axis=1) | ~m.any(axis=1))
    total = np.sum(masks, axis=0)
    assert total.max() == 1 and total.min() == 1  # disjoint, and together every byte


@settings(max_examples=200, deadline=None)
@given(size=st.integers(0, 10_000), n=st.integers(1, 9))
def test_split_is_a_partition_into_near_equal_parts(size, n):
    parts = nz._split(size, n)
    assert len(parts) == max(1, min(n, size))
    assert parts[0][0] == 0 and parts[-1][1] == size
    assert all(hi == lo for (_, hi), (lo, _) in zip(parts, parts[1:]))
    sizes = [hi - lo for lo, hi in parts]
    assert max(sizes) - min(sizes) <= 1 and (size == 0 or min(sizes) >= 1)


def _threads_used(monkeypatch) -> set[int]:
    """Record the thread of every np.copyto / np.take that runtime.nz makes."""
    used: set[int] = set()
    copyto, take = np.copyto, np.take

    def record(fn):
        return lambda *a, **k: used.add(threading.get_ident()) or fn(*a, **k)

    monkeypatch.setattr(np, "copyto", record(copyto))
    monkeypatch.setattr(np, "take", record(take))
    return used


@pytest.mark.parametrize("shape,dtype", [((2048, 2048), ml_dtypes.bfloat16), ((4, 256, 4096), np.int8)])
def test_a_large_array_is_moved_on_every_thread(shape, dtype, monkeypatch):  # NZ-8
    # 8 MiB and 4 MiB: at least _PARALLEL_BYTES, so the work is split over PACK_THREADS threads,
    # and the bytes are the same as on one thread.
    assert np.prod(shape) * np.dtype(dtype).itemsize >= nz._PARALLEL_BYTES
    a = _random_bytes(shape, dtype, seed=7)
    monkeypatch.setattr(nz, "PACK_THREADS", 1)
    one = runtime.pack_nz(a)
    used = _threads_used(monkeypatch)
    monkeypatch.setattr(nz, "PACK_THREADS", 2)
    np.testing.assert_array_equal(runtime.pack_nz(a).view(np.uint8), one.view(np.uint8))
    assert len(used) == 2 and threading.get_ident() in used
    used.clear()
    np.testing.assert_array_equal(runtime.unpack_nz(one).view(np.uint8), a.view(np.uint8))
    assert len(used) == 2


def test_a_small_array_or_one_thread_stays_on_the_calling_thread(monkeypatch):
    used = _threads_used(monkeypatch)
    monkeypatch.setattr(nz, "PACK_THREADS", 4)
    small = _random_bytes((1024, 1024), np.int8, seed=8)  # 1 MiB: the hand-off would cost more
    runtime.unpack_nz(runtime.pack_nz(small))
    assert used == {threading.get_ident()}
    monkeypatch.setattr(nz, "PACK_THREADS", 1)
    runtime.unpack_nz(runtime.pack_nz(_random_bytes((2048, 4096), np.int8, seed=9)))
    assert used == {threading.get_ident()}


def test_an_error_in_a_worker_part_reaches_the_caller_after_every_part_ended(monkeypatch):
    finished = []

    def failing():
        time.sleep(0.05)
        raise MemoryError("part 2 failed")

    def slow():
        time.sleep(0.1)
        finished.append("slow")

    with pytest.raises(MemoryError, match="part 2 failed"):
        nz._run([lambda: finished.append("first"), failing, slow])
    assert sorted(finished) == ["first", "slow"]  # _run waited for the slow part
    with pytest.raises(ZeroDivisionError):  # the calling thread's own part failing
        nz._run([lambda: 1 / 0, slow])
    assert finished.count("slow") == 2


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_packs_with_its_own_pool(monkeypatch):
    # The parent's pool has threads; a forked child's copy of it has none, and submitting to it
    # would wait forever. The child makes its own pool.
    monkeypatch.setattr(nz, "PACK_THREADS", 2)
    a = _random_bytes((2048, 2048), np.int8, seed=10)
    expected = runtime.pack_nz(a)  # the parent's pool now exists
    assert nz._pools is not None and nz._pools[0] == os.getpid() and 1 in nz._pools[1]
    pid = os.fork()
    if pid == 0:  # the child: exit code 0 if its pack is right
        ok = False
        try:
            ok = np.array_equal(runtime.pack_nz(a), expected) and nz._pools[0] == os.getpid()
        finally:
            os._exit(0 if ok else 1)
    deadline = time.monotonic() + 60
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            pytest.fail("the forked child's pack_nz hung")
        time.sleep(0.01)
    assert os.waitstatus_to_exitcode(status) == 0


@pytest.mark.parametrize(
    "value,threads",
    [("", None), ("1", 1), ("3", 3), (" 2 ", 2), ("0", "error"), ("-1", "error"), ("two", "error")],
)
def test_pack_threads_from_the_environment(value, threads, monkeypatch):
    monkeypatch.setenv("NZJIT_PACK_THREADS", value)
    if threads == "error":
        with pytest.raises(ValueError, match=r"NZJIT_PACK_THREADS must be a whole number >= 1, got"):
            nz._threads_from_env()
    elif threads is None:  # unset: the cores this process may use, at most 4
        assert nz._threads_from_env() == max(1, min(len(os.sched_getaffinity(0)), 4))
    else:
        assert nz._threads_from_env() == threads


def test_pack_threads_1_in_a_fresh_process_keeps_every_copy_on_the_calling_thread():
    code = ("import threading, numpy as np, runtime; from runtime import nz; used = set(); c = np.copyto; "
            "np.copyto = lambda *a, **k: used.add(threading.get_ident()) or c(*a, **k); "
            "runtime.pack_nz(np.zeros((2048, 4096), np.int8)); "
            "print(nz.PACK_THREADS, used == {threading.get_ident()}, nz._pools)")
    env = dict(os.environ, NZJIT_PACK_THREADS="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["1", "True", "None"]


def test_a_pool_stays_usable_when_the_thread_count_changes(monkeypatch):
    # Another thread may hold the pool of the old count and submit to it: nothing shuts it down.
    monkeypatch.setattr(nz, "_PARALLEL_BYTES", 0)
    a = _random_bytes((4, 64, 256), np.int8, seed=11)
    monkeypatch.setattr(nz, "PACK_THREADS", 2)
    expected = runtime.pack_nz(a)
    old = nz._pool(1)
    monkeypatch.setattr(nz, "PACK_THREADS", 4)
    np.testing.assert_array_equal(runtime.pack_nz(a), expected)
    assert nz._pool(3) is not old and old.submit(lambda: 7).result() == 7
