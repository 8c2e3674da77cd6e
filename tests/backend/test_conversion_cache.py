"""The conversion cache of mad operands read straight from GM (nzjit/backend/conversion_cache.py;
issue 22 item 10): reused only while the bytes are the ones converted, so every call gives the
bytes of the uncached path - resident weights, weights changed in place, NaN patterns, two
kernels on one weight, threads."""

from __future__ import annotations

import threading

import ml_dtypes
import numpy as np
import pytest
from gmm_kernels import gmm_operands, grouped

import runtime
from nzjit import pl
from nzjit.backend import conversion_cache as cc
from nzjit.backend.options import current, using
from runtime.widen import same_bytes

E, T, N, K, NT, KT = 2, 32, 256, 256, 128, 128
TYPES = {
    "int8": (pl.INT8, np.int8, pl.INT32, np.int32),
    "fp16": (pl.FP16, np.float16, pl.FP32, np.float32),
    "bf16": (pl.BF16, ml_dtypes.bfloat16, pl.FP32, np.float32),
}


@pytest.fixture
def cache(monkeypatch):
    """A fresh cache, switched on."""
    fresh = cc.ConversionCache()
    monkeypatch.setattr(cc, "CACHE", fresh)
    monkeypatch.setattr(cc, "ENABLED", True)
    return fresh


def _resident(types, seed=0):
    dtype, np_dtype, out_dtype, np_out = types
    x, w = gmm_operands(np.random.default_rng(seed), np_dtype, E, T, N, K)
    worker = runtime.Worker(0)
    xd = worker.alloc_tensor(x.shape, x.dtype, init=x)
    wd = worker.alloc_tensor(w.shape, w.dtype, init=runtime.pack_nz(w))
    od = worker.alloc_tensor((E, T, N), np_out)
    return worker, xd, wd, od


def _call(kern, worker, xd, wd, od, cached: bool) -> bytes:
    saved = cc.ENABLED
    cc.ENABLED = cached
    try:
        kern(xd, wd, od)
    finally:
        cc.ENABLED = saved
    return worker.copy_from(od).tobytes()


def _uncached(kern, worker, xd, wd, od) -> bytes:
    """The call's bytes with the cache off, and on the per-lane interpreter: both must agree."""
    got = _call(kern, worker, xd, wd, od, False)
    with using(current().with_(batch=False)):
        assert _call(kern, worker, xd, wd, od, False) == got
    return got


@pytest.mark.parametrize("name", list(TYPES))
def test_resident_weights_are_converted_once_and_give_the_same_bytes(cache, name):
    # issue 22 item 10: the third call on the same resident operands reuses their conversions
    kern = grouped(TYPES[name][0], TYPES[name][2], E, T, N, K, NT, KT)
    worker, xd, wd, od = _resident(TYPES[name])
    ref = _uncached(kern, worker, xd, wd, od)
    for i in range(4):
        assert _call(kern, worker, xd, wd, od, True) == ref, i
    assert cache.hits > 0 and cache.entries  # the path ran
    assert all(not e.converted.flags.writeable for e in cache.entries.values())


