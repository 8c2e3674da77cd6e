"""Happens-before bookkeeping of the simulated communication world: vector clocks and, per window
byte, who wrote it last (and when, in the writer's clock) and when each rank last read it.

This is the race detector of ``runtime.comm``. It follows the scheme of Pallas's TPU interpret
mode: every rank keeps a vector clock; a ``notify`` publishes the notifier's clock with the signal
cell and then ticks the notifier's own entry, a satisfied ``wait`` joins the cell's clock into the
waiter's. An access B is ordered after an access A of rank ``a`` at ``a``'s epoch ``e`` exactly
when B's rank has learned ``clock[a] >= e`` through such a chain. Every rank's own entry starts at
1, so an access nobody synchronised with is never ordered.

Everything is per byte but vectorised: a region is a numpy slice of the per-byte arrays, never a
Python loop over bytes. The caller (``runtime.comm``) holds the world's lock around every call.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["new_clock", "Conflict", "ByteTracker"]

NEVER = -1  # `writer` of a byte no rank has written since allocation


def new_clock(rank: int, n_ranks: int) -> np.ndarray:
    """The initial vector clock of `rank`: its own entry 1 (its first epoch), the others 0."""
    c = np.zeros(n_ranks, np.int64)
    c[rank] = 1
    return c


@dataclass(frozen=True)
class Conflict:
    """Two unordered accesses to one byte: the earlier one's rank, kind and site, and the byte."""

    other_rank: int
    other_kind: str  # "write" | "read"
    other_site: str
    byte: int


class ByteTracker:
    """Per-byte history of one rank's window (`nbytes` bytes, `n_ranks` ranks in the world).

    `writer[b]` is the rank that wrote byte b last (NEVER since allocation), `epoch[b]` the writer's
    own clock entry at that write, `atomic[b]` whether it was an atomic add (concurrent atomic adds
    are not races); `read_epoch[r, b]` is rank r's own clock entry at its last read of b (0: never).
    Sites are kept in a small table (`sites`), indexed per byte, so a report can name kernel lines.
    """

    def __init__(self, nbytes: int, n_ranks: int) -> None:
        self.writer = np.full(nbytes, NEVER, np.int32)
        self.epoch = np.zeros(nbytes, np.int64)
        self.atomic = np.zeros(nbytes, bool)
        self.write_site = np.zeros(nbytes, np.int32)
        self.read_epoch = np.zeros((n_ranks, nbytes), np.int64)
        self.read_site = np.zeros((n_ranks, nbytes), np.int32)
        self.sites: list[str] = ["<allocation>"]
        self._site_ids: dict[str, int] = {"<allocation>": 0}

    def _site(self, site: str) -> int:
        i = self._site_ids.get(site)
        if i is None:
            i = self._site_ids[site] = len(self.sites)
            self.sites.append(site)
        return i

    # ------------------------------------------------------------------------------- checks
    def read_conflict(self, idx: np.ndarray, reader: int, clock: np.ndarray) -> Conflict | None:
        """A write of another rank to bytes `idx` that the reader (at vector clock `clock`) is not
        ordered after, else None."""
        w = self.writer[idx]
        known = clock[np.maximum(w, 0)]
        bad = (w != NEVER) & (w != reader) & (self.epoch[idx] > known)
        return self._first(idx, bad, w, self.write_site[idx], "write")

    def write_conflict(
        self, idx: np.ndarray, writer: int, clock: np.ndarray, atomic: bool
    ) -> Conflict | None:
        """An earlier write (not both atomic adds) or read of another rank to bytes `idx` that this
        write (by `writer` at `clock`) is not ordered after, else None."""
        w = self.writer[idx]
        known = clock[np.maximum(w, 0)]
        bad = (w != NEVER) & (w != writer) & (self.epoch[idx] > known)
        if atomic:
            bad &= ~self.atomic[idx]
        c = self._first(idx, bad, w, self.write_site[idx], "write")
        if c is not None:
            return c
        reads = self.read_epoch[:, idx]  # [ranks, bytes]
        unordered = reads > clock[:, None]
        unordered[writer] = False
        if unordered.any():
            r, j = (int(x[0]) for x in np.nonzero(unordered))
            return Conflict(r, "read", self.sites[int(self.read_site[r, idx[j]])], int(idx[j]))
        return None

    def _first(
        self, idx: np.ndarray, bad: np.ndarray, who: np.ndarray, site: np.ndarray, kind: str
    ) -> Conflict | None:
        if not bad.any():
            return None
        j = int(np.argmax(bad))
        return Conflict(int(who[j]), kind, self.sites[int(site[j])], int(idx[j]))

    def unwritten(self, idx: np.ndarray) -> np.ndarray:
        """The bytes of `idx` that no rank has written since the window was allocated."""
        return idx[self.writer[idx] == NEVER]

    # ----------------------------------------------------------------------------- records
    def record_write(self, idx: np.ndarray, writer: int, epoch: int, site: str, atomic: bool = False) -> None:
        """Bytes `idx` were written by `writer` at its own epoch `epoch` (0: a synchronisation write,
        ordered before everything, e.g. a signal cell or a collective's result)."""
        self.writer[idx] = writer
        self.epoch[idx] = epoch
        self.atomic[idx] = atomic
        self.write_site[idx] = self._site(site)

    def record_read(self, idx: np.ndarray, reader: int, epoch: int, site: str) -> None:
        """Bytes `idx` were read by `reader` at its own epoch `epoch`."""
        self.read_epoch[reader, idx] = epoch
        self.read_site[reader, idx] = self._site(site)
