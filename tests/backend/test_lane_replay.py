"""Replays of lane-batched attempts (backend/lane_replay.py; issue 22 item 10, issue 27): a
kernel called again with the same signature repeats the recorded buffer work of its first
recorded attempt. Every test runs the replaying path next to `Options(replay=False)` (the
stepping path) on resident tensors whose bytes change between calls, checks the outputs byte for
byte, and checks that replays really ran (`lane_replay.stats`), so none can pass on the stepping
path alone. Then what must not be replayed: a signature that changed (a scalar's bits, a valid
shape), a value-dependent check (a quantising cast out of range), a freed tensor, two threads at
once, host arrays (new addresses every call), and a recorded call that made another inside it."""

from __future__ import annotations

import gc
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

import runtime
from nzjit import pl
from nzjit.backend import lane_replay
from nzjit.backend.lane_state import LaneState
from nzjit.backend.options import Options, using

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))

import fused_moe_expert as fm  # noqa: E402
import row_softmax as sm  # noqa: E402

RNG = np.random.default_rng(27)
STEP = Options(replay=False)
REPLAY = Options(strict=True)  # strict: a bug in a replay raises instead of hiding


def _runs() -> int:
    return lane_replay.stats()[1]


def _read(w: runtime.Worker, outs: list) -> list[bytes]:
    return [w.copy_from(o).tobytes() for o in outs]


def _compare(kernel, w, ins, outs, scalars=(), calls=4, fresh=None):
    """Call `kernel` `calls` times on both paths; before each call the inputs get new bytes
    (`fresh(i)` -> host arrays, or random ones) and the outputs poison; the bytes must agree."""
    before = _runs()
    for i in range(calls):
        new = fresh(i) if fresh is not None else [RNG.standard_normal(t.shape).astype(t.dtype) for t in ins]
        got = []
        for opts in (STEP, REPLAY):
            for t, a in zip(ins, new):
                w.write_tensor(t, a)
            for o in outs:
                w.write_tensor(o, np.full(o.shape, 7, o.dtype))  # a replay must write every byte again
            with using(opts):
                kernel(*ins, *scalars, *outs)
            got.append(_read(w, outs))
        assert got[0] == got[1], f"call {i}: the replay's bytes differ from the stepping path's"
    return _runs() - before


def test_row_softmax_replays_with_new_data_each_call():
    w = runtime.Worker(0)
    x = w.alloc_tensor((sm.ROWS, sm.PADDED), np.float32)
    y = w.alloc_tensor((sm.ROWS, sm.PADDED), np.float32)
    assert _compare(sm.row_softmax, w, [x], [y], calls=5) >= 3  # recorded on the 2nd call, replayed after
    # and the numbers are the example's (checked against float64 numpy there)
    a = w.copy_from(x)
    np.testing.assert_allclose(w.copy_from(y)[:, : sm.COLS], sm.reference(a), rtol=1e-6, atol=1e-9)


def test_fused_expert_replays_cube_pipe_and_vector_steps():
    # int8 NZ mads, the GM pipe (TPUSH / TPOP), casts, column broadcasts, an fp16 down projection
    w = runtime.Worker(0)
    x8, wg, wu, sg, su, wd, xs = fm.data()
    host = [x8, runtime.pack_nz(wg), runtime.pack_nz(wu), sg, su, runtime.pack_nz(wd)]
    ins = [w.alloc_tensor(a.shape, a.dtype, init=a) for a in host]
    out = w.alloc_tensor((fm.E, fm.T, fm.H), np.float32)

    def fresh(i):  # new activations and scales; the weights change on one call too
        rng = np.random.default_rng(i)
        new = list(host)
        new[0] = rng.integers(-8, 8, x8.shape).astype(np.int8)
        new[3] = (rng.random(sg.shape) * 0.01).astype(np.float32)
        if i == 2:
            new[1] = runtime.pack_nz(np.ascontiguousarray(wg[..., ::-1]))
        return new

    def kernel(*args):
        return fm.moe_expert(*args[:6], float(xs), args[6])

    assert _compare(kernel, w, ins, [out], calls=4, fresh=fresh) >= 2


