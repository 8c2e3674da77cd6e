"""Lane-batched SPMD execution (nzjit/backend/batched.py) against the lanes run one by one:
byte-identical GM, and a fallback to the per-lane run whenever batching could differ."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from batched_checks import compare as _compare
from gmm_kernels import check_gmm, gmm_operands, grouped, grouped_in_turns

import runtime
from nzjit import pl
from nzjit.backend import batched, lane_gm
from nzjit.backend.options import Options, current, using
from nzjit.errors import CompileError
from nzjit.passes import lane_races


@pytest.mark.parametrize(
    "dtype,np_dtype,out_dtype,np_out",
    [
        (pl.BF16, ml_dtypes.bfloat16, pl.FP32, np.float32),
        (pl.FP16, np.float16, pl.FP32, np.float32),
        (pl.INT8, np.int8, pl.INT32, np.int32),
    ],
)
@pytest.mark.parametrize("E,N,NT", [(2, 256, 128), (3, 512, 64)])
def test_grouped_matmul_batched_equals_per_lane(spy, dtype, np_dtype, out_dtype, np_out, E, N, NT):
    T, K, KT = 32, 256, 128
    x, w = gmm_operands(np.random.default_rng(E * N), np_dtype, E, T, N, K)
    got = _compare(
        grouped(dtype, out_dtype, E, T, N, K, NT, KT), x, runtime.pack_nz(w), np.full((E, T, N), 7, np_out)
    )
    assert spy == [True]  # batched (the reference run does not try)
    check_gmm(np.frombuffer(got[0][2], np_out).reshape(E, T, N), x, w, np_dtype)


@pytest.mark.parametrize(
    "dtype,np_dtype,out_dtype,np_out",
    [(pl.BF16, ml_dtypes.bfloat16, pl.FP32, np.float32), (pl.FP32, np.float32, pl.FP32, np.float32)],
)
def test_right_images_of_many_column_blocks_gather_in_slices(
    spy, monkeypatch, dtype, np_dtype, out_dtype, np_out
):
    """Mads of K = 256: a Right image row is K / c0 = 16 (bf16) or 32 (fp32) C0 lines from as many
    NZ column blocks, gathered RUNS_AT_ONCE blocks at a time (lane_values.copy_lines; bf16 lines
    widened to float32 as they are read, lane_values.widen_lines); the bytes are those of the lanes
    run one by one."""
    from nzjit.backend import lane_values

    monkeypatch.setattr(lane_values, "RUNS_AT_ONCE", 8)  # the slicing under test, whatever the tuning
    monkeypatch.setattr(lane_values, "NATIVE_WIDEN", False)  # numpy's line widening, which slices
    runs = []
    real, real_widen = lane_values.copy_lines, lane_values.widen_lines
    monkeypatch.setattr(
        lane_values, "copy_lines", lambda dst, src: runs.append(src.shape[-1]) or real(dst, src)
    )
    monkeypatch.setattr(
        lane_values, "widen_lines", lambda dst, src: runs.append(src.shape[-2]) or real_widen(dst, src)
    )
    E, T, N, K, NT, KT = 2, 32, 256, 512, 64, 256
    x, w = gmm_operands(np.random.default_rng(5), np_dtype, E, T, N, K)
    got = _compare(
        grouped(dtype, out_dtype, E, T, N, K, NT, KT), x, runtime.pack_nz(w), np.full((E, T, N), 7, np_out)
    )
    assert spy == [True]
    assert max(runs) == 256 // (32 // np.dtype(np_dtype).itemsize) > lane_values.RUNS_AT_ONCE
    check_gmm(np.frombuffer(got[0][2], np_out).reshape(E, T, N), x, w, np_dtype)


def test_lanes_reading_what_other_lanes_store_fall_back(spy):
    """Lane i copies block i into block i+1: lane i reads what lane i - 1 writes, a lane race
    (issue 24 item 2). The load/store overlap forces the fallback, and the lanes run one by one
    detect the race: refused, `buf` unchanged, the same message on both paths."""
    R, C, L = 16, 16, 6

    @pl.kernel
    def chain(buf: pl.InOut[pl.Tensor[[(L + 1) * R, C], pl.FP32]]):
        for lane in pl.spmd(L):
            t = pl.load(buf, [lane * R, 0], [R, C])
            pl.store(t, [lane * R + R, 0], buf)

    buf = np.arange((L + 1) * R * C, dtype=np.float32).reshape((L + 1) * R, C)
    got = _compare(chain, buf)
    assert spy == [False]
    assert got[0][0] == buf.tobytes()
    assert "lane race in pl.spmd(6): lane 1 reads buf[16:32, 0:16]" in got[1]
    assert "and lane 0 writes buf[16:32, 0:16]" in got[1]


def test_lanes_rewriting_their_own_window_fall_back_and_are_exact(spy):
    """Lane i reads block i and writes it back doubled: the load/store overlap forces the
    fallback (a batched run must not let loads see deferred stores), and no lane touches another
    lane's bytes: no race, the per-lane result."""
    R, C, L = 16, 16, 6

    @pl.kernel
    def double(buf: pl.InOut[pl.Tensor[[L * R, C], pl.FP32]]):
        for lane in pl.spmd(L):
            t = pl.load(buf, [lane * R, 0], [R, C])
            pl.store(pl.add(t, t), [lane * R, 0], buf)

    buf = np.arange(L * R * C, dtype=np.float32).reshape(L * R, C)
    got = _compare(double, buf)
    assert spy == [False] and got[1] is None
    np.testing.assert_array_equal(np.frombuffer(got[0][0], np.float32).reshape(buf.shape), 2 * buf)


