"""Running an orchestration whose ranks communicate (issue 28): window buffers and the comm world.

An orchestration body allocates window buffers (`pld.alloc_window_buffer`) and hands views of
them (`pld.window`) to kernels whose parameters are `pld.DistributedTensor`s. Nothing is allocated
while the body records; when the program runs, `open_world` makes one `runtime.comm.CommWorld`
over the program's ranks, allocates every buffer (zeroed, on every rank) and resolves each view to
that rank's memory; `run_ranks` runs the ranks as threads inside the world, so a `wait` blocks
its rank and a hang or a race stops all of them with one message.

backend/call.py calls `open_world`, `window_tensor`, `run_ranks` and `close_world` (its comm hook,
marked there); driver/orchestration.py records a body under `sizing`.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import runtime
from runtime import DispatchError, Worker
from runtime.comm import CommError, CommWorld, Window

from ..core import dtypes as dt
from ..prims import DistributedTensorType
from .comm_instrument import instrument

__all__ = [
    "WindowBuffer",
    "WindowView",
    "window_buffers",
    "world_ranks",
    "cause_of",
    "open_world",
    "window_tensor",
    "run_ranks",
    "close_world",
    "sizing",
    "world_size_hint",
    "DEFAULT_TIMEOUT",
]

#: seconds a blocked rank may see no progress before the world stops it (`NZJIT_COMM_TIMEOUT`)
DEFAULT_TIMEOUT = float(os.environ.get("NZJIT_COMM_TIMEOUT", "60"))


@dataclass(eq=False)
class WindowBuffer:
    """`pld.alloc_window_buffer(...)` in an orchestration body: `nbytes` per rank, allocated when the
    program runs. `grain` is the element size of the shape + dtype form (1 for the byte form)."""

    nbytes: int
    name: str
    grain: int = 1
    window: Window | None = field(default=None, repr=False)  # set while its program runs

    def __repr__(self) -> str:
        return f"<window buffer {self.name!r}: {self.nbytes} bytes per rank>"


@dataclass(eq=False)
class WindowView:
    """`pld.window(buf, shape, dtype=)`: the buffer seen as a dense `shape` tensor; passed to a kernel's
    `pld.DistributedTensor` parameter, it is the calling rank's memory of the buffer."""

    buffer: WindowBuffer
    view_shape: tuple[int, ...]
    pl_dtype: dt.DType

    @property
    def name(self) -> str:
        """The buffer's name (in error messages)."""
        return self.buffer.name

    @property
    def shape(self) -> tuple[int, ...]:
        """The view's shape."""
        return self.view_shape

    @property
    def dtype(self) -> np.dtype:
        """The view's numpy dtype."""
        return np.dtype(self.pl_dtype.np_dtype)

    def __repr__(self) -> str:
        return f"<window {self.name!r} as {self.pl_dtype.short}{list(self.view_shape)}>"


def window_tensor(view: WindowView, rank: int) -> runtime.DeviceTensor:
    """Rank `rank`'s memory of `view` (its program's world must be open)."""
    win = view.buffer.window
    if win is None:
        raise DispatchError(
            f"window {view.name!r} belongs to another orchestration run; allocate window buffers "
            "in the orchestration body that uses them"
        )
    return win.tensor(rank, view.view_shape, view.dtype)


# ---------------------------------------------------------------------------- world size
_sizing = threading.local()


@contextmanager
def sizing(cluster: Any, args: Sequence[Any]) -> Iterator[None]:
    """While an orchestration body records: `pld.world_size()` is the rank count of `cluster`, else of
    the cluster its StackedDeviceTensor arguments live on."""
    n = None
    if isinstance(cluster, runtime.Cluster):
        n = cluster.n_ranks
    elif cluster is not None and hasattr(cluster, "n_ranks"):  # a RayCluster-like object
        n = int(cluster.n_ranks)
    else:
        for a in args:
            if isinstance(a, runtime.StackedDeviceTensor):
                n = len(a.shards)
                break
    prev = getattr(_sizing, "n", None)
    _sizing.n = n
    try:
        yield
    finally:
        _sizing.n = prev


def world_size_hint() -> int | None:
    """The rank count `pld.world_size()` returns in the body recording on this thread, if known."""
    return getattr(_sizing, "n", None)


# --------------------------------------------------------------------------------- the run
def _views(calls: Sequence[Any]) -> list[WindowView]:
    out: list[WindowView] = []
    seen: set[int] = set()
    for c in calls:
        for a in c.args:
            if isinstance(a, WindowView) and id(a) not in seen:
                seen.add(id(a))
                out.append(a)
    return out