@pl.kernel
def _scaled(x: pl.Tensor[[64, 64], pl.FP32], s: pl.Scalar[pl.FP32], y: pl.Out[pl.Tensor[[64, 64], pl.FP32]]):
    for lane in pl.spmd(4):
        t = pl.load(x, [lane * 16, 0], [16, 64], target_memory=pl.Mem.Vec)
        pl.store(pl.add(pl.mul(t, s), s), [lane * 16, 0], y)


def test_a_scalar_with_other_bits_is_another_signature():
    # 0.0 and -0.0 compare equal but give other bytes (x * -0.0 + -0.0 keeps -0.0 for x >= 0)
    w = runtime.Worker(0)
    x = w.alloc_tensor((64, 64), np.float32, init=np.abs(RNG.standard_normal((64, 64))).astype(np.float32))
    y = w.alloc_tensor((64, 64), np.float32)
    ys: dict[bytes, list[bytes]] = {}
    before = _runs()
    for s in (0.0, -0.0, 0.0, -0.0, 0.0, -0.0):
        with using(REPLAY):
            _scaled(x, s, y)
        ys.setdefault(np.float64(s).tobytes(), []).append(w.copy_from(y).tobytes())
    assert _runs() - before == 2  # each sign recorded on its 2nd call, replayed on its 3rd
    for outs in ys.values():
        assert len(set(outs)) == 1
    assert len(set(o[0] for o in ys.values())) == 2
    assert np.signbit(np.frombuffer(ys[np.float64(-0.0).tobytes()][0], np.float32)).all()


@pl.kernel
def _valid_rows(
    x: pl.Tensor[[64, 64], pl.FP32], n: pl.Scalar[pl.INDEX], y: pl.Out[pl.Tensor[[64, 64], pl.FP32]]
):
    for lane in pl.spmd(4):
        t = pl.load(x, [lane * 16, 0], [16, 64], valid_shape=[n, 64], target_memory=pl.Mem.Vec)
        pl.store(pl.tile.fillpad(pl.exp(t), pad_value=pl.PadValue.zero), [lane * 16, 0], y)


def test_a_valid_shape_from_a_scalar_is_part_of_the_signature():
    # the same tensors with 16, then 12 valid rows: a replay per row count, each call its own bytes
    w = runtime.Worker(0)
    x = w.alloc_tensor((64, 64), np.float32)
    y = w.alloc_tensor((64, 64), np.float32)
    before = _runs()
    for i, n in enumerate((16, 12) * 4):
        a = RNG.standard_normal((64, 64)).astype(np.float32)
        got = []
        for opts in (STEP, REPLAY):
            w.write_tensor(x, a)
            w.write_tensor(y, np.full((64, 64), 7, np.float32))
            with using(opts):
                _valid_rows(x, n, y)
            got.append(w.copy_from(y).tobytes())
        assert got[0] == got[1], f"call {i} (n = {n})"
        want = np.zeros((4, 16, 64), np.float32)
        want[:, :n] = np.exp(a.reshape(4, 16, 64)[:, :n])
        np.testing.assert_allclose(np.frombuffer(got[1], np.float32).reshape(4, 16, 64), want, rtol=1e-6)
    assert _runs() - before == 4  # each row count: recorded on its 2nd call, replayed on the 3rd and 4th


@pl.kernel
def _quantise(x: pl.Tensor[[64, 32], pl.FP32], y: pl.Out[pl.Tensor[[64, 32], pl.INT16]]):
    for lane in pl.spmd(4):
        t = pl.load(x, [lane * 16, 0], [16, 32], target_memory=pl.Mem.Vec)
        pl.store(pl.cast(t, pl.INT16), [lane * 16, 0], y)


def test_a_value_dependent_check_is_replayed_too():
    # a float -> int16 tile.cast is batched only when every value is in range: in range on the calls
    # that record and replay, out of range on the last - the replay's check falls back to the
    # lanes one by one, which give the reference bytes
    w = runtime.Worker(0)
    x = w.alloc_tensor((64, 32), np.float32)
    y = w.alloc_tensor((64, 32), np.int16)

    def fresh(i):
        a = RNG.uniform(-100, 100, (64, 32)).astype(np.float32)
        if i == 3:
            a[5, 7] = 1e6
        return [a]

    aborts = lane_replay.stats()[2]
    assert _compare(_quantise, w, [x], [y], calls=4, fresh=fresh) >= 1
    assert lane_replay.stats()[2] == aborts + 1  # the last call's replay stopped at the check


