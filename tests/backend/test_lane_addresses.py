"""`lane_state.addresses`: a window's per-lane GM addresses (lane-uniform offsets summed in Python,
lane-dependent ones scaled to bytes once) against the plain formula, and its bounds refusals."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nzjit.backend.lane_state import Fallback, addresses
from nzjit.backend.lane_values import LaneTensor
from nzjit.backend.values import TensorVal

SHAPE, SIZES = (4, 8, 64), (1, 2, 16)
STRIDES = (8 * 64, 64, 1)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(0, 3), min_size=1, max_size=70),
    st.integers(0, 6),
    st.integers(-2, 50),
    st.sampled_from([np.float32, np.int8, np.float16]),
    st.booleans(),
    st.booleans(),
)
def test_addresses_are_base_plus_offsets_times_strides(lanes, o1, o2, dtype, per_lane_base, lane_col):
    L = len(lanes)
    dt = np.dtype(dtype)
    bases = (1 << 20) + np.arange(L, dtype=np.int64) * 4096
    src = (
        LaneTensor(bases, dt, SHAPE, STRIDES, "ND")
        if per_lane_base
        else TensorVal(1 << 20, dt, SHAPE, STRIDES)
    )
    o0 = np.asarray(lanes, dtype=np.int64)
    c = np.asarray(lanes, dtype=np.int64) * 16 if lane_col else o2
    offs = [o0, o1, c]
    cols = np.asarray(c).tolist() if lane_col else [c]
    if o1 + SIZES[1] > SHAPE[1] or min(cols) < 0 or max(cols) + SIZES[2] > SHAPE[2]:
        with pytest.raises(Fallback, match="out of bounds"):
            addresses(src, offs, L, SIZES)
        return
    want = (bases if per_lane_base else 1 << 20) + (
        o0 * STRIDES[0] + o1 * STRIDES[1] + np.asarray(c)
    ) * dt.itemsize
    got = addresses(src, offs, L, SIZES)
    assert isinstance(got, np.ndarray) and got.dtype == np.int64
    np.testing.assert_array_equal(got, want)


def test_lane_uniform_offsets_give_an_int_or_the_lanes_bases():
    src = TensorVal(1 << 20, np.dtype(np.float32), SHAPE, STRIDES)
    got = addresses(src, [np.int64(2), 3, 16], 4, SIZES)
    assert type(got) is int and got == (1 << 20) + (2 * 512 + 3 * 64 + 16) * 4
    bases = np.array([0, 8192, 16384], np.int64)
    lt = LaneTensor(bases, np.dtype(np.int8), SHAPE, STRIDES, "ND")
    got = addresses(lt, [1, 0, 0], 3, SIZES)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, bases + 512)
    with pytest.raises(Fallback, match="out of bounds"):
        addresses(src, [0, -1, 0], 4, SIZES)
