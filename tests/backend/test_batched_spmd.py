"""Lane-batched SPMD execution (nzjit/backend/batched.py) against the lanes run one by one:
byte-identical GM, and a fallback to the per-lane run whenever batching could differ."""

from __future__ import annotations

import threading

import ml_dtypes
import numpy as np
import pytest
from gmm_kernels import check_gmm, gmm_operands, grouped, grouped_in_turns
from hypothesis import given, settings
from hypothesis import strategies as st

import runtime
from nzjit import pl
from nzjit.backend import batched, lane_gm
from nzjit.backend.options import Options, current, using
from nzjit.errors import CompileError
from nzjit.passes import lane_races


def _record(monkeypatch, owner, name: str, when=lambda kwargs: True) -> list:
    """Replace `owner.name` by a wrapper that appends each call's result (when `when(kwargs)`)."""
    seen: list = []
    real = getattr(owner, name)

    def wrapped(*a, **k):
        r = real(*a, **k)
        if when(k):
            seen.append(r)
        return r

    monkeypatch.setattr(owner, name, wrapped)
    return seen


@pytest.fixture
def spy(monkeypatch):
    """Records whether each SPMD loop ran batched (True) or fell back to per-lane (False); carry-free
    range loops are tried too, and not recorded."""
    return _record(monkeypatch, batched, "try_run_spmd", lambda k: k.get("spmd", True))


def _run(kernel, args, batch: bool):
    with using(current().with_(batch=batch)):
        w = runtime.Worker(0)
        devs = [w.alloc_tensor(a.shape, a.dtype, init=a) for a in args]
        err = None
        try:
            kernel(*devs)
        except (runtime.DeviceError, runtime.DispatchError) as e:  # a device fault or a refused window
            err = str(e)
        return [w.copy_from(d).tobytes() for d in devs], err


def _compare(kernel, *args):
    got, ref = _run(kernel, args, True), _run(kernel, args, False)
    assert got[0] == ref[0]
    assert got[1] == ref[1]
    return got


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


@pytest.fixture
def acc_store_spy(monkeypatch):
    """Records whether each batched Acc -> ND store over lanes ran as strided assignments."""
    return _record(monkeypatch, lane_gm, "lane_acc_store")


