"""The helper threads of the simulator: how many, the one pool they live in, and the two ways work
is shared with them.

numpy releases the GIL while it copies, casts or calls BLAS, so a second core moves bytes while
the first computes.  Two users share the pool:
- `run` cuts one large copy into parts that run at once (runtime.nz: pack_nz / unpack_nz);
- `Ahead` computes the next item of a sequence while the caller works on the current one (the
  numpy backend converts the next chunk of matmul operands while BLAS multiplies this one, as
  the device's MTE moves the next tiles while its Cube computes).

Whatever the thread count, every byte written is the same: the parts write disjoint outputs, and
`Ahead` only moves work earlier in time.  ``NZJIT_THREADS=1`` keeps everything on the calling
thread.
"""

from __future__ import annotations

import concurrent.futures as cf
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Generic, TypeVar

from .blas import one_thread

__all__ = ["THREADS", "Ahead", "helper_available", "ranks_running", "run", "side_by_side"]

T = TypeVar("T")


def _threads_from_env() -> int:
    """``NZJIT_THREADS`` if set, else the cores this process may run on (at most 4)."""
    value = os.environ.get("NZJIT_THREADS", "").strip()
    if not value:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        return max(1, min(cores, 4))
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"NZJIT_THREADS must be a whole number >= 1, got {value!r}")
    return int(value)


#: Threads the simulator may keep busy at once: the caller and ``THREADS - 1`` helpers. Read at
#: every use, so a test or a benchmark may change it.
THREADS = _threads_from_env()


def run(parts: list[Callable[[], None]]) -> None:
    """Run `parts`: the first on this thread, the others on the pool, at the same time. Returns
    when every part has ended, raising the first error (no part outlives the call). With no core
    to spare (see `helper_available`), all on this thread, one after another."""
    if len(parts) == 1 or not helper_available():  # a helper waiting for helpers could wait forever
        for part in parts:
            part()
        return
    _at_once(parts, _pool(max(THREADS, len(parts)) - 1))  # one pool however many parts a call has


def _at_once(parts: Sequence[Callable[[], object]], pool: cf.ThreadPoolExecutor) -> None:
    """The first part on this thread, the others on `pool`; returns when all ended, raising the
    first error."""
    futures = [pool.submit(part) for part in parts[1:]]
    try:
        parts[0]()
    finally:
        cf.wait(futures)  # every part, even after a failure: none may outlive the call
    for f in futures:
        f.result()  # the first worker error, if any


class Ahead(Generic[T]):
    """``item(0) .. item(n - 1)``, in order, each ``item(i + 1)`` computed on a helper thread while
    the caller works on ``item(i)``; all on the caller's thread with one thread, `n` = 1,
    `threaded` False (the caller's judgement: work too small to pay for a hand-off), or when the
    caller is itself a helper.

    `defer` hands the helper work that must follow the caller's work on the current item: it runs
    just before the helper computes the item after the next, and has ended when that item is
    handed out.  Use as a context manager: leaving it waits for the helper, by error too, so
    nothing it computes outlives the loop; leaving it normally runs the deferred work left::

        with Ahead(convert, n) as items:
            for i, x in enumerate(items):
                multiply(x)
                items.defer(functools.partial(add, i))
    """

    def __init__(self, item: Callable[[int], T], n: int, threaded: bool = True) -> None:
        self.item, self.n = item, n
        self.pool = _pool(THREADS - 1) if threaded and n > 1 and helper_available() else None
        self.pending: cf.Future[T] | None = None
        self.deferred: list[Callable[[], None]] = []  # only the caller's thread touches it

    def defer(self, work: Callable[[], None]) -> None:
        """Hand `work` to the helper, to run after the caller's work on the current item."""
        self.deferred.append(work)

    def _take_deferred(self) -> list[Callable[[], None]]:
        work, self.deferred = self.deferred, []
        return work

    def _next(self, i: int, work: list[Callable[[], None]]) -> T:
        _run_all(work)
        return self.item(i)

    def __iter__(self) -> Iterator[T]:
        x = self._next(0, self._take_deferred())
        for i in range(1, self.n):
            if self.pool is not None:
                self.pending = self.pool.submit(self._next, i, self._take_deferred())
                yield x
                x, self.pending = self.pending.result(), None
            else:
                yield x
                x = self._next(i, self._take_deferred())
        if self.pool is not None and self.deferred:  # the last item's wait: the work left
            self.pending = self.pool.submit(_run_all, self._take_deferred())  # type: ignore[arg-type]
        yield x
        if self.pending is not None:
            self.pending.result()
            self.pending = None

    def __enter__(self) -> Ahead[T]:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        pending, self.pending = self.pending, None
        if pending is not None:
            cf.wait([pending])  # by error too: nothing the helper does outlives the loop
        if exc_type is None:
            if pending is not None:
                pending.result()  # the helper's error, if any
            _run_all(self._take_deferred())