def test_overlapping_stores_are_refused_on_both_paths(spy):
    """Every lane writes the same window (no lane reads it): refused at compile time; compiled
    without that proof, the run-time log refuses it on the batched and the per-lane path alike
    (issue 24 item 2), before any store lands: `out`, an input written in place, is unchanged."""
    R, C, L = 16, 16, 5

    @pl.kernel
    def last_wins(a: pl.Tensor[[L * R, C], pl.FP32], out: pl.Tensor[[R, C], pl.FP32]):
        for lane in pl.spmd(L):
            pl.store(pl.load(a, [lane * R, 0], [R, C]), [0, 0], out)

    a = np.arange(L * R * C, dtype=np.float32).reshape(L * R, C)
    with pytest.raises(CompileError, match="lane-race"):  # issue 24: the compiler refuses the race
        last_wins.lower()
    with lane_races._bypass_for_tests():  # the run-time check refuses it too
        got = _compare(last_wins, a, np.full((R, C), 7, np.float32))
    assert spy == []  # the batched attempt raised (no fallback), before applying any store
    assert got[0][1] == np.full((R, C), 7, np.float32).tobytes()
    assert "lane race in pl.spmd(5): lane 0 writes out[0:16, 0:16]" in got[1]
    assert "and lane 1 writes out[0:16, 0:16]" in got[1] and "they share out[0:16, 0:16]" in got[1]


@pytest.mark.parametrize("L,max_splits,runs_batched", [(4, 16, True), (40, 3, False)])
def test_lane_dependent_trip_count_splits_groups(spy, monkeypatch, L, max_splits, runs_batched):
    """Every lane runs its own trip count: a group of lanes cannot run as one, so it is retried in
    halves down to single lanes (same bytes as lane by lane); past MAX_SPLITS retries the lanes
    run one by one."""
    R, C = 16, 16
    monkeypatch.setattr(batched, "MAX_SPLITS", max_splits)

    @pl.kernel
    def ragged(a: pl.Tensor[[L * R, C], pl.FP32], out: pl.Tensor[[L * R, C], pl.FP32]):
        for lane in pl.spmd(L):
            for i in pl.range(lane % 4 + 1):  # lane 0 runs one trip, lane 3 four
                pl.store(pl.load(a, [i * R, 0], [R, C]), [lane * R, 0], out)

    a = np.arange(L * R * C, dtype=np.float32).reshape(L * R, C)
    got = _compare(ragged, a, np.zeros_like(a))
    assert spy == [runs_batched]
    res = np.frombuffer(got[0][1], np.float32).reshape(a.shape)
    for lane in range(L):
        i = lane % 4
        np.testing.assert_array_equal(res[lane * R : (lane + 1) * R], a[i * R : (i + 1) * R])


