"""Replay of a lane-batched attempt (batched.py): the checked step sequence bound once per call
signature, then repeated as pre-bound numpy calls over the attempt's own buffers.

A batched attempt spends most of a small kernel's time deciding, per step, what depends only on
the shapes around it: operand types and geometries, valid regions, lane maps, addresses, which
buffer a result takes over, the on-chip accounting. For a given *signature* - the plan, the lanes,
the captured values (tensor addresses and layouts, scalars by their bits), the dynamic dims, the
options, the on-chip bytes live at entry and the GM the tensors live in - those decisions come out
the same on every call. So the first attempt with a signature records its buffer work (every
write of a lane buffer goes through `LaneState.do`, in order) and its deferred stores; a later
call with the same signature runs the recorded calls on the same buffers, charges the recorded
on-chip peak, and commits the same stores (batched.commit) - the bytes of the stepping path, since
each recorded call is the call that path makes, on the same buffers, in the same order, and reads
the GM bytes of this call.

Only plans whose every lane step is marked `lane_state.replays` are recorded: such a step writes
lane buffers only through `LaneState.do` and decides nothing from their bytes (a value-dependent
check, e.g. a quantising cast's range, is itself a recorded call that raises `Fallback`). A
recording is kept when the attempt succeeded with no lane-race notes and its buffers stay within
`MAX_BYTES`; the buffers then belong to the replay alone (the recording took them from a store of
its own), and a replay runs on one thread at a time (another caller meanwhile takes the stepping
path). Before a replay runs, every GM allocation it reads or writes must still be live (GM never
hands an address out twice, so a live address is the same allocation with the same bytes
object); a dead one drops the replay. If a recorded call raises, nothing has reached GM yet: the
attempt runs the stepping path, which decides as always (and refuses as the reference does).
`Options(replay=False)` turns replays off (tests compare both paths byte for byte).
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import runtime
from runtime.cluster_memory import RANK_SHIFT, ClusterMemory
from runtime.crosscore import pipe_fill

from .lane_state import Fallback, LaneState
from .lane_values import LaneTensor
from .values import TensorVal

#: Replays kept per plan (the oldest goes first): a kernel called on a few argument sets.
MAX_REPLAYS = 4
#: Buffer bytes a replay may own (larger attempts keep stepping: their per-step cost is small
#: against their numpy work, and the memory would stay held).
MAX_BYTES = 32 << 20


@dataclass(eq=False)
class Replay:
    """One recorded attempt (module docstring). It holds its memories weakly (`gms`: the one GM,
    or the ranks' GMs behind a ClusterMemory); a recorded call's argument that was the call's GM
    is the marker `_GM`, the current call's GM when it runs (the calls' third item says which)."""

    gms: tuple[weakref.ref[Any], ...]
    calls: tuple[tuple[Callable[..., Any], tuple[Any, ...], bool], ...]
    groups: list[Any]
    live_after: dict[str, int]
    own_peak: dict[str, int]
    guards: tuple[int, ...]
    nbytes: int
    #: (weakref of its plan, its key): how `_WATCH` and the bounded set name it
    owner: tuple[Any, ...]
    watched: tuple[tuple[int, int], ...] = ()  # its keys of `_WATCH`
    lock: threading.Lock = field(default_factory=threading.Lock)
    #: runs a recorded call stopped (a value-dependent check) since its last full run
    aborts_in_row: int = 0


def _value_key(x: Any) -> Any:
    """A hashable key of a captured value that determines every decision a replayable step makes
    from it, or `_NO` (not replayable). Floats by their bits: 0.0 and -0.0 give other bytes."""
    t = type(x)
    if t is int or t is bool or x is None:
        return (t, x)
    if t is float:
        return (t, np.float64(x).tobytes())
    if t is TensorVal:
        if x.nz is not None:
            return _NO
        return (t, x.addr, x.dtype, x.shape, x.strides, x.layout)
    if t is LaneTensor:
        return (t, x.addr.tobytes(), x.dtype, x.shape, x.strides, x.layout)
    if isinstance(x, np.generic):
        return (t, x.tobytes())
    if t is np.ndarray:
        return (t, x.dtype, x.shape, x.tobytes())
    return _NO


_NO = object()


def signature(ctx: Any, lanes: np.ndarray, n: int, spmd: bool, captured: list[Any]) -> tuple[Any, ...] | None:
    """The key a recorded attempt is replayed under (module docstring), or None when a captured
    value is of a kind whose effect on the steps is not captured by a key (a tile, a host value)."""
    keys = []
    for c in captured:
        k = _value_key(c)
        if k is _NO:
            return None
        keys.append(k)
    onchip = ctx.onchip
    return (
        lanes.tobytes(),
        n,
        spmd,
        ctx.options,
        _gm_key(ctx.gm),
        onchip.target,
        tuple(onchip.live.items()),
        tuple(ctx.dims.items()) if ctx.dims else (),
        pipe_fill(ctx.gm),  # a mixed kernel's TPUSH / TPOP decide from it (a full FIFO refuses)
        # a carry-free loop's trips (spmd False) read the enclosing block index; a launch whose
        # accesses are logged (lane_log.py) notes them, which a replay would not
        ctx.block_idx,
        ctx.block_num,
        ctx.lane_log is None,
        *keys,
    )


_PIPE_AT = 8  # the index of the pipe's state in a signature


def _gm_key(gm: Any) -> Any:
    """The identity of the memory a call runs on: a GM, or the ranks' GMs behind a rank-batched
    launch's ClusterMemory (a new one per launch, rank_batch.py: its GMs are what stays)."""
    if type(gm) is ClusterMemory:
        return tuple(g.serial for g in gm.gms)
    return gm.serial


