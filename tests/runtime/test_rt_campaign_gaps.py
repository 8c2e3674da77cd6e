"""Three device paths the mutation campaign of issue 29 found untested: `unpack_nz` of a
non-contiguous NZ array, the device load model's batch offsets at a stride of exactly 2^32, and the
Acc -> NZ store's leftover (partial) column block, reachable only by calling the write directly.

The expectations are written from the formulas (nz-layout.md NZ-8, hardware-model.md §2.2 and
§4), not from runtime's code.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import runtime
from runtime import GmView, TileBuf
from runtime.load import batch_offsets
from runtime.store import _nz_acc_write


def _nz_index(shape, c0):
    """NZ-8: the flat NZ position of every logical element (b, r, c): b*R*C + (c // c0)*R*c0 + r*c0 + c % c0."""
    B, R, C = shape
    b, r, c = np.meshgrid(np.arange(B), np.arange(R), np.arange(C), indexing="ij")
    return b * R * C + (c // c0) * R * c0 + r * c0 + c % c0


@pytest.mark.parametrize(
    "dtype, c0", [(np.int8, 32), (np.float16, 16), (ml_dtypes.bfloat16, 16), (np.float32, 8)]
)
@pytest.mark.parametrize("layout", ["strided", "fortran", "reversed_batches"])
def test_unpack_nz_of_a_non_contiguous_array(dtype, c0, layout):  # NZ-8
    B, R, C = 3, 32, 4 * c0
    a = (np.arange(B * R * C) % 97 - 48).astype(dtype).reshape(B, R, C)
    nz = np.asarray(runtime.pack_nz(a))  # the NZ bytes of `a`, as a plain array
    flat = nz.reshape(-1)
    np.testing.assert_array_equal(flat[_nz_index((B, R, C), c0)], a)  # the formula holds for the bytes
    if layout == "strided":  # every other element of a wider buffer
        held = np.zeros((B, R, 2 * C), dtype)[:, :, ::2]
        held[...] = nz
    elif layout == "fortran":
        held = np.asfortranarray(nz)
    else:  # the batches in reverse order, then viewed back in order: negative strides
        held = np.ascontiguousarray(nz[::-1])[::-1]
    assert not held.flags.c_contiguous
    np.testing.assert_array_equal(runtime.unpack_nz(held), a)
    out = np.empty_like(a)
    assert runtime.unpack_nz(held, out=out) is out
    np.testing.assert_array_equal(out, a)


def test_batch_offsets_at_a_stride_of_exactly_2_pow_32():  # hw §2.2: i * s0 in 32-bit unsigned
    assert batch_offsets(2, 2**32 - 1) is None  # (g0 - 1) * s0 = 2^32 - 1: still affine
    assert batch_offsets(2, 2**32) == [0, 0]  # exactly 2^32: batch 1 wraps onto batch 0
    assert batch_offsets(3, 2**32 + 5) == [0, 5, 10]
    assert batch_offsets(3, 2**31) == [0, 2**31, 0]  # 2 * 2^31 = 2^32 wraps at the third batch
    assert batch_offsets(3, 2**31 - 1) is None  # 2 * (2^31 - 1) < 2^32
    assert batch_offsets(1, 2**40) is None  # one batch: no multiplication at all
    assert batch_offsets(2, -1) == [0, 2**32 - 1]  # a negative stride is taken modulo 2^32


@pytest.mark.parametrize("g4, n", [(8, 12), (8, 4), (8, 28), (16, 24)])
def test_acc_nz_store_writes_a_leftover_column_block(
    g4, n
):  # hw §4: addr + (c//w)*dstStride*32 + r*c0 + (c%w)*E
    R, C, m = 32, 32, 32
    w = runtime.Worker()
    t = w.alloc_tensor((R * C,), np.float32, init=np.full(R * C, -1.0, np.float32))
    view = GmView(t.address, np.float32, (1, C // g4, R // 16, 16, g4), (R * C, R * g4, 16 * g4, g4, 1), "NZ")
    vals = (np.arange(m * C) + 1).astype(np.float32).reshape(m, C)
    tile = TileBuf("Acc", np.float32, m, C)
    tile.set_logical(vals)
    _nz_acc_write(w.gm, view, tile, m, n, m, False, False)  # n % g4 != 0: a leftover block of n % g4 columns
    got = w.gm.read(t.address, t.nbytes).view(np.float32)
    want = np.full(R * C, -1.0, np.float32)
    r, c = np.meshgrid(np.arange(m), np.arange(n), indexing="ij")
    dst_stride = R * g4  # (g2 * g3 * c0Size) >> 5 thirty-two-byte units = R * g4 elements
    want[(c // g4) * dst_stride + r * g4 + c % g4] = vals[:m, :n]
    np.testing.assert_array_equal(got, want)  # the leftover block's rows are g4 apart, the rest stale


def _batched_parent(dtype=np.int8):
    """Two [32, 32] NZ batches, 1024 elements apart; returns (worker, logical, address)."""
    logical = (np.arange(2 * 32 * 32) % 251 - 125).astype(dtype).reshape(2, 32, 32)
    w = runtime.Worker()
    t = w.alloc_tensor((2, 32, 32), dtype, init=runtime.pack_nz(logical))
    return w, logical, t.address


@pytest.mark.parametrize("space", ["Mat", "Vec"])
@pytest.mark.parametrize("dtype", [np.int8, np.float16])
@pytest.mark.parametrize("s0, second", [(2**32, 0), (2**32 + 1024, 1)])
def test_nz_load_batch_stride_at_2_pow_32(space, dtype, s0, second):  # hw §2.2: batch i at (i * s0) mod 2^32
    from runtime.isa import tload

    w, logical, addr = _batched_parent(dtype)
    c0 = 32 // np.dtype(dtype).itemsize
    view = GmView(addr, dtype, (2, 32 // c0, 2, 16, c0), (s0, 32 * c0, 16 * c0, c0, 1), "NZ")
    tile = TileBuf(space, dtype, 32, 64, **({"layout": "NZ"} if space == "Vec" else {}))  # L1 or UB NZ load
    tload(w.gm, view, tile)
    got = tile.logical()
    np.testing.assert_array_equal(got[:, :32], logical[0])  # batch 0 at offset 0
    np.testing.assert_array_equal(
        got[:, 32:], logical[second]
    )  # batch 1: 2^32 wraps to 0, 2^32 + 1024 to 1024


def test_nz_load_batch_stride_just_below_2_pow_32_does_not_wrap():  # hw §2.2: affine, so it faults
    from runtime import DeviceError
    from runtime.isa import tload

    w, logical, addr = _batched_parent()
    view = GmView(addr, np.int8, (2, 1, 2, 16, 32), (2**32 - 1, 1024, 512, 32, 1), "NZ")
    with pytest.raises(DeviceError, match="outside every allocation"):
        tload(w.gm, view, TileBuf("Mat", np.int8, 32, 64))


def test_ub_nz_load_refuses_zero_column_blocks():  # hw §2.4: nBurst in 1..4095
    from runtime import DeviceError
    from runtime.isa import tload

    w, logical, addr = _batched_parent()
    view = GmView(addr, np.int8, (1, 0, 2, 16, 32), (1024, 1024, 512, 32, 1), "NZ")
    with pytest.raises(DeviceError, match="nBurst 0 outside 1..4095"):
        tload(w.gm, view, TileBuf("Vec", np.int8, 32, 32, layout="NZ"))


@pytest.mark.parametrize("shape", [(16, 65536), (65536, 32)])
def test_nd2nz_load_of_65536_columns_or_rows_is_an_empty_transfer(
    shape,
):  # hw §3: dValue / nValue are 16 bits
    import warnings

    from runtime import DeviceError
    from runtime.isa import tload

    w = runtime.Worker()
    t = w.alloc_tensor(shape, np.int8)
    view = GmView.dense(t.address, shape, np.int8, "ND")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the release build only warns on gShape4 > 65535
        with pytest.raises(DeviceError, match="empty transfer is undefined"):
            tload(w.gm, view, TileBuf("Mat", np.int8, 16, 32))


def test_acc_nz_store_refuses_65536_rows():  # hw §4: mSize is 16 bits; pto-isa static-asserts Rows <= 65535
    from runtime import DeviceError
    from runtime.isa import tstore

    w = runtime.Worker()
    t = w.alloc_tensor((65536, 16), np.float32)
    view = GmView.dense(t.address, (65536, 16), np.float32, "NZ")
    with pytest.raises(DeviceError, match="Rows in \\[1, 65535\\]"):
        tstore(w.gm, view, TileBuf("Acc", np.float32, 65536, 16))


def test_a_dense_two_panel_acc_nz_store_is_exact_and_warns_nothing():  # hw §4.3: g0 > 1 folds into columns
    import warnings

    from runtime import HardwareDefectWarning
    from runtime.isa import tstore

    R, C = 64, 16
    w = runtime.Worker()
    t = w.alloc_tensor((2, R, C), np.float32, init=np.zeros((2, R, C), np.float32))
    view = GmView.dense(t.address, (2, R, C), np.float32, "NZ")  # (2, 2, 4, 16, 8), s0 = g1 * m * g4
    vals = (np.arange(R * 2 * C) + 1).astype(np.float32).reshape(R, 2 * C)
    tile = TileBuf("Acc", np.float32, R, 2 * C)
    tile.set_logical(vals)
    with warnings.catch_warnings():
        warnings.simplefilter("error", HardwareDefectWarning)  # dense and whole-height: no defect
        tstore(w.gm, view, tile)
    got = runtime.unpack_nz(w.gm.read(t.address, t.nbytes).view(np.float32).reshape(2, R, C))
    np.testing.assert_array_equal(got[0], vals[:, :C])  # panel 0: the first C columns
    np.testing.assert_array_equal(got[1], vals[:, C:])  # panel 1: the next C columns


def test_a_vec_nd_store_passes_its_debug_asserts():  # hw §6: validRow == g0*g1*g2*g3
    from runtime.isa import tstore

    w = runtime.Worker()
    t = w.alloc_tensor((32, 64), np.float32, init=np.zeros((32, 64), np.float32))
    view = GmView.dense(t.address, (32, 64), np.float32, "ND")
    tile = TileBuf("Vec", np.float32, 32, 64)
    vals = np.arange(32 * 64, dtype=np.float32).reshape(32, 64)
    tile.set_logical(vals)
    tstore(w.gm, view, tile, debug=True)  # debug: a pto_assert raises instead of warning
    np.testing.assert_array_equal(w.gm.read(t.address, t.nbytes).view(np.float32).reshape(32, 64), vals)


def test_a_rank4_nd_load_into_vec_passes_its_debug_asserts():  # hw §5: validRow == g0*g1*g2*g3
    from runtime.isa import tload

    logical = (np.arange(2 * 2 * 16 * 32) % 97).astype(np.float16).reshape(2, 2, 16, 32)
    w = runtime.Worker()
    t = w.alloc_tensor(logical.shape, np.float16, init=logical)
    view = GmView.dense(t.address, logical.shape, np.float16, "ND")
    tile = TileBuf("Vec", np.float16, 64, 32)
    tload(w.gm, view, tile, debug=True)  # debug: a pto_assert raises instead of warning
    np.testing.assert_array_equal(tile.logical(), logical.reshape(64, 32))


def test_a_mat_to_nz_store_passes_its_debug_asserts():  # hw §5 TStoreMat2GmNz2Nz: validRow == g2*g3
    from runtime.isa import tload, tstore

    logical = (np.arange(32 * 64) % 113 - 56).astype(np.int8).reshape(32, 64)
    w = runtime.Worker()
    src = w.alloc_tensor((32, 64), np.int8, init=runtime.pack_nz(logical))
    dst = w.alloc_tensor((32, 64), np.int8, init=np.zeros((32, 64), np.int8))
    tile = TileBuf("Mat", np.int8, 32, 64)
    tload(w.gm, GmView.dense(src.address, (32, 64), np.int8, "NZ"), tile)
    tstore(w.gm, GmView.dense(dst.address, (32, 64), np.int8, "NZ"), tile, debug=True)
    np.testing.assert_array_equal(
        runtime.unpack_nz(w.gm.read(dst.address, dst.nbytes).view(np.int8).reshape(32, 64)), logical
    )
