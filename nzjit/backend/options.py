"""`Options`: how the backend runs a graph, as one frozen value.

Every switch of the executor is a field here, passed explicitly from the entry of a call down to
the plan compiler, and part of the plan cache key (`plan.plan_of(graph, n_owned, options)`), so
two option sets never share a plan and nothing needs clearing when they change. A call entry
(a kernel call, `Lowered.run`, an orchestration) takes the options of its context: `DEFAULT`,
or the ones a `with using(Options(...)):` block installs for the code inside it (this thread and
context only; the call captures them once and hands them on, also to the ranks' threads).
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields, replace
from typing import Any


@dataclass(frozen=True, eq=False)
class Options:
    """The executor's switches (all on by default; tests turn them off to compare paths).

    Interned: equal options are one object, so a cache keyed by them compares and hashes by
    identity (a C-level hash on every call, not a dataclass's tuple of the fields)."""

    #: Specialised step closures (a rule's `specialize`) and TEXTRACTs fused into their mad; False:
    #: every equation through its rule's reference `impl` (tests compare the two byte for byte).
    fast: bool = True
    #: Run the lanes of an SPMD body, and the trips of a carry-free loop, all at once (a rule's
    #: `batch`) when that is exact; else one by one. Needs `fast`.
    batch: bool = True
    #: Re-raise an unexpected error of a lane-batched attempt instead of falling back to the lanes
    #: one by one (tests: a bug in the batched path must fail, not hide behind the fallback).
    strict: bool = False
    #: Lanes of the first batched group (later groups grow within `batched.GROUP_BYTES`).
    lane_group: int = 16
    #: Threads a batched mad may use: None = `runtime.threads.THREADS` (``NZJIT_THREADS``); 1 =
    #: the calling thread only.
    threads: int | None = None
    #: Ranks that run the same program (same kernels, dims, argument geometries) run each call as
    #: one lane-batched launch over every rank's lanes (rank_batch.py); False: each rank on a
    #: thread of its own. Needs `batch`.
    rank_batch: bool = True
    #: Lane-batched vector steps run their instruction's prepared form (runtime.vector_prep: the
    #: checks once per operand layout, then the computation on the stacked bytes); False: the
    #: instruction call every time (tests compare the two byte for byte).
    prepared: bool = True
    #: A lane-batched attempt whose plan replays (every lane step marked `lane_state.replays`)
    #: is recorded once per call signature and later calls repeat the recorded buffer work
    #: (lane_replay.py); False: every attempt steps through its plan (tests compare the two).
    replay: bool = True

    def __new__(cls, *args: Any, **kwargs: Any) -> Options:
        names = [f.name for f in fields(cls)]
        values = dict(zip(names, args), **kwargs)
        key = tuple(values.get(f.name, f.default) for f in fields(cls))
        found = _INTERNED.get(key)
        if found is None:
            found = _INTERNED[key] = object.__new__(cls)
        return found

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        # pickled by its field values: the default reduction would call `__new__` with none and
        # so unpickle every Options as the defaults (a Ray actor, a rank process)
        return (Options, tuple(getattr(self, f.name) for f in fields(self)))

    def with_(self, **changes: object) -> Options:
        """A copy with `changes` applied (`dataclasses.replace`)."""
        return replace(self, **changes)  # type: ignore[arg-type]


#: field values -> the one Options object with them (a handful: one per option set in use)
_INTERNED: dict[tuple[Any, ...], Options] = {}
DEFAULT = Options()

_CURRENT: contextvars.ContextVar[Options] = contextvars.ContextVar("nzjit_backend_options", default=DEFAULT)


def current() -> Options:
    """The options a call entered now runs with (`DEFAULT` outside a `using` block)."""
    return _CURRENT.get()


@contextmanager
def using(options: Options) -> Iterator[Options]:
    """Calls entered inside the block run with `options`; the previous ones are restored after."""
    if not isinstance(options, Options):
        raise TypeError(f"using() expects backend Options, got {type(options).__name__}")
    token = _CURRENT.set(options)
    try:
        yield options
    finally:
        _CURRENT.reset(token)


__all__ = ["Options", "DEFAULT", "current", "using"]