@pytest.mark.parametrize("name", list(TYPES))
def test_a_weight_changed_in_place_gives_the_new_bytes_result(cache, name):
    # issue 22 item 10: same address, one byte different -> the new bytes' result
    kern = grouped(TYPES[name][0], TYPES[name][2], E, T, N, K, NT, KT)
    worker, xd, wd, od = _resident(TYPES[name])
    old = _uncached(kern, worker, xd, wd, od)
    for _ in range(3):
        assert _call(kern, worker, xd, wd, od, True) == old
    assert cache.hits > 0
    for offset in (0, wd.nbytes // 2 + 3, wd.nbytes - 1):  # first, middle, last byte of the weight
        byte = worker.gm.read(wd.address + offset, 1)
        worker.gm.write(wd.address + offset, np.array([byte[0] ^ 0x01], np.uint8))
        new = _uncached(kern, worker, xd, wd, od)
        assert new != old
        misses = cache.misses
        assert _call(kern, worker, xd, wd, od, True) == new
        assert cache.misses > misses  # the stale entry was not used
        assert _call(kern, worker, xd, wd, od, True) == new
        old = new


@pytest.mark.parametrize("name", ["fp16", "bf16"])
def test_nan_patterns_compare_as_bits(cache, name):
    # issue 22 item 10: NaNs of any payload hit (a float comparison never would), and a NaN whose
    # payload changed is not the same operand (a NaN-equal comparison would call it unchanged)
    types = TYPES[name]
    kern = grouped(types[0], types[2], E, T, N, K, NT, KT)
    worker, xd, wd, od = _resident(types, seed=3)
    w = worker.copy_from(wd).view(np.uint16).copy()
    nans = (0x7C01, 0x7E00, 0xFC01, 0x7FFF) if name == "fp16" else (0x7F81, 0x7FC0, 0xFF81, 0x7FFF)
    flat = w.reshape(-1)
    flat[::97][: 4 * (len(flat[::97]) // 4)] = np.tile(nans, len(flat[::97]) // 4)
    worker.gm.write(wd.address, w.view(np.uint8).reshape(-1))
    ref = _uncached(kern, worker, xd, wd, od)
    for _ in range(3):
        assert _call(kern, worker, xd, wd, od, True) == ref
    hits = cache.hits
    assert _call(kern, worker, xd, wd, od, True) == ref
    assert cache.hits > hits
    flat[0] ^= 0x0002  # another NaN payload at the same place
    worker.gm.write(wd.address, w.view(np.uint8).reshape(-1))
    ref = _uncached(kern, worker, xd, wd, od)
    misses = cache.misses
    assert _call(kern, worker, xd, wd, od, True) == ref
    assert cache.misses > misses


def test_two_kernels_share_a_weight(cache):
    # issue 22 item 10: a second kernel on the same resident weight reuses the first one's
    # conversions; a whole new weight written over it (write_tensor) is converted again
    types = TYPES["int8"]
    first = grouped(types[0], types[2], E, T, N, K, NT, KT)
    second = grouped(types[0], types[2], E, T, N, K, NT, KT)
    worker, xd, wd, od = _resident(types)
    ref = _uncached(first, worker, xd, wd, od)
    for _ in range(3):
        assert _call(first, worker, xd, wd, od, True) == ref
    hits = cache.hits
    assert _call(second, worker, xd, wd, od, True) == ref
    assert cache.hits > hits
    _, w2 = gmm_operands(np.random.default_rng(9), np.int8, E, T, N, K)
    worker.write_tensor(wd, runtime.pack_nz(w2))
    ref2 = _uncached(second, worker, xd, wd, od)
    assert ref2 != ref
    for _ in range(3):
        assert _call(second, worker, xd, wd, od, True) == ref2
        assert _call(first, worker, xd, wd, od, True) == ref2


@pytest.mark.parametrize("helper", [False, True])
def test_threads_share_the_cache_exactly(cache, monkeypatch, helper):
    # issue 22 item 10: kernels running at once on several threads - the same weights and others
    # - and with a helper converting a mad's other lanes: every call the uncached bytes
    from nzjit.backend import lane_cube

    monkeypatch.setattr(runtime.threads, "THREADS", 2 if helper else 1)
    monkeypatch.setattr(lane_cube, "OVERLAP_MACS", 0)
    types = TYPES["bf16"]
    kern = grouped(types[0], types[2], E, T, N, K, NT, KT)
    setups = [_resident(types, seed=i % 2) for i in range(4)]  # two pairs of equal weights
    refs = [_uncached(kern, *st) for st in setups]
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            for _ in range(6):
                assert _call(kern, *setups[i], True) == refs[i]
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)

    ts = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors
    assert cache.hits > 0


@pytest.mark.parametrize("compiled", [True, False])
def test_same_bytes_compares_and_copies_strided_views(monkeypatch, compiled):
    # issue 22 item 10: the cache's test - byte for byte, any strides, NaN as its bits; compiled
    # (memcmp over runs) and numpy's way alike
    from runtime import widen

    if not compiled:
        monkeypatch.setattr(widen, "_native", None)
    elif widen._native is None:
        pytest.skip("runtime._lines not built")
    a0 = np.zeros(8, np.uint8)
    assert widen.address(a0[3:]) == widen.address(a0) + 3
    rng = np.random.default_rng(0)
    a = rng.integers(0, 256, (4, 64, 8, 32), dtype=np.uint8)
    for v in (a, a[:, ::2], a.transpose(0, 2, 1, 3), a[1:3, :, 2:5, :], a.view(np.float16)[..., ::1]):
        saved = np.empty(v.shape, v.dtype)
        assert same_bytes(v, saved, copy=True)
        assert np.array_equal(saved.view(np.uint8), np.ascontiguousarray(v).view(np.uint8))
        assert same_bytes(v, saved)
        for idx in ((0,) * v.ndim, tuple(d - 1 for d in v.shape)):  # the first and the last item
            raw = saved.view(np.uint8)
            raw[idx[:-1] + (idx[-1] * v.itemsize,)] ^= 0x80
            assert not same_bytes(v, saved)
            raw[idx[:-1] + (idx[-1] * v.itemsize,)] ^= 0x80
            assert same_bytes(v, saved)
    nan = np.array([0x7E00, 0x7C01, 0xFE00], np.uint16).view(np.float16)
    saved = nan.copy()
    assert same_bytes(nan, saved)  # NaN == NaN as bits
    saved.view(np.uint16)[1] = 0x7C02
    assert not same_bytes(nan, saved)  # another payload
    v = a[:, :, :, ::2]  # an innermost axis not contiguous: numpy's comparison
    saved = np.ascontiguousarray(v)
    assert same_bytes(v, saved)
    saved[0, 0, 0, 0] ^= 1
    assert not same_bytes(v, saved)
    with pytest.raises(ValueError):
        same_bytes(a, np.empty((4, 64, 8, 16), np.uint8))


def _convert(out, src):
    np.copyto(out, src, casting="unsafe")


def _get(c, v):
    """`c`'s float32 operand of the one 2-D int8 view `v` (images of one row each)."""
    return c.converted([(0, v)], v.shape, np.dtype(np.float32), _convert)


def test_budget_admission_and_stale_keys():
    # issue 22 item 10: bounded bytes, admitted the second time seen, a key stale twice never again
    c = cc.ConversionCache(budget=3 * (16 << 10) * 5)  # three 16 KiB int8 operands (+ 4x float32)
    gm = np.zeros(10 * (16 << 10), np.int8)
    views = [gm[i * (16 << 10) : (i + 1) * (16 << 10)].reshape(64, 256) for i in range(10)]
    assert _get(c, views[0]) is None  # first seen: noted only
    got = _get(c, views[0])
    assert got is not None and np.array_equal(got, views[0]) and not got.flags.writeable
    assert _get(c, views[0]) is got  # a hit: the same array
    for v in views:  # more than the budget, all used recently: the first ones stay
        _get(c, v)
        _get(c, v)
        assert c.nbytes <= c.budget
    assert len(c.entries) == 3 and _get(c, views[0]) is got
    for _ in range(cc.STALE_LIMIT - 1):  # bytes that change at every look-up
        views[0][5, 7] += 1
        assert _get(c, views[0]) is None  # stale: dropped
        fresh = _get(c, views[0])  # admitted again
        assert fresh is not None and np.array_equal(fresh, views[0])
    views[0][5, 7] += 1
    assert _get(c, views[0]) is None  # stale STALE_LIMIT times
    assert _get(c, views[0]) is None and _get(c, views[0]) is None  # never admitted again
    assert _get(c, np.zeros((1, 16), np.int8)) is None  # too small to pay
    c.clear()
    assert not c.entries and c.nbytes == 0


def test_views_of_several_runs_are_one_entry():
    # issue 22 item 10: lanes whose GM addresses are two arithmetic runs (two experts' tiles):
    # one operand, each view compared; a change in the second view is seen
    c = cc.ConversionCache()
    gm = np.arange(4 * (8 << 10), dtype=np.int64).astype(np.int8)
    a, b = gm[: 16 << 10].reshape(2, 64, 128), gm[16 << 10 :].reshape(2, 64, 128)
    views = [(0, a), (2, b)]
    assert c.converted(views, (4, 64, 128), np.dtype(np.float32), _convert) is None  # first seen
    got = c.converted(views, (4, 64, 128), np.dtype(np.float32), _convert)
    assert got is not None and np.array_equal(got, np.concatenate([a, b]))
    assert c.converted(views, (4, 64, 128), np.dtype(np.float32), _convert) is got
    b[1, 63, 127] += 1
    assert c.converted(views, (4, 64, 128), np.dtype(np.float32), _convert) is None
    again = c.converted(views, (4, 64, 128), np.dtype(np.float32), _convert)
    assert again is not got and np.array_equal(again, np.concatenate([a, b]))
