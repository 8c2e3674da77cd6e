"""The public runtime API the compiler uses (issue 21: nzjit uses no `_`-prefixed runtime name):
each public name behaves as the implementation it fronts, with its documented refusals."""

from __future__ import annotations

import numpy as np
import pytest

import runtime
from runtime import GmView, OnChip, TileBuf
from runtime.cube import F32_EXACT_K, mov_checks
from runtime.spans import byte_span, overlaps_itself
from runtime.tile import TileGeometry, tile_geometry


def test_tile_geometry_is_shared_and_validated():
    g = tile_geometry("Vec", np.dtype(np.float32), 16, 32)
    assert isinstance(g, TileGeometry)
    assert g is tile_geometry("Vec", np.dtype(np.float32), 16, 32)  # cached: the same object
    assert (g.space, g.rows, g.cols, g.layout, g.nbytes) == ("Vec", 16, 32, "ND", 16 * 32 * 4)
    with pytest.raises(runtime.DeviceError, match="whole 32-byte blocks"):
        tile_geometry("Vec", np.float32, 16, 3)
    with pytest.raises(runtime.DeviceError, match="cannot have layout"):
        tile_geometry("Left", np.float16, 16, 16, "ND")


def test_from_geometry_wraps_a_buffer_without_copying():
    g = tile_geometry("Vec", np.int32, 8, 8)
    buf = np.zeros(g.nbytes, np.uint8)
    t = TileBuf.from_geometry(g, 4, 8, buf)
    assert t.geometry is g and t.owner is None and t.image is buf and not t.holds_logical
    assert (t.valid_row, t.valid_col) == (4, 8)
    t.set_logical(np.arange(64, dtype=np.int32).reshape(8, 8))
    assert buf.view(np.int32)[9] == 9  # the tile's bytes are the buffer's
    assert t.image_of(g) is buf
    assert t.image_of(tile_geometry("Vec", np.int32, 16, 8)) is None  # another geometry


def test_from_geometry_logical_acc_is_laid_out_on_first_byte_access():
    g = tile_geometry("Acc", np.float32, 16, 16)
    m = np.arange(256, dtype=np.float32).reshape(16, 16)
    t = TileBuf.from_geometry(g, None, None, m.reshape(-1).view(np.uint8).copy(), logical=True)
    assert t.holds_logical and t.image_of(g) is None  # not an image yet
    np.testing.assert_array_equal(t.logical(), m)
    assert not t.holds_logical  # `logical()` read the bytes: now the ACC image
    ref = TileBuf("Acc", np.float32, 16, 16)
    ref.set_logical(m)
    assert t.data.tobytes() == ref.data.tobytes()


def test_owner_check_live_and_check_window():
    oc = OnChip("A2A3")
    t = oc.alloc_tile("Vec", 16, 16, np.float32)
    assert t.owner is oc
    t.check_window(0, 0, 16, 16)
    with pytest.raises(runtime.DeviceError, match="outside the 16x16 Vec tile"):
        t.check_window(8, 0, 16, 16)
    oc.free_tile(t)
    with pytest.raises(runtime.DeviceError, match="used after free"):
        t.check_live()
    assert t.image_of(t.geometry) is None  # a freed tile has no image


def test_gmview_trusted_equals_the_checked_view():
    v = GmView(64, np.dtype(np.float16), (2, 16), (32, 1), "ND")
    t = GmView.trusted(64, np.dtype(np.float16), (2, 16), (32, 1), "ND")
    assert t == v and type(t) is GmView


def test_spans_and_the_exact_depth():
    assert byte_span(100, (2, 3), (10, 1)) == (100, 113)
    assert byte_span(5, (0, 3), (10, 1)) == (5, 5)  # empty: touches nothing
    assert overlaps_itself((2, 4), (2, 1))  # rows overlap by two bytes
    assert not overlaps_itself((2, 4), (4, 1))
    assert F32_EXACT_K == 2**24 // (128 * 128)  # int8 products summed exactly in float32


def test_mov_checks_refuses_like_tmov():
    src = TileBuf("Mat", np.float16, 32, 32)
    dst = TileBuf("Left", np.float16, 16, 16)
    mov_checks(dst, src, 16, 16)  # on the fractal grid
    with pytest.raises(runtime.DeviceError, match="multiple of"):
        mov_checks(dst, src, 8, 0)
    with pytest.raises(runtime.DeviceError, match="multiple of"):
        runtime.isa.tmov(dst, src, 8, 0)  # the instruction refuses the same way
    with pytest.raises(runtime.DeviceError, match="not supported"):
        mov_checks(TileBuf("Mat", np.float16, 16, 16), TileBuf("Left", np.float16, 16, 16), 0, 0)
