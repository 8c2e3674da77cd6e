"""runtime._lines.widen_bf16_runs (issue 27: the grouped bf16 prefill's operand conversion): bf16
views of contiguous runs into float32, rows in bands where a row's runs lie further apart than its
rows (NZ operands), 8 a step with AVX2 - the bits of numpy's cast for every pattern, on both the
AVX2 and the scalar loop, at every band edge."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import runtime
import runtime.widen as widen

BF16 = ml_dtypes.bfloat16
pytestmark = pytest.mark.skipif(widen._native is None, reason="runtime._lines was not built")


def _check(v: np.ndarray) -> None:
    """Both loops give numpy's bits for the bf16 view `v`, and `widen_bf16` takes them."""
    want = np.empty(v.shape, np.float32)
    np.copyto(want, v, casting="unsafe")
    for baseline in (False, True):
        got = np.full(v.shape, 0xFFFFFFFF, np.uint32)
        widen._native.widen_bf16_runs(v.view(np.uint16), got, baseline)
        assert np.array_equal(got, want.view(np.uint32)), baseline
    out = np.empty(v.shape, np.float32)
    widen.widen_bf16(out, v)
    assert np.array_equal(out.view(np.uint32), want.view(np.uint32))


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 3),  # lanes
    st.integers(1, 70),  # rows: band edges (32) inside, at and past
    st.integers(1, 12),  # column blocks of a row: banded above 8
    st.sampled_from([16, 8, 3]),  # run length (a C0 line is 16)
    st.integers(0, 2**16),
)
def test_nz_operand_views_in_bands(lanes, rows, blocks, run, seed):
    # issue 27: an NZ weight's window as the mad's rows - (lane, row, column block, run), a row's
    # runs one column block (rows x 32 bytes) apart: the banded loop
    bits = np.random.default_rng(seed).integers(0, 1 << 16, (blocks, lanes * rows + 3, 16), dtype=np.uint16)
    v = bits.view(BF16)[:, 1 : 1 + lanes * rows, :run].reshape(blocks, lanes, rows, run).transpose(1, 2, 0, 3)
    assert blocks == 1 or v.strides[-2] > v.strides[-3]  # the banded case
    _check(v)


def test_every_bit_pattern_through_the_bands():
    # issue 27: all 65536 patterns (NaNs, infinities, subnormals) as the runs of a banded view
    bits = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).reshape(16, 256, 16)  # (block, row, 16)
    v = bits.view(BF16).transpose(1, 0, 2)  # rows of 16 runs 8 KiB apart
    _check(v)
    _check(bits.view(BF16).reshape(4096, 16))  # plain rows: one run each


def test_an_nz_weight_chunk_as_the_grouped_prefill_reads_it():
    # issue 27: 16 lanes of a 128-row NZ window, 16 column blocks of 16 (the grouped prefill's
    # Right chunk, scaled down to 4 lanes and a 512-row weight)
    w = np.random.default_rng(4).standard_normal((512, 256)).astype(BF16)
    nz = runtime.pack_nz(w).reshape(16, 512, 16)  # (column block, row, 16)
    v = nz.reshape(16, 4, 128, 16).transpose(1, 2, 0, 3)  # (lane, row, column block, 16)
    out = np.empty(v.shape, np.float32)
    widen.widen_bf16(out, v)
    assert np.array_equal(out.reshape(4, 128, 256), w.reshape(4, 128, 256).astype(np.float32))
    _check(v)
