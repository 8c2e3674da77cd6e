"""pack_nz / unpack_nz on several threads (NZ-8): the parts of one call write disjoint lines that
cover the output, large arrays really use the threads, a forked child packs with its own pool.
(runtime.threads itself: test_rt_threads.py.)"""

from __future__ import annotations

import os
import threading
import time

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_rt_nz import _random_bytes

import runtime
from runtime import nz, threads


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
def test_parts_write_disjoint_lines_that_cover_the_output(
    shape, gather, n, n_parts, to_nz, monkeypatch, numpy_swap
):  # NZ-8
    monkeypatch.setattr(nz, "_PACK_GATHER_LINES", 1 << 20 if gather else 0)
    monkeypatch.setattr(nz, "_UNPACK_GATHER_LINES", 1 << 20 if gather else 0)
    monkeypatch.setattr(nz, "_PACK_TILE", (16, 4))
    monkeypatch.setattr(nz, "_UNPACK_TILE", (16, 4))
    B, R, C = shape
    J = C // 32
    logical = _random_bytes(shape, np.int8, seed=1)
    packed = logical.reshape(B, R, J, 32).swapaxes(1, 2).reshape(shape).copy()
    expected = packed if to_nz else logical
    out = np.empty(shape, np.int8)
    lg, z = (logical, out) if to_nz else (out, packed)
    parts = nz._parts(nz._as_lines(lg, R, J), nz._as_lines(z, J, R), to_nz, n)
    assert len(parts) == n_parts
    _check_parts_cover(parts, out, expected)


def _check_parts_cover(parts, out: np.ndarray, expected: np.ndarray) -> None:
    """The parts of one call, each run alone into `out` prefilled twice with different bytes: a
    byte it writes differs from one of the two fills and equals the expected byte. Each part
    writes whole 32-byte lines; together they write every byte once."""
    total = np.zeros(out.shape, np.int64)
    for part in parts:
        masks = []
        for fill in (0x55, 0xAA):
            out.view(np.uint8)[...] = fill
            part()
            masks.append(out.view(np.uint8) != fill)
            np.testing.assert_array_equal(out[masks[-1]], expected[masks[-1]])
        written = masks[0] | masks[1]
        lines = written.reshape(-1, 32)
        assert np.all(lines.all(axis=1) | ~lines.any(axis=1))  # whole lines
        total += written
    assert total.max() == 1 and total.min() == 1  # disjoint, and together every byte


@pytest.mark.parametrize(
    "shape,n,pack_calls,unpack_calls",
    [  # (planes, first row, end row) of each part's swap: a pack swaps R rows of J lines, an unpack
        # J rows (the NZ column blocks) of R lines
        ((4, 32, 256), 3, [(1, 0, 32), (1, 0, 32), (2, 0, 32)], [(1, 0, 8), (1, 0, 8), (2, 0, 8)]),  # planes
        ((1, 48, 256), 2, [(1, 0, 24), (1, 24, 48)], [(1, 0, 8)]),  # one plane: bands of 8 rows, or one band
        ((1, 32, 1024), 2, [(1, 0, 16), (1, 16, 32)], [(1, 0, 16), (1, 16, 32)]),
        ((2, 48, 256), 3, [(2, 0, 16), (2, 16, 32), (2, 32, 48)], [(2, 0, 8)]),  # fewer planes than threads
        ((1, 16, 32 * 11), 2, [(1, 0, 8), (1, 8, 16)], [(1, 0, 8), (1, 8, 11)]),  # a ragged last band
        ((1, 16, 256), 4, [(1, 0, 8), (1, 8, 16)], [(1, 0, 8)]),  # a part per band at most
        ((3, 32, 256), 1, [(3, 0, 32)], [(3, 0, 8)]),  # one thread: one call
    ],
)
@pytest.mark.parametrize("to_nz", [True, False])
def test_compiled_parts_write_disjoint_lines_that_cover_the_output(
    shape, n, pack_calls, unpack_calls, to_nz
):  # NZ-8
    if nz._native is None:
        pytest.skip("runtime._lines was not built (no C compiler at install)")
    calls = pack_calls if to_nz else unpack_calls
    B, R, C = shape
    J = C // 32
    logical = _random_bytes(shape, np.int8, seed=3)
    packed = logical.reshape(B, R, J, 32).swapaxes(1, 2).reshape(shape).copy()
    src, expected = (logical, packed) if to_nz else (packed, logical)
    src_lines = nz._as_lines(src, *((R, J) if to_nz else (J, R)))
    out = np.empty(shape, np.int8)
    parts = nz._native_parts(src_lines, nz._as_lines(out, *((J, R) if to_nz else (R, J))), n)
    assert [(p.args[2], p.args[5], p.args[6]) for p in parts] == calls
    _check_parts_cover(parts, out, expected)


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
    """Record the thread of every np.copyto / np.take / compiled swap that runtime.nz makes."""
    used: set[int] = set()
    copyto, take = np.copyto, np.take

    def record(fn):
        return lambda *a, **k: used.add(threading.get_ident()) or fn(*a, **k)

    monkeypatch.setattr(np, "copyto", record(copyto))
    monkeypatch.setattr(np, "take", record(take))
    if nz._native is not None:
        monkeypatch.setattr(nz._native, "swap", record(nz._native.swap))
    return used