def _check_params(calls: Sequence[Any]) -> None:
    for c in calls:
        for p, a in zip(c.kernel.params, c.args):
            is_dist = isinstance(p.type, DistributedTensorType)
            if is_dist and not isinstance(a, WindowView):
                raise DispatchError(
                    f"rank {c.device}: {c.kernel.__name__}: parameter {p.name!r} is a "
                    f"pld.DistributedTensor: pass a window (pld.window(buf, shape, dtype=...) of a "
                    f"pld.alloc_window_buffer in an orchestration body), got {type(a).__name__}"
                )
            if not is_dist and isinstance(a, WindowView):
                raise DispatchError(
                    f"rank {c.device}: {c.kernel.__name__}: parameter {p.name!r} got the window "
                    f"{a.name!r}; a window goes to a pld.DistributedTensor parameter"
                )


def window_buffers(calls: Sequence[Any]) -> list[WindowBuffer]:
    """The window buffers a program's calls use, in first-use order (every rank numbers them so);
    refused when a window view does not fit its buffer or goes to a parameter of the wrong kind."""
    _check_params(calls)
    views = _views(calls)
    for v in views:
        need = math.prod(v.view_shape) * v.dtype.itemsize
        if need > v.buffer.nbytes:
            raise DispatchError(
                f"pld.window({v.name}, {list(v.view_shape)}, dtype={v.pl_dtype!r}) needs {need} bytes; "
                f"the buffer has {v.buffer.nbytes} bytes per rank"
            )
    return list({id(v.buffer): v.buffer for v in views}.values())


def world_ranks(calls: Sequence[Any], ranks: Mapping[int, Any], cluster: Any) -> dict[int, Any]:
    """The ranks of the comm world: the cluster's, else the program's; they must be 0..n-1."""
    workers = dict(enumerate(cluster.workers)) if hasattr(cluster, "workers") else dict(ranks)
    if sorted(workers) != list(range(len(workers))):
        raise DispatchError(
            f"ranks that communicate are 0..n-1; this program dispatches to ranks {sorted(workers)}: "
            "pass cluster=runtime.Cluster(n)"
        )
    return workers


def open_world(calls: Sequence[Any], ranks: Mapping[int, Worker], cluster: Any) -> CommWorld | None:
    """The comm world of a program whose calls take windows (None when none does): every window
    buffer allocated, zeroed, on every rank of the world (the cluster's, else the program's)."""
    buffers = window_buffers(calls)
    if not buffers:
        return None
    workers = world_ranks(calls, ranks, cluster if isinstance(cluster, runtime.Cluster) else None)
    world = CommWorld(workers, timeout=DEFAULT_TIMEOUT, active=sorted({c.device for c in calls}))
    for buf in buffers:
        buf.window = world.alloc_window(buf.nbytes, buf.name, buf.grain)
    return world


def run_ranks(world: CommWorld, plan: Mapping[int, Any]) -> None:
    """Run every rank's launches (`plan[r].run(True)`) in its own thread inside `world`."""

    for rk in plan.values():  # the race detector sees each local store into / load from a window
        for ln in rk.launches:
            ln.plan.graph = instrument(ln.plan.graph)

    failed: dict[int, BaseException] = {}

    def rank_fn(r: int, rk: Any) -> Any:
        def go() -> None:
            try:
                with world.running(r):
                    rk.run(True)
            except BaseException as e:
                failed[r] = e
                raise

        return go

    try:
        runtime.dispatch.run_ranks({r: rank_fn(r, rk) for r, rk in plan.items()})
    except BaseException:
        cause = cause_of(failed)
        if cause is None:
            raise
        r, e = cause
        try:
            new = type(e)(f"rank {r}: {e}")
        except Exception:
            raise e from None
        raise new from e


def cause_of(failed: Mapping[int, BaseException]) -> tuple[int, BaseException] | None:
    """The lowest rank that failed on its own (not with a hang or race report), if any: the peers
    that were waiting for it only report that it stopped, so its error is the one to name."""
    causes = sorted(((r, e) for r, e in failed.items() if not isinstance(e, CommError)), key=lambda x: x[0])
    return causes[0] if causes else None


def close_world(world: CommWorld, calls: Sequence[Any]) -> None:
    """Free the program's windows; its buffers forget them (a later run allocates afresh)."""
    world.close()
    for v in _views(calls):
        v.buffer.window = None
