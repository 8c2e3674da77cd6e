"""Cube-side instructions: TMOV / TEXTRACT between on-chip tiles, and TMATMUL (``mad``).

TMATMUL reproduces the two A2/A3 defects of hardware-model.md §6:

* ``m == 1`` is forced to 16: ``mad`` computes 16 rows from whatever Left holds in rows 1..15.
* ``mad`` has no destination-stride operand: it lays C out in L0C with a column-block pitch of
  ``ceil16(m)*16`` elements, not ``Acc.Rows*16`` (pto-isa#253, pypto#2470).  A store that reads
  the tile as declared (pitch ``Rows``) then sees blocks 1.. at the wrong place.

int8 x int8 is exact (int32, wrapping); fp16 / bf16 / fp32 inputs are multiplied in float32
(the hardware summation order is undocumented).  One ``np.matmul`` per instruction.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable
from typing import Final, Literal, Protocol

import ml_dtypes
import numpy as np

from .convert import check_acc_pair, fixpipe_convert
from .dma import ceil16, pto_assert, static_check, write_in_order
from .dtypes import FRACTAL_ROWS, c0_of
from .errors import DeviceError
from .tile import TileBuf, TileGeometry, _Blocking

__all__ = ["tmov", "tmatmul", "textract_window", "TileWindow", "MATMUL_DTYPES", "F32_EXACT_K", "mov_checks"]

_F16, _BF16 = np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)
_F32, _I8, _I32 = np.dtype(np.float32), np.dtype(np.int8), np.dtype(np.int32)
#: Allowed (C, A, B) dtype triples of TMATMUL on A2/A3 [MM].
MATMUL_DTYPES = frozenset({(_I32, _I8, _I8), (_F32, _F16, _F16), (_F32, _F32, _F32), (_F32, _BF16, _BF16)})
#: Every partial sum of k int8 products is an integer of magnitude <= k * 128 * 128; a float
#: format holds all such integers exactly (whatever the BLAS summation order) below 2**mantissa.
_F32_EXACT_K = 2**24 // (128 * 128)
#: The deepest K whose int8 products summed in float32 stay exact integers (|a*b| <= 128*128).
F32_EXACT_K = _F32_EXACT_K
_F64_EXACT_K = 2**53 // (128 * 128)

_MOVES = {("Mat", "Left"), ("Mat", "Right"), ("Mat", "Bias"), ("Acc", "Vec"), ("Vec", "Vec"), ("Vec", "Mat")}
#: TMOV Mat -> Bias dtype pairs on A2/A3 (pto-isa docs/isa/TMOV.md): the bias table holds the
#: accumulator's dtype.
_BIAS_MOVES = {
    (np.dtype(np.int32), np.dtype(np.int32)),
    (np.dtype(np.float32), np.dtype(np.float32)),
    (np.dtype(np.float16), np.dtype(np.float32)),
}


def tmov(
    dst: TileBuf,
    src: TileBuf,
    row_off: int = 0,
    col_off: int = 0,
    *,
    transpose: bool = False,
    relu: bool = False,
) -> None:
    """Copy a window of ``src``'s logical matrix into all of ``dst`` (in ``dst``'s layout).

    Mat -> Left / Right is TEXTRACT: the window starts at (row_off, col_off), which must sit on
    the source's fractal grid (multiples of 16 rows / c0 columns).  With ``transpose`` the
    window is ``dst.cols x dst.rows`` and lands transposed -- how an NZ ``[N, K]`` weight
    becomes the Right operand of ``x @ w.T`` (its bytes already are Zn of ``w.T``).
    Acc -> Vec goes through the fixpipe (fp32 -> fp16 / bf16 conversion, optional ReLU); every
    other move keeps the dtype.
    """
    dst._live()
    src._live()
    if dst.space == "Bias":  # the valid row count is no part of the cached plan's key
        _bias_move_checks(dst, src)
    key = (dst._g, src._g, row_off, col_off, transpose, relu)
    plan = _MOV_PLANS.get(key)
    if plan is None:
        plan = _mov_plan(dst, src, row_off, col_off, transpose, relu)
        if len(_MOV_PLANS) < 4096:
            _MOV_PLANS[key] = plan
    if plan is _GENERIC:
        return _tmov_window(dst, src, row_off, col_off, transpose, relu)
    plan(dst, src)


class _Plan(enum.Enum):
    GENERIC = "the reference path (_tmov_window)"


_GENERIC: Final = _Plan.GENERIC
#: a checked TMOV of one geometry: a direct strided copy ``plan(dst, src)``, or the reference path
_MovPlan = Callable[[TileBuf, TileBuf], None] | Literal[_Plan.GENERIC]
_MOV_PLANS: dict[tuple[object, ...], _MovPlan] = {}


def _mov_checks(dst: TileBuf, src: TileBuf, row_off: int, col_off: int, transpose: bool, relu: bool) -> None:
    static_check(
        (src.space, dst.space) in _MOVES,
        lambda: f"TMOV {src.space} -> {dst.space} is not supported; allowed {sorted(_MOVES)}",
    )
    if src.space == "Mat":
        c0 = c0_of(src.dtype)
        if row_off % FRACTAL_ROWS or col_off % c0:
            raise DeviceError(
                f"TEXTRACT offset ({row_off}, {col_off}) must be a multiple of "
                f"(16, c0 = {c0}) (the source fractal grid)"
            )
    if src.space == "Acc":
        check_acc_pair(src.dtype, dst.dtype)
    elif dst.space == "Bias":
        _bias_move_checks(dst, src)
    else:
        static_check(
            src.dtype.itemsize == dst.dtype.itemsize and src.dtype == dst.dtype,
            lambda: f"TMOV {src.dtype.name} -> {dst.dtype.name} changes the dtype",
        )
        static_check(not relu, lambda: "relu exists on the fixpipe (Acc -> Vec) path only")


def _bias_move_checks(dst: TileBuf, src: TileBuf) -> None:
    """TMOV Mat -> Bias (pto-isa TMOV.md, A2/A3): one row, an allowed dtype pair, 64-byte rows."""
    static_check(
        (src.dtype, dst.dtype) in _BIAS_MOVES,
        lambda: (
            f"TMOV Mat -> Bias {src.dtype.name} -> {dst.dtype.name} is not an allowed pair "
            "(int32 -> int32, float32 -> float32, float16 -> float32)"
        ),
    )
    static_check(
        dst.rows == 1 and src.valid_row == 1,
        lambda: f"TMOV Mat -> Bias moves one row, got a {src.valid_row}-row source into {dst.rows} rows",
    )
    static_check(
        (dst.cols * src.dtype.itemsize) % 64 == 0,
        lambda: f"TMOV Mat -> Bias: {dst.cols} {src.dtype.name} columns are not whole 64-byte blocks",
    )


def mov_checks(
    dst: TileBuf, src: TileBuf, row_off: int, col_off: int, transpose: bool = False, relu: bool = False
) -> None:
    """Every check TMOV / TEXTRACT of `src` at (row_off, col_off) into `dst` makes before it moves
    a byte (spaces, fractal-grid offsets, dtypes, shapes; DeviceError with the instruction's
    message); the tiles' bytes are not read, so shape-only probes may stand in for them."""
    _mov_checks(dst, src, row_off, col_off, transpose, relu)


