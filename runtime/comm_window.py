"""Window buffers of the simulated communication world: one allocation per rank, and the byte
indices of a box of a window view. The world (runtime/comm.py) owns the windows and checks every
access; this module only knows the memory and its regions."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .comm_clock import ByteTracker
from .comm_errors import CommError
from .device import DeviceTensor

__all__ = ["Window", "region_bytes"]


@dataclass(eq=False)
class Window:
    """One window buffer: `nbytes` bytes on every rank, each rank's allocation its own memory."""

    name: str
    nbytes: int
    tensors: dict[int, DeviceTensor]  # rank -> that rank's bytes (uint8 [nbytes])
    trackers: dict[int, ByteTracker]
    shadows: dict[int, np.ndarray]  # rank -> the bytes as the world last knew them
    grain: int = 1  # element size: a local store found by comparison is dated element by element

    def address(self, rank: int) -> int:
        """The window's base address in `rank`'s GM."""
        return self.tensors[rank].address

    def tensor(self, rank: int, shape: Sequence[int], dtype: Any) -> DeviceTensor:
        """`rank`'s window seen as a dense `shape` / `dtype` tensor (it must fit the window)."""
        dtype = np.dtype(dtype)
        need = math.prod(shape) * dtype.itemsize
        if need > self.nbytes:
            raise CommError(
                f"window {self.name!r} of {self.nbytes} bytes cannot hold a {list(shape)} "
                f"{dtype.name} view ({need} bytes)"
            )
        base = self.tensors[rank]
        return DeviceTensor(base.worker, base.address, tuple(int(d) for d in shape), dtype)

    def _bytes(self, rank: int) -> np.ndarray:
        t = self.tensors[rank]
        return t.worker.gm.view(t.address, (self.nbytes,), (1,))


def region_bytes(
    shape: Sequence[int], itemsize: int, offsets: Sequence[int], box: Sequence[int], what: str
) -> np.ndarray:
    """Flat byte indices of the box at `offsets` of extent `box` in a dense row-major `shape` view."""
    if len(offsets) != len(shape) or len(box) != len(shape):
        raise CommError(
            f"{what}: a rank-{len(shape)} window view needs {len(shape)} offsets and extents, got "
            f"offsets {list(offsets)} and shape {list(box)}"
        )
    for axis, (o, b, d) in enumerate(zip(offsets, box, shape)):
        if o < 0 or b < 0 or o + b > d:
            raise CommError(
                f"{what}: the region [{o}, {o + b}) on axis {axis} is outside the window view "
                f"{list(shape)}; the region must fit inside the window at its offsets"
            )
    strides = [math.prod(shape[i + 1 :]) for i in range(len(shape))]
    idx = np.zeros((), np.intp)
    for o, b, s in zip(offsets, box, strides):
        idx = idx[..., None] + (np.arange(b, dtype=np.intp) + o) * s
    return ((idx.reshape(-1, 1) * itemsize) + np.arange(itemsize, dtype=np.intp)).reshape(-1)
