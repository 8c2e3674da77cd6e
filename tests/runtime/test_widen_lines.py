"""runtime.widen.widen_lines_f32: int8 / fp16 mad operands converted to float32 in one compiled
pass straight from their strided C0 lines (runtime/_lines.c widen_i8_runs, widen_f16_runs; issue
22 item 10: the fused expert's fp16 down projection). The same bits as numpy's cast for every
value and view; an fp16 view holding a NaN (F16C quiets a signalling NaN, numpy keeps its bits)
and every view it cannot take are refused, and gather_cast then gives numpy's bits."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import runtime.widen as widen
from nzjit.backend.lane_values import gather_cast
from runtime.widen import widen_lines_f32

pytestmark = pytest.mark.skipif(not widen.COMPILED, reason="runtime/_lines.c not built")

F16_NAN = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
F16_NAN = F16_NAN[(F16_NAN & 0x7FFF) > 0x7C00]  # every fp16 NaN pattern, quiet and signalling


def _c0_lines(flat: np.ndarray, rows: int) -> np.ndarray:
    """`flat` laid out as NZ column blocks of 32-byte C0 lines and read back as a mad's Right
    operand reads them: (rows, blocks, c0) with the blocks `rows` lines apart (not contiguous)."""
    c0 = 32 // flat.itemsize
    blocks = flat.size // (rows * c0)
    return flat.reshape(blocks, rows, c0).transpose(1, 0, 2)


def _bits_of_the_cast(v: np.ndarray) -> bytes:
    return v.astype(np.float32).tobytes()


def test_every_finite_fp16_pattern_in_c0_lines_gives_numpys_bits():
    pats = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    pats = pats[(pats & 0x7FFF) <= 0x7C00]  # every pattern but a NaN: subnormals, zeros, infinities
    pats = np.concatenate([pats, pats[: (-len(pats)) % 256]])  # whole 16 x 16 fractals
    v = _c0_lines(pats.view(np.float16), 16)
    out = np.empty(v.shape, np.float32)
    assert widen_lines_f32(out, v)
    assert out.tobytes() == _bits_of_the_cast(v)


def test_every_int8_value_in_c0_lines_gives_numpys_bits():
    vals = np.tile(np.arange(-128, 128, dtype=np.int16).astype(np.int8), 8)
    v = _c0_lines(vals, 16)
    out = np.empty(v.shape, np.float32)
    assert widen_lines_f32(out, v)
    assert out.tobytes() == _bits_of_the_cast(v)


@pytest.mark.parametrize("nan", [int(F16_NAN[0]), 0x7E00, 0xFD01, int(F16_NAN[-1])])
def test_an_fp16_nan_is_refused_and_gather_cast_keeps_numpys_bits(nan):
    # F16C sets a signalling NaN's quiet bit; numpy keeps the pattern (0x7c01 -> 0x7f802000)
    bits = np.random.default_rng(nan).integers(0, 0x7C00, 16 * 64, dtype=np.uint16)
    bits[777] = nan
    v = _c0_lines(bits.view(np.float16), 16)
    out = np.empty(v.shape, np.float32)
    assert not widen_lines_f32(out, v)
    gathered = np.empty(v.shape, np.float32)
    gather_cast(gathered, v)
    assert gathered.tobytes() == _bits_of_the_cast(v)


def test_every_fp16_nan_pattern_through_gather_cast():
    pats = np.concatenate([F16_NAN, F16_NAN[: (-len(F16_NAN)) % 256]])
    v = _c0_lines(pats.view(np.float16), 16)
    out = np.empty(v.shape, np.float32)
    gather_cast(out, v)
    assert out.tobytes() == _bits_of_the_cast(v)


@st.composite
def line_views(draw):
    """An int8 or fp16 view of a larger buffer whose innermost axis is contiguous (C0 lines, ND
    rows) and whose other axes are permuted, stepped and reversed; finite fp16 values."""
    dtype = draw(st.sampled_from([np.int8, np.float16]))
    nd = draw(st.integers(1, 5))
    # the innermost axis up to 40: runs of whole 16- and 8-element vector steps and their tails
    dims = [draw(st.integers(1, 7)) for _ in range(nd - 1)] + [draw(st.integers(1, 40))]
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    if dtype == np.int8:
        buf = rng.integers(-128, 128, [d * 2 for d in dims]).astype(np.int8)
    else:
        buf = rng.integers(0, 0x7C01, [d * 2 for d in dims], dtype=np.uint16).view(np.float16)
        buf = np.where(rng.random(buf.shape) < 0.5, -buf, buf)
    steps = [draw(st.sampled_from([1, 2, -1, -2])) for _ in dims[:-1]] + [1]
    v = buf[tuple(slice(draw(st.integers(0, 1)), None, k) if k > 0 else slice(None, None, k) for k in steps)]
    outer = draw(st.permutations(list(range(nd - 1))))
    return v.transpose(*outer, nd - 1)


@settings(max_examples=150, deadline=None)
@given(line_views())
def test_any_view_of_contiguous_runs_gives_numpys_bits(v):
    out = np.empty(v.shape, np.float32)
    assert widen_lines_f32(out, v)
    assert out.tobytes() == _bits_of_the_cast(v)


def test_what_it_cannot_take_is_refused():
    x8 = np.arange(64, dtype=np.int8).reshape(8, 8)
    out = np.empty((8, 8), np.float32)
    assert not widen_lines_f32(out, x8.T)  # innermost axis strided
    assert not widen_lines_f32(np.empty((8, 8), np.float64), x8)  # another destination dtype
    assert not widen_lines_f32(np.empty((8, 16), np.float32)[:, :8], x8)  # a strided destination
    assert not widen_lines_f32(np.empty((4, 16), np.float32), x8)  # another shape
    assert not widen_lines_f32(out, x8.astype(np.int16))  # another source dtype
    assert not widen_lines_f32(np.empty((), np.float32), np.zeros((), np.int8))  # no axis
    assert not widen_lines_f32(np.empty((0, 4), np.float32), np.zeros((0, 4), np.int8))  # empty


def test_without_the_compiled_loops_nothing_is_done(monkeypatch):
    monkeypatch.setattr(widen, "_native", None)
    assert not widen_lines_f32(np.empty(4, np.float32), np.zeros(4, np.int8))


def test_the_compiled_loops_refuse_bad_buffers():
    n = widen._native
    with pytest.raises(ValueError, match="contiguous"):
        n.widen_i8_runs(np.zeros((4, 4), np.int8).T, np.empty((4, 4), np.float32))
    with pytest.raises(ValueError, match="shape"):
        n.widen_i8_runs(np.zeros((4, 4), np.int8), np.empty((2, 8), np.float32))
    with pytest.raises(ValueError, match="axes"):
        n.widen_f16_runs(np.zeros(4, np.int8), np.empty(4, np.uint32))
    buf = np.zeros(64, np.uint16)
    with pytest.raises(ValueError, match="overlap"):
        n.widen_f16_runs(buf[:16], buf[8:40].view(np.uint32))
