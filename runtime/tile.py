"""On-chip tiles held as their raw byte image, with the pto-isa fractal layouts.

A tile is kept as bytes, not as a logical matrix, so that a layout mistake anywhere (a wrong
burst gap, the ``mad`` write pitch, a store that ignores strides) corrupts exactly the bytes the
hardware would corrupt, and the corruption propagates through later instructions.

Layouts (hardware-model.md §1.3, §6; element offsets from the tile base):

======  ====================================================  ==========================
name    element offset of logical (r, c)                       pto-isa BLayout/SLayout
======  ====================================================  ==========================
ND      ``r*cols + c``                                         RowMajor, NoneBox
NZ      ``(c//c0)*rows*c0 + r*c0 + c%c0``                      ColMajor + RowMajor, 512
ZZ      ``(r//16)*16*cols + (c//c0)*16*c0 + (r%16)*c0 + c%c0``  RowMajor + RowMajor, 512 (L0A)
ZN      ``(r//c0)*c0*cols + (c//16)*c0*16 + (c%16)*c0 + r%c0``  RowMajor + ColMajor, 512 (L0B)
ACC     ``(c//16)*rows*16 + r*16 + c%16``                      ColMajor + RowMajor, 1024 (L0C)
DN      ``c*rows + r``                                         ColMajor, NoneBox (Vec)
======  ====================================================  ==========================

DN is the column-major Vec layout of a row reduction's ``[R, 1]`` result (one value per row):
its columns, not its rows, are whole 32-byte blocks.

Every layout is "split rows by ir, columns by ic, then permute the four axes", so decoding and
encoding are one reshape + transpose each (no per-fractal loop).
"""

from __future__ import annotations

import operator
from dataclasses import dataclass

import numpy as np

from ._strided import byte_span, strided_bytes
from .dtypes import C0_BYTES, FRACTAL_ROWS, c0_of
from .errors import DeviceError

__all__ = ["TileBuf", "TileGeometry", "tile_geometry", "SPACES", "LAYOUTS", "DEFAULT_LAYOUT"]

SPACES = ("Vec", "Mat", "Left", "Right", "Acc", "Bias")
LAYOUTS = ("ND", "NZ", "ZZ", "ZN", "ACC", "DN")
#: The layout pto-isa gives each space by default on A2/A3 (TileLeft is Zz there, not Nz).
DEFAULT_LAYOUT = {"Vec": "ND", "Mat": "NZ", "Left": "ZZ", "Right": "ZN", "Acc": "ACC", "Bias": "ND"}
_ALLOWED = {
    "Vec": ("ND", "NZ", "DN"),
    "Mat": ("NZ", "ND"),
    "Left": ("ZZ",),
    "Right": ("ZN",),
    "Acc": ("ACC",),
    "Bias": ("ND",),
}


@dataclass(frozen=True)
class _Blocking:
    """How a layout splits (rows, cols) into (R1, R0, C1, C0) and orders them in memory."""

    ir: int
    ic: int
    order: tuple[int, int, int, int]  # physical axis order, as indices into (R1, R0, C1, C0)

    @property
    def inverse(self) -> tuple[int, int, int, int]:
        """Permutation taking the physical axes back to (R1, R0, C1, C0)."""
        return tuple(self.order.index(i) for i in range(4))  # type: ignore[return-value]


_BLOCKINGS: dict[tuple[str, np.dtype], _Blocking] = {}


def _blocking(layout: str, dtype: np.dtype) -> _Blocking:
    b = _BLOCKINGS.get((layout, dtype))
    if b is None:
        b = _BLOCKINGS[(layout, dtype)] = _make_blocking(layout, dtype)
    return b


def _make_blocking(layout: str, dtype: np.dtype) -> _Blocking:
    if layout == "ND":
        return _Blocking(1, 1, (0, 1, 2, 3))
    if layout == "ACC":
        return _Blocking(1, 16, (2, 0, 1, 3))  # 16x16 fractals whatever the dtype
    if layout == "DN":
        return _Blocking(1, 1, (2, 3, 0, 1))  # column-major
    c0 = c0_of(dtype)
    if layout == "NZ":
        return _Blocking(1, c0, (2, 0, 1, 3))
    if layout == "ZZ":
        return _Blocking(FRACTAL_ROWS, c0, (0, 2, 1, 3))
    if layout == "ZN":
        return _Blocking(c0, FRACTAL_ROWS, (0, 2, 3, 1))
    raise DeviceError(f"unknown tile layout {layout!r}; expected one of {LAYOUTS}")


