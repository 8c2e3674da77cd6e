"""The runtime's fast paths (cached TMOV copies, TMATMUL straight from the tile images, the
whole-line ND2NZ copy, cached burst plans) against the reference semantics, byte for byte."""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from runtime import DeviceError, GmView, TileBuf, Worker
from runtime.cube import _mov_checks, _tmov_window, tmatmul, tmov
from runtime.load import nd2nz_load

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runtime"))
import rt_reference as ref  # noqa: E402

DTYPES = (np.int8, np.float16, ml_dtypes.bfloat16, np.float32)


@pytest.mark.parametrize("dtype", DTYPES)
def test_tmov_plan_equals_reference_window_copy(dtype):
    """Every (src, dst) layout pair, offset and transpose: same bytes (or the same refusal)."""
    rng = np.random.default_rng(0)
    c0 = 32 // np.dtype(dtype).itemsize
    srcs = [("Mat", "NZ"), ("Mat", "ND"), ("Vec", "ND"), ("Vec", "NZ")]
    dsts = [("Left", "ZZ"), ("Right", "ZN"), ("Vec", "ND"), ("Mat", "NZ")]
    checked = 0
    for (ss, sl), (ds, dl), tr in itertools.product(srcs, dsts, (False, True)):
        for (sr, sc), (dr, dc), (r0, c0f) in itertools.product(
            ((64, 128), (32, 2 * c0)), ((16, c0), (32, 2 * c0), (16, 32)), ((0, 0), (16, c0))
        ):
            try:
                src = TileBuf(ss, dtype, sr, sc, layout=sl)
                d1, d2 = TileBuf(ds, dtype, dr, dc, layout=dl), TileBuf(ds, dtype, dr, dc, layout=dl)
            except DeviceError:
                continue
            src.data[:] = rng.integers(0, 256, src.data.size, dtype=np.uint8)
            d1.data[:] = 7
            d2.data[:] = 7
            e1 = e2 = None
            try:
                tmov(d1, src, r0, c0f, transpose=tr)
            except DeviceError as e:
                e1 = str(e)
            try:
                _mov_checks(d2, src, r0, c0f, tr, False)
                _tmov_window(d2, src, r0, c0f, tr, False)
            except DeviceError as e:
                e2 = str(e)
            assert e1 == e2
            np.testing.assert_array_equal(d1.data, d2.data)
            checked += e1 is None
    assert checked > 50


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m,k,n", [(16, 64, 16), (32, 128, 48), (128, 128, 256), (48, 96, 64), (1, 32, 32)])
def test_tmatmul_matches_section8_mad(dtype, m, k, n):
    """Operands read from the ZZ / ZN images, accumulation through the pitch view: the §8 mad."""
    c0 = 32 // np.dtype(dtype).itemsize
    k = -(-k // c0) * c0
    rng = np.random.default_rng(m * k + n)
    rows = max(16, -(-m // 16) * 16)
    if dtype == np.int8:
        A = rng.integers(-128, 128, (rows, k)).astype(dtype)
        B = rng.integers(-128, 128, (k, n)).astype(dtype)
        acc_dt, init = np.int32, rng.integers(-(2**31), 2**31, (rows, n)).astype(np.int32)
    else:
        A = rng.standard_normal((rows, k)).astype(dtype)
        B = rng.standard_normal((k, n)).astype(dtype)
        acc_dt, init = np.float32, rng.standard_normal((rows, n)).astype(np.float32)
    left, right = TileBuf("Left", dtype, rows, k, valid_row=m), TileBuf("Right", dtype, k, n)
    left.set_logical(A)
    right.set_logical(B)
    acc = TileBuf("Acc", acc_dt, rows + 16, n)  # taller than m: the pitch defect shows
    acc.set_logical(np.zeros((rows + 16, n), acc_dt))
    flat = acc.data.view(acc_dt).copy()
    acc.data.view(acc_dt)[: init.size] = init.reshape(-1)
    flat[: init.size] = init.reshape(-1)
    for accumulate in (False, True, True):
        tmatmul(acc, left, right, accumulate=accumulate)
        ref.mad(flat, A, B, m, k, n, init=not accumulate)
        if dtype == np.int8:
            np.testing.assert_array_equal(acc.data.view(acc_dt), flat)
        else:  # the reference sums element by element: equal to float32 rounding
            np.testing.assert_allclose(acc.data.view(acc_dt), flat, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows,cols,pitch", [(32, 64, 64), (48, 128, 200), (16, 32, 70000), (128, 256, 2048)])
def test_nd2nz_whole_lines_match_reference(dtype, rows, cols, pitch):
    E = np.dtype(dtype).itemsize
    c0 = 32 // E
    cols = -(-cols // c0) * c0
    w = Worker(0)
    nbytes = (rows * pitch + cols) * E
    t = w.alloc_tensor(
        (nbytes,), np.uint8, init=np.random.default_rng(3).integers(0, 256, nbytes, dtype=np.uint8)
    )
    tile = TileBuf("Mat", dtype, rows + 16, cols)
    tile.data[:] = 9
    l1 = tile.data.copy()
    view = GmView(t.address, dtype, (rows, cols), (pitch, 1))
    with pytest.warns(Warning) if pitch > 65535 else _nothing():
        nd2nz_load(w.gm, view, tile)
    ref.nd2nz_load(w.gm.read(t.address, t.nbytes), 0, rows, cols, pitch, E, l1, rows + 16)
    np.testing.assert_array_equal(tile.data, l1)


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


@pytest.mark.parametrize("dtype", DTYPES)
def test_whole_tile_mads_keep_the_logical_matrix_until_bytes_are_read(dtype):
    """A chain of mads covering the whole Acc tile (kept row-major until a byte is read) leaves
    exactly the image of the §8 mad sequence."""
    m, k, n = 32, 64, 48
    rng = np.random.default_rng(4)
    acc_dt = np.int32 if dtype == np.int8 else np.float32
    acc = TileBuf("Acc", acc_dt, m, n)
    flat = np.zeros(m * n, acc_dt)
    for step, accumulate in enumerate((False, True, True)):
        if dtype == np.int8:
            A = rng.integers(-128, 128, (m, k)).astype(dtype)
            B = rng.integers(-128, 128, (k, n)).astype(dtype)
        else:
            A = rng.integers(-8, 8, (m, k)).astype(dtype)  # exact in float32: any summation order
            B = rng.integers(-8, 8, (k, n)).astype(dtype)
        left, right = TileBuf("Left", dtype, m, k), TileBuf("Right", dtype, k, n)
        left.set_logical(A)
        right.set_logical(B)
        tmatmul(acc, left, right, accumulate=accumulate)
        ref.mad(flat, A, B, m, k, n, init=not accumulate)
        if step == 1:  # a byte access in the middle of the chain, then more mads
            np.testing.assert_array_equal(acc.data.view(acc_dt), flat)
    np.testing.assert_array_equal(acc.data.view(acc_dt), flat)
    np.testing.assert_array_equal(
        acc.logical().reshape(-1), flat.reshape(n // 16, m, 16).transpose(1, 0, 2).reshape(-1)
    )


@pytest.mark.parametrize("compact,rows", [(False, 32), (True, 32), (False, 48)])
def test_acc_store_after_whole_tile_mads(compact, rows):
    """The Acc -> ND store of a tile written by whole-tile mads: same GM bytes as from the image."""
    from runtime.store import nd_store_acc

    m, k, n = 32, 32, 64
    rng = np.random.default_rng(5)
    A = rng.integers(-8, 8, (m, k)).astype(np.float16)
    B = rng.integers(-8, 8, (k, n)).astype(np.float16)
    left, right = TileBuf("Left", np.float16, m, k), TileBuf("Right", np.float16, k, n)
    left.set_logical(A)
    right.set_logical(B)
    outs = []
    for touch in (False, True):
        acc = TileBuf("Acc", np.float32, rows, n, valid_row=m)
        if rows == m:
            tmatmul(acc, left, right, accumulate=False)
            tmatmul(acc, left, right, accumulate=True)
        else:  # taller tile: image path
            tmatmul(acc, left, right, accumulate=False)
        if touch:
            acc.data  # noqa: B018 - lay the image out first
        w = Worker(0)
        t = w.alloc_tensor((m, n), np.float32)
        nd_store_acc(w.gm, GmView.dense(t.address, (m, n), np.float32), acc, compact=compact)
        outs.append(w.copy_from(t))
    np.testing.assert_array_equal(outs[0], outs[1])


def _fault(fn):
    try:
        fn()
    except DeviceError as e:
        return str(e)
    return None


@pytest.mark.parametrize(
    "n_burst,nbytes,src_pitch,dst_pitch,batch",
    [
        (16, 64, 64, 64, ()),  # dense on both sides: one flat slice copy
        (16, 64, 256, 64, ()),  # strided GM rows into dense tile rows
        (16, 64, 64, 128, ()),  # dense GM into strided tile rows
        (4, 32, 32, 32, ((2, 128, 128),)),  # a batch axis, dense everywhere
        (1, 96, 96, 96, ((1, 0, 0),)),  # unit axes
    ],
)
@pytest.mark.parametrize("gm_offset", [0, 4096 - 64])  # inside, and running past the allocation
@pytest.mark.parametrize("to_tile", [True, False])
def test_dense_copy_sides_equal_strided_views(
    n_burst, nbytes, src_pitch, dst_pitch, batch, gm_offset, to_tile
):
    """A copy side that is dense in view order is one flat slice: the bytes written, and the
    fault of a copy leaving its GM allocation, are those of the strided views."""
    from runtime.dma import copy_bursts

    rng = np.random.default_rng(5)
    shape = (*(b[0] for b in batch), n_burst, nbytes)
    g_strides, t_strides = (*(b[1] for b in batch), src_pitch, 1), (*(b[2] for b in batch), dst_pitch, 1)
    w = Worker(0)
    g = w.alloc_tensor((4096,), np.uint8, init=rng.integers(0, 256, 4096, dtype=np.uint8))
    tiles = [TileBuf("Vec", np.uint8, 32, 128) for _ in range(2)]
    tiles[0].data[:] = rng.integers(0, 256, tiles[0].data.size, dtype=np.uint8)
    tiles[1].data[:] = tiles[0].data
    addr = g.address + gm_offset
    gm_before = w.gm.read(g.address, 4096)
    if to_tile:
        got = _fault(
            lambda: copy_bursts(
                w.gm,
                addr,
                tiles[0],
                0,
                n_burst=n_burst,
                nbytes=nbytes,
                src_pitch=src_pitch,
                dst_pitch=dst_pitch,
                batch=batch,
            )
        )
    else:
        got = _fault(
            lambda: copy_bursts(
                tiles[0],
                0,
                w.gm,
                addr,
                n_burst=n_burst,
                nbytes=nbytes,
                src_pitch=dst_pitch,
                dst_pitch=src_pitch,
                batch=[(b[0], b[2], b[1]) for b in batch],
            )
        )
    gm_fast = w.gm.read(g.address, 4096)
    w.gm.write(g.address, gm_before)

    def reference():
        if to_tile:
            s = w.gm.view(addr, shape, g_strides)
            tiles[1].view(0, shape, t_strides)[...] = s
        else:
            s = tiles[1].view(0, shape, t_strides)
            w.gm.view(addr, shape, g_strides)[...] = s

    assert got == _fault(reference)
    assert (got is None) == (gm_offset == 0)
    np.testing.assert_array_equal(tiles[0].data, tiles[1].data)
    np.testing.assert_array_equal(gm_fast, w.gm.read(g.address, 4096))


def test_charge_transient_is_reserve_then_release():
    """The elementwise step's in-place result: capacity check and peak of reserve + release."""
    from runtime import OnChip

    a, b = OnChip(), OnChip()
    a.reserve("Vec", 100 * 1024)
    b.reserve("Vec", 100 * 1024)
    a.charge_transient("Vec", 50 * 1024 + 1)
    b.reserve("Vec", 50 * 1024 + 1)
    b.release("Vec", 50 * 1024 + 1)
    assert (a.live, a.peak) == (b.live, b.peak)
    errs = [
        _fault(lambda: a.charge_transient("Vec", 100 * 1024)),
        _fault(lambda: b.reserve("Vec", 100 * 1024)),
    ]
    assert errs[0] == errs[1] and "capacity exceeded" in errs[0]
    assert (a.live, a.peak) == (b.live, b.peak)


@pytest.mark.parametrize("shape", [(16, 32), (0,), (), (256, 512)])  # (256, 512): pooled buffers
def test_upload_is_alloc_then_write(shape):
    """`GlobalMemory.upload` (one copy into the new allocation) against `alloc(zero=False)` +
    `write`: the same addresses, bytes and counters, also on a reused (dirty) pooled buffer."""
    host = np.arange(int(np.prod(shape)), dtype=np.int32).reshape(shape)
    a, b = Worker(0).gm, Worker(0).gm
    for gm in (a, b):  # a freed buffer of the size is pooled (when large enough), still dirty
        gm.free(gm.upload(np.full(shape, -1, np.int32)))
    got = a.upload(host)
    want = b.alloc(host.nbytes, zero=False)
    b.write(want, host)
    assert got == want
    assert (a.uploads, a.upload_bytes, a.live_bytes) == (b.uploads, b.upload_bytes, b.live_bytes)
    assert a.read(got, host.nbytes).tobytes() == host.tobytes() == b.read(want, host.nbytes).tobytes()
    host[...] = 5  # the allocation holds a copy, not the caller's array
    assert a.read(got, host.nbytes).tobytes() == b.read(want, host.nbytes).tobytes()


def test_read_into_is_read_without_the_intermediate_copy():
    """`read_into` writes `read`'s bytes into the caller's array, counts one download, and refuses
    what `read` refuses (a range outside every allocation, a freed one) with the same text."""
    gm = Worker(0).gm
    host = np.arange(48, dtype=np.float32).reshape(4, 12)
    addr = gm.upload(host)
    out = np.zeros_like(host)
    gm.read_into(addr, out)
    assert out.tobytes() == gm.read(addr, host.nbytes).tobytes() == host.tobytes()
    assert gm.downloads == 2
    gm.read_into(addr, np.zeros(0, np.float32))  # empty: nothing read, still one download
    assert gm.downloads == 3
    too_long = np.zeros((5, 12), np.float32)
    assert _fault(lambda: gm.read_into(addr, too_long)) == _fault(lambda: gm.read(addr, too_long.nbytes))
    assert "outside every allocation" in _fault(lambda: gm.read_into(addr, too_long))
    with pytest.raises(DeviceError, match="C-contiguous"):
        gm.read_into(addr, np.zeros((12, 4), np.float32).T)
    gm.free(addr)
    assert _fault(lambda: gm.read_into(addr, out)) == _fault(lambda: gm.read(addr, out.nbytes))
    assert "use after free" in _fault(lambda: gm.read_into(addr, out))


def test_onchip_reset_is_a_new_onchip_unless_bytes_are_live():
    """`OnChip.reset` (a launch's OnChip reused by the next): no live bytes and no peak, like a
    new one; refused (False, nothing changed) while a tile is still accounted; tile images
    beyond the kept budget are dropped."""
    from runtime import OnChip

    oc = OnChip()
    t = oc.alloc_tile("Vec", 64, 64, np.float32)
    assert not oc.reset() and oc.live["Vec"] == oc.peak["Vec"] > 0
    t._data[...] = 7  # a dirty image goes back to the pool
    oc.free_tile(t)
    assert oc.reset(keep_bytes=1 << 20)
    assert oc.live == OnChip().live and oc.peak == OnChip().peak
    assert not oc.alloc_tile("Vec", 64, 64, np.float32)._data.any()  # the reused image, zeroed
    oc2 = OnChip()
    oc2.free_tile(oc2.alloc_tile("Vec", 64, 64, np.float32))
    assert oc2.reset(keep_bytes=0) and not oc2._pool
