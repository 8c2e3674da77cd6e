"""Lane races of the scalar GM accesses (issue 24 item 2): `pl.read(t, indices)` / `pl.write(t, indices,
value)` inside a `pl.spmd` are GM accesses like tile loads and stores - a one-element window at their
indices. Indices the compiler proves disjoint across lanes (affine in the lane) are not logged (a plan
fact); the others are logged (kind read / write) into the launch's LaneWriteLog with the tile accesses,
and a race raises runtime.races.LaneRaceError naming the lanes, the tensor, both windows and the kernel
lines, on every execution path, with every output and every written input unchanged."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import runtime
from nzjit import pl
from nzjit.backend import lane_log
from nzjit.backend.options import Options, using
from nzjit.backend.plan import plan_of
from runtime.races import LaneRaceError

PATHS = [Options(), Options(batch=False), Options(fast=False), Options(lane_group=1)]
IDS = ["batched", "per-lane", "reference", "lane-group-1"]
_SOURCE = Path(__file__).read_text().splitlines()


def _at(marker: str) -> str:
    """`file:line:col` (as the log names it) of the access on the kernel line ending in `# <marker>`:
    its first `pl.` call, or the call named after a `|` (`element-read|pl.read`)."""
    tag, _, call = marker.partition("|")
    (i,) = [i for i, text in enumerate(_SOURCE) if text.endswith(f"# {tag}")]
    return f"{__file__}:{i + 1}:{_SOURCE[i].index(call or 'pl.') + 1}"


def _message(first: str, second: str, share: str) -> str:
    a, b = first.split(" @"), second.split(" @")
    return (
        f"{_at(a[1])}: [lane-race] lane race in pl.spmd(4): {a[0]} ({_at(a[1])}) and {b[0]} ({_at(b[1])}); "
        f"they share {share}. The lanes run concurrently, so the result would depend on their order; the call "
        "is refused and its outputs are unchanged.\nhelp: give each lane its own window (offsets from the lane "
        "index), or use an atomic store to accumulate"
    )


def _marks(k, *args):
    return [
        (e.primitive.name, e.params.get("lane_log"))
        for e in k.lower(*args).final.walk()
        if "lane_log" in e.params
    ]


@pl.kernel
def clamped_writes(out: pl.Out[pl.Tensor[[2, 4], pl.INT32]]):
    for lane in pl.spmd(4):
        pl.write(out, [pl.min(lane, 1), 0], pl.cast(lane, pl.INT32))  # clamped-write


@pl.kernel
def next_lanes_element(buf: pl.InOut[pl.Tensor[[4, 4], pl.INT32]], out: pl.Out[pl.Tensor[[4, 4], pl.INT32]]):
    for lane in pl.spmd(4):
        v = pl.read(buf, [(lane + 1) % 4, 0])  # next-read
        pl.write(buf, [lane, 0], v + 1)  # own-write
        pl.write(out, [lane, 0], v)


@pl.kernel
def into_the_next_block(
    x: pl.Tensor[[16, 256], pl.FP32], out: pl.Out[pl.Tensor[[16, 256], pl.FP32]], shift: pl.Scalar[pl.INDEX]
):
    for lane in pl.spmd(4):
        pl.store(pl.load(x, [0, lane * 64], [16, 64]), [0, lane * 64], out)  # block-store
        pl.write(out, [1, (lane * 64 + shift) % 256], pl.read(x, [0, lane]))  # element-write


@pl.kernel
def reading_the_next_block(
    x: pl.Tensor[[16, 256], pl.FP32],
    out: pl.Out[pl.Tensor[[16, 256], pl.FP32]],
    probe: pl.Out[pl.Tensor[[4], pl.FP32]],
):
    for lane in pl.spmd(4):
        pl.store(pl.load(x, [0, lane * 64], [16, 64]), [0, lane * 64], out)  # tile-store
        pl.write(probe, [lane], pl.read(out, [2, (lane * 64 + 64) % 256]))  # element-read


@pl.kernel
def per_lane(x: pl.Tensor[[4, 8], pl.INT32], out: pl.Out[pl.Tensor[[4, 8], pl.INT32]]):
    for lane in pl.spmd(4):
        pl.write(out, [lane, 1], pl.read(x, [lane, 2]) + 1)
        pl.write(out, [lane, 0], pl.read(out, [lane, 1]) * 2)  # its own element, through the first write


@pl.kernel
def strided(x: pl.Tensor[[8], pl.INT32], out: pl.Out[pl.Tensor[[8], pl.INT32]], step: pl.Scalar[pl.INDEX]):
    for lane in pl.spmd(4):
        pl.write(out, [lane * step], pl.read(x, [lane]))  # strided-write
        pl.write(out, [lane * step], pl.read(out, [lane * step]) + 1)


def _race(info, lanes, tensor, windows):
    e = info.value
    assert isinstance(e, runtime.DeviceError) and e.rule == "lane-race"
    assert (e.lanes, e.tensor, e.windows) == (lanes, repr(tensor), windows)


@pytest.mark.parametrize("options", PATHS, ids=IDS)
def test_two_lanes_writing_one_element_through_a_clamped_index_race(options):
    """Lanes 1, 2 and 3 all write out[1, 0] (pl.min(lane, 1)): the least pair, lanes 1 and 2, is named;
    the index varies with the lane, so the compile-time check cannot refuse it."""
    assert _marks(clamped_writes) == [("for", (0,)), ("tensor.write", "out")]
    dev = runtime.Worker(0)
    out = dev.alloc_tensor((2, 4), np.int32, init=np.full((2, 4), 7, np.int32))
    with using(options):
        with pytest.raises(LaneRaceError) as info:
            clamped_writes(out)
        assert str(info.value) == _message(
            "lane 1 writes out[1:2, 0:1] @clamped-write",
            "lane 2 writes out[1:2, 0:1] @clamped-write",
            "out[1:2, 0:1]",
        )
        _race(info, (1, 2), "out", (((1, 0), (1, 1)), ((1, 0), (1, 1))))
        assert (dev.copy_from(out) == 7).all()
        host = np.full((2, 4), 5, np.int32)
        with pytest.raises(LaneRaceError):
            clamped_writes(host)  # a host output: nothing downloaded
        assert (host == 5).all()


@pytest.mark.parametrize("options", PATHS, ids=IDS)
def test_a_lane_reading_the_element_another_lane_writes_races(options):
    """Lane l reads buf[l + 1, 0], which lane l + 1 writes (lane 3 reads lane 0's, written before it ran):
    the least pair is lane 0's read against lane 1's write; buf (InOut) and out are unchanged."""
    buf = np.arange(16, dtype=np.int32).reshape(4, 4)
    dev = runtime.Worker(0)
    d_buf = dev.alloc_tensor(buf.shape, buf.dtype, init=buf)
    d_out = dev.alloc_tensor(buf.shape, buf.dtype, init=np.zeros_like(buf))
    with using(options), pytest.raises(LaneRaceError) as info:
        next_lanes_element(d_buf, d_out)
    assert str(info.value) == _message(
        "lane 0 reads buf[1:2, 0:1] @next-read", "lane 1 writes buf[1:2, 0:1] @own-write", "buf[1:2, 0:1]"
    )
    _race(info, (0, 1), "buf", (((1, 0), (1, 1)), ((1, 0), (1, 1))))
    assert (dev.copy_from(d_buf) == buf).all() and (dev.copy_from(d_out) == 0).all()


@pytest.mark.parametrize("options", PATHS, ids=IDS)
def test_a_pl_write_into_another_lanes_tile_store_races(options):
    """Lane l writes out[1, l * 64 + shift]: with shift 64 that is inside lane l + 1's stored block (lane
    3's wraps to lane 0's); with shift 0 inside its own block (program order: no race, exact result)."""
    assert _marks(into_the_next_block) == [
        ("for", (1,)),
        ("tile.load", False),
        ("tile.store", "out"),
        ("tensor.read", False),
        ("tensor.write", "out"),
    ]
    x = np.arange(16 * 256, dtype=np.float32).reshape(16, 256)
    want = x.copy()
    want[1, 0:256:64] = x[0, :4]
    with using(options):
        np.testing.assert_array_equal(into_the_next_block(x, np.zeros_like(x), 0), want)
        out = np.full_like(x, 3)
        with pytest.raises(LaneRaceError) as info:
            into_the_next_block(x, out, 64)
    assert str(info.value) == _message(
        "lane 0 writes out[0:16, 0:64] @block-store",
        "lane 3 writes out[1:2, 0:1] @element-write",
        "out[1:2, 0:1]",
    )
    _race(info, (0, 3), "out", (((0, 0), (16, 64)), ((1, 0), (1, 1))))
    assert (out == 3).all()


@pytest.mark.parametrize("options", PATHS, ids=IDS)
def test_a_pl_read_of_another_lanes_tile_store_races(options):
    x = np.arange(16 * 256, dtype=np.float32).reshape(16, 256)
    with using(options), pytest.raises(LaneRaceError) as info:
        reading_the_next_block(x)
    assert str(info.value) == _message(
        "lane 0 reads out[2:3, 64:65] @element-read|pl.read",
        "lane 1 writes out[0:16, 64:128] @tile-store",
        "out[2:3, 64:65]",
    )
    _race(info, (0, 1), "out", (((2, 64), (1, 1)), ((0, 64), (16, 64))))


def test_affine_indices_are_proven_disjoint_and_their_plan_logs_nothing(monkeypatch):
    """`[lane, c]` for every access: |1| >= 1 separates any two lanes on axis 0 (the second pl.write's
    tensor is the first one's result: the same parameter `out`). Nothing is marked, no step wraps, no
    launch opens a log, and the result is exact on every path."""
    assert _marks(per_lane) == [
        ("for", False),
        ("tensor.read", False),
        ("tensor.write", False),
        ("tensor.read", False),
        ("tensor.write", False),
    ]
    body = next(e.params["body"] for e in per_lane.lower().final.walk() if e.params.get("kind") == "spmd")
    monkeypatch.setattr(lane_log, "LaneWriteLog", None)  # a log opened would fail the call
    x = np.arange(32, dtype=np.int32).reshape(4, 8)
    for options in PATHS:
        assert plan_of(body, 0, options, True).logged == ()
        with using(options):
            out = per_lane(x, np.zeros((4, 8), np.int32))
        want = np.zeros((4, 8), np.int32)
        want[:, 1] = x[:, 2] + 1
        want[:, 0] = want[:, 1] * 2
        np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("options", PATHS, ids=IDS)
def test_indices_from_a_scalar_are_logged_and_race_only_when_they_meet(options):
    """`lane * step` is not provable: every access is logged. A lane reading and rewriting its own
    element is program order (step 2: exact); step 0 puts every lane on out[0]."""
    marks = _marks(strided)
    assert marks[1:] == [
        ("tensor.read", False),
        ("tensor.write", "out"),
        ("tensor.read", "out"),
        ("tensor.write", "out"),
    ]
    spmd = next(e for e in strided.lower().final.walk() if e.params.get("kind") == "spmd")
    nb, nc, _ = spmd.params["arity"]
    assert [spmd.inputs[nb + j].hint for j in spmd.params["lane_log"]] == ["out"]  # snapshotted on a launch
    body = spmd.params["body"]
    assert [
        s.eqn.primitive.name
        for s in (lambda p: [p.steps[i] for i in p.logged])(plan_of(body, 0, options, True))
    ] == ["tensor.write", "tensor.read", "tensor.write"]
    x = np.arange(10, 18, dtype=np.int32)
    with using(options):
        np.testing.assert_array_equal(strided(x, np.zeros(8, np.int32), 2)[0:8:2], x[:4] + 1)
        with pytest.raises(LaneRaceError) as info:
            strided(x, np.zeros(8, np.int32), 0)
    assert str(info.value) == _message(
        "lane 0 writes out[0:1] @strided-write", "lane 1 writes out[0:1] @strided-write", "out[0:1]"
    )
    _race(info, (0, 1), "out", (((0,), (1,)), ((0,), (1,))))


@pl.kernel
def scatter(
    idx: pl.Tensor[[4], pl.INT32], x: pl.Tensor[[4], pl.FP32], out: pl.InOut[pl.Tensor[[8], pl.FP32]]
):
    for lane in pl.spmd(4):
        pl.write(out, [pl.cast(pl.read(idx, [lane]), pl.INDEX)], pl.read(x, [lane]))  # scatter-write


@pytest.mark.parametrize("options", PATHS, ids=IDS)
def test_an_index_read_from_the_call_data_races_only_on_a_repeated_index(options):
    """The index is data (unknown when compiled): logged. Distinct indices scatter exactly; a repeated
    one (lanes 1 and 3 both write out[5]) is refused and `out` (InOut) keeps its bytes."""
    assert _marks(scatter)[1:] == [("tensor.read", False), ("tensor.read", False), ("tensor.write", "out")]
    x = np.array([1.5, 2.5, 3.5, 4.5], np.float32)
    out = np.zeros(8, np.float32)
    with using(options):
        scatter(np.array([6, 5, 0, 2], np.int32), x, out)
        np.testing.assert_array_equal(out, [3.5, 0, 4.5, 0, 0, 2.5, 1.5, 0])
        with pytest.raises(LaneRaceError) as info:
            scatter(np.array([6, 5, 0, 5], np.int32), x, out)
    assert str(info.value) == _message(
        "lane 1 writes out[5:6] @scatter-write", "lane 3 writes out[5:6] @scatter-write", "out[5:6]"
    )
    _race(info, (1, 3), "out", (((5,), (1,)), ((5,), (1,))))
    np.testing.assert_array_equal(out, [3.5, 0, 4.5, 0, 0, 2.5, 1.5, 0])