class _Geometry:
    """Everything a tile's static shape determines, validated once per (space, dtype, shape, layout)."""

    __slots__ = (
        "space",
        "dtype",
        "rows",
        "cols",
        "layout",
        "blk",
        "phys",
        "inv",
        "nbytes",
        "key",
        "strides4",
        "need",
    )

    def __init__(self, space: str, dtype: np.dtype, rows: int, cols: int, layout: str) -> None:
        self.space, self.dtype, self.rows, self.cols, self.layout = space, dtype, rows, cols, layout
        self.blk = b = _blocking(layout, dtype)
        dims = (rows // b.ir, b.ir, cols // b.ic, b.ic)
        self.phys = tuple(dims[i] for i in b.order)
        self.inv = b.inverse
        self.nbytes = rows * cols * dtype.itemsize
        self.need = -(-self.nbytes // 32) * 32  # what OnChip charges (32-B aligned)
        self.key = (space, dtype, rows, cols, layout)
        # byte strides of the logical split axes (R1, R0, C1, C0), as _view4 sees them
        phys_strides = [dtype.itemsize] * 4
        for i in range(2, -1, -1):
            phys_strides[i] = phys_strides[i + 1] * self.phys[i + 1]
        self.strides4 = tuple(phys_strides[j] for j in self.inv)

    def axis_view(
        self, start: int, n: int, axis: int, big: int, small: int
    ) -> tuple[int, tuple[int, int, int], tuple[int, int, int]] | None:
        """Rows (axis 0) or columns (axis 1) ``start .. start+n`` split as ``(n/big, big/small,
        small)``: (byte offset of ``start``, extents, byte strides), or None when this layout's
        block does not fit that split (``small | block | big`` with block in {1, small, big})."""
        ib = self.blk.ir if axis == 0 else self.blk.ic
        s_hi, s_lo = self.strides4[2 * axis], self.strides4[2 * axis + 1]
        if start % ib or n % big or big % small:
            return None
        base = (start // ib) * s_hi
        if ib == 1:
            strides = (big * s_hi, small * s_hi, s_hi)
        elif ib == small:
            strides = ((big // small) * s_hi, s_hi, s_lo)
        elif ib == big:
            strides = (s_hi, small * s_lo, s_lo)
        else:
            return None
        return base, (n // big, big // small, small), strides


_GEOMETRIES: dict[tuple[object, ...], _Geometry] = {}


def _geometry(space: str, dtype: np.dtype | type, rows: int, cols: int, layout: str | None) -> _Geometry:
    """The cached, validated geometry of a tile (DeviceError for an invalid one, never cached)."""
    key = (space, dtype, rows, cols, layout)
    g = _GEOMETRIES.get(key)
    if g is not None:
        return g
    if space not in SPACES:
        raise DeviceError(f"unknown on-chip space {space!r}; expected one of {SPACES}")
    dt = np.dtype(dtype)
    lay = DEFAULT_LAYOUT[space] if layout is None else layout
    if lay not in _ALLOWED[space]:
        raise DeviceError(f"a {space} tile cannot have layout {lay}; allowed: {_ALLOWED[space]}")
    r, c = int(rows), int(cols)
    if r < 1 or c < 1:
        raise DeviceError(f"tile shape must be positive, got {r} x {c}")
    b = _blocking(lay, dt)
    # pto-isa static_asserts: fractal layouts need whole fractals, ND rows whole 32-B blocks
    ir, ic = b.ir, b.ic
    if lay in ("NZ", "ZZ"):
        ir = max(ir, FRACTAL_ROWS)  # Mat/Vec NZ tiles: Rows % 16 == 0 [TILE L1519-1534]
    if r % ir or c % ic:
        raise DeviceError(
            f"{space} {lay} tile {r} x {c} {dt.name}: "
            f"rows must be a multiple of {ir} and cols a multiple of {ic} (whole fractals)"
        )
    if lay == "ND" and space in ("Vec", "Mat") and (c * dt.itemsize) % C0_BYTES:
        raise DeviceError(
            f"{space} ND tile row of {c} {dt.name} is "
            f"{c * dt.itemsize} bytes; rows must be whole 32-byte blocks"
        )
    if lay == "DN" and (r * dt.itemsize) % C0_BYTES:
        raise DeviceError(
            f"{space} DN tile column of {r} {dt.name} is {r * dt.itemsize} bytes; "
            "columns must be whole 32-byte blocks"
        )
    g = _Geometry(space, dt, r, c, lay)
    if len(_GEOMETRIES) < 4096:
        _GEOMETRIES[key] = g
    return g


#: The validated static geometry of a tile (space, dtype, rows, cols, layout and everything they
#: determine: ``nbytes``, ``phys`` - the physical element axes -, ``blk``, ``inv``); cached, so
#: tiles made from the same (space, np.dtype, rows, cols, layout) share one object and
#: ``a.geometry is b.geometry`` compares them in one test.
TileGeometry = _Geometry


def tile_geometry(
    space: str, dtype: np.dtype | type, rows: int, cols: int, layout: str | None = None
) -> TileGeometry:
    """The cached, validated geometry of a ``rows x cols`` tile of `dtype` in `space` (`layout`
    None: the space's default). Raises DeviceError, as the TileBuf constructor would, for a
    geometry the hardware cannot hold."""
    return _geometry(space, dtype, rows, cols, layout)


class TileBuf:
    """One on-chip tile: ``rows x cols`` static shape, a valid region, a layout, raw bytes.

    ``valid_row`` / ``valid_col`` are the runtime valid extent (pto-isa ``validRow`` /
    ``validCol``): instructions read them as the hardware does (e.g. the NZ load takes its burst
    length from ``valid_row``), they never clip ``logical()``.
    """

    __slots__ = (
        "space",
        "dtype",
        "rows",
        "cols",
        "valid_row",
        "valid_col",
        "layout",
        "_data",
        "_logical",
        "freed",
        "_owner",
        "_blk",
        "_phys",
        "_inv",
        "_g",
        "geometry",  # public: the static geometry (`TileGeometry`, shared), set once with `_g`
        "owner",  # public: the OnChip this tile was allocated from (None: free-standing), with `_owner`
    )

    def __init__(
        self,
        space: str,
        dtype: np.dtype | type,
        rows: int,
        cols: int,
        *,
        layout: str | None = None,
        valid_row: int | None = None,
        valid_col: int | None = None,
    ) -> None:
        g = _geometry(space, dtype, rows, cols, layout)
        self._init(g, valid_row, valid_col, np.zeros(g.nbytes, dtype=np.uint8))

    def _init(
        self,
        g: _Geometry,
        valid_row: int | None,
        valid_col: int | None,
        data: np.ndarray,
        owner: object = None,
    ) -> None:
        """Fill a tile from a validated geometry (the constructor and the OnChip allocator)."""
        self.space, self.dtype, self.rows, self.cols, self.layout = g.space, g.dtype, g.rows, g.cols, g.layout
        self._blk, self._phys, self._inv, self._g, self.geometry = g.blk, g.phys, g.inv, g, g
        self.valid_row = g.rows if valid_row is None else int(valid_row)
        self.valid_col = g.cols if valid_col is None else int(valid_col)
        self._data = data
        self._logical = False
        self.freed = False
        self._owner: object | None = owner
        self.owner: object | None = owner

    @classmethod
    def _from_geometry(
        cls, g: _Geometry, valid_row: int | None, valid_col: int | None, data: np.ndarray
    ) -> TileBuf:
        t = cls.__new__(cls)
        t._init(g, valid_row, valid_col, data)
        return t

    @classmethod
    def from_geometry(
        cls,
        g: TileGeometry,
        valid_row: int | None,
        valid_col: int | None,
        data: np.ndarray,
        *,
        logical: bool = False,
    ) -> TileBuf:
        """A tile of geometry `g` over the existing uint8 buffer `data` (``g.nbytes`` bytes, not
        copied, owned by no OnChip). `logical`: `data` holds the tile's logical matrix row-major
        (the form whole-tile mads leave in an Acc tile), laid out as the image on first byte access."""
        t = cls.__new__(cls)
        t._init(g, valid_row, valid_col, data)
        t._logical = logical
        return t

    # read-only views of slots that change (a freed tile drops its buffer), as properties over C
    # getters: no Python frame per access (a compiler's fast paths read them per instruction)
    image = property(
        operator.attrgetter("_data"),
        doc="The buffer behind the tile as it is now, without laying out a logical Acc matrix "
        "(see `holds_logical`); `data` is the byte image.",
    )
    holds_logical = property(
        operator.attrgetter("_logical"),
        doc="True while the buffer holds the logical matrix of whole-tile mads, not the image.",
    )

    def image_of(self, g: TileGeometry) -> np.ndarray | None:
        """The byte image when this tile is live, of geometry `g` and holds bytes (not a logical
        matrix), else None: one call for the test a fast path makes before using the bytes."""
        if self._g is g and not self.freed and not self._logical:
            return self._data
        return None

    def check_live(self) -> None:
        """DeviceError if the tile was freed (use after free)."""
        self._live()

    def check_window(self, r0: int, c0: int, nrows: int, ncols: int) -> None:
        """DeviceError unless the logical window at (r0, c0) of nrows x ncols lies in the tile."""
        self._check_window(r0, c0, nrows, ncols)

    # ------------------------------------------------------------------ byte image access
    @property
    def data(self) -> np.ndarray:
        """The raw byte image (``uint8``, ``rows * cols * itemsize`` bytes)."""
        if self._logical:
            self._materialize()
        return self._data

    @data.setter
    def data(self, value: np.ndarray) -> None:
        """Replace the raw byte image (the tile no longer holds a logical Acc matrix)."""
        self._data = value
        self._logical = False

    def _materialize(self) -> None:
        """An Acc tile written by whole-tile mads holds its logical matrix row-major in the
        buffer (cube.tmatmul): lay it out as the ACC image before anyone reads bytes."""
        self._logical = False
        b = self._blk
        flat = self._data.view(self.dtype)
        logical = flat.reshape(self.rows, self.cols).copy()
        flat.reshape(self._phys).transpose(self._inv)[...] = logical.reshape(
            self.rows // b.ir, b.ir, self.cols // b.ic, b.ic
        )

    @property
    def nbytes(self) -> int:
        """Size of the tile's byte image."""
        return self._data.nbytes

    def _live(self) -> None:
        if self.freed:
            raise DeviceError(f"{self.space} tile {self.rows}x{self.cols} used after free")

    def view(self, addr: int, shape: tuple[int, ...], byte_strides: tuple[int, ...]) -> np.ndarray:
        """Writable uint8 strided view into the tile image; DeviceError if it leaves the tile.

        A DMA or ``mad`` that runs past the tile would hit a neighbouring buffer on the device;
        the simulator refuses instead of guessing what lives there.
        """
        self._live()
        lo, hi = byte_span(addr, shape, byte_strides)
        if hi <= lo:
            return np.zeros(shape, dtype=np.uint8)
        if lo < 0 or hi > self.nbytes:
            raise self._outside(lo, hi)
        return strided_bytes(self.data, addr, shape, byte_strides)

    def _outside(self, lo: int, hi: int) -> DeviceError:
        return DeviceError(
            f"access to bytes [{lo}, {hi}) of a {self.space} tile of {self.nbytes} bytes "
            f"({self.rows}x{self.cols} {self.dtype.name}) runs outside the tile"
        )

    def view_span(
        self, addr: int, shape: tuple[int, ...], byte_strides: tuple[int, ...], lo: int, hi: int
    ) -> np.ndarray:
        """:meth:`view` with the touched range ``[addr + lo, addr + hi)`` precomputed (non-empty)."""
        if self.freed:
            self._live()
        if addr + lo < 0 or addr + hi > self.data.nbytes:
            return self.view(addr, shape, byte_strides)  # raises with the full message
        return strided_bytes(self.data, addr, shape, byte_strides)

    def span(self, lo: int, hi: int) -> np.ndarray:
        """The image bytes ``[lo, hi)`` (non-empty) as a flat view: :meth:`view_span` of a dense
        transfer, whose bytes are in view order (one slice instead of a strided view)."""
        if self.freed:
            self._live()
        data = self.data
        if lo < 0 or hi > data.nbytes:
            raise self._outside(lo, hi)
        return data[lo:hi]

    def _view4(self) -> np.ndarray:
        """Element view with axes (R1, R0, C1, C0) of the logical split; writable, no copy."""
        return self.data.view(self.dtype).reshape(self._phys).transpose(self._inv)

    def logical(self) -> np.ndarray:
        """Decode the whole ``rows x cols`` logical matrix from the byte image (a copy)."""
        self._live()
        return np.array(self._view4()).reshape(self.rows, self.cols)

    def set_logical(self, arr: np.ndarray) -> None:
        """Encode a ``rows x cols`` logical matrix into the byte image (same dtype required)."""
        self._live()
        arr = np.asarray(arr)
        if arr.shape != (self.rows, self.cols):
            raise DeviceError(f"set_logical: expected shape {(self.rows, self.cols)}, got {arr.shape}")
        if arr.dtype != self.dtype:
            raise DeviceError(f"set_logical: expected dtype {self.dtype.name}, got {arr.dtype.name}")
        b = self._blk
        self._view4()[...] = arr.reshape(self.rows // b.ir, b.ir, self.cols // b.ic, b.ic)

    def window(self, r0: int, c0: int, nrows: int, ncols: int) -> np.ndarray:
        """Copy of the logical window ``[r0:r0+nrows, c0:c0+ncols]`` without decoding the rest."""
        self._live()
        self._check_window(r0, c0, nrows, ncols)
        b = self._blk
        if r0 % b.ir == 0 and nrows % b.ir == 0 and c0 % b.ic == 0 and ncols % b.ic == 0:
            v = self._view4()[r0 // b.ir : (r0 + nrows) // b.ir, :, c0 // b.ic : (c0 + ncols) // b.ic, :]
            return np.ascontiguousarray(v).reshape(nrows, ncols)
        return np.ascontiguousarray(self.logical()[r0 : r0 + nrows, c0 : c0 + ncols])

    def set_window(self, r0: int, c0: int, arr: np.ndarray) -> None:
        """Encode ``arr`` into the logical window starting at (r0, c0)."""
        self._live()
        arr = np.asarray(arr, dtype=self.dtype)
        nrows, ncols = arr.shape
        self._check_window(r0, c0, nrows, ncols)
        b = self._blk
        if r0 % b.ir == 0 and nrows % b.ir == 0 and c0 % b.ic == 0 and ncols % b.ic == 0:
            v = self._view4()[r0 // b.ir : (r0 + nrows) // b.ir, :, c0 // b.ic : (c0 + ncols) // b.ic, :]
            v[...] = arr.reshape(nrows // b.ir, b.ir, ncols // b.ic, b.ic)
            return
        full = self.logical()
        full[r0 : r0 + nrows, c0 : c0 + ncols] = arr
        self.set_logical(full)

    def _check_window(self, r0: int, c0: int, nrows: int, ncols: int) -> None:
        if r0 < 0 or c0 < 0 or r0 + nrows > self.rows or c0 + ncols > self.cols:
            raise DeviceError(
                f"window [{r0}:{r0 + nrows}, {c0}:{c0 + ncols}] is outside the "
                f"{self.rows}x{self.cols} {self.space} tile"
            )

    def __repr__(self) -> str:
        return (
            f"TileBuf({self.space}, {self.dtype.name}, {self.rows}x{self.cols}, "
            f"valid={self.valid_row}x{self.valid_col}, {self.layout}"
            f"{', freed' if self.freed else ''})"
        )