@pl.kernel
def _many_lanes(x: pl.Tensor[[1024, 64], pl.FP16], y: pl.Out[pl.Tensor[[1024, 64], pl.FP16]]):
    for lane in pl.spmd(64):  # lane groups of 16, then larger: one recording covers every group
        t = pl.load(x, [lane * 16, 0], [16, 64], target_memory=pl.Mem.Vec)
        pl.store(pl.row_expand_sub(pl.exp(t), pl.row_max(t)), [lane * 16, 0], y)


def test_lane_groups_replay_in_order():
    w = runtime.Worker(0)
    x = w.alloc_tensor((1024, 64), np.float16)
    y = w.alloc_tensor((1024, 64), np.float16)
    assert _compare(_many_lanes, w, [x], [y], calls=4) >= 2


@pl.kernel
def _ragged(x: pl.Tensor[[100, 64], pl.FP32], y: pl.Out[pl.Tensor[[100, 64], pl.FP32]]):
    for lane in pl.spmd(7):  # the last lane's tile is ragged: its group splits (LaneDependent)
        n = pl.min(100 - lane * 16, 16)
        t = pl.load(x, [lane * 16, 0], [16, 64], valid_shape=[n, 64], target_memory=pl.Mem.Vec)
        pl.store(pl.exp(t), [lane * 16, 0], y)


def test_a_group_split_in_halves_replays_the_retried_groups_only():
    w = runtime.Worker(0)
    x = w.alloc_tensor((100, 64), np.float32)
    y = w.alloc_tensor((100, 64), np.float32)
    assert _compare(_ragged, w, [x], [y], calls=4) >= 2


@pl.kernel
def _lane_matmuls(
    x: pl.Tensor[[40 * 16, 64], pl.FP16],
    w: pl.Tensor[[64, 32], pl.FP16],
    y: pl.Out[pl.Tensor[[40 * 16, 32], pl.FP32]],
):
    for lane in pl.spmd(40):  # two lane groups of different sizes, each with its stacked mad
        a = pl.load(x, [lane * 16, 0], [16, 64], target_memory=pl.Mem.Mat)
        b = pl.load(w, [0, 0], [64, 32], target_memory=pl.Mem.Mat)
        pl.store(pl.matmul(a, b), [lane * 16, 0], y)


def test_mads_of_lane_groups_of_different_sizes_replay_each_group():
    w = runtime.Worker(0)
    x = w.alloc_tensor((640, 64), np.float16)
    b = w.alloc_tensor((64, 32), np.float16)
    y = w.alloc_tensor((640, 32), np.float32)
    assert _compare(_lane_matmuls, w, [x, b], [y], calls=4) >= 2


@pl.kernel
def _shared_and_own(x: pl.Tensor[[64, 64], pl.FP32], y: pl.Out[pl.Tensor[[64, 64], pl.FP32]]):
    for lane in pl.spmd(4):
        first = pl.load(x, [0, 0], [16, 64], target_memory=pl.Mem.Vec)  # one image for every lane
        own = pl.load(x, [lane * 16, 0], [16, 64], target_memory=pl.Mem.Vec)
        pl.store(pl.add(pl.exp(first), own), [lane * 16, 0], y)  # operands with other lane maps


def test_operands_with_other_lane_maps_are_gathered_on_every_replay():
    w = runtime.Worker(0)
    x = w.alloc_tensor((64, 64), np.float32)
    y = w.alloc_tensor((64, 64), np.float32)
    assert _compare(_shared_and_own, w, [x], [y], calls=4) >= 2


@pl.kernel
def _k_steps(
    x: pl.Tensor[[64, 256], pl.FP16],
    w: pl.Tensor[[256, 32], pl.FP16],
    y: pl.Out[pl.Tensor[[64, 32], pl.FP32]],
):
    for lane in pl.spmd(4):  # a K loop inside the lanes: its trips replay with the body
        a = pl.load(x, [lane * 16, 0], [16, 64], target_memory=pl.Mem.Mat)
        acc = pl.matmul(a, pl.load(w, [0, 0], [64, 32], target_memory=pl.Mem.Mat))
        for k in pl.range(64, 256, 64):
            a = pl.load(x, [lane * 16, k], [16, 64], target_memory=pl.Mem.Mat)
            acc = pl.matmul_acc(acc, a, pl.load(w, [k, 0], [64, 32], target_memory=pl.Mem.Mat))
        pl.store(acc, [lane * 16, 0], y)