def _tmov_window(dst: TileBuf, src: TileBuf, row_off: int, col_off: int, transpose: bool, relu: bool) -> None:
    """The reference TMOV: decode the source window, (convert,) encode it into ``dst``."""
    nrows, ncols = (dst.cols, dst.rows) if transpose else (dst.rows, dst.cols)
    win = src.window(row_off, col_off, nrows, ncols)
    if src.space == "Acc":
        win = fixpipe_convert(win, dst.dtype, relu)
    elif dst.space == "Bias":
        win = win.astype(dst.dtype)  # half -> float32 widens exactly
    dst.set_logical(win.T if transpose else win)


def _split(a: int, b: int) -> tuple[int, int]:
    return max(a, b), min(a, b)


def _mov_plan(
    dst: TileBuf, src: TileBuf, row_off: int, col_off: int, transpose: bool, relu: bool
) -> _MovPlan:
    """Check a TMOV once per geometry; return a direct strided copy when both layouts express
    the window as one 6-D view each (the common TEXTRACT case), else the reference path."""
    _mov_checks(dst, src, row_off, col_off, transpose, relu)
    nrows, ncols = (dst.cols, dst.rows) if transpose else (dst.rows, dst.cols)
    src._check_window(row_off, col_off, nrows, ncols)
    if src.space == "Acc" or src.dtype != dst.dtype or dst.space == "Bias":
        return _GENERIC
    sg, dg = src._g, dst._g
    # dst rows come from src rows (or src cols when transposed), likewise dst cols
    s_rb, s_cb = (sg.blk.ic, sg.blk.ir) if transpose else (sg.blk.ir, sg.blk.ic)
    rb, rs = _split(dg.blk.ir, s_rb)
    cb, cs = _split(dg.blk.ic, s_cb)
    d_r = dg.axis_view(0, dst.rows, 0, rb, rs)
    d_c = dg.axis_view(0, dst.cols, 1, cb, cs)
    if transpose:
        s_r = sg.axis_view(row_off, nrows, 0, cb, cs)
        s_c = sg.axis_view(col_off, ncols, 1, rb, rs)
    else:
        s_r = sg.axis_view(row_off, nrows, 0, rb, rs)
        s_c = sg.axis_view(col_off, ncols, 1, cb, cs)
    if d_r is None or d_c is None or s_r is None or s_c is None:
        return _GENERIC
    if transpose:
        s_r, s_c = s_c, s_r  # src viewed with dst's axis order
    shape = d_r[1] + d_c[1]
    d_strides = d_r[2] + d_c[2]
    s_strides = s_r[2] + s_c[2]
    s_off = s_r[0] + s_c[0]
    dt = dst.dtype
    # drop unit axes; view 32-byte (or 16-byte) contiguous runs common to both sides as one item
    dims = [(n, ss, ds) for n, ss, ds in zip(shape, s_strides, d_strides) if n != 1]
    item = dt
    if dims and dims[-1][1] == dims[-1][2] == dt.itemsize:
        run = dims[-1][0] * dt.itemsize
        for width in (32, 16, 8):
            if run % width == 0 and all(ss % width == 0 and ds % width == 0 for _, ss, ds in dims[:-1]):
                n_items = run // width
                dims[-1] = (n_items, width, width)
                item = np.dtype(f"V{width}") if width > 8 else np.dtype(np.uint64)
                break
    shp = tuple(d[0] for d in dims) or (1,)
    sst = tuple(d[1] for d in dims) or (0,)
    dst_ = tuple(d[2] for d in dims) or (0,)

    def run_plan(d: TileBuf, s: TileBuf) -> None:
        dv = np.ndarray(shp, item, d.data, 0, dst_)
        dv[...] = np.ndarray(shp, item, s.data, s_off, sst)

    return run_plan


