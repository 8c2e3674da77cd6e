"""pack_nz / unpack_nz / nz_blocked_shape / c0_of (NZ-4, NZ-5, NZ-8, NZ-28, NZ-33)."""

from __future__ import annotations

from unittest import mock

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import runtime
from runtime.dtypes import itemsize_bits
from runtime.layout_marks import is_nz

WHOLE_BYTE = [
    np.int8,
    np.uint8,
    ml_dtypes.float8_e4m3fn,
    ml_dtypes.float8_e5m2,
    np.int16,
    np.uint16,
    np.float16,
    ml_dtypes.bfloat16,
    np.int32,
    np.uint32,
    np.float32,
]
SUB_BYTE = [ml_dtypes.int4, ml_dtypes.uint4, ml_dtypes.float4_e2m1fn, np.bool_]


def _random(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    return rng.integers(-8, 8, size=shape).astype(dtype)


def _random_bytes(shape, dtype, seed=0):
    """Every byte random (NaN and infinity patterns included): a copy must move bytes, not values."""
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape)) * np.dtype(dtype).itemsize
    return rng.integers(0, 256, size=n, dtype=np.uint8).view(dtype).reshape(shape)


@pytest.mark.parametrize("dtype", WHOLE_BYTE)
def test_c0_is_256_over_bits(dtype):  # NZ-4
    assert runtime.c0_of(dtype) == 256 // (np.dtype(dtype).itemsize * 8)


@pytest.mark.parametrize("dtype", SUB_BYTE)
def test_sub_byte_dtypes_have_no_c0(dtype):  # NZ-33
    assert itemsize_bits(dtype) < 8
    with pytest.raises(ValueError, match="NZ-33"):
        runtime.c0_of(dtype)


@pytest.mark.parametrize("dtype", [np.float64, np.int64, np.uint64])
def test_64_bit_dtypes_have_no_c0(dtype):  # HW §1.1
    with pytest.raises(ValueError, match="64-bit"):
        runtime.c0_of(dtype)


@pytest.mark.parametrize("dtype", WHOLE_BYTE)
@pytest.mark.parametrize("lead", [(), (3,), (2, 3)])
def test_pack_unpack_round_trip(dtype, lead, swap_path):  # NZ-8, ranks 2-4
    c0 = runtime.c0_of(dtype)
    a = _random((*lead, 48, 2 * c0), dtype)
    p = runtime.pack_nz(a)
    assert p.shape == a.shape and p.dtype == a.dtype and p.flags.c_contiguous
    np.testing.assert_array_equal(runtime.unpack_nz(p).view(np.uint8), a.view(np.uint8))