def test_a_loop_inside_the_lanes_replays_its_trips():
    w = runtime.Worker(0)
    x = w.alloc_tensor((64, 256), np.float16)
    b = w.alloc_tensor((256, 32), np.float16)
    y = w.alloc_tensor((64, 32), np.float32)
    assert _compare(_k_steps, w, [x, b], [y], calls=4) >= 2
    a, bb = w.copy_from(x).astype(np.float64), w.copy_from(b).astype(np.float64)
    np.testing.assert_allclose(w.copy_from(y), a @ bb, rtol=1e-3, atol=1e-3)


def test_a_recording_that_cannot_be_kept_is_not_made_again(monkeypatch):
    # (its buffers are fresh memory: recording every call would cost more than stepping)
    monkeypatch.setattr(lane_replay, "MAX_BYTES", 0)
    recordings = []
    real = lane_replay.keep

    def spy(*args):
        recordings.append(args[2].rec is not None)
        return real(*args)

    monkeypatch.setattr(lane_replay, "keep", spy)
    w = runtime.Worker(0)
    x = w.alloc_tensor((64, 64), np.float32, init=RNG.standard_normal((64, 64)).astype(np.float32))
    y = w.alloc_tensor((64, 64), np.float32)
    for _ in range(5):
        _scaled(x, 3.0, y)
    assert recordings == [True]


def test_a_freed_tensor_drops_its_replays():
    w = runtime.Worker(0)
    x = w.alloc_tensor((64, 64), np.float32, init=RNG.standard_normal((64, 64)).astype(np.float32))
    y = w.alloc_tensor((64, 64), np.float32)
    for _ in range(3):
        _scaled(x, 1.5, y)
    kept, runs, _, _ = lane_replay.stats()
    assert runs >= 1
    w.free_tensor(y)  # GM's free hook drops every replay that holds views of y's bytes
    assert lane_replay.stats()[0] == kept - 1
    with pytest.raises(runtime.DispatchError, match="use after free"):
        _scaled(x, 1.5, y)  # the refusal of a use after free, as without replays


def test_a_collected_worker_takes_its_replays_along():
    # a replay holds its GM weakly: the views it keeps would hold the worker's bytes otherwise
    def calls() -> int:
        w = runtime.Worker(0)
        x = w.alloc_tensor((64, 64), np.float32, init=np.ones((64, 64), np.float32))
        y = w.alloc_tensor((64, 64), np.float32)
        for _ in range(3):
            _scaled(x, 2.5, y)
        return lane_replay.stats()[0]

    kept = calls()
    gc.collect()
    assert lane_replay.stats()[0] == kept - 1


def test_two_threads_share_a_replay_safely():
    # one replay runs on one thread at a time; the other thread steps meanwhile
    w = runtime.Worker(0)
    x = w.alloc_tensor(
        (sm.ROWS, sm.PADDED), np.float32, init=RNG.standard_normal((sm.ROWS, sm.PADDED)).astype(np.float32)
    )
    ys = [w.alloc_tensor((sm.ROWS, sm.PADDED), np.float32) for _ in range(2)]
    with using(STEP):
        sm.row_softmax(x, ys[0])
    want = w.copy_from(ys[0]).tobytes()
    for _ in range(2):
        sm.row_softmax(x, ys[0])  # recorded for ys[0]
    errors: list[BaseException] = []

    def call(y):
        try:
            for _ in range(20):
                sm.row_softmax(x, y)
                assert w.copy_from(y).tobytes() == want
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=call, args=(ys[0],)) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_host_arrays_are_not_recorded():
    # uploads land at new GM addresses every call: those signatures never come again
    x = RNG.standard_normal((64, 64)).astype(np.float32)
    kept = lane_replay.stats()[0]
    for _ in range(4):
        _scaled(x, 2.0)
    assert lane_replay.stats()[0] == kept


def test_a_call_recorded_inside_another_is_not_kept():
    # a recorded call that makes another recorded call would be repeated as the outer call only
    s = LaneState.__new__(LaneState)
    s.rec, s.recording, s.nested = [], True, False
    a = np.zeros(4)
    s.do(lambda: s.do(a.fill, 1.0))
    assert s.nested and len(s.rec) == 1
