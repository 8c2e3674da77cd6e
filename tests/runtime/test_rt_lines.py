"""runtime._lines.swap, the compiled NZ line permutation behind pack_nz / unpack_nz (NZ-8): the
lines it moves, the range of source rows it is given, and what it refuses."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime import nz

pytestmark = pytest.mark.skipif(
    nz._native is None, reason="runtime._lines was not built (no C compiler at install)"
)


def _lines(planes, n_i, n_j, seed):
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (planes, n_i, n_j, 32), dtype=np.uint8)


@settings(max_examples=150, deadline=None)
@given(planes=st.integers(0, 3), n_i=st.integers(0, 40), n_j=st.integers(0, 12), data=st.data())
def test_swap_moves_exactly_the_lines_of_its_rows(planes, n_i, n_j, data):  # NZ-8
    # dst[b, j, i] = src[b, i, j] for every b, j and i_lo <= i < i_hi (bands of 8 rows, a ragged
    # last one, empty ranges); every other byte of dst is left as it was.
    i_lo = data.draw(st.integers(0, n_i))
    i_hi = data.draw(st.integers(i_lo, n_i))
    src = _lines(planes, n_i, n_j, seed=n_i * 100 + n_j)
    dst = np.full((planes, n_j, n_i, 32), 0xA5, np.uint8)
    nz._native.swap(src, dst, planes, n_i, n_j, i_lo, i_hi)
    expected = np.full_like(dst, 0xA5)
    expected[:, :, i_lo:i_hi] = src.swapaxes(1, 2)[:, :, i_lo:i_hi]
    np.testing.assert_array_equal(dst, expected)


def test_swaps_on_several_threads_at_once_each_move_their_own_lines():
    # The GIL is released while lines move, so calls really overlap: each must keep to its own
    # buffers and rows (four threads, two of them sharing one dst by disjoint row ranges).
    from concurrent.futures import ThreadPoolExecutor

    srcs = [_lines(1, 512, 64, seed=s) for s in range(3)]
    dsts = [np.zeros((1, 64, 512, 32), np.uint8) for _ in range(3)]
    jobs = [
        (srcs[0], dsts[0], 0, 512),
        (srcs[1], dsts[1], 0, 512),
        (srcs[2], dsts[2], 0, 256),
        (srcs[2], dsts[2], 256, 512),
    ]
    with ThreadPoolExecutor(4) as pool:
        for _ in range(5):
            list(pool.map(lambda j: nz._native.swap(j[0], j[1], 1, 512, 64, j[2], j[3]), jobs))
    for src, dst in zip(srcs, dsts):
        np.testing.assert_array_equal(dst, src.swapaxes(1, 2))


@pytest.mark.parametrize(
    "args,error,match",
    [
        (
            lambda a, b: (a, b, 1, 2, 3, 0, 2),
            ValueError,
            "must each hold planes \\* n_i \\* n_j 32-byte lines",
        ),
        (lambda a, b: (a, b[:64], 1, 2, 2, 0, 2), ValueError, "must each hold"),
        (lambda a, b: (a, b, 1, 2, 2, 1, 3), ValueError, "0 <= i_lo <= i_hi <= n_i"),
        (lambda a, b: (a, b, 1, 2, 2, 2, 1), ValueError, "0 <= i_lo <= i_hi <= n_i"),
        (lambda a, b: (a, b, -1, 2, 2, 0, 2), ValueError, "must be >= 0"),
        (lambda a, b: (a, b, 1 << 60, 4, 4, 0, 1), ValueError, "overflow"),
        (lambda a, b: (a, a, 1, 2, 2, 0, 2), ValueError, "must not overlap"),
        (lambda a, b: (a[:96], a[32:], 1, 1, 3, 0, 1), ValueError, "must not overlap"),
        (lambda a, b: (a.reshape(8, 16)[:, ::2], b[:64], 1, 1, 2, 0, 1), ValueError, "not C-contiguous"),
        (lambda a, b: (a, np.frombuffer(bytes(128), np.uint8), 1, 2, 2, 0, 2), TypeError, "read-write"),
        (lambda a, b: (a, b, 1, 2, 2, 0), TypeError, "takes exactly 7 arguments|7 arguments"),
    ],
)
def test_swap_refuses_what_it_cannot_do_exactly(args, error, match):
    a = np.arange(128, dtype=np.uint8)  # 4 lines
    b = np.zeros(128, np.uint8)
    with pytest.raises(error, match=match):
        nz._native.swap(*args(a, b))
    assert not b.any()  # nothing written