@pytest.mark.parametrize("dtype", [np.int8, ml_dtypes.bfloat16, np.float32])
@pytest.mark.parametrize("shape", [(32, 64), (3, 48, 64), (2, 2, 16, 128)])
def test_pack_puts_element_at_nz8_offset(dtype, shape, swap_path):  # NZ-8
    a = _random(shape, dtype, seed=1)
    c0 = runtime.c0_of(dtype)
    R, C = shape[-2:]
    flat = runtime.pack_nz(a).reshape(-1)
    b, r, c = np.unravel_index(np.arange(a.size), (a.size // (R * C), R, C))
    off = b * C * R + (c // c0) * R * c0 + (r // 16) * 16 * c0 + (r % 16) * c0 + (c % c0)
    np.testing.assert_array_equal(flat[off].view(np.uint8), a.reshape(-1).view(np.uint8))


@pytest.mark.parametrize(
    "rows,lines,to_nz,tile",
    [
        (2048, 128, True, (256, 128)),  # bf16[2048, 2048] packed: 256 rows x 128 lines, 1 MiB
        (2048, 128, False, (512, 64)),  # ... unpacked: 512 rows x 64 lines
        (1024, 512, True, (256, 128)),  # float32[..., 1024, 4096]
        (2048, 64, True, (512, 64)),  # int8[..., 2048, 2048]: rows of 64 lines, so more rows
        (2048, 16, False, (2048, 16)),  # bf16[2048, 256]: short rows of lines, so more rows
        (16, 4096, False, (16, 2048)),  # one fractal row of a wide plane: more lines per copy
        (65536, 1, True, (32768, 1)),  # one line per row: NZ order is the logical order
    ],
)
def test_tile_shape(rows, lines, to_nz, tile):  # NZ-8: a large plane is copied ~1 MiB at a time
    preferred = runtime.nz._PACK_TILE if to_nz else runtime.nz._UNPACK_TILE
    assert runtime.nz._tile_shape(rows, lines, preferred) == tile
    assert tile[0] * tile[1] == preferred[0] * preferred[1]


def _record_copies(monkeypatch) -> list:
    """The list that records every np.copyto ("copyto") and np.take ("take") from now on."""
    calls: list = []
    copyto, take = np.copyto, np.take
    monkeypatch.setattr(np, "copyto", lambda *a, **k: calls.append("copyto") or copyto(*a, **k))
    monkeypatch.setattr(np, "take", lambda *a, **k: calls.append("take") or take(*a, **k))
    return calls


@pytest.mark.parametrize(
    "shape,n_takes,n_copies",
    [
        ((2, 1024, 512), 0, 2 * 16 * 4),  # 16 x 4 tiles per plane
        ((2, 4096, 32 * 11), 0, 2 * 64 * 3),  # 11 lines per row: line tiles of 4 + 4 + 3
        ((3, 64, 128), 1, 0),  # planes of 256 lines: one gather over all three
    ],
)
def test_pack_runs_tile_by_tile_or_gathers_small_planes(
    shape, n_takes, n_copies, monkeypatch, numpy_swap
):  # NZ-8
    # Tiles of 64 rows x 4 lines; planes of up to 256 lines are gathered.
    monkeypatch.setattr(runtime.nz, "_PACK_TILE", (64, 4))
    monkeypatch.setattr(runtime.nz, "_UNPACK_TILE", (64, 4))
    monkeypatch.setattr(runtime.nz, "_PACK_GATHER_LINES", 256)
    monkeypatch.setattr(runtime.nz, "_UNPACK_GATHER_LINES", 256)
    calls = _record_copies(monkeypatch)
    a = _random_bytes(shape, np.int8, seed=2)
    R, C = shape[-2:]
    expected = a.reshape(-1, R, C // 32, 32).swapaxes(1, 2).reshape(shape)
    packed = runtime.pack_nz(a)
    np.testing.assert_array_equal(packed, expected)
    assert (calls.count("take"), calls.count("copyto")) == (n_takes, n_copies)
    np.testing.assert_array_equal(runtime.unpack_nz(packed), a)
    assert (calls.count("take"), calls.count("copyto")) == (2 * n_takes, 2 * n_copies)


def test_bf16_plane_is_packed_in_tiles_and_unpacked_by_one_gather(monkeypatch, numpy_swap):  # NZ-8
    # An 8 MiB plane (2048 x 128 lines): 8 tiles of 256 rows x 128 lines when packing; one
    # gather when unpacking, which writes whole rows in order while its reads hit the cache.
    # (On one thread; test_rt_nz_threads.py splits the same work over several.)
    monkeypatch.setattr(runtime.threads, "THREADS", 1)
    calls = _record_copies(monkeypatch)
    a = _random_bytes((2048, 2048), ml_dtypes.bfloat16, seed=5)
    packed = runtime.pack_nz(a)
    assert calls == ["copyto"] * 8
    expected = a.view(np.uint8).reshape(2048, 128, 32).swapaxes(0, 1).reshape(-1)
    np.testing.assert_array_equal(packed.view(np.uint8).reshape(-1), expected)
    calls.clear()
    unpacked = runtime.unpack_nz(packed)
    assert calls == ["take"]
    np.testing.assert_array_equal(unpacked.view(np.uint8), a.view(np.uint8))


def test_a_plane_moves_in_one_compiled_call_per_direction(monkeypatch):  # NZ-8
    # The compiled swap moves the whole 8 MiB bf16 plane in one call each way (on one thread),
    # and numpy copies nothing.
    if runtime.nz._native is None:
        pytest.skip("runtime._lines was not built (no C compiler at install)")
    monkeypatch.setattr(runtime.threads, "THREADS", 1)
    calls = _record_copies(monkeypatch)
    swap = runtime.nz._native.swap
    monkeypatch.setattr(runtime.nz._native, "swap", lambda *a: calls.append(("swap", *a[2:])) or swap(*a))
    a = _random_bytes((2048, 2048), ml_dtypes.bfloat16, seed=5)
    packed = runtime.pack_nz(a)
    assert calls == [("swap", 1, 2048, 128, 0, 2048)]  # planes, rows, lines, row range
    expected = a.view(np.uint8).reshape(2048, 128, 32).swapaxes(0, 1).reshape(-1)
    np.testing.assert_array_equal(packed.view(np.uint8).reshape(-1), expected)
    calls.clear()
    np.testing.assert_array_equal(runtime.unpack_nz(packed).view(np.uint8), a.view(np.uint8))
    assert calls == [("swap", 1, 128, 2048, 0, 128)]


def test_pack_accepts_non_contiguous_input():
    a = _random((64, 96), np.float16, seed=3)
    np.testing.assert_array_equal(runtime.pack_nz(np.asfortranarray(a)), runtime.pack_nz(a))
    big = _random((64, 192), np.float16, seed=3)
    np.testing.assert_array_equal(runtime.pack_nz(big[:, ::2]), runtime.pack_nz(big[:, ::2].copy()))


@pytest.mark.parametrize(
    "shape,dtype,blocked",
    [
        ((256, 512), np.int8, (1, 16, 16, 16, 32)),  # NZ-11
        ((32, 2048, 4096), np.int8, (32, 128, 128, 16, 32)),  # NZ-11
        ((64, 16), np.float32, (1, 2, 4, 16, 8)),  # NZ-20
        ((2, 3, 32, 16), np.float16, (6, 1, 2, 16, 16)),  # NZ-28 folding
    ],
)
def test_blocked_shape(shape, dtype, blocked):  # NZ-5, NZ-6
    assert runtime.nz_blocked_shape(shape, dtype) == blocked
    assert runtime.dispatch.blocked_view_shape(shape, dtype) == blocked  # NZ-32


@pytest.mark.parametrize(
    "shape,dtype,match",
    [
        ((64,), np.int8, "rank >= 2"),
        ((24, 32), np.int8, "multiple of 16"),
        ((32, 48), np.int8, "multiple of c0 = 32"),
        ((32, 20), np.float16, "multiple of c0 = 16"),
        ((32, 32), ml_dtypes.int4, "NZ-33"),
        ((32, 32), np.bool_, "sub-byte"),
        ((32, 32), np.float64, "64-bit"),
    ],
)
def test_refusals(shape, dtype, match):  # NZ-8, NZ-33
    with pytest.raises(ValueError, match=match):
        runtime.nz_blocked_shape(shape, dtype)
    with pytest.raises(ValueError, match=match):
        runtime.pack_nz(np.zeros(shape, dtype=dtype))
    with pytest.raises(ValueError, match=match):
        runtime.unpack_nz(np.zeros(shape, dtype=dtype))


def test_refusal_message_says_how_to_fix():
    with pytest.raises(ValueError, match=r"NZ-8.*pad R to 32"):
        runtime.pack_nz(np.zeros((24, 32), np.int8))


def test_pack_into_preallocated_out(swap_path):
    a = _random((2, 32, 64), np.int8, seed=4)
    buf = runtime.pack_nz(np.empty_like(a))  # a marked buffer, reused: returned itself
    assert runtime.pack_nz(a, out=buf) is buf
    np.testing.assert_array_equal(buf, runtime.pack_nz(a))
    plain_buf = np.empty_like(a)  # a plain buffer: a marked view of it comes back
    view = runtime.pack_nz(a, out=plain_buf)
    assert is_nz(view) and not is_nz(plain_buf) and np.shares_memory(view, plain_buf)
    np.testing.assert_array_equal(plain_buf, buf)
    back = np.empty_like(a)
    assert runtime.unpack_nz(buf, out=back) is back
    np.testing.assert_array_equal(back, a)
    with pytest.raises(ValueError, match="out must be"):
        runtime.pack_nz(a, out=np.empty((2, 32, 64), np.uint8))
    with pytest.raises(ValueError, match="overlap"):
        runtime.pack_nz(a, out=a)


@settings(max_examples=60, deadline=None)
@given(
    dtype=st.sampled_from([np.int8, ml_dtypes.bfloat16, np.float32]),
    batch=st.integers(1, 3),
    fractal_rows=st.integers(1, 6),
    lines=st.integers(1, 7),
    tile_rows=st.integers(1, 100),
    tile_lines=st.integers(1, 8),
    gather_lines=st.integers(0, 700),
    threads=st.integers(1, 5),
    compiled=st.booleans(),
)
def test_pack_matches_nz8_for_any_tile(
    dtype, batch, fractal_rows, lines, tile_rows, tile_lines, gather_lines, threads, compiled
):  # NZ-8
    # Whatever the tile (ragged row and line tiles, one line per tile), whichever way each
    # direction moves a plane (compiled in bands of source rows, or with numpy: gathered whole
    # or tiled) and however many threads share the work (every size parallel here: ranges of
    # planes, or of bands, ragged last band included), packing is the NZ-8 axis swap of every
    # byte and unpacking inverts it.
    if compiled and runtime.nz._native is None:
        compiled = False  # not built here: numpy's copies are what runs
    c0 = runtime.c0_of(dtype)
    shape = (batch, 16 * fractal_rows, lines * c0)
    a = _random_bytes(shape, dtype, seed=tile_rows * 10 + tile_lines)
    expected = a.view(np.uint8).reshape(batch, shape[1], lines, 32).swapaxes(1, 2).reshape(-1)
    with (
        mock.patch.object(runtime.nz, "_PACK_TILE", (tile_rows, tile_lines)),
        mock.patch.object(runtime.nz, "_UNPACK_TILE", (tile_lines * 3, tile_rows)),
        mock.patch.object(runtime.nz, "_PACK_GATHER_LINES", gather_lines),
        mock.patch.object(runtime.nz, "_UNPACK_GATHER_LINES", 700 - gather_lines),
        mock.patch.object(runtime.threads, "THREADS", threads),
        mock.patch.object(runtime.nz, "_PARALLEL_BYTES", 0),
        mock.patch.object(runtime.nz, "_native", runtime.nz._native if compiled else None),
    ):
        packed = runtime.pack_nz(a)
        np.testing.assert_array_equal(packed.view(np.uint8).reshape(-1), expected)
        np.testing.assert_array_equal(runtime.unpack_nz(packed).view(np.uint8), a.view(np.uint8))
