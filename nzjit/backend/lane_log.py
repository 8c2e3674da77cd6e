"""Feeding the run-time lane-race log (issue 24 item 2; `runtime.races`).

The compiler marks each GM access (`passes/lane_windows.py`, the hidden `lane_log` parameter):
False when no lane of its launch can race with another on it (proven, or outside any launch),
else the tensor's name. A launch (`loops.run_loop`, a `pl.spmd` whose `lane_log` is not False)
opens a `LaneWriteLog` in `ctx.lane_log`; its accesses are logged with the lane running them
(`ctx.lane`) and the log is checked when the last lane finished. Logging costs nothing where the
compiler proved it unneeded: the plan wraps only the marked steps (`logging_run`) and the batched
forms note only marked accesses.

* Per trip (the compiled steps and the reference impls alike): `logging_run` notes the window
  before the step runs it; a `pl.read` / `pl.write` notes its one element (kind read / write).
  Those have no batched form: a body with one runs lane by lane, so this is their only path.
* Lane-batched (batched.py): the batched load / store forms append their accesses to
  `LaneState.notes` (all lanes of one step at once); when the attempt succeeds they are fed to the
  log - for an SPMD attempt its stores, with their lanes, checked before any store is applied
  (loads need no log there: the attempt only succeeds when no lane loads a byte any lane stores);
  for the trips of a loop inside one lane, loads and stores, all of that lane.

A race raises `runtime.races.LaneRaceError` (a DeviceError) at the end of the launch; the
calling convention then restores every resident output and downloads nothing, so the call's
outputs are unchanged.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from runtime import TileBuf
from runtime.races import LaneWriteLog, Window
from runtime.spans import byte_span

from .. import prims as P
from ..core.ir import Eqn
from ..passes.lane_windows import LANE_LOG
from .nz_partition import nz_store_partition
from .rule import Run, Step
from .steps import operand_groups
from .values import HostValue, TensorVal

__all__ = [
    "LANE_LOG",
    "logged_name",
    "launch_logged",
    "open_log",
    "snapshot",
    "restore",
    "logging_run",
    "window_of",
    "note",
    "feed",
]


def logged_name(e: Eqn) -> str | None:
    """The tensor name of a logged access, None when the compiler marked it unneeded."""
    mark = e.params.get(LANE_LOG)
    if mark is False:
        return None
    if isinstance(mark, str):
        return mark
    t = e.inputs[-1] if e.primitive is P.tile_store_p else e.inputs[0]
    return getattr(t, "hint", None) or "a tensor"


def launch_logged(e: Eqn) -> bool:
    """Does the pl.spmd loop `e` open a log (something inside it may race)?"""
    return e.params.get(LANE_LOG) is not False


def open_log(n: int) -> LaneWriteLog:
    """The log of one launch of `n` lanes."""
    return LaneWriteLog(launch=f"pl.spmd({n})")


def snapshot(ctx: Any, e: Eqn, captured: list[Any]) -> list[tuple[int, np.ndarray]]:
    """The GM bytes of the tensors the launch `e` writes (its mark names them among `captured`;
    unmarked: every captured tensor), taken when it opens its log: a race restores them, so an
    input the kernel writes in place is unchanged too (the convention restores only outputs)."""
    mark = e.params.get(LANE_LOG)
    picks = mark if isinstance(mark, tuple) else range(len(captured))
    out = []
    for j in picks:
        t = captured[j]
        if type(t) is TensorVal and t.shape:
            size = t.dtype.itemsize  # the bytes of every element: a trailing axis of its bytes
            lo, hi = byte_span(t.addr, (*t.shape, size), (*(s * size for s in t.strides), 1))
            if hi > lo:
                out.append((lo, ctx.gm.span(lo, hi).copy()))
    return out


def restore(ctx: Any, saved: list[tuple[int, np.ndarray]]) -> None:
    """Put back the bytes `snapshot` took (after a race, or any failure of a logged launch)."""
    for lo, data in saved:
        ctx.gm.span(lo, lo + len(data))[...] = data


class _Windows:
    """The `Window`s of one access, by geometry (the valid extents may differ between trips)."""

    def __init__(self, e: Eqn, name: str) -> None:
        src = e.source  # file:line:col of the kernel line, as CompileError shows it
        self.name, self.line = name, f"{src.file}:{src.line}:{src.col + 1}" if src is not None else "<kernel>"
        self.cache: dict[tuple[Any, ...], Window] = {}

    def get(self, sizes: tuple[int, ...], t: TensorVal) -> Window:
        key = (sizes, t.strides, t.dtype.itemsize)
        w = self.cache.get(key)
        if w is None:
            w = self.cache[key] = Window(self.name, self.line, sizes, t.strides, t.dtype.itemsize)
        return w


def window_of(e: Eqn) -> _Windows | None:
    """The window cache of a logged access (None: not logged)."""
    name = logged_name(e)
    return None if name is None else _Windows(e, name)


def store_sizes(e: Eqn, tile: Any, rank: int) -> tuple[int, ...] | None:
    """The extents of the window a store writes (as `rules/memory._store` computes them)."""
    part = e.params.get("nz_partition")
    if part is not None:
        cols = getattr(tile, "valid_col", None)
        return nz_store_partition(e, part, cols) if isinstance(cols, int) else tuple(int(v) for v in part)
    vr: int | None
    vc: int | None
    if type(tile) is TileBuf:
        vr, vc = tile.valid_row, tile.valid_col
    elif isinstance(tile, HostValue):
        shape = tile.array.shape
        return (1,) * (rank - len(shape)) + tuple(shape) if len(shape) <= rank else None
    else:
        vr, vc = getattr(tile, "valid_row", None), getattr(tile, "valid_col", getattr(tile, "cols", None))
        if vr is None or vc is None:
            return None
    return ((1,) * (rank - 2) + (int(vr), int(vc)))[-rank:]


def logging_run(st: Step, run: Run) -> Run:
    """`run` (a load / store step) noting its window in the launch's log first, when one is open;
    `run` itself when the compiler marked the access unneeded (nothing added)."""
    e = st.eqn
    wins = window_of(e)
    if wins is None:
        return run
    g = operand_groups(e, st.ins)
    if e.primitive in (P.tensor_read_p, P.tensor_write_p):
        return _scalar_logging_run(e, g, wins, run)
    store = e.primitive is P.tile_store_p
    kind = (
        "atomic"
        if store and bool((e.params.get("attrs") or {}).get("atomic"))
        else "write"
        if store
        else "read"
    )
    (s_t,) = g["dst"] if store else g["src"]
    offs_slots = g["offsets"]
    s_tile = g["tile"][0] if store else -1  # -1: a load has no tile operand
    valid = () if store else g["valid"]
    shape = None if store else tuple(int(d) for d in e.params["shape"])

    def logged(ctx: Any, env: list[Any]) -> None:
        log = ctx.lane_log
        if log is not None:
            t = env[s_t]
            if type(t) is TensorVal and t.nz is None:  # a logical NZ value: reference stages only
                offs = tuple(int(env[i]) for i in offs_slots)
                if store:
                    sizes = store_sizes(e, env[s_tile], len(t.shape))
                else:
                    sizes = tuple(int(env[i]) for i in valid) if valid else shape
                if sizes is not None:
                    delta = 0
                    for o, s in zip(offs, t.strides):
                        delta += o * s
                    log.access(kind, ctx.lane, t.addr + delta * t.dtype.itemsize, offs, wins.get(sizes, t))
        run(ctx, env)

    return logged


def _scalar_logging_run(e: Eqn, g: dict[str, tuple[int, ...]], wins: _Windows, run: Run) -> Run:
    """`logging_run` of a `pl.read` / `pl.write`: its window is the one element at its indices. An
    index outside the view is not noted: the step itself refuses it (rules/tensor_scalar.py)."""
    write = e.primitive is P.tensor_write_p
    kind = "write" if write else "read"
    (s_t,) = g["dst"] if write else g["src"]
    idx_slots = g["indices"]

    def logged(ctx: Any, env: list[Any]) -> None:
        log = ctx.lane_log
        if log is not None:
            t = env[s_t]
            if type(t) is TensorVal and t.nz is None:
                idx = tuple(int(env[i]) for i in idx_slots)
                if all(0 <= i < d for i, d in zip(idx, t.shape)):
                    delta = 0
                    for i, s in zip(idx, t.strides):
                        delta += i * s
                    log.access(
                        kind, ctx.lane, t.addr + delta * t.dtype.itemsize, idx, wins.get((1,) * len(idx), t)
                    )
        run(ctx, env)

    return logged


def note(
    s: Any, kind: str, wins: _Windows, t: Any, offs: list[Any], sizes: tuple[int, ...], addr: np.ndarray
) -> None:
    """A batched step's access of all the attempt's lanes (`addr`: each lane's first byte)."""
    L = s.L
    o = np.empty((L, len(offs)), np.int64)
    for j, v in enumerate(offs):
        o[:, j] = v
    s.notes.append((kind, s.lanes, addr, o, wins.get(tuple(int(n) for n in sizes), t)))


def feed(s: Any, notes: list[Any]) -> None:
    """After a successful batched attempt: its notes into the launch's log, checked when the attempt
    is the launch itself (before any of its stores is applied)."""
    log = s.ctx.lane_log
    if log is None or not notes:
        return
    for kind, lanes, addr, offs, w in notes:
        who = lanes if s.spmd else np.full(len(addr), s.ctx.lane, np.int64)
        log.access_lanes(kind, who, addr, offs, w)
    if s.spmd:
        log.check()