def _memories(gm: Any) -> tuple[Any, ...]:
    """The GlobalMemories behind `gm` (itself, or a ClusterMemory's ranks')."""
    return tuple(gm.gms) if type(gm) is ClusterMemory else (gm,)


def _same_gm(gm: Any, rp: Replay) -> bool:
    mems = _memories(gm)
    return len(mems) == len(rp.gms) and all(m is r() for m, r in zip(mems, rp.gms))


class _GmMarker:
    """A recorded call's argument that was the attempt's GM (`Replay`)."""

    def __repr__(self) -> str:
        return "<the call's GM>"


_GM = _GmMarker()


def _bound(calls: list[tuple[Callable[..., Any], tuple[Any, ...]]], gm: Any) -> tuple[Any, ...]:
    """`calls` with every argument that is `gm` made the marker `_GM`."""
    out = []
    for fn, args in calls:
        if any(a is gm for a in args):
            out.append((fn, tuple(_GM if a is gm else a for a in args), True))
        else:
            out.append((fn, args, False))
    return tuple(out)


def guards_of(captured: list[Any]) -> tuple[int, ...]:
    """The GM addresses a replay checks are still live: every captured tensor's base (one per
    lane of a LaneTensor)."""
    out: set[int] = set()
    for c in captured:
        if type(c) is TensorVal:
            out.add(int(c.addr))
        elif type(c) is LaneTensor:
            out.update(int(a) for a in np.unique(c.addr).tolist())
    return tuple(sorted(out))


def wanted(plan: Any, key: tuple[Any, ...]) -> bool:
    """Whether to record the attempt of signature `key` now: on its second sighting (a kernel
    called on host arrays uploads them to new addresses every call, whose signatures never come
    again: recording those would only cost)."""
    replays = plan.replays
    if key in replays:
        return replays[key] is None  # (False: a recording of it could not be kept)
    seen = [
        k for k, v in list(replays.items()) if v is None or v is False
    ]  # (a free hook may drop one meanwhile)
    if len(seen) >= MAX_SEEN:
        replays.pop(seen[0])
    replays[key] = None
    return False


