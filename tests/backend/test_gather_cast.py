"""Property: `lane_values.gather_cast` (the mad operands' conversion: C0 lines gathered as 32-byte
items, `RUNS_AT_ONCE` source runs per copy, or one direct cast when consecutive lines are adjacent)
writes exactly what a plain typed copy ``np.copyto(out, v, casting="unsafe")`` writes, for views of
C0 lines in any axis order."""

from __future__ import annotations

from unittest import mock

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nzjit.backend import lane_values
from nzjit.backend.lane_values import gather_cast

DTYPES = [np.int8, np.float16, ml_dtypes.bfloat16, np.float32]


@st.composite
def line_views(draw):
    """A view ``(a, b, c, c0)`` of C0 lines of a larger buffer, its three line axes permuted."""
    dt = np.dtype(draw(st.sampled_from(DTYPES)))
    c0 = 32 // dt.itemsize
    dims = [draw(st.integers(1, 7)) for _ in range(3)]
    pad = draw(st.integers(0, 2))  # extra lines in the buffer's rows: the view is not contiguous
    buf = np.random.default_rng(draw(st.integers(0, 2**16))).integers(
        -100, 100, (*dims[:2], dims[2] + pad, c0)
    )
    v = buf.astype(dt)[:, :, draw(st.integers(0, pad)) :][:, :, : dims[2]]
    order = draw(st.permutations([0, 1, 2]))
    return v.transpose(*order, 3)


@settings(max_examples=200, deadline=None)
@given(line_views(), st.sampled_from([np.float32, np.float64, None]), st.integers(1, 8))
def test_gather_cast_equals_a_typed_copy(v, out_dtype, runs):
    # `runs` source runs per copy: 1..8 against up to 7 lines on the last axis (ragged last slices)
    out = np.empty(v.shape, out_dtype or v.dtype)
    want = np.empty_like(out)
    np.copyto(want, v, casting="unsafe")
    with mock.patch.object(lane_values, "RUNS_AT_ONCE", runs):
        gather_cast(out, v)
    assert np.array_equal(out.view(np.uint8), want.view(np.uint8))


def test_adjacent_lines_cast_directly():
    # an ND row of 4 C0 lines (the Left operand of a matmul read straight from GM)
    x = np.arange(3 * 64, dtype=np.float32).astype(ml_dtypes.bfloat16).reshape(3, 64)
    v = x.reshape(3, 4, 16)
    assert v.strides[-2] == 32
    out = np.empty(v.shape, np.float32)
    gather_cast(out, v)
    assert np.array_equal(out, x.astype(np.float32).reshape(3, 4, 16))


@pytest.mark.parametrize("native", [True, False])
def test_bf16_lines_widen_to_the_bits_of_the_cast_for_every_pattern(native, monkeypatch):
    # the bf16 -> float32 lines are widened by a 16-bit shift, not ml_dtypes' cast: the same bits
    # for all 65536 patterns (NaN payloads and signs, infinities, subnormals), gathered from C0
    # lines 64 bytes apart (not adjacent: the line path); runtime.widen's compiled loop, and the
    # numpy shift it replaces when it is not built
    if native and not lane_values.NATIVE_WIDEN:
        pytest.skip("runtime._lines was not built")
    monkeypatch.setattr(lane_values, "NATIVE_WIDEN", native)
    bits = np.arange(1 << 16, dtype=np.uint16).reshape(-1, 16)  # 4096 lines of 16 elements
    buf = np.zeros((bits.shape[0], 2, 16), np.uint16)
    buf[:, 0] = bits
    v = buf.view(ml_dtypes.bfloat16)[:, 0, :].reshape(64, 64, 16)
    assert v.strides[-2] == 64
    out = np.empty(v.shape, np.float32)
    gather_cast(out, v)
    want = np.empty_like(out)
    np.copyto(want, v, casting="unsafe")
    assert np.array_equal(out.view(np.uint32), want.view(np.uint32))
    assert np.array_equal(out.view(np.uint32).reshape(-1), bits.reshape(-1).astype(np.uint32) << 16)


def test_bf16_lines_widen_runs_at_once():
    # 20 lines per row, RUNS_AT_ONCE = 8: slices of 8, 8 and 4 lines, each widened into its place
    # (numpy's shift: the way without the compiled loop)
    x = np.random.default_rng(3).standard_normal((5, 20, 2, 16)).astype(ml_dtypes.bfloat16)
    v = x[:, :, 1, :]
    seen = []
    real = np.left_shift
    with (
        mock.patch.object(lane_values, "NATIVE_WIDEN", False),
        mock.patch.object(lane_values, "RUNS_AT_ONCE", 8),
        mock.patch.object(
            lane_values.np,
            "left_shift",
            side_effect=lambda s, *a, **k: seen.append(s.shape[-2]) or real(s, *a, **k),
        ),
    ):
        out = np.empty(v.shape, np.float32)
        gather_cast(out, v)
    assert seen == [8, 8, 4]
    assert np.array_equal(out, v.astype(np.float32))
