"""GmView descriptors (pto GlobalTensor) and the burst DMA primitive (HW §2.3, §5, §8)."""

from __future__ import annotations

import numpy as np
import pytest
import rt_reference as ref
from hypothesis import given, settings
from hypothesis import strategies as st

import runtime
from runtime import DeviceError, GmView, TileBuf
from runtime.dma import dma_burst
from runtime.isa import tload


def test_dense_views():
    v = GmView.dense(0x10000, (2, 64, 96), np.float16, "NZ")  # NZ-5, NZ-7
    assert v.shape == (2, 6, 4, 16, 16) and v.strides == (6144, 1024, 256, 16, 1)
    nd = GmView.dense(0x10000, (2, 3, 4, 5, 6, 7), np.int8)
    assert nd.shape == (6, 4, 5, 6, 7) and nd.strides == (840, 210, 42, 7, 1)
    assert GmView.dense(0, (8, 16), np.int8).shape5 == (1, 1, 1, 8, 16)


def test_partition_moves_the_pointer_only():  # NZ-12
    w = GmView.dense(0x10000, (4, 512, 1024), np.int8, "NZ")  # [E, N, K]
    p = w.partition((1, 16, 16, 0, 0), (1, 16, 16, 16, 32))  # w[1:2, 256:512, 512:1024]
    assert p.strides == w.strides and p.shape == (1, 16, 16, 16, 32)
    assert p.addr == 0x10000 + 1 * 512 * 1024 + 16 * 512 * 32 + 16 * 512


@pytest.mark.parametrize(
    "kw,match",
    [
        (dict(shape=(1,) * 6, strides=(1,) * 6), "rank 1..5"),
        (dict(shape=(4, 4), strides=(4,)), "one stride per axis"),
        (dict(shape=(4,), strides=(1,), layout="DN"), "layout"),
    ],
)
def test_view_validation(kw, match):
    with pytest.raises(DeviceError, match=match):
        GmView(0, np.int8, **kw)


@pytest.mark.parametrize("n_burst,len_burst", [(0, 1), (4096, 1), (65536 + 5000, 1), (1, 0)])
def test_dma_field_ranges(n_burst, len_burst):  # HW §8 dma_burst require
    gm = runtime.GlobalMemory()
    a = gm.alloc(1 << 20)
    with pytest.raises(DeviceError, match="nBurst|lenBurst"):
        dma_burst(
            gm,
            a,
            TileBuf("Mat", np.int8, 16, 32),
            0,
            n_burst=n_burst,
            len_burst=len_burst,
            src_gap=0,
            dst_gap=0,
        )


def test_dma_wraps_16_bit_fields_silently():
    gm = runtime.GlobalMemory()
    a = gm.alloc(4096)
    gm.write(a, np.arange(4096, dtype=np.uint16).astype(np.uint8))
    tile = TileBuf("Mat", np.int8, 16, 64)
    dma_burst(gm, a, tile, 0, n_burst=2, len_burst=1, src_gap=65536 + 3, dst_gap=65536 + 15)
    src = np.arange(4096, dtype=np.uint16).astype(np.uint8)
    assert (tile.data[:32] == src[:32]).all() and (tile.data[512:544] == src[128:160]).all()


@settings(max_examples=25, deadline=None)
@given(
    g=st.tuples(st.integers(1, 2), st.integers(1, 2), st.integers(1, 2), st.integers(1, 4)),
    cols=st.sampled_from([32, 64]),
    pitch_extra=st.integers(0, 40),
    seed=st.integers(0, 99),
)
def test_nd2nd_l1_matches_reference_dma(g, cols, pitch_extra, seed):  # HW §5 TLoadGm2L1Nd2nd
    g0, g1, g2, g3 = g
    s3 = cols + pitch_extra
    s2, s1, s0 = g3 * s3 + 7, g2 * (g3 * s3 + 7) + 5, g1 * (g2 * (g3 * s3 + 7) + 5) + 3
    n = g0 * s0
    w = runtime.Worker()
    t = w.alloc_tensor((n,), np.int8, init=np.random.default_rng(seed).integers(-99, 99, n).astype(np.int8))
    view = GmView(t.address, np.int8, (g0, g1, g2, g3, cols), (s0, s1, s2, s3, 1))
    tile = TileBuf("Mat", np.int8, g0 * g1 * g2 * g3, cols + 32, layout="ND", valid_col=cols)
    tload(w.gm, view, tile)
    gm = w.gm.read(t.address, n)
    l1 = np.zeros(tile.nbytes, np.uint8)
    gap = ((s3 - cols) >> 5) & 0xFFFF
    for i in range(g0):
        for j in range(g1):
            for k in range(g2):
                ref.dma_burst(
                    gm,
                    i * s0 + j * s1 + k * s2,
                    l1,
                    ((i * g1 + j) * g2 + k) * g3 * (cols + 32),
                    g3,
                    cols // 32,
                    gap,
                    1,
                )
    np.testing.assert_array_equal(tile.data, l1)


@settings(max_examples=25, deadline=None)
@given(
    lead=st.lists(st.integers(1, 3), max_size=2),
    rb=st.integers(1, 4),
    kb=st.integers(1, 4),
    dtype=st.sampled_from(["int8", "float16", "float32", "uint16"]),
)
def test_pack_round_trip_property(lead, rb, kb, dtype):  # NZ-8
    c0 = runtime.c0_of(np.dtype(dtype))
    a = np.random.default_rng(0).integers(0, 100, size=(*lead, rb * 16, kb * c0)).astype(dtype)
    np.testing.assert_array_equal(runtime.unpack_nz(runtime.pack_nz(a)), a)
