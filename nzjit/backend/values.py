"""Run-time values of the numpy backend: GM tensor views, transposed tile views, host arrays."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import runtime
from runtime import GlobalMemory, GmView, TileBuf


@dataclass(frozen=True)
class NzWindow:
    """A window on a *logical* NZ tensor, for graphs before BlockNzTensorViews (bisection).

    `root` is the logical shape of the whole tensor (its bytes in NZ order), `offsets` this view's
    origin on it, `kept` the root axes that are axes of the view (the others were indexed away).
    """

    root: tuple[int, ...]
    offsets: tuple[int, ...]
    kept: tuple[int, ...]

    def slices(self, rel: tuple[int, ...], extents: tuple[int, ...]) -> tuple[slice, ...]:
        """Index of the root for the window at `rel` (relative to this view) of `extents`; indexed-away axes
        get length-1 slices."""
        idx = [slice(o, o + 1) for o in self.offsets]
        for j, axis in enumerate(self.kept):
            o = self.offsets[axis] + rel[j]
            idx[axis] = slice(o, o + extents[j])
        return tuple(idx)

    def sub(self, rel: tuple[int, ...], drop: tuple[int, ...]) -> NzWindow:
        """The sub-window at `rel` of this view, with the view axes at positions `drop` indexed away."""
        offs = list(self.offsets)
        for j, axis in enumerate(self.kept):
            offs[axis] += rel[j]
        kept = tuple(a for j, a in enumerate(self.kept) if j not in drop)
        return NzWindow(self.root, tuple(offs), kept)


def dense_view(
    gm: GlobalMemory, addr: int, dtype: np.dtype, shape: tuple[int, ...], strides: tuple[int, ...]
) -> np.ndarray:
    """A writable typed strided view of GM (element strides), bounds-checked by the runtime."""
    size = dtype.itemsize
    v = gm.view(addr, (*shape, size), (*(s * size for s in strides), 1))
    return v.view(dtype)[..., 0]


@dataclass(frozen=True)
class TensorVal:
    """A tensor in GM: a strided view (element strides), as the emitted `partition_view` sees it.

    `nz` is set for an NZ tensor seen before BlockNzTensorViews: only the reference paths of
    bisection stages read it, through the NZ-8 order; the lowered graph never does.
    """

    addr: int
    dtype: np.dtype
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    layout: str = "ND"
    nz: NzWindow | None = None

    def gm_view(self, offsets: tuple[int, ...], sizes: tuple[int, ...]) -> GmView:
        """The partition at `offsets` (already clamped) of extent `sizes`, folded to rank <= 5."""
        delta = sum(o * s for o, s in zip(offsets, self.strides)) * self.dtype.itemsize
        shape, strides = list(sizes), list(self.strides)
        while len(shape) > 5:  # fold leading unit axes (they carry no stride)
            if shape[0] != 1:
                raise runtime.DeviceError(
                    f"a GM window of rank {len(shape)} with leading extent "
                    f"{shape[0]} has no rank-5 GlobalTensor"
                )
            shape.pop(0)
            strides.pop(0)
        return GmView(self.addr + delta, self.dtype, tuple(shape), tuple(strides), self.layout)

    def _root_nz(self, gm: GlobalMemory) -> np.ndarray:
        assert self.nz is not None
        n = int(np.prod(self.nz.root)) * self.dtype.itemsize
        return runtime.unpack_nz(gm.read(self.addr, n).view(self.dtype).reshape(self.nz.root))

    def read(
        self, gm: GlobalMemory, offsets: tuple[int, ...] | None = None, extents: tuple[int, ...] | None = None
    ) -> np.ndarray:
        """The logical content of a window (the whole view by default); reference paths only."""
        offsets = offsets or (0,) * len(self.shape)
        extents = extents or self.shape
        if self.nz is not None:
            return self._root_nz(gm)[self.nz.slices(offsets, extents)].reshape(extents)
        d = dense_view(gm, self.addr, self.dtype, self.shape, self.strides)
        return np.array(d[tuple(slice(o, o + e) for o, e in zip(offsets, extents))])

    def write(self, gm: GlobalMemory, offsets: tuple[int, ...], arr: np.ndarray) -> None:
        """Write `arr` (its shape left-padded with 1s to this rank) at `offsets`."""
        arr = np.asarray(arr).astype(self.dtype, copy=False)
        extents = (1,) * (len(self.shape) - arr.ndim) + arr.shape
        if self.nz is not None:
            full = self._root_nz(gm).copy()
            win = self.nz.slices(offsets, extents)
            full[win] = arr.reshape(full[win].shape)
            gm.write(self.addr, runtime.pack_nz(full).reshape(-1).view(np.uint8))
            return
        d = dense_view(gm, self.addr, self.dtype, self.shape, self.strides)
        d[tuple(slice(o, o + e) for o, e in zip(offsets, extents))] = arr.reshape(extents)


@dataclass(frozen=True)
class TransposedTile:
    """`tile.transpose_view`: the same bytes read as the transpose (no copy, like the device)."""

    tile: TileBuf

    def logical(self) -> np.ndarray:
        """The tile's logical matrix, transposed."""
        return self.tile.logical().T


@dataclass
class HostValue:
    """A tensor-level result of the reference path (before tiles exist): a logical array."""

    array: np.ndarray

    def logical(self) -> np.ndarray:
        """The logical array itself."""
        return self.array