@pytest.mark.parametrize("shape,dtype", [((2048, 2048), ml_dtypes.bfloat16), ((4, 256, 4096), np.int8)])
def test_a_large_array_is_moved_on_every_thread(shape, dtype, monkeypatch, swap_path):  # NZ-8
    # 8 MiB and 4 MiB: at least _PARALLEL_BYTES, so the work is split over runtime.threads.THREADS threads,
    # and the bytes are the same as on one thread.
    assert np.prod(shape) * np.dtype(dtype).itemsize >= nz._PARALLEL_BYTES
    a = _random_bytes(shape, dtype, seed=7)
    monkeypatch.setattr(threads, "THREADS", 1)
    one = runtime.pack_nz(a)
    used = _threads_used(monkeypatch)
    monkeypatch.setattr(threads, "THREADS", 2)
    np.testing.assert_array_equal(runtime.pack_nz(a).view(np.uint8), one.view(np.uint8))
    assert len(used) == 2 and threading.get_ident() in used
    used.clear()
    np.testing.assert_array_equal(runtime.unpack_nz(one).view(np.uint8), a.view(np.uint8))
    assert len(used) == 2


def test_a_small_array_or_one_thread_stays_on_the_calling_thread(monkeypatch, swap_path):
    used = _threads_used(monkeypatch)
    monkeypatch.setattr(threads, "THREADS", 4)
    small = _random_bytes((1024, 1024), np.int8, seed=8)  # 1 MiB: the hand-off would cost more
    runtime.unpack_nz(runtime.pack_nz(small))
    assert used == {threading.get_ident()}
    monkeypatch.setattr(threads, "THREADS", 1)
    runtime.unpack_nz(runtime.pack_nz(_random_bytes((2048, 4096), np.int8, seed=9)))
    assert used == {threading.get_ident()}


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_packs_with_its_own_pool(monkeypatch, swap_path):
    # The parent's pool has threads; a forked child's copy of it has none, and submitting to it
    # would wait forever. The child makes its own pool.
    monkeypatch.setattr(threads, "THREADS", 2)
    a = _random_bytes((2048, 2048), np.int8, seed=10)
    expected = runtime.pack_nz(a)  # the parent's pool now exists
    assert threads._pools is not None and threads._pools[0] == os.getpid() and 1 in threads._pools[1]
    pid = os.fork()
    if pid == 0:  # the child: exit code 0 if its pack is right
        ok = False
        try:
            ok = np.array_equal(runtime.pack_nz(a), expected) and threads._pools[0] == os.getpid()
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
