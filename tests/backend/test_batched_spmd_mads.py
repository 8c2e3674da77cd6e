"""Lane-batched mads (nzjit/backend/lane_cube.py) against the lanes run one by one: decode batches,
lanes sharing a weight window, buffers kept from one call to the next, mad chunks (on one thread
and shared with the helper), lanes in any order; byte-identical GM."""

from __future__ import annotations

import threading

import ml_dtypes
import numpy as np
import pytest
from batched_checks import compare as _compare
from gmm_kernels import check_gmm, gmm_operands, grouped, grouped_in_turns
from hypothesis import given, settings
from hypothesis import strategies as st

import runtime
from nzjit import pl
from nzjit.backend import batched
from nzjit.backend.options import current, using


@pytest.mark.parametrize(
    "dtype,np_dtype,out_dtype,np_out",
    [
        (pl.BF16, ml_dtypes.bfloat16, pl.FP32, np.float32),
        (pl.FP16, np.float16, pl.FP32, np.float32),
        (pl.INT8, np.int8, pl.INT32, np.int32),
    ],
)
@pytest.mark.parametrize("T", [1, 4, 15, 17])
def test_decode_batches_run_batched_equal_per_lane(spy, dtype, np_dtype, out_dtype, np_out, T):
    """A decode batch (M = T rows, not whole fractals) runs batched: TMATMUL's m = Left.validRow
    (m = 1 computes a whole fractal), the accumulator's rows past M are never stored. The same
    bytes as lane by lane - the output rows past M keep their sentinel."""
    E, N, K, NT, KT = 2, 128, 128, 64, 64
    x, w = gmm_operands(np.random.default_rng(T), np_dtype, E, T, N, K)
    got = _compare(
        grouped(dtype, out_dtype, E, T, N, K, NT, KT), x, runtime.pack_nz(w), np.full((E, T, N), 7, np_out)
    )
    assert spy == [True]
    check_gmm(np.frombuffer(got[0][2], np_out).reshape(E, T, N), x, w, np_dtype)