def _operands(acc: TileBuf, left: TileBuf, right: TileBuf) -> None:
    for t, space, layout in ((acc, "Acc", "ACC"), (left, "Left", "ZZ"), (right, "Right", "ZN")):
        t._live()
        if t.space != space or t.layout != layout:
            static_check(False, f"TMATMUL operand must be a {space} {layout} tile, got {t!r}")
    triple = (acc.dtype, left.dtype, right.dtype)
    static_check(
        triple in MATMUL_DTYPES,
        lambda: (
            f"TMATMUL dtypes (C, A, B) = ({', '.join(d.name for d in triple)}) not in the allowed triples"
        ),
    )


def _product(a: np.ndarray, b: np.ndarray, k: int) -> np.ndarray:
    """A @ B in the accumulator's arithmetic: exact int32 (wrapping) or float32."""
    if a.dtype == _I8:
        for limit, ft in ((_F32_EXACT_K, np.float32), (_F64_EXACT_K, np.float64)):
            if k <= limit:  # provably exact in this float format: use BLAS
                return np.matmul(a.astype(ft), b.astype(ft)).astype(np.int64)
        return np.matmul(a.astype(np.int64), b.astype(np.int64))
    # B goes to BLAS as the transpose of a C-contiguous n x k matrix, the one operand layout every
    # path uses (the image fast path below, the backend's stacked lanes): OpenBLAS's AVX-512
    # kernels sum a C-contiguous B in another order, so a plain `a @ b` here would give other bits
    return np.matmul(a.astype(np.float32), np.ascontiguousarray(b.T, dtype=np.float32).T)