def _run_all(work: list[Callable[[], None]]) -> None:
    for w in work:
        w()


_pools: tuple[int, dict[int, cf.ThreadPoolExecutor]] | None = None  # (pid, workers -> pool)
_pool_lock = threading.Lock()


_HELPER = threading.local()


_RANKS = 0  # threads of ranks running side by side now (`ranks_running`), each keeping a core busy
_ranks_lock = threading.Lock()


@contextmanager
def ranks_running(n: int) -> Iterator[None]:
    """While `n` ranks run side by side, each on a thread of its own (runtime.dispatch.run_ranks),
    work is handed to helpers only if the ranks leave a core idle: with as many ranks as threads,
    a helper would only compete with a rank for a core, and a rank that waits for a helper busy
    with another rank's work loses more than the overlap gains (4 ranks on 2 cores took 4.3x one
    rank, against 3.6x of CPU time). Which thread computes what changes; no byte written does."""
    global _RANKS
    with _ranks_lock:
        _RANKS += n
    try:
        with one_thread():  # nor do the BLAS library's own threads get a core (runtime/blas.py)
            yield
    finally:
        with _ranks_lock:
            _RANKS -= n


def side_by_side(parts: list[Callable[[], object]]) -> None:
    """Run `parts` at once, each keeping a core busy (`ranks_running`): the first on this thread,
    the others on the pool's helpers, which are started once per process (starting a thread per
    call costs a scheduler round trip, milliseconds on a loaded machine). Returns when every part
    has ended, raising the first error (no part outlives the call). On a helper, or with more
    parts than threads, one after another on this thread: a helper waiting for helpers could wait
    forever."""
    with ranks_running(len(parts)):
        if len(parts) == 1 or _on_helper() or len(parts) > THREADS:
            for part in parts:
                part()
            return
        _at_once(parts, _pool(THREADS - 1))


def helper_available() -> bool:
    """Would work handed on from this thread run on a helper? Not with one thread, nor on a
    helper itself (see `_on_helper`), nor while ranks running side by side keep every thread
    busy (`ranks_running`): `Ahead` then computes everything on the caller."""
    return THREADS > 1 and not _on_helper() and _RANKS < THREADS


def _mark_helper() -> None:
    _HELPER.is_helper = True


def _on_helper() -> bool:
    """Is this thread one of the pools' helpers? Work it hands on runs on it instead: with every
    helper busy, a helper that waits for another one would wait forever."""
    return getattr(_HELPER, "is_helper", False)


def _pool(workers: int) -> cf.ThreadPoolExecutor:
    """The pool of `workers` threads, made again in a forked child (whose copy of the parent's
    pool has no threads behind it). A pool is never shut down: another thread may be about to
    submit to it (only a change of THREADS, or `run` given more parts than threads, asks for a
    second size)."""
    global _pools
    with _pool_lock:
        if _pools is None or _pools[0] != os.getpid():
            _pools = (os.getpid(), {})
        pools = _pools[1]
        pool = pools.get(workers)
        if pool is None:
            pool = pools[workers] = cf.ThreadPoolExecutor(
                max_workers=workers, thread_name_prefix="nzjit", initializer=_mark_helper
            )
        return pool
