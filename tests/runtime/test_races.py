"""runtime.races.LaneWriteLog (issue 24 item 2, the run-time half): lanes of one SPMD launch
that write overlapping GM bytes, or read bytes another lane writes, are a race - LaneRaceError (a
DeviceError) naming both lanes, the tensor and the windows; own-lane overlaps, shared reads and
atomic-vs-atomic stores are not. Exact: checked against all pairs on random spans."""

from __future__ import annotations

import numpy as np
import pytest

from runtime import DeviceError
from runtime.races import LaneRaceError, LaneWriteLog

BASE = 0x10000


def test_two_lanes_storing_the_same_window_race_and_the_message_names_everything():
    log = LaneWriteLog({BASE: "out"})
    for lane in range(4):  # out[:, 0:64] in every lane: 16 rows of 256 bytes, row pitch 1024
        log.write_lanes(np.full(16, lane), BASE + 1024 * np.arange(16), 0, 256)
    with pytest.raises(LaneRaceError) as info:
        log.check()
    e = info.value
    assert isinstance(e, DeviceError) and e.tensor == "'out'" and set(e.lanes) == {0, 1}
    assert (
        "lane race in pl.spmd: lane 0 writes bytes [0, 256) of 'out' and lane 1 writes bytes [0, 256)"
        in str(e)
    )
    assert "help: give each lane its own window" in str(e)


def test_disjoint_windows_own_lane_rereads_and_shared_reads_do_not_race():
    log = LaneWriteLog({BASE: "out"})
    lanes = np.arange(8)
    log.write_lanes(lanes, BASE + 256 * lanes, 0, 256)  # each lane its own 256 bytes, touching
    log.read_lanes(lanes, BASE + 256 * lanes, 0, 256)  # each reads back what it wrote
    log.read_lanes(lanes, np.full(8, BASE + 8192), 0, 4096)  # all read one shared input
    log.write_lanes(lanes, np.full(8, BASE + 20000), 0, 64, atomic=True)  # atomics combine
    log.check()


def test_a_lane_reading_what_another_writes_races():
    log = LaneWriteLog({BASE: "x", BASE + 4096: "out"})
    log.write(3, BASE + 4096 + 100, BASE + 4096 + 200)
    log.read(5, BASE + 4096 + 150, BASE + 4096 + 160)
    with pytest.raises(
        LaneRaceError,
        match=r"lane 5 reads bytes \[150, 160\) of 'out' and lane 3 writes bytes "
        r"\[100, 200\) \(they share \[150, 160\)\)",
    ):
        log.check()


def test_an_atomic_store_against_a_plain_store_races():
    log = LaneWriteLog()
    log.write(0, BASE, BASE + 64, atomic=True)
    log.write(1, BASE + 32, BASE + 96)
    with pytest.raises(LaneRaceError, match="lane 0 atomically writes .* lane 1 writes"):
        log.check()


def _brute(spans):
    """Any race among (kind, lane, lo, hi) spans, by all pairs."""
    for i, (k1, l1, a1, b1) in enumerate(spans):
        for k2, l2, a2, b2 in spans[i + 1 :]:
            if l1 == l2 or a1 == b1 or a2 == b2 or not (a1 < b2 and a2 < b1):  # empty spans touch nothing
                continue
            kinds = {k1, k2}
            if kinds in ({"w"}, {"w", "a"}, {"r", "w"}, {"r", "a"}):
                return True
    return False


def test_random_spans_agree_with_all_pairs():
    rng = np.random.default_rng(0)
    seen = set()
    for _ in range(400):
        n = int(rng.integers(1, 12))
        spans = []
        for _ in range(n):
            lo = int(rng.integers(0, 200))
            spans.append(
                (str(rng.choice(["w", "r", "a"])), int(rng.integers(0, 4)), lo, lo + int(rng.integers(0, 40)))
            )
        log = LaneWriteLog()
        for kind, lane, lo, hi in spans:
            if kind == "r":
                log.read(lane, BASE + lo, BASE + hi)
            else:
                log.write(lane, BASE + lo, BASE + hi, atomic=kind == "a")
        try:
            log.check()
            got = False
        except LaneRaceError:
            got = True
        assert got == _brute(spans), spans
        seen.add(got)
    assert seen == {True, False}


def test_the_error_crosses_processes_whole():
    """A rank in another process (RayCluster) pickles it: every field survives."""
    import pickle

    e = LaneRaceError(
        "msg", (1, 2), "'out'", (((0, 32), (16, 64)), ((0, 0), (16, 64))), ("k.py:3:5", "k.py:3:5")
    )
    back = pickle.loads(pickle.dumps(e))
    assert (str(back), back.lanes, back.tensor, back.windows, back.lines) == (
        "msg",
        (1, 2),
        "'out'",
        (((0, 32), (16, 64)), ((0, 0), (16, 64))),
        ("k.py:3:5", "k.py:3:5"),
    )