def tmatmul(
    acc: TileBuf,
    left: TileBuf,
    right: TileBuf,
    accumulate: bool,
    m: int | None = None,
    k: int | None = None,
    n: int | None = None,
    *,
    debug: bool = False,
    bias: TileBuf | None = None,
    gemv: bool = False,
) -> None:
    """TMATMUL (``accumulate=False``) / TMATMUL_ACC: ``C[i, j] (+)= sum_kk A[i, kk] B[kk, j]``.
    TMATMUL_BIAS (``bias``, a one-row Bias tile of the accumulator's dtype): ``C[i, j] = sum + bias[0, j]``,
    the bias added to the float32 (or wrapping int32) sum once.
    TGEMV (``gemv``, pto-isa docs/isa/TGEMV.md): m = 1 exactly (not forced to 16), k = Right.validRow.

    m, k, n default to Left.validRow, Left.validCol, Right.validCol.  C(i, j) is written at L0C
    element ``(j//16)*ceil16(m)*16 + i*16 + j%16`` of the Acc tile -- the pitch defect -- for
    i < m, j < n only (what mad puts in the padding of a fractal is undocumented).
    """
    key = (acc._g, left._g, right._g)
    if key not in _CHECKED:
        _operands(acc, left, right)
        if len(_CHECKED) < 4096:
            _CHECKED.add(key)
    else:
        acc._live()
        left._live()
        right._live()
    m = left.valid_row if m is None else int(m)
    k = (right.valid_row if gemv else left.valid_col) if k is None else int(k)
    if gemv and m != 1:
        raise DeviceError(f"TGEMV m = {m}: the Left tile must have exactly one valid row")
    n = right.valid_col if n is None else int(n)
    for name, v in (("m", m), ("k", k), ("n", n)):
        if v < 1:
            raise DeviceError(f"TMATMUL {name} = {v} must be >= 1")
        if v > 4095:
            pto_assert(False, f"TMATMUL {name} = {v} in [1, 4095]", debug)
    if m == 1 and not gemv:
        m = 16  # non-GEMV mad computes a whole 16-row fractal from stale Left rows 1..15
    if m > left.rows or k > left.cols or k > right.rows or n > right.cols:
        raise DeviceError(
            f"TMATMUL m={m}, k={k}, n={n} exceeds Left {left.rows}x{left.cols} "
            f"or Right {right.rows}x{right.cols}"
        )
    brow = None if bias is None else _bias_row(acc, bias, n, accumulate)
    m16, E = ceil16(m), acc.dtype.itemsize
    nfull, rem = divmod(n, 16)
    nblk = nfull + (rem > 0)
    if m == m16 == acc.rows and n == acc.cols and type(acc) is TileBuf:
        # the mad writes every element of the image: keep it as the logical matrix, row-major in
        # the same buffer (TileBuf.data lays it out as the ACC image on first byte access)
        logical = acc._data.view(acc.dtype).reshape(m, n)
        if not accumulate:
            _product_windows(left, right, m, k, n, out=logical)
            if brow is not None:
                np.add(logical, brow, out=logical)
            acc._logical = True
            return
        if acc._logical:
            np.add(logical, _product_windows(left, right, m, k, n), out=logical)  # int32 wraps
            return
    view = acc.view(0, (nblk, m, 16 * E), (m16 * 16 * E, 16 * E, 1)).view(acc.dtype)
    if not rem:  # whole 16-column blocks: the product is added / written through the L0C view
        c = _product_windows(left, right, m, k, n)
        if brow is not None:
            c = c + brow
        # C's 16-column runs (64 bytes) move as single items: C(i, j) lands in block j // 16, row i
        line = np.dtype(f"V{16 * E}")
        src = c.reshape(-1).view(line).reshape(m, nblk).T
        if accumulate:
            blocked = _buffer((nblk, m, 16), acc.dtype, 3)
            blocked.reshape(-1).view(line).reshape(nblk, m)[...] = src
            np.add(view, blocked, out=view)  # int32 wraps mod 2**32 like the accumulator
        else:
            acc.view(0, (nblk, m, 16 * E), (m16 * 16 * E, 16 * E, 1)).view(line)[..., 0] = src
        return
    c = _product(left.window(0, 0, m, k), right.window(0, 0, k, n), k)
    if accumulate:
        old = np.ascontiguousarray(view.transpose(1, 0, 2)).reshape(m, nblk * 16)[:, :n]
        c = old.astype(c.dtype) + c
    new = c.astype(acc.dtype)  # int64 -> int32 wraps mod 2**32, like the int32 accumulator
    if brow is not None:
        new = new + brow
    if nfull:
        write_in_order(view[:nfull], new[:, : nfull * 16].reshape(m, nfull, 16).transpose(1, 0, 2))
    if rem:
        view[nfull, :, :rem] = new[:, nfull * 16 :]