def test_ragged_last_tile_runs_batched(spy):
    """N = 112 in tiles of 32: the last lane's weight window has 16 valid rows (pl.min), the other
    lanes 32. The group of all lanes disagrees on the valid shape, so it splits; the lanes run
    batched in uniform groups, the same bytes as lane by lane."""
    M, K, N, NT = 16, 64, 112, 32
    L = -(-N // NT)

    @pl.kernel
    def ragged(
        x: pl.Tensor[[M, K], pl.BF16],
        w: pl.Tensor[[N, K], pl.BF16, pl.NZ],
        out: pl.Tensor[[M, L * NT], pl.FP32],
    ):
        for lane in pl.spmd(L):
            n0 = lane * NT
            rows = pl.min(N - n0, NT)
            xt = pl.load(x, [0, 0], [M, K], target_memory=pl.Mem.Mat)
            wt = pl.load(w, [n0, 0], [NT, K], target_memory=pl.Mem.Mat, valid_shape=[rows, K])
            pl.store(pl.matmul(xt, wt, b_trans=True), [0, n0], out)

    rng = np.random.default_rng(23)
    x = rng.integers(-3, 4, (M, K)).astype(ml_dtypes.bfloat16)
    w = rng.integers(-3, 4, (N, K)).astype(ml_dtypes.bfloat16)
    got = _compare(ragged, x, runtime.pack_nz(w), np.zeros((M, L * NT), np.float32))
    assert spy == [True]
    res = np.frombuffer(got[0][2], np.float32).reshape(M, L * NT)
    np.testing.assert_array_equal(res[:, :N], x.astype(np.float32) @ w.astype(np.float32).T)


def test_unsupported_body_runs_per_lane(spy):
    """A tensor reshape inside the body has no batched form: the lanes run one by one."""
    R, C, L = 16, 16, 3

    @pl.kernel
    def vec(a: pl.Tensor[[L * R, C], pl.FP32], out: pl.Tensor[[L * R, C], pl.FP32]):
        for lane in pl.spmd(L):
            t = pl.load(pl.reshape(a, [L * R * C]), [lane * R * C], [R * C], target_memory=pl.Mem.Vec)
            pl.store(pl.add(t, t), [lane * R * C], pl.reshape(out, [L * R * C]))

    a = np.arange(L * R * C, dtype=np.float32).reshape(L * R, C)
    got = _compare(vec, a, np.zeros_like(a))
    assert spy == [False]
    np.testing.assert_array_equal(np.frombuffer(got[0][1], np.float32).reshape(a.shape), 2 * a)


@pytest.mark.parametrize("scale,batched", [(1.0, True), (1e12, False)])
def test_float_to_int_casts_batched_only_in_range(spy, scale, batched):
    """A float -> int8 cast (quantisation) runs batched when every value converts in range; an
    out-of-range value (undefined in C) sends the lanes one by one. Same bytes either way."""
    R, C, L = 16, 32, 4

    @pl.kernel
    def quant(a: pl.Tensor[[L * R, C], pl.FP32], out: pl.Tensor[[L * R, C], pl.INT8]):
        for lane in pl.spmd(L):
            t = pl.load(a, [lane * R, 0], [R, C])
            pl.store(pl.cast(t, pl.INT8), [lane * R, 0], out)

    a = ((np.arange(L * R * C) % 255) - 127.25).astype(np.float32).reshape(L * R, C)
    a[-1, -1] *= scale
    got = _compare(quant, a, np.zeros((L * R, C), np.int8))
    assert spy == [batched]
    if batched:
        np.testing.assert_array_equal(np.frombuffer(got[0][1], np.int8).reshape(a.shape), a.astype(np.int8))


@pytest.mark.parametrize(
    "src,np_src,mid,np_mid",
    [
        (pl.FP32, np.float32, pl.FP16, np.float16),
        (pl.FP32, np.float32, pl.BF16, ml_dtypes.bfloat16),
        (pl.INT16, np.int16, pl.FP32, np.float32),
        (pl.INT16, np.int16, pl.INT32, np.int32),
    ],
)
def test_tile_casts_run_batched(spy, src, np_src, mid, np_mid):
    """Casts to a float type, or to an integer type that holds every source value, run batched:
    the same bytes as lane by lane, rounding (fp32 -> fp16 / bf16) included."""
    R, C, L = 16, 32, 5

    @pl.kernel
    def vec(a: pl.Tensor[[L * R, C], src], out: pl.Tensor[[L * R, C], mid]):
        for lane in pl.spmd(L):
            t = pl.load(a, [lane * R, 0], [R, C])
            pl.store(pl.cast(pl.add(t, t), mid), [lane * R, 0], out)

    rng = np.random.default_rng(9)
    a = (rng.standard_normal((L * R, C)) * 1000).astype(np_src)
    got = _compare(vec, a, np.zeros((L * R, C), np_mid))
    assert spy == [True]
    want = (a + a).astype(np_mid)
    np.testing.assert_array_equal(
        np.frombuffer(got[0][1], np_mid).reshape(a.shape).view(np.uint8), want.view(np.uint8)
    )


def test_vec_elementwise_range_trips_batched_equal_per_trip(monkeypatch):
    """A carry-free pl.range of Vec loads / elementwise / stores runs its trips batched (one
    strided copy per load and store for all trips): the same bytes as trip by trip."""
    R, C, NIT = 16, 32, 40
    calls = []
    real = batched.try_run_spmd
    monkeypatch.setattr(batched, "try_run_spmd", lambda *a, **k: calls.append(real(*a, **k)) or calls[-1])

    @pl.kernel
    def trips(
        a: pl.Tensor[[NIT * R, C], pl.FP32],
        b: pl.Tensor[[NIT * R, C], pl.FP32],
        out: pl.Tensor[[NIT * R, C], pl.FP32],
    ):
        for i in pl.range(NIT):
            r0 = (i * 7) % NIT * R
            ta = pl.load(a, [r0, 0], [R, C])
            tb = pl.load(b, [i * R, 0], [R, C])
            pl.store(pl.exp(pl.maximum(pl.mul(pl.add(ta, tb), ta), tb)), [r0, 0], out)

    rng = np.random.default_rng(7)
    a = rng.standard_normal((NIT * R, C)).astype(np.float32) * 30
    b = rng.standard_normal((NIT * R, C)).astype(np.float32)
    got = _compare(trips, a, b, np.zeros_like(a))
    assert calls == [True]
    res = np.frombuffer(got[0][2], np.float32).reshape(a.shape)
    perm = (np.arange(NIT) * 7) % NIT
    ta = a.reshape(NIT, R, C)[perm]
    tb = b.reshape(NIT, R, C)
    with np.errstate(over="ignore"):
        expect = np.exp(np.maximum((ta + tb) * ta, tb))
    np.testing.assert_array_equal(res.reshape(NIT, R, C)[perm], expect)


def test_a_refusing_lane_falls_back_and_earlier_lanes_stored(spy):
    """Lane 2 reads past the tensor: per lane, lanes 0 and 1 have stored when it is refused."""
    R, C, L = 16, 16, 4

    @pl.kernel
    def oob(
        a: pl.Tensor[[2 * R, C], pl.FP32],
        off: pl.Tensor[[R * C * 64], pl.FP32],
        out: pl.Tensor[[L * R, C], pl.FP32],
    ):
        for lane in pl.spmd(L):
            t = pl.load(off, [lane * lane * R * C * 40], [R * C])
            pl.store(pl.load(a, [0, 0], [R, C]), [lane * R, 0], out)
            _ = t

    a = np.arange(2 * R * C, dtype=np.float32).reshape(2 * R, C)
    off = np.zeros(R * C * 64, np.float32)
    got = _compare(oob, a, off, np.zeros((L * R, C), np.float32))
    assert spy == [False]
    assert got[1] is not None  # the per-lane error, raised by both runs
    res = np.frombuffer(got[0][2], np.float32).reshape(L * R, C)
    np.testing.assert_array_equal(res[: 2 * R], np.tile(a[:R], (2, 1)))  # lanes 0 and 1 stored
    assert not res[2 * R :].any()


def test_batching_can_be_switched_off(spy):
    with using(current().with_(batch=False)):
        E, T, N, K, NT, KT = 1, 16, 64, 64, 32, 32
        k = grouped(pl.FP16, pl.FP32, E, T, N, K, NT, KT)
        k(
            np.ones((E, T, K), np.float16),
            runtime.pack_nz(np.ones((E, N, K), np.float16)),
            np.zeros((E, T, N), np.float32),
        )
        assert spy == []


def test_in_place_update_loop_falls_back_and_stops_trying(monkeypatch):
    """x[i] = x[i] * 2 + x[i]: every trip loads what it stores, so a batched run is abandoned at
    the first store; after MAX_FAILS such attempts the body is not tried again."""
    R, C, NIT = 16, 16, 6
    calls = []
    real = batched.try_run_spmd
    monkeypatch.setattr(batched, "try_run_spmd", lambda *a, **k: calls.append(real(*a, **k)) or calls[-1])

    @pl.kernel
    def in_place(x: pl.InOut[pl.Tensor[[NIT * R, C], pl.FP32]]):
        for i in pl.range(NIT):
            t = pl.load(x, [i * R, 0], [R, C])
            pl.store(pl.add(pl.add(t, t), t), [i * R, 0], x)

    x = np.arange(NIT * R * C, dtype=np.float32).reshape(NIT * R, C)
    for _ in range(batched.MAX_FAILS + 2):
        got = _compare(in_place, x)
        np.testing.assert_array_equal(np.frombuffer(got[0][0], np.float32).reshape(x.shape), 3 * x)
    assert calls[: batched.MAX_FAILS] == [False] * batched.MAX_FAILS
    assert all(c is False for c in calls)
    assert len(calls) == batched.MAX_FAILS + 2  # asked on every batched run, refused at once after


def _loads_checked(monkeypatch):
    """Wraps lane_gm.gm_images: every lazy view it returns must hold exactly the bytes the load
    instruction copies, lane image by lane image (replayed with the instruction's own plan)."""
    seen = []
    real = lane_gm.gm_images

    def checked(plan, gm, addrs, g):
        chunks = real(plan, gm, addrs, g)
        if chunks is not None:
            lazy = np.concatenate([v for _, v in chunks])
            assert [u0 for u0, _ in chunks] == list(np.cumsum([0] + [len(v) for _, v in chunks])[:-1])
            for u, a in enumerate(addrs.tolist()):
                img = np.zeros(g.nbytes, np.uint8)
                plan.run(gm, a, runtime.TileBuf._from_geometry(g, None, None, img))
                assert lazy[u].tobytes() == img.view(g.dtype).reshape(g.phys).tobytes()
            seen.append((g.space, g.layout, len(chunks)))
        return chunks

    monkeypatch.setattr(lane_gm, "gm_images", checked)
    return seen


@pytest.mark.parametrize("E,N,NT", [(2, 256, 128), (3, 512, 64)])
def test_lazy_nz_weight_images_are_the_loaded_bytes(monkeypatch, E, N, NT):
    """NZ weight windows are read by the mads straight from GM (no tile copy): the views equal
    the bytes the load copies; lanes of one expert form one arithmetic run of addresses, so
    the views come in one chunk per expert that a lane group spans."""
    seen = _loads_checked(monkeypatch)
    T, K, KT = 32, 256, 128
    rng = np.random.default_rng(5)
    x = rng.standard_normal((E, T, K)).astype(ml_dtypes.bfloat16)
    w = rng.standard_normal((E, N, K)).astype(ml_dtypes.bfloat16)
    _compare(
        grouped(pl.BF16, pl.FP32, E, T, N, K, NT, KT), x, runtime.pack_nz(w), np.zeros((E, T, N), np.float32)
    )
    assert seen and all(space == "Mat" and layout == "NZ" for space, layout, _ in seen)
    # one chunk per expert in the first lane group (Options.lane_group lanes)
    assert max(n for _, _, n in seen) == min(E, Options().lane_group // (N // NT))


def test_lazy_vec_images_materialise_for_elementwise_and_stores(monkeypatch):
    """Vec tiles loaded lazily and then added / stored are materialised first: same bytes as
    the trips run one by one."""
    seen = _loads_checked(monkeypatch)
    R, C, NIT = 16, 32, 24

    @pl.kernel
    def trips(a: pl.Tensor[[NIT * R, C], pl.FP32], out: pl.Tensor[[NIT * R, C], pl.FP32]):
        for i in pl.range(NIT):
            t = pl.load(a, [(NIT - 1 - i) * R, 0], [R, C])
            pl.store(pl.add(t, t), [i * R, 0], out)
            pl.store(t, [i * R, 0], out)  # a raw lazy tile stored: its bytes must be materialised

    a = np.random.default_rng(2).standard_normal((NIT * R, C)).astype(np.float32)
    got = _compare(trips, a, np.zeros_like(a))
    assert seen and seen[0][:2] == ("Vec", "ND")
    np.testing.assert_array_equal(
        np.frombuffer(got[0][1], np.float32).reshape(NIT, R, C), a.reshape(NIT, R, C)[::-1]
    )


@pytest.mark.parametrize("seed", range(20))
def test_arithmetic_runs_split_greedily(seed):
    """Lane addresses are split into maximal arithmetic runs, greedily from the first address;
    every address is in exactly one run, each run is arithmetic."""
    rng = np.random.default_rng(seed)
    steps = rng.choice([8, 8, 8, 16, 40], size=int(rng.integers(1, 30)))
    addrs = np.cumsum(np.concatenate([[1000], steps])).astype(np.int64)
    runs = lane_gm.arithmetic_runs(addrs)
    i = 0
    for start, stop, step in runs:
        assert start == i and stop > start
        seg = addrs[start:stop]
        assert (np.diff(seg) == step).all()
        if stop < len(addrs) and stop - start >= 2:  # maximal: the next address breaks the run
            assert addrs[stop] - addrs[stop - 1] != step
        i = stop
    assert i == len(addrs)


@pytest.mark.parametrize(
    "dtype,np_dtype,out_dtype,np_out",
    [
        (pl.BF16, ml_dtypes.bfloat16, pl.FP32, np.float32),
        (pl.INT8, np.int8, pl.INT32, np.int32),
    ],
)
def test_interleaved_experts_batched_equal_per_lane(spy, dtype, np_dtype, out_dtype, np_out):
    """Lanes take experts round-robin (lane % E): Left images are not shared in consecutive
    blocks and Right addresses are not in lane order, so the stacked matmul gathers both
    operands per lane. Same bytes as the lanes one by one."""
    E, T, N, K, NT, KT = 3, 16, 128, 128, 32, 64
    gmm = grouped_in_turns(dtype, out_dtype, E, T, N, K, NT, KT)

    x, w = gmm_operands(np.random.default_rng(11), np_dtype, E, T, N, K)
    got = _compare(gmm, x, runtime.pack_nz(w), np.zeros((E, T, N), np_out))
    assert spy == [True]
    check_gmm(np.frombuffer(got[0][2], np_out).reshape(E, T, N), x, w, np_dtype)


def test_deep_int8_mads_batched_exact_in_float64(spy):
    """An int8 mad deeper than float32 holds exactly (k = 2048 > 2**24 / 128**2) is batched with
    float64 products, still exact: the same bytes as the lanes one by one, equal to numpy."""
    E, T, N, K, NT, KT = 2, 16, 64, 2048, 16, 2048
    x, w = gmm_operands(np.random.default_rng(3), np.int8, E, T, N, K)
    x[:] = 127  # the largest products everywhere a row sums to: |C| = 2048 * 127 * 128 needs 25 bits
    w[0] = -128
    kern = grouped(pl.INT8, pl.INT32, E, T, N, K, NT, KT)
    depths = {
        e.inputs[-2].type.shape[1]
        for e in kern.lower(x, runtime.pack_nz(w)).final.walk()
        if e.primitive.name in ("tile.mad", "tile.mad_acc")
    }
    assert depths == {2048}  # one mad per lane, deeper than the float32-exact 1024
    got = _compare(kern, x, runtime.pack_nz(w), np.zeros((E, T, N), np.int32))
    assert spy == [True]
    check_gmm(np.frombuffer(got[0][2], np.int32).reshape(E, T, N), x, w, np.int8)
    assert np.frombuffer(got[0][2], np.int32).min() == -2048 * 127 * 128


def test_stored_partial_sums_are_not_updated_by_later_mads(spy):
    """A lane stores its accumulator after the first K half, then keeps accumulating into it.
    Stores of a batched run are applied at the end, so the later in-place mad must not touch the
    sums the first store reads: out1 holds the first half's products, out2 the whole K."""
    E, T, N, K, NT, KT = 2, 16, 64, 64, 32, 32

    @pl.kernel
    def halves(
        x: pl.Tensor[[E, T, K], pl.BF16],
        w: pl.Tensor[[E, N, K], pl.BF16, pl.NZ],
        out1: pl.Tensor[[E, T, N], pl.FP32],
        out2: pl.Tensor[[E, T, N], pl.FP32],
    ):
        for lane in pl.spmd(E * (N // NT)):
            e = lane // (N // NT)
            n0 = (lane % (N // NT)) * NT
            acc = pl.matmul(x[e, :, 0:KT], w[e, n0 : n0 + NT, 0:KT], b_trans=True)
            out1[e, :, n0 : n0 + NT] = acc
            acc = pl.matmul_acc(acc, x[e, :, KT:K], w[e, n0 : n0 + NT, KT:K], b_trans=True)
            out2[e, :, n0 : n0 + NT] = acc

    x, w = gmm_operands(np.random.default_rng(5), ml_dtypes.bfloat16, E, T, N, K)
    zeros = np.zeros((E, T, N), np.float32)
    got = _compare(halves, x, runtime.pack_nz(w), zeros, zeros)
    assert spy == [True]
    out1 = np.frombuffer(got[0][2], np.float32).reshape(E, T, N)
    out2 = np.frombuffer(got[0][3], np.float32).reshape(E, T, N)
    check_gmm(out1, x[:, :, :KT], w[:, :, :KT], ml_dtypes.bfloat16)
    check_gmm(out2, x, w, ml_dtypes.bfloat16)
