"""Lane races of one SPMD launch, detected exactly from the byte spans the lanes touch.

The lanes of one ``pl.spmd`` run concurrently on the device. Two lanes writing overlapping bytes
of GM (the last one to land wins), or one lane reading bytes that another lane of the same
launch writes (the lane order decides what it reads), is a race: the result depends on timing.
The simulator runs lanes in some order, so it would pick one outcome silently; instead the
executor feeds a :class:`LaneWriteLog` with each lane's GM byte spans and calls
:meth:`LaneWriteLog.check` before any store of the launch reaches GM, which raises
:class:`LaneRaceError` naming both lanes, the tensor and the two windows.

Exempt: a lane reading or rewriting its own bytes (program order within a lane), two lanes
reading the same bytes, and atomic stores against each other (``AtomicType.Add``: the device
combines them). Everything is vectorised: spans are merged per lane (a lane's own spans never
race), then one sort over all lanes finds any overlap between different lanes.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from .errors import DeviceError

__all__ = ["LaneRaceError", "LaneWriteLog"]

_LANE_SHIFT = 40  # GM addresses stay below 2**40: lane * 2**40 + address orders spans by lane


class LaneRaceError(DeviceError):
    """Two lanes of one SPMD launch write overlapping GM bytes, or one reads what another writes."""

    def __init__(self, message: str, lanes: tuple[int, int] = (-1, -1), tensor: str = "",
                 windows: tuple[tuple[int, int], tuple[int, int]] = ((0, 0), (0, 0))) -> None:
        super().__init__(message)
        self.lanes, self.tensor, self.windows = lanes, tensor, windows


class _Spans:
    def __init__(self) -> None:
        self.lanes: list[np.ndarray] = []
        self.lo: list[np.ndarray] = []
        self.hi: list[np.ndarray] = []

    def add(self, lanes: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> None:
        keep = hi > lo
        self.lanes.append(lanes[keep])
        self.lo.append(lo[keep])
        self.hi.append(hi[keep])

    def merged(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(lane, lo, hi) of each lane's union of spans, sorted by lo; a lane's pieces are disjoint."""
        if not self.lo:
            e = np.zeros(0, np.int64)
            return e, e, e
        lanes, lo, hi = (np.concatenate(x).astype(np.int64) for x in (self.lanes, self.lo, self.hi))
        if not len(lo):
            return lanes, lo, hi
        key = (lanes << _LANE_SHIFT) + lo
        order = np.argsort(key, kind="stable")
        lanes, klo, khi = lanes[order], key[order], (lanes[order] << _LANE_SHIFT) + hi[order]
        reach = np.maximum.accumulate(khi)
        starts = np.ones(len(klo), bool)
        starts[1:] = klo[1:] > reach[:-1]  # touching spans of one lane merge too (>=: no gap)
        idx = np.flatnonzero(starts)
        ends = np.append(idx[1:], len(klo)) - 1
        mlanes = lanes[idx]
        mlo = klo[idx] - (mlanes << _LANE_SHIFT)
        mhi = reach[ends] - (mlanes << _LANE_SHIFT)
        o = np.argsort(mlo, kind="stable")
        return mlanes[o], mlo[o], mhi[o]


