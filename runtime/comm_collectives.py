"""The collectives of the simulated communication world (PyPTO's ``pld.tensor.*`` semantics).

Each is one rendezvous of every rank (``Endpoint.collective``): the last rank to arrive computes the
result with every rank stopped, so the data movement itself cannot race, and every rank leaves
ordered after what every rank did before entering. A target is a whole window view
``(window, view_shape, dtype)``; the ``[NR, SIZE]`` collectives need ``view_shape[0] == NR``.

Reductions run over the ranks in rank order (0, 1, ...), so a float result does not depend on the
order in which the rank threads arrived.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .comm import REDUCE_OPS, CommError, Endpoint, Window, region_bytes

__all__ = ["allreduce", "allgather", "reduce_scatter", "all_to_all", "broadcast", "barrier"]

_UFUNC = {"sum": np.add, "max": np.maximum, "min": np.minimum, "prod": np.multiply}


def _whole(shape: Sequence[int], dtype: np.dtype) -> np.ndarray:
    return region_bytes(shape, dtype.itemsize, [0] * len(shape), shape, "collective")


def _reduce(parts: list[np.ndarray], op: str) -> np.ndarray:
    f = _UFUNC[op]
    acc = parts[0].copy()
    with np.errstate(over="ignore"):
        for p in parts[1:]:  # rank order: deterministic whatever the arrival order
            acc = f(acc, p).astype(acc.dtype)
    return acc


def _rows(view_shape: Sequence[int], n: int, what: str) -> None:
    if len(view_shape) < 1 or view_shape[0] != n:
        raise CommError(
            f"{what} needs a target of shape [NR, ...] with NR = {n} ranks, got {list(view_shape)}"
        )


def allreduce(ep: Endpoint, win: Window, view_shape: Sequence[int], dtype: Any, op: str, site: str) -> None:
    """Every rank's window view becomes the `op` reduction (sum / max / min / prod) of all of them."""
    dtype = np.dtype(dtype)
    if op not in REDUCE_OPS:
        raise CommError(f"{site}: allreduce op {op!r} is not one of {REDUCE_OPS}")
    idx = _whole(view_shape, dtype)

    def run(io: Endpoint, args: dict[int, dict[str, Any]]) -> dict[int, Any]:
        parts = [io.read_window(args[r]["win"], r, idx).view(dtype) for r in sorted(args)]
        out = _reduce(parts, op)
        for r in args:
            io.write_window(args[r]["win"], r, idx, out, f"allreduce at {args[r]['site']}")
        return {}

    ep.collective("allreduce", (op, tuple(view_shape), dtype.name), site, {"win": win, "site": site}, run)


def allgather(
    ep: Endpoint, local: np.ndarray, win: Window, view_shape: Sequence[int], dtype: Any, site: str
) -> None:
    """Row `src` of every rank's `[NR, ...]` target becomes rank src's `local` chunk."""
    dtype = np.dtype(dtype)
    _rows(view_shape, ep.n_ranks, f"{site}: allgather")
    row = tuple(view_shape[1:])
    chunk = np.ascontiguousarray(local, dtype).reshape(-1)
    if chunk.size != int(np.prod(row)):
        raise CommError(
            f"{site}: allgather: the local chunk of {chunk.size} elements does not fill one row "
            f"{list(row)} of the target"
        )

    def run(io: Endpoint, args: dict[int, dict[str, Any]]) -> dict[int, Any]:
        gathered = np.concatenate([args[r]["chunk"] for r in sorted(args)])
        for r in args:
            io.write_window(
                args[r]["win"], r, _whole(view_shape, dtype), gathered, f"allgather at {args[r]['site']}"
            )
        return {}

    ep.collective(
        "allgather", (tuple(view_shape), dtype.name), site, {"win": win, "chunk": chunk, "site": site}, run
    )


def reduce_scatter(
    ep: Endpoint, win: Window, view_shape: Sequence[int], dtype: Any, op: str, site: str
) -> None:
    """Row `r` of rank r's `[NR, ...]` target becomes the `op` reduction of row r over all ranks
    (PyPTO accepts only sum); the other rows are left as they were."""
    dtype = np.dtype(dtype)
    if op != "sum":
        raise CommError(f"{site}: reduce_scatter supports only ReduceOp.Sum, got {op!r}")
    n = ep.n_ranks
    _rows(view_shape, n, f"{site}: reduce_scatter")
    row = [1, *view_shape[1:]]

    def run(io: Endpoint, args: dict[int, dict[str, Any]]) -> dict[int, Any]:
        for dst in sorted(args):
            idx = region_bytes(
                view_shape, dtype.itemsize, [dst] + [0] * (len(view_shape) - 1), row, "reduce_scatter"
            )
            parts = [io.read_window(args[r]["win"], r, idx).view(dtype) for r in sorted(args)]
            io.write_window(
                args[dst]["win"], dst, idx, _reduce(parts, op), f"reduce_scatter at {args[dst]['site']}"
            )
        return {}

    ep.collective(
        "reduce_scatter", (op, tuple(view_shape), dtype.name), site, {"win": win, "site": site}, run
    )


def all_to_all(
    ep: Endpoint, local: np.ndarray, win: Window, view_shape: Sequence[int], dtype: Any, site: str
) -> None:
    """Row `src` of rank d's `[NR, ...]` target becomes row d of rank src's `local` `[NR, ...]` input."""
    dtype = np.dtype(dtype)
    n = ep.n_ranks
    _rows(view_shape, n, f"{site}: all_to_all")
    data = np.ascontiguousarray(local, dtype)
    if data.shape != tuple(view_shape):
        raise CommError(
            f"{site}: all_to_all: the input {list(data.shape)} and the target {list(view_shape)} "
            "differ in shape"
        )

    def run(io: Endpoint, args: dict[int, dict[str, Any]]) -> dict[int, Any]:
        for d in sorted(args):
            received = np.stack([args[s]["data"][d] for s in sorted(args)])
            io.write_window(
                args[d]["win"], d, _whole(view_shape, dtype), received, f"all_to_all at {args[d]['site']}"
            )
        return {}

    ep.collective(
        "all_to_all", (tuple(view_shape), dtype.name), site, {"win": win, "data": data, "site": site}, run
    )


def broadcast(ep: Endpoint, win: Window, view_shape: Sequence[int], dtype: Any, root: int, site: str) -> None:
    """Every rank's window view becomes rank `root`'s."""
    dtype = np.dtype(dtype)
    if not 0 <= root < ep.n_ranks:
        raise CommError(
            f"{site}: broadcast root {root} is not a rank of the world (ranks 0..{ep.n_ranks - 1})"
        )
    idx = _whole(view_shape, dtype)

    def run(io: Endpoint, args: dict[int, dict[str, Any]]) -> dict[int, Any]:
        data = io.read_window(args[root]["win"], root, idx)
        for r in args:
            if r != root:
                io.write_window(args[r]["win"], r, idx, data, f"broadcast at {args[r]['site']}")
        return {}

    ep.collective("broadcast", (root, tuple(view_shape), dtype.name), site, {"win": win, "site": site}, run)


def barrier(ep: Endpoint, site: str) -> None:
    """Every rank waits until all have arrived; afterwards each is ordered after all the others."""
    ep.collective("barrier", (), site, {"site": site}, lambda io, args: {})