def _bias_row(acc: TileBuf, bias: TileBuf, n: int, accumulate: bool) -> np.ndarray:
    """The first n entries of a TMATMUL_BIAS bias table row (pto-isa TMATMUL_BIAS.md, A2/A3)."""
    bias._live()
    static_check(not accumulate, "TMATMUL_BIAS initialises the accumulator; there is no accumulating form")
    static_check(
        bias.space == "Bias" and bias.rows == 1,
        lambda: f"TMATMUL_BIAS bias must be a one-row Bias tile, got {bias!r}",
    )
    static_check(
        bias.dtype == acc.dtype,
        lambda: f"TMATMUL_BIAS bias dtype {bias.dtype.name} must be the accumulator's {acc.dtype.name}",
    )
    if n > bias.cols:
        raise DeviceError(f"TMATMUL_BIAS n = {n} exceeds the bias tile's {bias.cols} columns")
    return bias.window(0, 0, 1, n)


_CHECKED: set[tuple[object, ...]] = set()
_scratch = threading.local()


def _buffer(shape: tuple[int, ...], dtype: np.dtype, slot: int) -> np.ndarray:
    """A reusable per-thread buffer (mad operands and products): no fresh pages per instruction."""
    bufs = getattr(_scratch, "bufs", None)
    if bufs is None:
        bufs = _scratch.bufs = {}
    key = (shape, dtype, slot)
    b = bufs.get(key)
    if b is None:
        if len(bufs) > 64:
            bufs.clear()
        b = bufs[key] = np.empty(shape, dtype)
    return b


def _operand(t: TileBuf, r: int, c: int, ft: type, slot: int) -> np.ndarray:
    if type(t) is TileWindow:
        return t.operand(r, c, ft)
    return _image_operand(t, r, c, ft)


