"""``GmView``: the simulator's mirror of pto-isa's ``GlobalTensor`` (a GM window descriptor).

A view is an address plus a shape and element strides of rank 1..5, and a layout tag.  It holds
no bytes: instructions interpret it exactly as pto-isa interprets ``GlobalTensor`` (e.g. the
NZ load reads only ``strides[0]`` and ``strides[1]``; the Acc NZ store reads no stride at all),
so a descriptor that is wrong in a way the hardware ignores is ignored here too.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .errors import DeviceError
from .nz import nz_blocked_shape

__all__ = ["GmView", "row_major_strides"]


def row_major_strides(shape: Sequence[int]) -> tuple[int, ...]:
    """Element strides of a dense row-major array (also the NZ strides of a blocked shape, NZ-7)."""
    out, acc = [], 1
    for d in reversed(tuple(shape)):
        out.append(acc)
        acc *= int(d)
    return tuple(reversed(out))


@dataclass(frozen=True)
class GmView:
    """A GM window: ``addr`` in bytes, ``shape`` / ``strides`` in elements (rank 1..5).

    ``layout`` is ``"ND"`` or ``"NZ"`` (pto ``Layout::ND`` / ``Layout::NZ``).  For ND the
    trailing two axes are the row / column window; for NZ the view must be the rank-5 blocked
    form ``<B, C/c0, R/16, 16, c0>`` (NZ-6), checked by the instructions, not here, because the
    assembler -- not the descriptor -- enforces it.
    """

    addr: int
    dtype: np.dtype
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    layout: str = "ND"

    def __post_init__(self) -> None:
        object.__setattr__(self, "dtype", np.dtype(self.dtype))
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))
        object.__setattr__(self, "strides", tuple(int(s) for s in self.strides))
        object.__setattr__(self, "addr", int(self.addr))
        if not 1 <= len(self.shape) <= 5 or len(self.strides) != len(self.shape):
            raise DeviceError(
                f"GmView needs rank 1..5 with one stride per axis, got shape "
                f"{self.shape} strides {self.strides}"
            )
        if self.layout not in ("ND", "NZ"):
            raise DeviceError(f"GmView layout must be 'ND' or 'NZ', got {self.layout!r}")

    @property
    def itemsize(self) -> int:
        """Bytes per element of the view's dtype."""
        return self.dtype.itemsize

    @property
    def shape5(self) -> tuple[int, int, int, int, int]:
        """Shape left-padded with 1s to rank 5 (how pto fills an unused GlobalTensor slot)."""
        return (1,) * (5 - len(self.shape)) + self.shape  # type: ignore[return-value]

    @property
    def strides5(self) -> tuple[int, int, int, int, int]:
        """Strides left-padded to rank 5; a padded axis has extent 1 so its stride is never used."""
        pad = self.strides[0] * self.shape[0] if self.strides else 0
        return (pad,) * (5 - len(self.strides)) + self.strides  # type: ignore[return-value]

    @classmethod
    def dense(
        cls, addr: int, logical_shape: Sequence[int], dtype: np.dtype | type, layout: str = "ND"
    ) -> GmView:
        """View of a whole dense tensor: ND keeps its shape (leading axes folded past rank 5),
        NZ gets the blocked rank-5 shape with row-major strides (NZ-5, NZ-7, NZ-32)."""
        shape = tuple(int(d) for d in logical_shape)
        if layout == "NZ":
            blocked = nz_blocked_shape(shape, dtype)
            return cls(addr, np.dtype(dtype), blocked, row_major_strides(blocked), "NZ")
        if len(shape) == 0:
            shape = (1,)
        if len(shape) > 5:
            shape = (math.prod(shape[:-4]),) + shape[-4:]
        return cls(addr, np.dtype(dtype), shape, row_major_strides(shape), layout)

    def partition(self, offsets: Sequence[int], sizes: Sequence[int]) -> GmView:
        """Sub-window (pto ``partition_view``): pointer advanced by ``sum(off*stride)``, same strides.

        Offsets are taken as given: the clamp of a negative offset to 0 (NZ-18) is emitted code,
        not a property of the view, so it is the caller's to apply.
        """
        offsets, sizes = tuple(int(o) for o in offsets), tuple(int(s) for s in sizes)
        if len(offsets) != len(self.shape) or len(sizes) != len(self.shape):
            raise DeviceError(
                f"partition of a rank-{len(self.shape)} view needs "
                f"{len(self.shape)} offsets and sizes, got {offsets} / {sizes}"
            )
        delta = sum(o * s for o, s in zip(offsets, self.strides)) * self.dtype.itemsize
        return self._trusted(self.addr + delta, sizes)

    @classmethod
    def _make(
        cls, addr: int, dtype: np.dtype, shape: tuple[int, ...], strides: tuple[int, ...], layout: str
    ) -> GmView:
        """A view from fields that are already valid (ints, np.dtype, rank 1..5): no checks (hot path)."""
        v = object.__new__(cls)
        d = v.__dict__
        d["addr"], d["dtype"], d["shape"], d["strides"], d["layout"] = addr, dtype, shape, strides, layout
        return v

    @classmethod
    def trusted(
        cls, addr: int, dtype: np.dtype, shape: tuple[int, ...], strides: tuple[int, ...], layout: str
    ) -> GmView:
        """A view from fields the caller has already validated (int address, np.dtype, rank 1..5
        shape and element strides, a known layout): built without the constructor's checks."""
        return cls._make(addr, dtype, shape, strides, layout)

    def _trusted(self, addr: int, shape: tuple[int, ...]) -> GmView:
        """Same dtype / strides / layout, new addr and shape, skipping re-validation (hot path)."""
        v = object.__new__(GmView)
        for k, val in (
            ("addr", addr),
            ("dtype", self.dtype),
            ("shape", shape),
            ("strides", self.strides),
            ("layout", self.layout),
        ):
            object.__setattr__(v, k, val)
        return v
