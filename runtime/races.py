"""Lane races of one SPMD launch, detected exactly from the byte spans the lanes touch.

The lanes of one ``pl.spmd`` run concurrently on the device. Two lanes writing overlapping bytes
of GM (the last one to land wins), or one lane reading bytes that another lane of the same
launch writes (the lane order decides what it reads), is a race: the result depends on timing.
The simulator runs lanes in some order, so it would pick one outcome silently; instead the
executor (nzjit/backend/lane_log.py) feeds a :class:`LaneWriteLog` with each logged access of
each lane - its :class:`Window` (tensor, kernel line, element extents, byte runs) and where it
lies - and calls :meth:`LaneWriteLog.check` at the end of the launch, which raises
:class:`LaneRaceError` naming both lanes, the tensor, the two windows and their kernel lines
(the call's outputs are then restored: nothing is written back).

Exempt: a lane reading or rewriting its own bytes (program order within a lane), two lanes
reading the same bytes, and atomic stores against each other (``AtomicType.Add``: the device
combines them). Everything is vectorised: a window's bytes are its runs (no loop per row), and
for every run the runs of other lanes meeting it are counted with two sorted searches (all runs
minus the lane's own, lane-keyed). The race reported is the least pair by (lane, address,
order), so the order in which the lanes ran does not change the message.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from .errors import DeviceError

__all__ = ["LaneRaceError", "LaneWriteLog", "Window"]

_LANE_SHIFT = 40  # GM addresses stay below 2**40: lane * 2**40 + address orders spans by lane


class LaneRaceError(DeviceError):
    """Two lanes of one SPMD launch write overlapping GM bytes, or one reads what another writes."""

    rule = "lane-race"  # the rule id of the compile-time refusal of the same race (when provable)

    def __init__(
        self,
        message: str,
        lanes: tuple[int, int] = (-1, -1),
        tensor: str = "",
        windows: tuple[Any, Any] = ((0, 0), (0, 0)),
        lines: tuple[str, str] = ("", ""),
    ) -> None:
        super().__init__(message)
        # windows: ((offsets, extents) of each lane's access), or byte spans from the byte-span API
        self.lanes, self.tensor, self.windows, self.lines = lanes, tensor, windows, lines

    def __reduce__(self) -> tuple[Any, ...]:
        # a rank in another process (RayCluster) sends it back whole: lanes, tensor, windows too
        return (type(self), (str(self), self.lanes, self.tensor, self.windows, self.lines))


class Window:
    """The geometry of one access, for the log and its messages: the tensor's name, the kernel line,
    the window's element extents, and its bytes as runs ``[start, start + run)`` relative to the
    window's first byte (the innermost contiguous axes merged; vectorised, no loop per row)."""

    __slots__ = ("tensor", "line", "sizes", "starts", "run")

    def __init__(
        self, tensor: str, line: str, sizes: tuple[int, ...], strides: tuple[int, ...], itemsize: int
    ) -> None:
        self.tensor, self.line, self.sizes = tensor, line, tuple(int(n) for n in sizes)
        dims = [(int(n), int(st) * itemsize) for n, st in zip(sizes, strides) if n != 1]
        run = itemsize
        while dims and dims[-1][1] == run:  # an axis continuing the run: one longer run
            run *= dims.pop()[0]
        starts = np.zeros(1, np.int64) if all(n > 0 for n in self.sizes) else np.zeros(0, np.int64)
        for n, st in dims:
            starts = (starts[:, None] + np.arange(n, dtype=np.int64)[None, :] * st).reshape(-1)
        self.starts, self.run = starts, run

    def text(self, offsets: tuple[int, ...]) -> str:
        """`out[0:16, 64:128]`: the window at `offsets`, as the kernel indexes it."""
        return f"{self.tensor}[" + ", ".join(f"{o}:{o + n}" for o, n in zip(offsets, self.sizes)) + "]"


_BYTES = Window("", "", (1,), (1,), 1)  # a raw byte span of the old API: [addr, addr + 1) runs


class _Record:
    """The accesses of one (window, kind): lanes, first-byte addresses, element offsets, order."""

    __slots__ = ("window", "kind", "lanes", "addrs", "offsets", "seq", "chunks", "hi")

    def __init__(self, window: Window, kind: str, hi: int = 0) -> None:
        self.window, self.kind, self.hi = window, kind, hi  # hi: the old API's span length
        self.lanes: list[int] = []
        self.addrs: list[int] = []
        self.offsets: list[tuple[int, ...]] = []
        self.seq: list[int] = []
        self.chunks: list[tuple[np.ndarray, ...]] = []

    def arrays(self) -> tuple[np.ndarray, ...]:
        nd = len(self.window.sizes)
        parts = [
            (
                np.asarray(self.lanes, np.int64),
                np.asarray(self.addrs, np.int64),
                np.asarray(self.offsets, np.int64).reshape(-1, nd),
                np.asarray(self.seq, np.int64),
            )
        ]
        parts.extend(self.chunks)  # type: ignore[arg-type]  # each chunk: the same four int64 arrays
        return tuple(np.concatenate([p[i] for p in parts]) for i in range(4))