def keep(plan: Any, key: tuple[Any, ...], s: LaneState, captured: list[Any]) -> bool:
    """Keep the recording of the successful attempt `s` as `plan`'s replay under `key`; False when
    it cannot be kept (lane-race notes, a nested recorded call, too many bytes, a GM it cannot
    watch) - its buffers then go back as usual."""
    replays = plan.replays
    gm = s.ctx.gm
    guards = guards_of(captured)
    try:
        watched = [_allocation(gm, a) for a in guards]
    except (runtime.DeviceError, AttributeError):
        watched = None
    if (
        s.rec is None
        or s.notes
        or s.nested
        or pipe_fill(gm) != key[_PIPE_AT]  # a pipe left fuller or emptier: a replay changes none
        or s.fresh_bytes > MAX_BYTES
        or watched is None
    ):
        replays[key] = False  # never recorded again: each recording costs fresh buffers
        return False
    kept = [k for k, v in list(replays.items()) if type(v) is Replay]
    if len(kept) >= MAX_REPLAYS:
        drop(plan, kept[0])
    owner = (weakref.ref(plan, _plan_gone), key)
    rp = Replay(
        # a GM that goes (its worker collected) takes the replays on it along: their views would
        # keep its allocations' bytes alive
        tuple(weakref.ref(m, functools.partial(_owner_gone, owner)) for m in _memories(gm)),
        _bound(s.rec, gm),
        s.groups,
        dict(s.live_after),
        dict(s.own_peak),
        guards,
        s.fresh_bytes,
        owner,
    )
    replays[key] = rp
    s.rec = None
    # what the recorded calls read from the attempt's state beyond their arguments: the options
    # (lane_cube's thread count) - not the call's context, which would keep its GM alive
    s.ctx = _Held(s.ctx.options)
    _register(rp, watched)
    return True


class _Held:
    """What a kept attempt's recorded calls may read of its context (`LaneState.ctx`)."""

    __slots__ = ("options",)

    def __init__(self, options: Any) -> None:
        self.options = options


def drop(plan: Any, key: tuple[Any, ...]) -> None:
    """Forget `plan`'s replay under `key` (its buffers and GM views go with it)."""
    rp = plan.replays.pop(key, None)
    if type(rp) is not Replay:
        return
    with _LOCK:
        if _ALL.pop(id(rp), None) is not None:
            _TOTAL[0] -= rp.nbytes
        _unwatch(rp)


def _unwatch(rp: Replay) -> None:
    """Take `rp` off the allocations it watched (under `_LOCK`)."""
    for w in rp.watched:
        holders = _WATCH.get(w)
        if holders is not None:
            holders[:] = [h for h in holders if h is not rp.owner and h[0]() is not None]
            if not holders:
                del _WATCH[w]


# ------------------------------------------------------------------ every kept replay, bounded
#: Bytes of lane buffers all kept replays may own together, and how many there may be: the oldest
#: go first (a test suite compiles thousands of kernels; each replay keeps its buffers).
TOTAL_BYTES = 256 << 20
TOTAL_REPLAYS = 256
#: first sightings of signatures remembered per plan (`wanted`)
MAX_SEEN = 8
#: a replay stopped by a recorded call this many times in a row is dropped (each stop costs the
#: calls before it on top of the stepping path)
MAX_ABORTS = 2
_LOCK = threading.Lock()
_ALL: dict[int, Replay] = {}  # by id, oldest first
_TOTAL = [0]
_COUNTS = [0, 0]  # replays run, replays stopped by a recorded call (`stats`)
#: (a GlobalMemory's serial, allocation base) -> the replays holding views of it: dropped when it is
#: freed (`GlobalMemory.free_hooks`), so a freed tensor's bytes are not kept alive by a replay
_WATCH: dict[tuple[int, int], list[tuple[weakref.ref[Any], tuple[Any, ...]]]] = {}


def stats() -> tuple[int, int, int, int]:
    """(replays kept now, replays run since the process started, runs a recorded call stopped
    since then, the kept replays' buffer bytes): what tests and benchmarks read to see that
    replays ran."""
    with _LOCK:
        return len(_ALL), _COUNTS[0], _COUNTS[1], _TOTAL[0]


def raise_peak(peak: dict[str, int], other: dict[str, int]) -> None:
    """``peak[space] = max(peak[space], other[space])`` for every space of `other`."""
    for space, p in other.items():
        if p > peak[space]:
            peak[space] = p