def _image_operand(t: TileBuf, r: int, c: int, ft: type) -> np.ndarray:
    """The logical window ``[0:r, 0:c]`` of a Left (ZZ) tile as a C-contiguous ``ft`` matrix, or of
    a Right (ZN) tile as its transpose (``c x r``, C-contiguous): in both cases the source is read
    in runs of c0 contiguous elements, so the conversion is one fast pass."""
    b = t._blk
    if r % b.ir == 0 and c % b.ic == 0:
        v = t._view4()[: r // b.ir, :, : c // b.ic, :]
        if t.layout == "ZN":
            v = v.transpose(2, 3, 0, 1)
            r, c = c, r
        return v.astype(ft, order="C").reshape(r, c)
    w = t.window(0, 0, r, c)
    if t.layout == "ZN":
        return np.ascontiguousarray(w.T, dtype=ft)
    return np.ascontiguousarray(w, dtype=ft)


def _product_windows(
    left: TileBuf, right: TileBuf, m: int, k: int, n: int, out: np.ndarray | None = None
) -> np.ndarray:
    """``_product(left.window(0, 0, m, k), right.window(0, 0, k, n), k)`` read straight from the
    tile images; float products come back float32, int8 ones as exact int32 (mod 2**32); into
    ``out`` (C-contiguous ``m x n`` of that dtype) when given.

    B is passed to BLAS as the transpose of a C-contiguous ``n x k`` matrix (the ZN image is
    ``B^T`` in runs of c0), as `_product` and the backend's stacked lanes pass it: every path
    gives the same bits. They are NOT those of a plain ``A @ B`` on every machine (OpenBLAS's
    AVX-512 kernels sum the two layouts in different orders); against numpy a float product is
    within the float32 accumulation bound (docs/safety.md, tests/backend/test_float_claims.py)."""
    if left.dtype == _I8:
        if k <= _F32_EXACT_K:  # |C| <= k * 2**14 <= 2**24: exact in float32, and in int32
            c = np.matmul(_operand(left, m, k, np.float32, 0), _operand(right, k, n, np.float32, 1).T)
        else:
            c = _product(left.window(0, 0, m, k), right.window(0, 0, k, n), k)
        if out is None:
            return c.astype(np.int32)
        out[...] = c.astype(np.int32)
        return out
    if left.layout != "ZZ" or right.layout != "ZN":
        c = _product(left.window(0, 0, m, k), right.window(0, 0, k, n), k)
        if out is None:
            return c
        out[...] = c
        return out
    if out is None:
        out = _buffer((m, n), _F32, 2)
    return np.matmul(_operand(left, m, k, np.float32, 0), _operand(right, k, n, np.float32, 1).T, out=out)


# ------------------------------------------------------------------ TEXTRACT fused into the mad
class TileWindow:
    """A Left / Right tile produced by TEXTRACT whose only reader is the next mad.

    Its byte image would be exactly the moved window of the source (TMOV fills the whole
    destination), and the mad reads nothing else of it, so it is kept as (source, offset,
    transpose) and the mad reads the source window directly. It is charged to its on-chip space
    like a tile (``OnChip.free_tile`` releases it). The backend creates one only when the
    destination dies at that mad and the source outlives it (nzjit/backend/plan.py).
    """

    __slots__ = (
        "space",
        "dtype",
        "rows",
        "cols",
        "layout",
        "valid_row",
        "valid_col",
        "src",
        "r0",
        "c0",
        "transpose",
        "freed",
        "data",
        "nbytes",
        "_owner",
        "_g",
        "_blk",
        "owner",  # public: the OnChip this window is charged to (with `_owner`)
        "geometry",  # public: the static geometry of the moved tile (with `_g`)
    )
    space: str
    dtype: np.dtype
    rows: int
    cols: int
    layout: str
    valid_row: int
    valid_col: int
    src: TileBuf
    r0: int
    c0: int
    transpose: bool
    freed: bool
    data: None  # no image of its own: the mad reads the source window
    nbytes: int
    _owner: object
    _g: TileGeometry
    _blk: _Blocking
    owner: object
    geometry: TileGeometry

    def _live(self) -> None:
        if self.freed:
            raise DeviceError(f"{self.space} tile {self.rows}x{self.cols} used after free")
        self.src._live()

    def _source_window(self) -> tuple[int, int, int, int]:
        return (
            (self.r0, self.c0, self.cols, self.rows)
            if self.transpose
            else (self.r0, self.c0, self.rows, self.cols)
        )

    def window(self, r0: int, c0: int, nrows: int, ncols: int) -> np.ndarray:
        """Copy of this tile's logical window (what the moved image would decode to)."""
        self._live()
        sr, sc, nr, nc = self._source_window()
        full = self.src.window(sr, sc, nr, nc)
        full = full.T if self.transpose else full
        return np.ascontiguousarray(full[r0 : r0 + nrows, c0 : c0 + ncols])

    def logical(self) -> np.ndarray:
        """Copy of the whole moved tile (``rows x cols``) as its logical matrix."""
        return self.window(0, 0, self.rows, self.cols)

    def operand(self, r: int, c: int, ft: type) -> np.ndarray:
        """``_image_operand`` of the moved tile: window ``[0:r, 0:c]`` as C-contiguous ``ft``
        (Left), or its transpose (Right), read from the source in c0 runs when aligned."""
        want_t = self.layout == "ZN"  # Right operands are handed to BLAS as B^T
        src, b = self.src, self.src._blk
        # window [0:r, 0:c] of this tile is src[sr:sr+r, sc:sc+c] (or, transposed, src[sr:sr+c, sc:sc+r].T)
        sr, sc = self.r0, self.c0
        nr, nc = (c, r) if self.transpose else (r, c)
        flip = want_t != self.transpose  # read the source window transposed
        if sr % b.ir == 0 and sc % b.ic == 0 and nr % b.ir == 0 and nc % b.ic == 0:
            v = src._view4()[sr // b.ir : (sr + nr) // b.ir, :, sc // b.ic : (sc + nc) // b.ic, :]
            if flip:
                return v.transpose(2, 3, 0, 1).astype(ft, order="C").reshape(nc, nr)
            return v.astype(ft, order="C").reshape(nr, nc)
        w = src.window(sr, sc, nr, nc)
        return np.ascontiguousarray(w.T if flip else w, dtype=ft)


class _Charged(Protocol):
    """What a TEXTRACT window is charged to (``runtime.memory.OnChip``, which imports this module)."""

    def reserve(self, space: str, nbytes: int) -> None: ...


def textract_window(
    onchip: _Charged, g: TileGeometry, src: TileBuf, row_off: int, col_off: int, transpose: bool
) -> TileWindow:
    """TEXTRACT into a new tile of geometry ``g`` (``runtime.tile._geometry``) that only the next
    mad reads: the checks, refusals and on-chip accounting of ``alloc_tile`` + :func:`tmov`,
    without moving the bytes."""
    key = (g, src._g, row_off, col_off, transpose)
    src._live()
    if key not in _WINDOW_OK:
        # a bufferless probe: the checks read the geometry only, so no image is allocated
        probe = TileBuf._from_geometry(g, None, None, None)  # type: ignore[arg-type]
        _mov_checks(probe, src, row_off, col_off, transpose, False)
        rows, cols = g.rows, g.cols
        nrows, ncols = (cols, rows) if transpose else (rows, cols)
        src._check_window(row_off, col_off, nrows, ncols)
        if len(_WINDOW_OK) < 4096:
            _WINDOW_OK.add(key)
    onchip.reserve(g.space, g.nbytes)
    t = TileWindow.__new__(TileWindow)
    t.space, t.dtype, t.rows, t.cols, t.layout = g.space, g.dtype, g.rows, g.cols, g.layout
    t.valid_row, t.valid_col, t.src, t.r0, t.c0, t.transpose = (
        t.rows,
        t.cols,
        src,
        row_off,
        col_off,
        transpose,
    )
    t.freed, t.data, t.nbytes, t._owner, t._g, t._blk = False, None, g.nbytes, onchip, g, g.blk
    t.owner, t.geometry = onchip, g
    return t


_WINDOW_OK: set[tuple[object, ...]] = set()