class LaneWriteLog:
    """The GM byte spans each lane of one SPMD launch reads and writes; `check` finds races.

    The executor calls :meth:`access` (one lane) or :meth:`access_lanes` (many lanes at once) with
    the :class:`Window` of each logged load and store. The older byte-span API (:meth:`write`,
    :meth:`read`, ...) takes absolute GM byte addresses ``[lo, hi)``; ``names`` maps a tensor's
    base address to the name its messages use, else the allocation's address is shown."""

    def __init__(self, names: Mapping[int, str] | None = None, launch: str = "pl.spmd") -> None:
        self.names = dict(names or {})
        self.launch = launch
        self._records: dict[tuple[int, str, int], _Record] = {}
        self._seq = 0

    def _record(self, window: Window, kind: str, hi: int = 0) -> _Record:
        key = (id(window), kind, hi)
        r = self._records.get(key)
        if r is None:
            r = self._records[key] = _Record(window, kind, hi)
        return r

    # ---------------------------------------------------------------- feeding
    def access(self, kind: str, lane: int, addr: int, offsets: tuple[int, ...], window: Window) -> None:
        """Lane `lane` touches `window` at element `offsets`, its first byte at GM `addr`;
        `kind` is "read", "write" or "atomic" (an atomic-add store)."""
        r = self._record(window, kind)
        r.lanes.append(lane)
        r.addrs.append(addr)
        r.offsets.append(offsets)
        r.seq.append(self._seq)
        self._seq += 1

    def access_lanes(
        self, kind: str, lanes: np.ndarray, addrs: np.ndarray, offsets: np.ndarray, window: Window
    ) -> None:
        """`access` of ``lanes[i]`` at ``addrs[i]`` and ``offsets[i]`` (one step of many lanes)."""
        n = len(lanes)
        self._record(window, kind).chunks.append(
            (
                np.asarray(lanes, np.int64).reshape(n),
                np.asarray(addrs, np.int64).reshape(n),
                np.asarray(offsets, np.int64).reshape(n, len(window.sizes)),
                np.full(n, self._seq, np.int64),
            )
        )
        self._seq += 1

    def write(self, lane: int, lo: int, hi: int, atomic: bool = False) -> None:
        """Lane `lane` writes GM bytes ``[lo, hi)`` (``atomic``: an atomic-add store)."""
        self.write_lanes(np.array([lane]), np.array([lo]), 0, hi - lo, atomic)

    def read(self, lane: int, lo: int, hi: int) -> None:
        """Lane `lane` reads GM bytes ``[lo, hi)``."""
        self.read_lanes(np.array([lane]), np.array([lo]), 0, hi - lo)

    def write_lanes(
        self, lanes: np.ndarray, addrs: np.ndarray, lo: int, hi: int, atomic: bool = False
    ) -> None:
        """Lane ``lanes[i]`` writes ``[addrs[i] + lo, addrs[i] + hi)``: one store step of many lanes."""
        self._bytes("atomic" if atomic else "write", lanes, addrs, lo, hi)

    def read_lanes(self, lanes: np.ndarray, addrs: np.ndarray, lo: int, hi: int) -> None:
        """Lane ``lanes[i]`` reads ``[addrs[i] + lo, addrs[i] + hi)``: one load step of many lanes."""
        self._bytes("read", lanes, addrs, lo, hi)

    def _bytes(self, kind: str, lanes: np.ndarray, addrs: np.ndarray, lo: int, hi: int) -> None:
        if hi <= lo:
            return
        lanes = np.asarray(lanes, np.int64).reshape(-1)
        a = np.asarray(addrs, np.int64).reshape(-1) + lo
        self._record(_BYTES, kind, hi - lo).chunks.append(
            (lanes, a, np.zeros((len(a), 1), np.int64), np.full(len(a), self._seq, np.int64))
        )
        self._seq += 1

    # ---------------------------------------------------------------- checking
    def _spans(self, kinds: tuple[str, ...]) -> tuple[np.ndarray, ...]:
        """(lane, lo, hi, seq, record, entry) of every byte run of the accesses of `kinds`."""
        cols: list[list[np.ndarray]] = [[] for _ in range(6)]
        for ri, r in enumerate(self._records.values()):
            if r.kind not in kinds:
                continue
            lanes, addrs, _, seq = r.arrays()
            starts, run = (r.window.starts, r.window.run) if r.hi == 0 else (np.zeros(1, np.int64), r.hi)
            if not len(lanes) or not len(starts):
                continue
            R = len(starts)
            cols[0].append(np.repeat(lanes, R))
            lo = (addrs[:, None] + starts[None, :]).reshape(-1)
            cols[1].append(lo)
            cols[2].append(lo + run)
            cols[3].append(np.repeat(seq, R))
            cols[4].append(np.full(len(lo), ri, np.int64))
            cols[5].append(np.repeat(np.arange(len(lanes), dtype=np.int64), R))
        if not cols[0]:
            e = np.zeros(0, np.int64)
            return e, e, e, e, e, e
        return tuple(np.concatenate(c) for c in cols)

    def check(self) -> None:
        """Raise LaneRaceError for the first race found (write-write, atomic-plain, read-write,
        read-atomic), the same one whatever order the lanes were logged in."""
        w, a, r = self._spans(("write",)), self._spans(("atomic",)), self._spans(("read",))
        for (x, xw), (y, yw) in (
            ((w, "writes"), (w, "writes")),
            ((a, "atomically writes"), (w, "writes")),
            ((r, "reads"), (w, "writes")),
            ((r, "reads"), (a, "atomically writes")),
        ):
            hit = _first_cross(x, y)
            if hit is not None:
                self._raise(x, hit[0], xw, y, hit[1], yw)

    def _name(self, lo: int) -> tuple[str, int]:
        bases = [b for b in self.names if b <= lo]
        if not bases:
            return f"the GM tensor at {lo:#x}", lo
        b = max(bases)
        return repr(self.names[b]), b

    def _raise(
        self, x: tuple[np.ndarray, ...], i: int, what1: str, y: tuple[np.ndarray, ...], k: int, what2: str
    ) -> None:
        l1, l2 = int(x[0][i]), int(y[0][k])
        w1, w2 = (int(x[1][i]), int(x[2][i])), (int(y[1][k]), int(y[2][k]))
        recs = list(self._records.values())
        r1, r2 = recs[int(x[4][i])], recs[int(y[4][k])]
        lo, hi = max(w1[0], w2[0]), min(w1[1], w2[1])
        help_ = (
            "help: give each lane its own window (offsets from the lane index), or use an atomic store "
            "to accumulate"
        )
        if r1.hi or r2.hi:  # the byte-span API: byte windows of the named tensor
            name, base = self._name(lo)
            b1, b2 = (w1[0] - base, w1[1] - base), (w2[0] - base, w2[1] - base)
            raise LaneRaceError(
                f"lane race in {self.launch}: lane {l1} {what1} bytes [{b1[0]}, {b1[1]}) of {name} and lane {l2} "
                f"{what2} bytes [{b2[0]}, {b2[1]}) (they share [{lo - base}, {hi - base})); lanes run concurrently, "
                f"so the result would depend on their order. {help_}",
                (l1, l2),
                name,
                (b1, b2),
            )
        o1 = tuple(int(v) for v in r1.arrays()[2][int(x[5][i])])
        o2 = tuple(int(v) for v in r2.arrays()[2][int(y[5][k])])
        v1, v2 = r1.window, r2.window
        both = [(max(a, b), min(a + m, b + n)) for a, m, b, n in zip(o1, v1.sizes, o2, v2.sizes)]
        common = (
            f"{v1.tensor}[" + ", ".join(f"{a}:{b}" for a, b in both) + "]"
            if v1.tensor == v2.tensor and len(o1) == len(o2) and all(a < b for a, b in both)
            else f"{hi - lo} bytes"
        )
        raise LaneRaceError(
            f"{v1.line}: [lane-race] lane race in {self.launch}: lane {l1} {what1} {v1.text(o1)} ({v1.line}) and "
            f"lane {l2} {what2} {v2.text(o2)} ({v2.line}); they share {common}. The lanes run concurrently, so "
            f"the result would depend on their order; the call is refused and its outputs are unchanged.\n{help_}",
            (l1, l2),
            repr(v1.tensor),
            ((o1, v1.sizes), (o2, v2.sizes)),
            (v1.line, v2.line),
        )


