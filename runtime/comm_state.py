"""What each rank of the simulated communication world is doing, and the text of a hang report.

runtime/comm.py keeps one :class:`RankState` per rank (the world decides a hang from them) and one
:class:`PendingCollective` per collective call in progress (the ranks that entered it, their
arguments, the results once the last rank arrives)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["RankState", "PendingCollective", "notify_history", "key_text"]


@dataclass
class RankState:
    """One rank's state: `kind`, the kernel line it is at, and (while blocked) its condition."""

    # idle (runs no kernel) | pending (not started) | running | wait | collective | done | failed
    kind: str = "idle"
    site: str = ""
    describe: Callable[[], str] = lambda: ""
    ready: Callable[[], bool] = lambda: False
    progress: float = field(default_factory=time.monotonic)


@dataclass(eq=False)
class PendingCollective:
    """A collective call some rank entered: the others must enter it with the same `key`."""

    kind: str
    key: tuple[Any, ...]  # what every rank must agree on (op, shapes, dtypes)
    first_rank: int
    first_site: str
    args: dict[int, dict[str, Any]] = field(default_factory=dict)
    done: bool = False
    results: dict[int, Any] = field(default_factory=dict)


def notify_history(log: list[tuple[int, str, int, str]]) -> str:
    """What reached a cell, for a hang report: who notified it, how, and the likely mistake."""
    if not log:
        return "; no rank notified it"
    names = {"set": "Set", "atomic_add": "AtomicAdd"}
    text = "; notified by " + ", ".join(
        f"rank {r} ({names[op]} {v} at {site})" for r, op, v, site in sorted(log)
    )
    setters = {r for r, op, _, _ in log if op == "set"}
    if len(setters) > 1:
        text += " - several ranks Set this cell and the last Set wins: count them with NotifyOp.AtomicAdd"
    return text


def key_text(key: tuple[Any, ...]) -> str:
    """A collective's agreement key as a hang / mismatch report shows it."""
    return "(" + ", ".join(str(k) for k in key) + ")"
