"""TileBuf layouts (HW §1.3, §6): byte image <-> logical matrix for ND/NZ/ZZ/ZN/ACC."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from runtime import DeviceError, TileBuf
from runtime.dtypes import c0_of


def _offsets(layout, rows, cols, dtype):
    """Element offset of every logical (r, c), from the formulas of HW §1.3 / §6."""
    r, c = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    c0 = c0_of(dtype) if layout in ("NZ", "ZZ", "ZN") else None
    if layout == "ND":
        return r * cols + c
    if layout == "NZ":
        return (c // c0) * rows * c0 + r * c0 + c % c0
    if layout == "ZZ":
        return (r // 16) * 16 * cols + (c // c0) * 16 * c0 + (r % 16) * c0 + c % c0
    if layout == "ZN":
        return (r // c0) * c0 * cols + (c // 16) * c0 * 16 + (c % 16) * c0 + r % c0
    return (c // 16) * rows * 16 + r * 16 + c % 16  # ACC


@pytest.mark.parametrize(
    "space,layout,rows,cols,dtype",
    [
        ("Vec", "ND", 16, 32, np.float16),
        ("Mat", "ND", 8, 64, np.int8),
        ("Mat", "NZ", 48, 64, np.int8),
        ("Mat", "NZ", 32, 48, ml_dtypes.bfloat16),
        ("Vec", "NZ", 16, 16, np.float32),
        ("Left", "ZZ", 32, 64, np.int8),
        ("Left", "ZZ", 48, 32, np.float16),
        ("Left", "ZZ", 16, 16, np.float32),
        ("Right", "ZN", 64, 32, np.int8),
        ("Right", "ZN", 32, 48, np.float16),
        ("Right", "ZN", 16, 32, np.float32),
        ("Acc", "ACC", 24, 32, np.float32),
        ("Acc", "ACC", 32, 48, np.int32),
    ],
)
def test_layout_offsets(space, layout, rows, cols, dtype):
    t = TileBuf(space, dtype, rows, cols, layout=layout)
    logical = np.arange(rows * cols).reshape(rows, cols).astype(dtype)
    t.set_logical(logical)
    flat = t.data.view(t.dtype)
    off = _offsets(layout, rows, cols, dtype)
    np.testing.assert_array_equal(flat[off], logical)
    np.testing.assert_array_equal(t.logical(), logical)


def test_default_layouts():
    assert [TileBuf(s, np.float16, 16, 16).layout for s in ("Vec", "Mat", "Left", "Right", "Acc")] == [
        "ND",
        "NZ",
        "ZZ",
        "ZN",
        "ACC",
    ]


def test_window_and_set_window():
    t = TileBuf("Mat", np.float16, 64, 64)
    full = np.arange(64 * 64).reshape(64, 64).astype(np.float16)
    t.set_logical(full)
    np.testing.assert_array_equal(t.window(16, 32, 32, 16), full[16:48, 32:48])
    np.testing.assert_array_equal(t.window(3, 5, 7, 9), full[3:10, 5:14])  # unaligned fallback
    t.set_window(16, 16, np.ones((16, 16), np.float16))
    t.set_window(1, 2, np.zeros((3, 3), np.float16))
    full[16:32, 16:32] = 1
    full[1:4, 2:5] = 0
    np.testing.assert_array_equal(t.logical(), full)
    with pytest.raises(DeviceError, match="outside"):
        t.window(60, 0, 16, 16)


@pytest.mark.parametrize(
    "space,layout,rows,cols,dtype",
    [
        ("Mat", "NZ", 24, 32, np.int8),  # rows not a multiple of 16
        ("Mat", "NZ", 16, 48, np.int8),  # cols not a multiple of c0 = 32
        ("Left", "ZZ", 16, 8, np.float16),
        ("Right", "ZN", 8, 16, np.float16),  # K not a multiple of c0
        ("Acc", "ACC", 16, 8, np.float32),
        ("Vec", "ND", 4, 3, np.float16),  # row not a whole 32-byte block
        ("Left", "NZ", 16, 16, np.float16),  # Left is Zz on A2/A3
        ("L2", "ND", 16, 16, np.float16),
    ],
)
def test_static_tile_refusals(space, layout, rows, cols, dtype):
    with pytest.raises(DeviceError):
        TileBuf(space, dtype, rows, cols, layout=layout)


def test_set_logical_checks_shape_and_dtype():
    t = TileBuf("Vec", np.float16, 16, 16)
    with pytest.raises(DeviceError, match="shape"):
        t.set_logical(np.zeros((16, 8), np.float16))
    with pytest.raises(DeviceError, match="dtype"):
        t.set_logical(np.zeros((16, 16), np.float32))


def test_tile_view_bounds():
    t = TileBuf("Mat", np.int8, 16, 32)
    assert t.view(0, (16, 32), (32, 1)).shape == (16, 32)
    with pytest.raises(DeviceError, match="outside the tile"):
        t.view(32, (16, 32), (32, 1))
