"""TCVT's rounding (runtime/rounding.py `round_to`) to a float with rint / none: an integer source
(up to 32 bits: every value a float64 holds exactly) is cast directly, a float source through
float64 as before. Both must give exactly the bytes of the cast through float64: the rounding of
the exact value, nearest, ties to even; float sources keep the float64 detour, which quiets
signalling NaNs (a direct cast would keep their payload)."""

from __future__ import annotations

import numpy as np
import pytest

from runtime.rounding import round_to

EDGES = [
    0,
    1,
    -1,
    2**24,
    2**24 + 1,
    2**24 + 3,
    2**25 + 2,
    2**31 - 1,
    -(2**31),
    65504,
    65519,
    65520,
    65536,
    2047,
    2049,
]


@pytest.mark.parametrize("src", [np.int8, np.int16, np.int32, np.uint8, np.uint16, np.uint32])
@pytest.mark.parametrize("dst", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("mode", ["rint", "none"])
def test_an_integer_source_rounds_as_through_float64(src, dst, mode):
    info = np.iinfo(src)
    edges = np.array([e for e in EDGES if info.min <= e <= info.max], np.int64).astype(src)
    bits = np.random.default_rng(1).integers(info.min, info.max, 200_000, dtype=np.int64, endpoint=True)
    x = np.concatenate([edges, bits.astype(src)])
    with np.errstate(over="ignore"):
        want = x.astype(np.float64).astype(dst)
        got = round_to(x, np.dtype(dst), mode)
    assert got.dtype == np.dtype(dst) and got.tobytes() == want.tobytes()


def test_a_float_source_keeps_the_float64_detour_for_nans():
    snan = np.array([0x7F800001, 0xFF800123, 0x7FC00000, 0x3F800000], np.uint32).view(np.float32)
    with np.errstate(invalid="ignore"):
        want = snan.astype(np.float64).astype(np.float32)
        got = round_to(snan, np.dtype(np.float32), "rint")
    assert got.tobytes() == want.tobytes()
