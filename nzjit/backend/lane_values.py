"""Values of a lane-batched run (see batched.py): tensors with one address per lane, tiles as the
lanes' distinct byte images, TEXTRACT windows fused into their mad, accumulators, and the
conversion of mad operands for all images at once."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np

from runtime import TileBuf
from runtime.cube import TileWindow
from runtime.widen import COMPILED, LINE_DTYPES, widen_bf16, widen_f16, widen_lines_f32


@dataclass(frozen=True, eq=False)
class LaneTensor:
    """A GM tensor view with one base address per lane (`addr`, int64 `(L,)`); shape, strides and layout are
    lane-uniform."""

    addr: np.ndarray  # int64 (L,): one base address per lane
    dtype: np.dtype
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    layout: str
    nz: None = None


class LaneTile:
    """A tile over lanes: the distinct byte images `data` (lanes loading the same window share one) and the
    lane -> image map `row`.

    A tile loaded by one plain burst copy may start *lazy*: `gm_images` then lists read-only element
    views of GM, ``(u0, view (n, *g.phys))`` for images u0..u0+n-1, holding exactly the bytes the load
    would copy (GM does not change while a batch runs: stores are deferred and a load/store overlap
    falls back).  A mad reads its operands straight from there; `data` materialises the images (the
    load's copy) on first use."""

    __slots__ = ("g", "valid_row", "valid_col", "_held", "row", "freed", "gm_images", "_fill")

    def __init__(
        self,
        g: Any,
        vr: int,
        vc: int,
        data: np.ndarray | None,
        row: np.ndarray,
        gm_images: list[tuple[int, np.ndarray]] | None = None,
        fill: Callable[[], np.ndarray] | None = None,
    ) -> None:
        self.g, self.valid_row, self.valid_col, self._held, self.row, self.freed = g, vr, vc, data, row, False
        self.gm_images, self._fill = gm_images, fill

    @property
    def data(self) -> np.ndarray:
        """The (U, nbytes) uint8 images (materialised from GM on first use by a lazy tile)."""
        d = self._held
        if d is None:
            d = self._held = self._fill()  # type: ignore[misc]
            self._fill = None
        return d

    @property
    def held(self) -> np.ndarray | None:
        """The materialised images, or None while the tile is still lazy (nothing copied)."""
        return self._held

    def disown(self) -> None:
        """Give the images up to the result of the step this tile dies at (`LaneState.adopt`): the
        tile is dead, and releasing it must not recycle bytes its successor now holds."""
        self._held = self._fill = self.gm_images = None

    @property
    def n_images(self) -> int:
        """How many distinct images the lanes share (materialising nothing)."""
        return len(self._held) if self._held is not None else self._n_lazy()

    def _n_lazy(self) -> int:
        u0, v = self.gm_images[-1]  # type: ignore[index]
        return u0 + len(v)

    def image(self, u: int) -> TileBuf:
        """Image `u` as a `TileBuf` of this tile's geometry (a view, no copy)."""
        return TileBuf.from_geometry(self.g, self.valid_row, self.valid_col, self.data[u])

    def element_chunks(self) -> list[tuple[int, np.ndarray]]:
        """The images as elements in physical order, ``(u0, (n, *g.phys))`` chunks: GM itself for a
        lazy tile, else one chunk of `data`."""
        if self._held is None and self.gm_images is not None:
            return self.gm_images
        d = self.data
        return [(0, d.view(self.g.dtype).reshape(len(d), *self.g.phys))]


class LaneWindow:
    """A TEXTRACT fused into its mad: window (`r0`, `c0`, possibly transposed) of a `LaneTile`, read by the
    mad without a copy."""

    __slots__ = ("g", "src", "r0", "c0", "transpose", "freed", "valid_row", "valid_col")

    def __init__(
        self,
        g: Any,
        src: LaneTile,
        r0: int,
        c0: int,
        transpose: bool,
        valid_row: int | None = None,
        valid_col: int | None = None,
    ) -> None:
        self.g, self.src, self.r0, self.c0, self.transpose, self.freed = g, src, r0, c0, transpose, False
        #: the window tile's valid rows (a decode batch's M) and columns (a ragged N tile's), as
        #: TEXTRACT gives them to TMATMUL
        self.valid_row = g.rows if valid_row is None else valid_row
        self.valid_col = g.cols if valid_col is None else valid_col

    def operand(self, u: int, r: int, c: int, ft: type) -> np.ndarray:
        """`TileWindow.operand` of image `u` of the source."""
        w = TileWindow.__new__(TileWindow)
        w.src, w.r0, w.c0, w.transpose, w.layout = (
            self.src.image(u),
            self.r0,
            self.c0,
            self.transpose,
            self.g.layout,
        )
        return w.operand(r, c, ft)

    def operands(
        self,
        r: int,
        c: int,
        ft: type,
        alloc: Callable[[tuple[int, ...], np.dtype | type], np.ndarray] = np.empty,
        images: tuple[int, int] | None = None,
    ) -> np.ndarray | None:
        """`operand` of every image at once - or of images ``lo <= u < hi`` for `images` = (lo, hi) -
        as (U, ...) C-contiguous (in a buffer from `alloc`, or, read straight from GM with the
        conversion cache on, a read-only operand kept from an earlier call whose source bytes
        are these: `conversion_cache`); None when not aligned."""
        src = self.src
        g = src.g
        b = g.blk
        sr, sc = self.r0, self.c0
        nr, nc = (c, r) if self.transpose else (r, c)
        flip = (self.g.layout == "ZN") != self.transpose
        if sr % b.ir or sc % b.ic or nr % b.ir or nc % b.ic:
            return None
        lo, hi = images if images is not None else (0, src.n_images)
        U = hi - lo
        out = alloc((U, nc, nr) if flip else (U, nr, nc), ft)
        for u0, v in src.element_chunks():
            if u0 + len(v) <= lo or u0 >= hi:
                continue
            v = v[max(lo - u0, 0) : hi - u0]
            u0 = max(u0, lo) - lo
            v = v.transpose(0, *(i + 1 for i in g.inv))
            v = v[:, sr // b.ir : (sr + nr) // b.ir, :, sc // b.ic : (sc + nc) // b.ic, :]
            if flip:
                v = v.transpose(0, 3, 4, 1, 2)
            gather_cast(out[u0 : u0 + len(v)].reshape(v.shape), v, alloc)
        return out


_LINE = np.dtype("V32")
_BF16 = np.dtype(ml_dtypes.bfloat16)
#: Source runs one line copy reads at once (see `copy_lines`). 8 suited an AMD EPYC host whose
#: L1 and L2 are 8-way; on the Xeon this runs on now (12-way L1, 16-way L2) one pass over a
#: mad operand's 16 or 32 runs is fastest: a 16-lane 128 x 256 bf16 Right chunk widens in
#: 280 us against 500 us in slices of 8, the gemv kernel -26% CPU, the grouped bf16 -6%.
RUNS_AT_ONCE = 32
#: bf16 lines widen in runtime.widen's compiled loop when it is built (else `widen_lines`).
NATIVE_WIDEN = COMPILED


def copy_lines(dst: np.ndarray, src: np.ndarray) -> None:
    """``dst[...] = src`` for 32-byte lines, copied in slices of at most `RUNS_AT_ONCE` along the
    last axis.  The copy walks `dst` in order, so the last axis of `src` is read run after run: an
    NZ operand's column blocks, 64 KiB apart for a 2048-row weight, which all map to the same
    cache set.  Sixteen of them at once evict each other from the 8-way L1 and L2 before a 64-byte
    cache line's second C0 line is read; eight fit (the bf16 grouped matmul's Right gather took
    6-35% less time across runs, the whole call 2-5%). On caches of more ways the slices cost
    more than they save (`RUNS_AT_ONCE`)."""
    n = src.shape[-1]
    if n <= RUNS_AT_ONCE:
        np.copyto(dst, src)
        return
    for k in range(0, n, RUNS_AT_ONCE):
        np.copyto(dst[..., k : k + RUNS_AT_ONCE], src[..., k : k + RUNS_AT_ONCE])


def widen_lines(dst: np.ndarray, src: np.ndarray) -> None:
    """bf16 C0 lines (`src`, viewed as uint16) into float32 (`dst`, viewed as uint32): the bits
    shifted up by 16, in one pass straight from the strided lines - ~20% less time than gathering
    them, then casting. The cast gives the same bits for all 65536 patterns, NaNs included
    (tests/backend/test_gather_cast.py). Like `copy_lines`, at most `RUNS_AT_ONCE` source runs
    (the second-to-last axis: the lines of one row) at a time."""
    n = src.shape[-2]
    for k in range(0, n, RUNS_AT_ONCE):
        np.left_shift(
            src[..., k : k + RUNS_AT_ONCE, :], 16, out=dst[..., k : k + RUNS_AT_ONCE, :], dtype=np.uint32
        )


def gather_cast(
    out: np.ndarray, v: np.ndarray, alloc: Callable[[tuple[int, ...], np.dtype | type], np.ndarray] = np.empty
) -> None:
    """``out[...] = v`` with a cast.  When `v`'s innermost axis is one 32-byte C0 line, the lines
    are gathered first as 32-byte void elements (one memcpy each, not 32 / itemsize scalar moves),
    then cast contiguously.  When consecutive lines are adjacent (an ND row read as C0 lines), the
    runs are already long: one direct cast, no gather. int8 and fp16 lines into float32 are
    converted in one compiled pass straight from the strided lines (`widen_lines_f32`)."""
    if v.dtype in LINE_DTYPES and widen_lines_f32(out, v):
        return
    if v.shape[-1] * v.itemsize != 32 or v.strides[-1] != v.itemsize or v.ndim < 2 or v.strides[-2] == 32:
        if v.dtype == _BF16 and out.dtype == np.float32 and out.flags.c_contiguous:
            widen_bf16(out, v)  # the transposing case (an ND weight's rows as the mad's columns) compiled
        else:
            np.copyto(out, v, casting="unsafe")
        return
    if v.dtype == _BF16 and out.dtype == np.float32:
        if NATIVE_WIDEN and out.flags.c_contiguous:
            widen_bf16(out, v)  # compiled: one pass, ~40% less time than numpy's line by line shift
        else:
            widen_lines(out.view(np.uint32), v.view(np.uint16))
        return
    lines = v.view(_LINE)[..., 0]
    if out.dtype == v.dtype:
        copy_lines(out.view(_LINE)[..., 0], lines)
        return
    tmp = alloc(lines.shape, _LINE)  # the gathered lines (a reused buffer, when `alloc` gives one)
    copy_lines(tmp, lines)
    if v.dtype == np.float16 and out.dtype == np.float32 and out.flags.c_contiguous:
        widen_f16(out, tmp.view(v.dtype).reshape(v.shape))  # numpy's bits, by its own table
        return
    np.copyto(out, tmp.view(v.dtype).reshape(v.shape), casting="unsafe")


class LaneAcc:
    """An accumulator over lanes: one logical matrix per lane, as `runtime.cube.tmatmul` keeps whole-tile
    accumulators."""

    __slots__ = ("g", "data", "freed", "valid_row", "valid_col")

    def __init__(
        self, g: Any, data: np.ndarray, valid_row: int | None = None, valid_col: int | None = None
    ) -> None:
        self.g, self.data, self.freed = g, data, False  # data: (L, rows, cols) logical matrices
        #: valid rows (a decode batch's M) and columns (a ragged N tile's): the rest holds no defined
        #: value and is never stored
        self.valid_row = g.rows if valid_row is None else valid_row
        self.valid_col = g.cols if valid_col is None else valid_col

    def lane_tile(self, lane: int) -> TileBuf:
        """Lane `lane`'s accumulator as a `TileBuf` that holds its logical matrix (laid out as the ACC image
        on first byte access)."""
        # the buffer holds the logical matrix (runtime.cube.tmatmul's form)
        return TileBuf.from_geometry(
            self.g, self.valid_row, self.valid_col, self.data[lane].reshape(-1).view(np.uint8), logical=True
        )


LANE_VALUES = (LaneTile, LaneWindow, LaneAcc)
