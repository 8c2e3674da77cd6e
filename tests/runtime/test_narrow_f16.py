"""float32 -> fp16 TCVT (rint) through the compiled F16C conversion (`runtime._lines.narrow_f16`,
`runtime.rounding.convert_into`): the same bits as numpy's conversion for every value it takes -
each fp16 value, the float32 values at and around each rounding boundary, random bit patterns -
and numpy's own path for NaNs and overflows (their bits, the overflow warning)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from runtime.rounding import convert, convert_into

_lines = pytest.importorskip("runtime._lines")


def _candidates() -> np.ndarray:
    h = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float32)
    b = h[np.isfinite(h)].view(np.uint32)
    # each fp16 value, the midpoints to its neighbours (13 dropped bits: 0x1000) and their ulps
    near = [b + d for d in (0, 1, 0xFFF, 0x1000, 0x1001, 0x1FFF, 0x2000)] + [b - 1]
    rng = np.random.default_rng(17)
    random = rng.integers(0, 1 << 32, 1 << 20, dtype=np.uint64).astype(np.uint32)
    f = np.concatenate([*near, random]).view(np.float32)
    return f[np.abs(f) < 65520]  # NaN and what rounds to inf take numpy's path (below)


def test_the_compiled_conversion_gives_numpys_bits():
    x = _candidates()
    out = np.empty(x.shape, np.float16)
    if not _lines.narrow_f16(x, out.view(np.uint16)):
        pytest.skip("no F16C on this CPU")
    assert np.array_equal(out.view(np.uint16), x.astype(np.float64).astype(np.float16).view(np.uint16))


@pytest.mark.parametrize("special", [np.nan, np.inf, -np.inf, 65520.0, -1e6, 65519.99])
def test_nan_and_overflow_take_numpys_path_with_its_warning(special):
    x = np.linspace(-3, 3, 64, dtype=np.float32).reshape(4, 16)
    x[2, 5] = special
    out = np.empty(x.shape, np.float16)
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        convert_into(out, x, "rint")
    with warnings.catch_warnings(record=True) as want:
        warnings.simplefilter("always")
        ref = convert(x, np.dtype(np.float16), "rint")
    assert out.tobytes() == ref.tobytes()
    assert [str(w.message) for w in got] == [str(w.message) for w in want]


def test_views_and_other_modes_take_numpys_path():
    x = np.random.default_rng(3).standard_normal((8, 32)).astype(np.float32) * 1000
    for mode in ("rint", "round", "floor", "trunc"):
        out = np.zeros((8, 40), np.float16)
        convert_into(out[:, :32], x, mode)  # a strided destination
        assert out[:, :32].tobytes() == convert(x, np.dtype(np.float16), mode).tobytes()
        assert not out[:, 32:].any()