class LaneWriteLog:
    """The GM byte spans each lane of one SPMD launch reads and writes; `check` finds races.

    Spans are absolute GM byte addresses ``[lo, hi)``; ``names`` maps a tensor's base address to
    the name errors use (the kernel parameter), else the allocation's address is shown."""

    def __init__(self, names: Mapping[int, str] | None = None, launch: str = "pl.spmd") -> None:
        self.names = dict(names or {})
        self.launch = launch
        self._writes, self._atomics, self._reads = _Spans(), _Spans(), _Spans()

    # ---------------------------------------------------------------- feeding
    def write(self, lane: int, lo: int, hi: int, atomic: bool = False) -> None:
        """Lane `lane` writes GM bytes ``[lo, hi)`` (``atomic``: an atomic-add store)."""
        self.write_lanes(np.array([lane]), np.array([lo]), 0, hi - lo, atomic)

    def read(self, lane: int, lo: int, hi: int) -> None:
        """Lane `lane` reads GM bytes ``[lo, hi)``."""
        self.read_lanes(np.array([lane]), np.array([lo]), 0, hi - lo)

    def write_lanes(self, lanes: np.ndarray, addrs: np.ndarray, lo: int, hi: int, atomic: bool = False) -> None:
        """Lane ``lanes[i]`` writes ``[addrs[i] + lo, addrs[i] + hi)``: one store step of many lanes."""
        a = np.asarray(addrs, np.int64)
        (self._atomics if atomic else self._writes).add(np.asarray(lanes, np.int64), a + lo, a + hi)

    def read_lanes(self, lanes: np.ndarray, addrs: np.ndarray, lo: int, hi: int) -> None:
        """Lane ``lanes[i]`` reads ``[addrs[i] + lo, addrs[i] + hi)``: one load step of many lanes."""
        a = np.asarray(addrs, np.int64)
        self._reads.add(np.asarray(lanes, np.int64), a + lo, a + hi)

    # ---------------------------------------------------------------- checking
    def check(self) -> None:
        """Raise LaneRaceError for the first race found (write-write, atomic-plain, read-write)."""
        w, a, r = self._writes.merged(), self._atomics.merged(), self._reads.merged()
        for (x, xw), (y, yw) in (((w, "writes"), (w, "writes")), ((a, "atomically writes"), (w, "writes")),
                                 ((r, "reads"), (w, "writes")), ((r, "reads"), (a, "atomically writes"))):
            hit = _first_cross(x, y)
            if hit is not None:
                i, k = hit
                self._raise(int(x[0][i]), (int(x[1][i]), int(x[2][i])), xw, int(y[0][k]),
                            (int(y[1][k]), int(y[2][k])), yw)

    def _name(self, lo: int) -> tuple[str, int]:
        bases = [b for b in self.names if b <= lo]
        if not bases:
            return f"the GM tensor at {lo:#x}", lo
        b = max(bases)
        return repr(self.names[b]), b

    def _raise(self, l1: int, w1: tuple[int, int], what1: str, l2: int, w2: tuple[int, int], what2: str) -> None:
        name, base = self._name(max(w1[0], w2[0]))
        r1, r2 = (w1[0] - base, w1[1] - base), (w2[0] - base, w2[1] - base)
        lo, hi = max(w1[0], w2[0]) - base, min(w1[1], w2[1]) - base
        raise LaneRaceError(
            f"lane race in {self.launch}: lane {l1} {what1} bytes [{r1[0]}, {r1[1]}) of {name} and lane {l2} "
            f"{what2} bytes [{r2[0]}, {r2[1]}) (they share [{lo}, {hi})); lanes run concurrently, so the result "
            "would depend on their order. help: give each lane its own window (offsets from the lane index), "
            "or use an atomic store to accumulate", (l1, l2), name, (r1, r2))


def _overlaps(lo: np.ndarray, hi: np.ndarray, blo_sorted: np.ndarray, bhi_sorted: np.ndarray) -> np.ndarray:
    """For each span [lo, hi): how many spans of b meet it (b's starts and ends sorted apart)."""
    return np.searchsorted(blo_sorted, hi, side="left") - np.searchsorted(bhi_sorted, lo, side="right")


def _first_cross(a: tuple[np.ndarray, ...], b: tuple[np.ndarray, ...]) -> tuple[int, int] | None:
    """(i, k): span i of `a` meets span k of `b` of another lane; None if no such pair. Exact and
    vectorised: the spans of b meeting each span of a, minus those of its own lane (lane-keyed)."""
    al, alo, ahi = a
    bl, blo, bhi = b
    if not len(alo) or not len(blo):
        return None
    total = _overlaps(alo, ahi, np.sort(blo), np.sort(bhi))
    ka, kb = al << _LANE_SHIFT, bl << _LANE_SHIFT
    same = _overlaps(ka + alo, ka + ahi, np.sort(kb + blo), np.sort(kb + bhi))
    hit = np.flatnonzero(total > same)
    if not hit.size:
        return None
    i = int(hit[0])
    k = int(np.flatnonzero((blo < ahi[i]) & (bhi > alo[i]) & (bl != al[i]))[0])
    return i, k