@pytest.mark.parametrize("attrs", [{}, {"atomic": True}, {"pre_relu": True}])
@pytest.mark.parametrize("out_dtype,np_out", [(pl.FP32, np.float32), (pl.BF16, ml_dtypes.bfloat16)])
def test_acc_stores_over_lanes_batched_equal_per_lane(spy, acc_store_spy, attrs, out_dtype, np_out):
    """Lanes of two experts store their accumulators (fixpipe: pre-ReLU, fp32 -> bf16, atomic
    add) as one strided assignment per run of lane addresses: the same bytes as lane by lane."""
    E, T, N, K, NT = 2, 16, 128, 64, 32

    @pl.kernel
    def gmm(
        x: pl.Tensor[[E * T, K], pl.BF16],
        w: pl.Tensor[[E * N, K], pl.BF16, pl.NZ],
        out: pl.Tensor[[E * T, N], out_dtype],
    ):
        for lane in pl.spmd(E * (N // NT)):
            e = lane // (N // NT)
            n0 = (lane % (N // NT)) * NT
            xt = pl.load(x, [e * T, 0], [T, K], target_memory=pl.Mem.Mat)
            wt = pl.load(w, [e * N + n0, 0], [NT, K], target_memory=pl.Mem.Mat)
            pl.store(pl.matmul(xt, wt, b_trans=True), [e * T, n0], out, **attrs)

    x, w = gmm_operands(np.random.default_rng(3), ml_dtypes.bfloat16, E, T, N, K)
    init = np.random.default_rng(4).standard_normal((E, T, N)).astype(np_out)
    got = _compare(gmm, x.reshape(E * T, K), runtime.pack_nz(w.reshape(E * N, K)), init.reshape(E * T, N))
    assert spy == [True] and acc_store_spy == [True]
    prod = np.einsum("etk,enk->etn", x.astype(np.float32), w.astype(np.float32))
    if attrs.get("pre_relu"):
        prod = np.maximum(prod, 0)
    want = (init.astype(np.float32) + prod.astype(np_out).astype(np.float32)) if attrs.get("atomic") else prod
    res = np.frombuffer(got[0][2], np_out).reshape(E, T, N).astype(np.float32)
    np.testing.assert_allclose(res, want.astype(np_out).astype(np.float32), rtol=2e-2, atol=2e-2)


def test_acc_stores_of_lanes_into_one_window_are_refused(spy, acc_store_spy):
    """Every lane stores its accumulator into the same window: a lane race (issue 24 item 2),
    refused on both paths before any store lands (the batched attempt applies no store)."""
    T, K, N, L = 16, 32, 32, 3

    @pl.kernel
    def same_window(
        x: pl.Tensor[[L * T, K], pl.BF16],
        w: pl.Tensor[[N, K], pl.BF16, pl.NZ],
        out: pl.Tensor[[T, N], pl.FP32],
    ):
        for lane in pl.spmd(L):
            xt = pl.load(x, [lane * T, 0], [T, K], target_memory=pl.Mem.Mat)
            wt = pl.load(w, [0, 0], [N, K], target_memory=pl.Mem.Mat)
            pl.store(pl.matmul(xt, wt, b_trans=True), [0, 0], out)

    rng = np.random.default_rng(6)
    x = rng.standard_normal((L, T, K)).astype(ml_dtypes.bfloat16)
    w = rng.standard_normal((N, K)).astype(ml_dtypes.bfloat16)
    with pytest.raises(CompileError, match="lane-race"):  # issue 24: the compiler refuses the race
        same_window.lower()
    with lane_races._bypass_for_tests():  # the run-time check refuses it too
        got = _compare(same_window, x.reshape(L * T, K), runtime.pack_nz(w), np.zeros((T, N), np.float32))
    assert spy == [] and acc_store_spy == []
    assert got[0][2] == np.zeros((T, N), np.float32).tobytes()
    assert "lane race in pl.spmd(3): lane 0 writes out[0:16, 0:32]" in got[1]


def test_vec_stores_over_several_address_runs_are_strided_assignments(spy, monkeypatch):
    """Lanes of two groups (a gap between them in `out`) load, add and store Vec tiles: loads and
    stores run as one strided assignment per run of lane addresses, the same bytes as lane by lane."""
    R, C, L = 16, 32, 8
    copies = _record(monkeypatch, lane_gm, "lane_copy")

    @pl.kernel
    def two_runs(a: pl.Tensor[[L * R, C], pl.FP32], out: pl.Tensor[[(L + 4) * R, C], pl.FP32]):
        for lane in pl.spmd(L):
            t = pl.load(a, [lane * R, 0], [R, C], target_memory=pl.Mem.Vec)
            pl.store(pl.add(t, t), [(lane + (lane // 4) * 4) * R, 0], out)  # lanes 4.. four tiles later

    a = np.arange(L * R * C, dtype=np.float32).reshape(L * R, C)
    got = _compare(two_runs, a, np.full(((L + 4) * R, C), -1, np.float32))
    assert spy == [True] and copies and all(copies)
    res = np.frombuffer(got[0][1], np.float32).reshape((L + 4) * R, C)
    want = np.full_like(res, -1)
    for lane in range(L):
        row = (lane + (lane // 4) * 4) * R
        want[row : row + R] = 2 * a[lane * R : (lane + 1) * R]
    np.testing.assert_array_equal(res, want)


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


def test_nz_partition_stores_run_batched_equal_per_lane(spy):  # NZ-20, NZ-22
    """Lanes over N tiles store their accumulators into an FP32 NZ output (whole-height column
    panels, each an explicit rank-5 partition): the body runs batched, the stores replay lane by
    lane at the end, and the bytes are those of the lanes one by one - the packed product."""
    M, K, N, NT = 32, 64, 128, 32

    @pl.kernel
    def nz_out(
        a: pl.Tensor[[M, K], pl.FP16],
        b: pl.Tensor[[N, K], pl.FP16, pl.NZ],
        out: pl.Tensor[[M, N], pl.FP32, pl.NZ],
    ):
        for lane in pl.spmd(N // NT):
            n0 = lane * NT
            at = pl.load(a, [0, 0], [M, K], target_memory=pl.Mem.Mat)
            bt = pl.load(b, [n0, 0], [NT, K], target_memory=pl.Mem.Mat)
            pl.store(pl.matmul(at, bt, b_trans=True), [0, n0], out)

    rng = np.random.default_rng(17)
    a = rng.integers(-3, 4, (M, K)).astype(np.float16)
    b = rng.integers(-3, 4, (N, K)).astype(np.float16)
    got = _compare(nz_out, a, runtime.pack_nz(b), runtime.pack_nz(np.full((M, N), 5, np.float32)))
    assert spy == [True]
    ref = a.astype(np.float32) @ b.astype(np.float32).T
    assert got[0][2] == runtime.pack_nz(ref).tobytes()


def test_nz_store_that_mis_writes_falls_back_with_its_warning(spy):  # NZ-23, hw §4.3
    """Lanes store 64 x 16 tiles into the quadrants of a [128, 32] NZ parent (the full-row check
    skipped, as only a test may): TStoreAccNz2nz ignores the parent's strides and mis-writes.
    The store's warning sends the lanes one by one, which reproduce the device's bytes."""
    from nzjit.passes import block_nz_store

    @pl.kernel
    def quad(
        t: pl.Tensor[[4, 64, 16], pl.FP16],
        eye: pl.Tensor[[16, 16], pl.FP16],
        out: pl.Tensor[[128, 32], pl.FP32, pl.NZ],
    ):
        for lane in pl.spmd(4):
            e = pl.load(eye, [0, 0], [16, 16], target_memory=pl.Mem.Mat)
            ti = pl.load(t, [lane, 0, 0], [1, 64, 16], target_memory=pl.Mem.Mat)
            pl.store(pl.matmul(ti, e), [(lane // 2) * 64, (lane % 2) * 16], out)

    i, j = np.indices((64, 16))
    tiles = np.stack([10 * k + 1 + (i + j) % 5 for k in range(4)]).astype(np.float16)
    stale = runtime.pack_nz(np.full((128, 32), -1, np.float32))
    with block_nz_store.unsafe_skip_full_row_check_for_tests():
        quad.lower(tiles, np.eye(16, dtype=np.float16), stale)
        with pytest.warns(runtime.HardwareDefectWarning, match="ignores the parent strides"):
            got = _compare(quad, tiles, np.eye(16, dtype=np.float16), stale)
    assert spy == [False]
    intended = runtime.pack_nz(np.block([[tiles[0], tiles[1]], [tiles[2], tiles[3]]]).astype(np.float32))
    assert got[0][2] != intended.tobytes()  # the device's mis-write, reproduced on both paths


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