def _allocation(gm: Any, addr: int) -> tuple[Any, int]:
    """The GlobalMemory holding GM address `addr` (a rank's own, behind a ClusterMemory) and the
    base of its allocation there."""
    if isinstance(gm, ClusterMemory):
        gm, addr = gm.gms[addr >> RANK_SHIFT], addr & ((1 << RANK_SHIFT) - 1)
    return gm, gm.base_of(addr)


def _register(rp: Replay, watched: list[tuple[Any, int]]) -> None:
    """Add `rp` to the bounded set (evicting the oldest beyond it) and watch its allocations."""
    evict = []
    with _LOCK:
        _ALL[id(rp)] = rp
        _TOTAL[0] += rp.nbytes
        for gm, base in watched:
            if not any(getattr(h, "func", None) is _freed for h in gm.free_hooks):
                gm.free_hooks.append(functools.partial(_freed, gm.serial))
            _WATCH.setdefault((gm.serial, base), []).append(rp.owner)
        rp.watched = tuple((gm.serial, base) for gm, base in watched)
        while _ALL and (_TOTAL[0] > TOTAL_BYTES or len(_ALL) > TOTAL_REPLAYS):
            old = _ALL.pop(next(iter(_ALL)))
            _TOTAL[0] -= old.nbytes
            evict.append(old.owner)
    for owner in evict:
        _owner_gone(owner)


def _owner_gone(owner: tuple[Any, ...], _: Any = None) -> None:
    """Drop the replay `owner` names (a weakref callback passes the dead reference as `_`)."""
    ref, key = owner
    p = ref()
    if p is not None:
        drop(p, key)


def _plan_gone(ref: weakref.ref[Any]) -> None:
    """A plan was collected (its graph is gone): its replays leave the bounded set."""
    with _LOCK:
        for k in [k for k, rp in _ALL.items() if rp.owner[0] is ref]:
            rp = _ALL.pop(k)
            _TOTAL[0] -= rp.nbytes
            _unwatch(rp)


def _freed(serial: int, base: int) -> None:
    """`GlobalMemory.free_hooks`: drop the replays that hold views of the freed allocation."""
    with _LOCK:
        holders = _WATCH.pop((serial, base), [])
    for owner in holders:
        _owner_gone(owner)


def run(
    ctx: Any, plan: Any, key: tuple[Any, ...], rp: Replay, commit: Callable[[Any, list[Any]], None]
) -> bool:
    """Run the replay `rp` of `plan` (kept under `key`) in `ctx`: True when it ran and committed
    its stores; False, with nothing written, when the caller must take the stepping path (its GM
    is gone - the replay is dropped -, another thread is running it, or a recorded call raised)."""
    gm = ctx.gm
    if not _same_gm(gm, rp) or not all(gm.is_live(a) for a in rp.guards):
        drop(plan, key)  # a freed tensor: its views must not be written again
        return False
    if not rp.lock.acquire(blocking=False):
        return False
    try:
        try:
            with np.errstate(over="ignore", invalid="ignore"):
                for fn, args, at in rp.calls:
                    if at:  # the marker stands for this call's GM
                        args = tuple(gm if a is _GM else a for a in args)
                    fn(*args)
        except Exception as e:  # a value-dependent check, or anything: the stepping path decides
            if ctx.options.strict and not isinstance(e, (Fallback, runtime.DeviceError, OverflowError)):
                raise
            rp.aborts_in_row += 1
            _COUNTS[1] += 1
            if rp.aborts_in_row >= MAX_ABORTS:  # its check keeps failing: stepping alone is cheaper
                drop(plan, key)
            return False
        onchip = ctx.onchip
        raise_peak(onchip.peak, rp.own_peak)
        onchip.live.update(rp.live_after)
        commit(ctx, rp.groups)
        rp.aborts_in_row = 0
        _COUNTS[0] += 1
        return True
    finally:
        rp.lock.release()


__all__ = [
    "Replay",
    "signature",
    "wanted",
    "keep",
    "drop",
    "run",
    "stats",
    "raise_peak",
    "MAX_REPLAYS",
    "MAX_BYTES",
]