def _overlaps(lo: np.ndarray, hi: np.ndarray, blo_sorted: np.ndarray, bhi_sorted: np.ndarray) -> np.ndarray:
    """For each span [lo, hi): how many spans of b meet it (b's starts and ends sorted apart)."""
    return np.searchsorted(blo_sorted, hi, side="left") - np.searchsorted(bhi_sorted, lo, side="right")


def _first_cross(a: tuple[np.ndarray, ...], b: tuple[np.ndarray, ...]) -> tuple[int, int] | None:
    """(i, k): span i of `a` meets span k of `b` of another lane; None if no such pair. Exact and
    vectorised: the spans of b meeting each span of a, minus those of its own lane (lane-keyed).
    The pair is canonical - the least (lane, address, order) on each side - so the lanes' order of
    execution (one by one, or batched) does not change which race is reported."""
    al, alo, ahi, aseq = a[:4]
    bl, blo, bhi, bseq = b[:4]
    if not len(alo) or not len(blo):
        return None
    total = _overlaps(alo, ahi, np.sort(blo), np.sort(bhi))
    ka, kb = al << _LANE_SHIFT, bl << _LANE_SHIFT
    same = _overlaps(ka + alo, ka + ahi, np.sort(kb + blo), np.sort(kb + bhi))
    hit = np.flatnonzero(total > same)
    if not hit.size:
        return None
    i = int(hit[np.lexsort((aseq[hit], alo[hit], al[hit]))[0]])
    cand = np.flatnonzero((blo < ahi[i]) & (bhi > alo[i]) & (bl != al[i]))
    k = int(cand[np.lexsort((bseq[cand], blo[cand], bl[cand]))[0]])
    return i, k
