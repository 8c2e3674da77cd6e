"""runtime.widen.widen_bf16: bf16 -> float32 of a strided view, compiled for the transposing case
(runtime/_lines.c widen_bf16) and for views of contiguous runs (widen_bf16_runs: NZ C0 lines) - the same bits as numpy's cast for every view and every bit pattern,
with and without the compiled loop; the compiled loop's refusals."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.lib.stride_tricks import as_strided

import runtime
import runtime.widen as widen
from runtime.widen import widen_bf16

BF16 = ml_dtypes.bfloat16


@st.composite
def views(draw):
    """A bf16 view of a larger buffer: 1-4 axes, permuted, sliced with steps, backwards too (never
    contiguous in general), with random bit patterns (NaNs and infinities included)."""
    nd = draw(st.integers(1, 4))
    dims = [draw(st.integers(1, 9)) for _ in range(nd)]
    buf = (
        np.random.default_rng(draw(st.integers(0, 2**16)))
        .integers(0, 1 << 16, [d * 2 for d in dims], dtype=np.uint16)
        .view(BF16)
    )
    steps = [draw(st.sampled_from([1, 2, -1, -2])) for _ in dims]  # negative strides too
    v = buf[tuple(slice(draw(st.integers(0, 1)), None, k) if k > 0 else slice(None, None, k) for k in steps)]
    return v.transpose(draw(st.permutations(list(range(nd)))))


@pytest.fixture(params=["compiled", "numpy"])
def way(request, monkeypatch):
    if request.param == "numpy":
        monkeypatch.setattr(widen, "_native", None)
    elif widen._native is None:
        pytest.skip("runtime._lines was not built (no C compiler at install): only numpy's cast runs")
    return request.param


@settings(max_examples=300, deadline=None)
@given(v=views())
def test_widen_equals_the_cast_of_any_view(v):
    for native in (widen._native, None):
        out = np.empty(v.shape, np.float32)
        saved, widen._native = widen._native, native
        try:
            widen_bf16(out, v)
        finally:
            widen._native = saved
        want = np.empty_like(out)
        np.copyto(want, v, casting="unsafe")
        assert np.array_equal(out.view(np.uint32), want.view(np.uint32))


def test_every_bit_pattern_transposed(way):
    # all 65536 bf16 patterns as a (256, 256) plane read transposed: the compiled loop's case
    bits = np.arange(1 << 16, dtype=np.uint16).reshape(256, 256)
    v = bits.view(BF16).T[None]
    out = np.empty(v.shape, np.float32)
    widen_bf16(out, v)
    assert np.array_equal(out.view(np.uint32)[0], bits.T.astype(np.uint32) << 16)


def test_an_nd_weight_window_as_the_mads_operand(way):
    # lanes of 128 x 256 windows of a bf16 [512, 1024] ND weight, read as (n, k): 16-column blocks
    # across 128 source rows, with a ragged last block (J = 136)
    w = np.random.default_rng(1).standard_normal((512, 1024)).astype(BF16)
    v = as_strided(w, (4, 256, 136), (512, 2, 2048))  # lane u: columns 256u.., rows 0..135
    out = np.empty(v.shape, np.float32)
    widen_bf16(out, v)
    assert np.array_equal(out, v.astype(np.float32))


def test_widen_refuses_what_it_cannot_write():
    with pytest.raises(ValueError, match="a bf16 view and a C-contiguous float32 array of its shape"):
        widen_bf16(np.empty((2, 3), np.float32), np.zeros((3, 2), BF16))
    with pytest.raises(ValueError, match="a bf16 view and a C-contiguous float32 array of its shape"):
        widen_bf16(np.empty((3, 2), np.float32).T, np.zeros((2, 3), BF16))
    with pytest.raises(ValueError, match="a bf16 view"):
        widen_bf16(np.empty((2, 3), np.float32), np.zeros((2, 3), np.float16))


@pytest.mark.skipif(widen._native is None, reason="runtime._lines was not built")
def test_the_compiled_loop_refuses_bad_buffers():
    f = widen._native.widen_bf16
    src = np.zeros((2, 3, 4), np.uint16)
    with pytest.raises(ValueError, match="must be 3-D, of 2- and 4-byte items"):
        f(src[0], np.empty((3, 4), np.uint32))
    with pytest.raises(ValueError, match="must be 3-D, of 2- and 4-byte items"):
        f(src, np.empty((2, 3, 4), np.uint16))
    with pytest.raises(ValueError, match="must have the same shape"):
        f(src, np.empty((2, 4, 3), np.uint32))
    buf = np.zeros(64, np.uint32)
    with pytest.raises(ValueError, match="must not overlap"):
        f(buf.view(np.uint16)[:24].reshape(2, 3, 4), buf[:24].reshape(2, 3, 4))
    with pytest.raises(ValueError, match="not C-contiguous"):  # numpy's buffer export refuses
        f(src, np.empty((2, 4, 3), np.uint32).transpose(0, 2, 1))


def test_widen_f16_gives_numpys_bits_for_every_pattern(way):
    # all 65536 fp16 patterns (NaN payloads, signed zeros, subnormals, infinities): the table is
    # numpy's own conversion, the lookup must give back exactly the cast's bits
    from runtime.widen import widen_f16

    bits = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).reshape(4, 16, 1024)
    out = np.empty(bits.shape, np.float32)
    widen_f16(out, bits.view(np.float16))
    want = np.empty_like(out)
    np.copyto(want, bits.view(np.float16), casting="unsafe")
    assert out.view(np.uint32).tobytes() == want.view(np.uint32).tobytes()
    small = bits[0, :1, :8].view(np.float16)  # below F16_TABLE_FROM: numpy's cast itself
    out = np.empty(small.shape, np.float32)
    widen_f16(out, small)
    assert np.array_equal(out, small.astype(np.float32))


def test_widen_f16_refuses_what_it_cannot_write():
    from runtime.widen import widen_f16

    with pytest.raises(ValueError, match="a C-contiguous fp16 array and a C-contiguous float32 array"):
        widen_f16(np.empty((64, 64), np.float32), np.zeros((64, 64), np.float16).T)
    with pytest.raises(ValueError, match="a C-contiguous fp16 array"):
        widen_f16(np.empty((2, 3), np.float32), np.zeros((2, 3), BF16))


@pytest.mark.skipif(widen._native is None, reason="runtime._lines was not built")
def test_the_compiled_lookup_refuses_bad_buffers():
    f = widen._native.lookup16
    table = np.zeros(1 << 16, np.uint32)
    src = np.zeros(8, np.uint16)
    with pytest.raises(ValueError, match="as many 4-byte items"):
        f(src, np.empty(7, np.uint32), table)
    with pytest.raises(ValueError, match="a table of 65536"):
        f(src, np.empty(8, np.uint32), table[:100])
    buf = np.zeros(16, np.uint32)
    with pytest.raises(ValueError, match="must not overlap"):
        f(buf.view(np.uint16)[:8], buf[:8], table)


def test_every_bit_pattern_in_c0_lines(way):
    # all 65536 patterns as 4096 C0 lines of 16, each line 64 bytes from the next (the runs case)
    bits = np.arange(1 << 16, dtype=np.uint16).reshape(-1, 16)
    buf = np.zeros((bits.shape[0], 2, 16), np.uint16)
    buf[:, 1] = bits
    v = buf.view(BF16)[:, 1, :].reshape(64, 64, 16)
    out = np.empty(v.shape, np.float32)
    widen_bf16(out, v)
    assert np.array_equal(out.view(np.uint32).reshape(-1), bits.reshape(-1).astype(np.uint32) << 16)


def test_an_nz_weight_window_as_the_mads_operand(way):
    # the Right operand of 4 lanes of 64 x 128 windows of an NZ-packed bf16 W[256, 256]: (lane,
    # row, column block, 16) with the column blocks 256 rows x 32 bytes apart - 4 axes, each line
    # a contiguous run of 16
    w = np.random.default_rng(2).standard_normal((256, 256)).astype(BF16)
    nz = runtime.pack_nz(w).reshape(-1).reshape(16, 256, 16)  # (column block, row, 16)
    v = nz[0:8].reshape(8, 4, 64, 16).transpose(1, 2, 0, 3)
    out = np.empty(v.shape, np.float32)
    widen_bf16(out, v)
    assert np.array_equal(out.reshape(4, 64, 128), w[:, :128].reshape(4, 64, 128).astype(np.float32))


@pytest.mark.skipif(widen._native is None, reason="runtime._lines was not built")
def test_the_compiled_run_loop_refuses_bad_buffers():
    f = widen._native.widen_bf16_runs
    src = np.zeros((2, 3, 4), np.uint16)
    with pytest.raises(ValueError, match="the same 1 to 8 axes, of 2- and 4-byte items"):
        f(src[0], np.empty((2, 3, 4), np.uint32))
    with pytest.raises(ValueError, match="the same 1 to 8 axes, of 2- and 4-byte items"):
        f(src, np.empty((2, 3, 4), np.uint16))
    with pytest.raises(ValueError, match="the same 1 to 8 axes"):
        f(np.zeros((1,) * 9, np.uint16), np.empty((1,) * 9, np.uint32))
    with pytest.raises(ValueError, match="innermost axis must be contiguous"):
        f(src.transpose(0, 2, 1), np.empty((2, 4, 3), np.uint32))
    with pytest.raises(ValueError, match="must have the same shape"):
        f(src, np.empty((2, 4, 3), np.uint32))
    buf = np.zeros(64, np.uint32)
    with pytest.raises(ValueError, match="must not overlap"):
        f(buf.view(np.uint16)[:24].reshape(2, 3, 4), buf[:24].reshape(2, 3, 4))
    out = np.empty((2, 3, 4), np.uint32)
    f(np.arange(24, dtype=np.uint16).reshape(2, 3, 4), out)
    assert np.array_equal(out, np.arange(24, dtype=np.uint32).reshape(2, 3, 4) << 16)