@pytest.mark.parametrize(
    "dtype,np_dtype,out_dtype,np_out",
    [
        (pl.BF16, ml_dtypes.bfloat16, pl.FP32, np.float32),
        (pl.INT8, np.int8, pl.INT32, np.int32),
    ],
)
def test_lanes_sharing_the_weight_window_batched_equal_per_lane(spy, dtype, np_dtype, out_dtype, np_out):
    """Lanes over M blocks of the activations all multiply the same NZ weight window: one Right
    image shared by every lane, a Left image per lane. Same bytes as lane by lane."""
    M, N, K, MT = 96, 64, 128, 16

    @pl.kernel
    def rows(
        x: pl.Tensor[[M, K], dtype], w: pl.Tensor[[N, K], dtype, pl.NZ], out: pl.Tensor[[M, N], out_dtype]
    ):
        for lane in pl.spmd(M // MT):
            m0 = lane * MT
            out[m0 : m0 + MT, :] = pl.matmul(x[m0 : m0 + MT, :], w[:, :], b_trans=True)

    x, w = gmm_operands(np.random.default_rng(13), np_dtype, 1, M, N, K)
    got = _compare(rows, x[0], runtime.pack_nz(w[0]), np.zeros((M, N), np_out))
    assert spy == [True]
    check_gmm(np.frombuffer(got[0][2], np_out).reshape(1, M, N), x, w, np_dtype)


def test_buffers_of_one_call_serve_the_next_and_never_leak_its_values(monkeypatch):
    """An attempt's buffers (accumulators, operand scratch, tile images) are kept for the next
    attempt (lane_state.LaneState.recycle): the second call takes them instead of fresh memory,
    and every call still equals its own per-lane run - with a vec kernel whose stored results
    reuse images and a grouped matmul whose accumulators do, on new data each call."""
    from nzjit.backend import lane_state

    served: list[bool] = []
    real_empty = lane_state.LaneState.empty

    def empty(self, shape, dtype):
        before = sum(len(v) for v in lane_state._spares().lists.values())
        a = real_empty(self, shape, dtype)
        served.append(sum(len(v) for v in lane_state._spares().lists.values()) < before)
        return a

    monkeypatch.setattr(lane_state.LaneState, "empty", empty)
    E, T, N, K, NT, KT = 2, 32, 256, 256, 64, 128
    gmm = grouped(pl.BF16, pl.FP32, E, T, N, K, NT, KT)

    R, C, L = 16, 32, 12

    @pl.kernel
    def vec(
        a: pl.Tensor[[L * R, C], pl.FP32],
        b: pl.Tensor[[L * R, C], pl.FP32],
        out: pl.Tensor[[L * R, C], pl.FP32],
    ):
        for lane in pl.spmd(L):
            ta = pl.load(a, [lane * R, 0], [R, C])
            tb = pl.load(b, [lane * R, 0], [R, C])
            pl.store(pl.mul(pl.add(ta, tb), ta), [lane * R, 0], out)

    for call in range(3):
        rng = np.random.default_rng(call)
        x, w = gmm_operands(rng, ml_dtypes.bfloat16, E, T, N, K)
        served.clear()
        got = _compare(gmm, x, runtime.pack_nz(w), np.zeros((E, T, N), np.float32))
        check_gmm(np.frombuffer(got[0][2], np.float32).reshape(E, T, N), x, w, ml_dtypes.bfloat16)
        if call:
            assert served and all(served)  # every buffer came from the previous call
        a, b = rng.standard_normal((2, L * R, C)).astype(np.float32)
        got = _compare(vec, a, b, np.zeros((L * R, C), np.float32))
        np.testing.assert_array_equal(np.frombuffer(got[0][2], np.float32).reshape(L * R, C), (a + b) * a)


@pytest.mark.parametrize(
    "dtype,np_dtype,out_dtype,np_out",
    [
        (pl.BF16, ml_dtypes.bfloat16, pl.FP32, np.float32),
        (pl.FP16, np.float16, pl.FP32, np.float32),
        (pl.FP32, np.float32, pl.FP32, np.float32),
        (pl.INT8, np.int8, pl.INT32, np.int32),
    ],
)
@pytest.mark.parametrize(
    "T,N,NT",
    [
        (32, 768, 32),  # 24 lanes per expert: chunks of 16 lanes straddle two experts' Left images
        (32, 1024, 32),  # 32 lanes per expert: each chunk within one expert (a broadcast Left)
        (4, 640, 16),  # a decode batch (M = 4 valid rows), 40 lanes per expert
    ],
)
@pytest.mark.parametrize("helper", [False, True])
def test_large_lane_groups_run_their_mads_in_chunks(
    spy, monkeypatch, dtype, np_dtype, out_dtype, np_out, T, N, NT, helper
):
    """A lane group larger than MAD_CHUNK converts, multiplies and accumulates MAD_CHUNK lanes at a
    time (lane_cube.mad_lanes): the same BLAS call per lane, so the same bytes as lane by lane,
    for the first mad and the accumulating ones, whether a chunk's lanes share one Left image or
    not, in float and in int8 (exact integers, wrapping int32 sums). With a helper thread (every
    mad large enough for it here), the caller and the helper take the chunks in turn, each
    converting and multiplying its own (issue 27: both threads convert and multiply): the same
    bytes again."""
    import time
    import types

    from nzjit.backend import lane_cube

    monkeypatch.setattr(runtime.threads, "THREADS", 2 if helper else 1)
    monkeypatch.setattr(lane_cube, "OVERLAP_MACS", 0)
    multiplied = set()  # the threads that ran a chunk's products
    real_matmul = np.matmul

    def matmul(*args, **kw):
        multiplied.add(threading.get_ident())
        return real_matmul(*args, **kw)

    monkeypatch.setattr(lane_cube, "np", types.SimpleNamespace(**{**vars(np), "matmul": matmul}))
    chunks, where = [], set()
    real = lane_cube._Side.chunk
    caller = threading.get_ident()

    def chunk(self, l0, l1, *buffers):
        if helper and threading.get_ident() == caller and not where - {caller}:
            time.sleep(0.005)  # the caller waits here until the helper has taken a chunk too
        chunks.append((l0, l1))
        where.add(threading.get_ident())
        return real(self, l0, l1, *buffers)

    monkeypatch.setattr(lane_cube._Side, "chunk", chunk)
    left_at_once = []  # per mad: were the few Left images converted all at once?
    real_init = lane_cube._Side.__init__

    def init(self, s, win, *args):
        real_init(self, s, win, *args)
        if win.g.space == "Left":
            left_at_once.append(self.all is not None)

    monkeypatch.setattr(lane_cube._Side, "__init__", init)
    E, K, KT = 3, 128, 64
    x, w = gmm_operands(np.random.default_rng(T * N), np_dtype, E, T, N, K)
    got = _compare(
        grouped(dtype, out_dtype, E, T, N, K, NT, KT), x, runtime.pack_nz(w), np.full((E, T, N), 7, np_out)
    )
    assert spy == [True]
    assert any(l0 >= lane_cube.MAD_CHUNK for l0, _ in chunks)  # a group larger than one chunk
    assert len(where) == (2 if helper else 1)
    assert multiplied == where
    # with a helper, a group's few Left images (an expert's per chunk, or a decode batch's) are
    # converted chunk by chunk, on the helper; on one thread all at once
    assert (not any(left_at_once)) if helper else all(left_at_once)
    check_gmm(np.frombuffer(got[0][2], np_out).reshape(E, T, N), x, w, np_dtype)


def test_mad_chunks_of_a_shared_mad():
    """lane_cube._chunks: MAD_CHUNK lanes at a time, so one expert's lanes keep sharing a chunk;
    shared with a helper, SHARED_CHUNK lanes, and a group of fewer than twice that is cut in two
    halves, one for each thread (issue 27)."""
    from nzjit.backend import lane_cube

    assert (lane_cube.MAD_CHUNK, lane_cube.SHARED_CHUNK) == (16, 8)
    assert lane_cube._chunks(40, False) == [(0, 16), (16, 32), (32, 40)]
    assert lane_cube._chunks(20, True) == [(0, 8), (8, 16), (16, 20)]
    assert lane_cube._chunks(16, True) == [(0, 8), (8, 16)]
    assert lane_cube._chunks(10, True) == [(0, 5), (5, 10)]
    assert lane_cube._chunks(16, False) == [(0, 16)]


def test_lanes_in_scattered_order_run_their_mads_image_by_image(spy, monkeypatch):
    """Lanes that take the experts in turn (lane -> expert lane % E): the lanes' weight windows are
    not in address order, and a chunk of MAD_CHUNK lanes reads images far apart - converted one
    image at a time. Lanes over M blocks of the activations that share one weight window: one
    Right image for every chunk, a Left image per lane. Both give the bytes of the lanes run one
    by one."""
    from nzjit.backend import lane_cube

    E, T, N, K, NT, KT = 3, 32, 1024, 128, 32, 64
    turns = grouped_in_turns(pl.BF16, pl.FP32, E, T, N, K, NT, KT)

    spans = []
    real = lane_cube._Side.chunk

    def chunk(self, l0, l1, *buffers):
        rows = self.rows[l0:l1]
        spans.append(max(rows) - min(rows) + 1)
        return real(self, l0, l1, *buffers)

    monkeypatch.setattr(lane_cube._Side, "chunk", chunk)
    x, w = gmm_operands(np.random.default_rng(5), ml_dtypes.bfloat16, E, T, N, K)
    got = _compare(turns, x, runtime.pack_nz(w), np.zeros((E, T, N), np.float32))
    assert spy == [True]
    assert max(spans) > 2 * lane_cube.MAD_CHUNK  # some chunk read images far apart
    check_gmm(np.frombuffer(got[0][2], np.float32).reshape(E, T, N), x, w, ml_dtypes.bfloat16)

    M, MT = 1024, 16

    @pl.kernel
    def rows(
        x: pl.Tensor[[M, K], pl.BF16], w: pl.Tensor[[N, K], pl.BF16, pl.NZ], out: pl.Tensor[[M, 64], pl.FP32]
    ):
        for lane in pl.spmd(M // MT):
            m0 = lane * MT
            out[m0 : m0 + MT, :] = pl.matmul(x[m0 : m0 + MT, :], w[0:64, :], b_trans=True)

    spy.clear()
    xs, ws = gmm_operands(np.random.default_rng(6), ml_dtypes.bfloat16, 1, M, N, K)
    got = _compare(rows, xs[0], runtime.pack_nz(ws[0]), np.zeros((M, 64), np.float32))
    assert spy == [True]
    check_gmm(np.frombuffer(got[0][2], np.float32).reshape(1, M, 64), xs, ws[:, :64], ml_dtypes.bfloat16)


@settings(max_examples=25, deadline=None)
@given(
    st.integers(1, 3),
    st.sampled_from([2, 5, 8, 12]),
    st.integers(1, 97),
    st.sampled_from([4, 16, 64]),
    st.sampled_from(
        [(pl.BF16, ml_dtypes.bfloat16, pl.FP32, np.float32), (pl.INT8, np.int8, pl.INT32, np.int32)]
    ),
    st.sampled_from([1, 2, 3]),
)
def test_any_lane_order_and_chunk_size_gives_the_per_lane_bytes(E, tiles, a, chunk, types, threads):
    """Property: lanes visit the (expert, N tile) pairs in any order (lane -> (lane * a) mod L, a
    coprime to L), mads run in chunks of any size, with or without a helper thread converting the
    next chunk (runtime.threads.Ahead): the bytes equal the lanes run one by one, and the
    reference."""
    from math import gcd

    from nzjit.backend import lane_cube

    dtype, np_dtype, out_dtype, np_out = types
    L = E * tiles
    while gcd(a, L) != 1:
        a += 1
    T, K, KT = 16, 64, 32
    NT = 32 if dtype is pl.INT8 else 16
    N = tiles * NT

    @pl.kernel
    def perm(
        x: pl.Tensor[[E, T, K], dtype],
        w: pl.Tensor[[E, N, K], dtype, pl.NZ],
        out: pl.Tensor[[E, T, N], out_dtype],
    ):
        for lane in pl.spmd(L):
            p = (lane * a) % L
            e = p // tiles
            n0 = (p % tiles) * NT
            acc = pl.matmul(x[e, :, 0:KT], w[e, n0 : n0 + NT, 0:KT], b_trans=True)
            for k0 in pl.pipeline(KT, K, KT):
                acc = pl.matmul_acc(
                    acc, x[e, :, k0 : k0 + KT], w[e, n0 : n0 + NT, k0 : k0 + KT], b_trans=True
                )
            out[e, :, n0 : n0 + NT] = acc

    x, w = gmm_operands(np.random.default_rng(L * a), np_dtype, E, T, N, K)
    saved = (lane_cube.MAD_CHUNK, lane_cube.OVERLAP_MACS, runtime.threads.THREADS, batched.try_run_spmd)
    ran: list[bool] = []
    lane_cube.MAD_CHUNK = chunk
    lane_cube.OVERLAP_MACS, runtime.threads.THREADS = 0, threads  # every mad overlapped when threads > 1
    batched.try_run_spmd = lambda *args, **kw: ran.append(saved[3](*args, **kw)) or ran[-1]
    try:
        with using(current().with_(lane_group=64, strict=True)):  # one group: chunks matter
            got = _compare(perm, x, runtime.pack_nz(w), np.zeros((E, T, N), np_out))
    finally:
        lane_cube.MAD_CHUNK, lane_cube.OVERLAP_MACS, runtime.threads.THREADS, batched.try_run_spmd = saved
    assert ran == [True]  # the batched run (the reference run does not try)
    check_gmm(np.frombuffer(got[0][2], np_out).reshape(E, T, N), x, w, np_dtype)
