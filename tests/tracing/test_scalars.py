"""Scalar (index) arithmetic on traced values: `+ - * // %`, comparisons, pl.min / pl.max.
Integer arithmetic wraps at its declared width; `//` and `%` are floor division and floor modulo
(api.md; NZ-17, NZ-19).

Each expression is observed numerically: it is the row offset of a one-row load from `ROWS`
(row r holds r), stored to row j of the output, so `out[j, 0]` is the value (plus a bias that
keeps offsets non-negative).
"""

from __future__ import annotations

import numpy as np
import pytest

from nzjit import pl
from nzjit.core import dtypes as D

R = 256
ROWS = np.repeat(np.arange(R, dtype=np.int32)[:, None], 16, axis=1)
X = pl.Tensor[[R, 16], pl.INT32]
OUT = pl.Out[pl.Tensor[[32, 16], pl.INT32]]


def observe(kernel, *scalars, n):
    return [int(v) for v in kernel(ROWS, *scalars)[:n, 0]]


def emit(x, values, out):
    for j, v in enumerate(values):
        pl.store(pl.load(x, [v, 0], [1, 16]), [j, 0], out)


def test_int32_multiplication_wraps_before_the_division():  # NZ-17, NZ-19
    @pl.kernel
    def k(x: X, a: pl.Scalar[pl.INT32], out: OUT):
        emit(
            x,
            [
                (a * 256) // 16,  # 2**32 wraps to 0 in INT32
                (a * (256 // 16)) // (1 << 21),  # 2**28 fits: 2**28 / 2**21 = 128
                (a * 128) // (1 << 24) + 130,
            ],
            out,
        )  # 2**31 wraps to -2**31: floor(-128) + 130

    assert observe(k, 1 << 24, n=3) == [0, 128, 2]


def test_int32_addition_wraps_at_the_top():  # NZ-17
    @pl.kernel
    def k(x: X, a: pl.Scalar[pl.INT32], out: OUT):
        emit(x, [(a + 1) // (1 << 24) + 200], out)  # 2**31 - 1 + 1 wraps to -2**31: -128 + 200

    assert observe(k, (1 << 31) - 1, n=1) == [72]


def test_int8_scalar_wraps_at_8_bits():
    @pl.kernel
    def k(x: X, a: pl.Scalar[pl.INT8], out: OUT):
        emit(x, [pl.cast(a + 100, pl.INDEX) + 60], out)  # 100 + 100 wraps to -56

    assert observe(k, 100, n=1) == [4]


def test_index_arithmetic_does_not_wrap_at_32_bits():
    @pl.kernel
    def k(x: X, a: pl.Scalar[pl.INDEX], out: OUT):
        emit(x, [(a * 256) // (1 << 28)], out)  # 2**32 in 64 bits

    assert observe(k, 1 << 24, n=1) == [16]


def test_negative_floor_division_and_modulo():  # NZ-19
    @pl.kernel
    def k(x: X, b: pl.Scalar[pl.INT32], out: OUT):
        emit(
            x,
            [
                b // 4 + 10,  # floor(-7 / 4) = -2
                b % 4,  # non-negative remainder for a positive divisor: 1
                7 // b + 10,  # floor(7 / -7) = -1
                b // -4,  # floor(-7 / -4) = 1
                b % -4 + 10,  # floor modulo takes the divisor's sign: -3
                (-b) % 5,  # 7 % 5 = 2
                (b - 1) // 8 + 10,  # floor(-1) = -1, not truncation's 0
                b * -3,
            ],
            out,
        )  # 21

    assert observe(k, -7, n=8) == [8, 1, 9, 1, 7, 2, 9, 21]
    assert [-7 // 4, -7 % 4, 7 // -7, -7 // -4, -7 % -4] == [-2, 1, -1, 1, -3]  # Python agrees


def test_min_max_and_mixing_with_python_ints():
    @pl.kernel
    def k(x: X, a: pl.Scalar[pl.INT32], b: pl.Scalar[pl.INT32], out: OUT):
        emit(
            x,
            [
                pl.min(a, b) + 20,
                pl.max(a, b),
                pl.min(a, 3),
                pl.max(1, b) + 1,
                pl.min(800 - a, 256) // 2,
                100 - a,
            ],
            out,
        )

    assert observe(k, 9, -7, n=6) == [13, 9, 3, 2, 128, 91]


def test_python_ints_fold_at_trace_time():
    assert pl.min(3, 5) == 3 and pl.max(3, 5) == 5


def test_comparisons():
    @pl.kernel
    def k(x: X, a: pl.Scalar[pl.INT32], b: pl.Scalar[pl.INT32], out: OUT):
        c = pl.INT32
        emit(
            x,
            [
                pl.cast(a < b, c),
                pl.cast(a <= a, c),
                pl.cast(a > b, c),
                pl.cast(b >= a, c),
                pl.cast(a == 9, c),
                pl.cast(a != a, c),
                pl.cast(b < 0, c),
            ],
            out,
        )

    assert observe(k, 9, -7, n=7) == [0, 1, 1, 0, 1, 0, 1]


def test_the_graph_keeps_the_declared_width_and_floor_ops():
    @pl.kernel
    def k(x: X, a: pl.Scalar[pl.INT32], out: OUT):
        emit(x, [(a * 256) // 16 + a % 8], out)

    text = str(k.lower().ir("trace"))
    assert "mul a 256" in text and "floordiv" in text and "mod a 8" in text
    assert ":i32 = mul" in text  # never re-associated into a * 16 (NZ-17)


def test_mixed_widths_need_a_cast():
    @pl.kernel
    def k(x: X, a: pl.Scalar[pl.INT32], out: OUT):
        for i in pl.range(2):
            emit(x, [a + i], out)

    with pytest.raises(ValueError, match="pl.cast"):
        k.lower()


def test_division_by_a_literal_zero_is_refused():
    @pl.kernel
    def k(x: X, a: pl.Scalar[pl.INT32], out: OUT):
        emit(x, [a // 0], out)

    with pytest.raises(ValueError, match="by zero"):
        k.lower()


@pytest.mark.parametrize(
    ("dtype", "value", "wrapped"),
    [
        (D.INT8, 200, -56),
        (D.UINT8, -1, 255),
        (D.INT32, 1 << 32, 0),
        (D.INT32, (1 << 31), -(1 << 31)),
        (D.INT16, -32769, 32767),
        (D.INDEX, 1 << 63, -(1 << 63)),
        (D.UINT32, 1 << 32, 0),
    ],
)
def test_dtype_wrap(dtype, value, wrapped):
    assert dtype.wrap(value) == wrapped
