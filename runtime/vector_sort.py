"""The vector unit's sorting and gathering instructions (pto-isa TCI, TSORT32, TMRGSORT, TGATHER)
on UB tile bytes: what a row top-k (MoE routing) is built from.

Value-index pairs (TSORT32's output, TMRGSORT's input and output) are 8-byte structures laid
along a row: fp32 ``(value, uint32 index)`` = 2 tile elements per pair; fp16 ``(value, pad,
uint32 index)`` = 4 elements. Sorting is descending by value; equal values keep the smaller
index first (TSORT32) or their list order (TMRGSORT).
"""

from __future__ import annotations

import numpy as np

from .errors import DeviceError
from .memory import CAPACITIES
from .tile import TileBuf
from .vector import check_vec, valid_region

__all__ = [
    "MASK_PATTERNS",
    "SORT_DTYPES",
    "tci",
    "tsort32",
    "tmrgsort",
    "tmrgsort_lists",
    "gather_mask",
    "gather",
    "pair_elems",
]

#: pl.tile.MaskPattern codes -> (start, stride) of the selected positions along a row.
MASK_PATTERNS = {1: (0, 2), 2: (1, 2), 3: (0, 4), 4: (1, 4), 5: (2, 4), 6: (3, 4), 7: (0, 1)}
SORT_DTYPES = (np.dtype(np.float32), np.dtype(np.float16))


def pair_elems(dtype: np.dtype) -> int:
    """Tile elements of one value-index pair: 2 for fp32, 4 for fp16."""
    return 8 // np.dtype(dtype).itemsize


def tci(dst: TileBuf, start: int, descending: bool = False) -> None:
    """TCI: ``dst[0, k] = start + k`` (or ``start - k``) along the first row (only that row)."""
    check_vec(dst, "TCI")
    if dst.dtype not in (np.dtype(np.int16), np.dtype(np.int32)):
        raise DeviceError(f"TCI: the destination must be int16 or int32, got {dst.dtype.name}")
    k = np.arange(dst.valid_col, dtype=np.int64)
    row = start - k if descending else start + k
    valid_region(dst)[0, :] = row.astype(dst.dtype)


def _pairs(t: TileBuf, what: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(values as float32, indices as uint32, the raw 8-byte pair words) of a pair tile's rows."""
    if t.dtype not in SORT_DTYPES:
        raise DeviceError(f"{what}: value-index pairs are fp32 or fp16, got {t.dtype.name}")
    pe = pair_elems(t.dtype)
    if t.valid_col % pe:
        raise DeviceError(f"{what}: {t.valid_col} valid columns are not whole {pe}-element pairs")
    raw = np.ascontiguousarray(valid_region(t)).view(np.uint64)  # one 8-byte word per pair
    if t.dtype == np.float32:
        vals = raw.view(np.float32)[..., 0::2]
    else:
        vals = raw.view(np.float16)[..., 0::4].astype(np.float32)
    idx = raw.view(np.uint32)[..., 1::2]
    return vals, idx, raw


def tsort32(dst: TileBuf, src: TileBuf, idx: TileBuf) -> None:
    """TSORT32: each row's 32-element blocks of `src` sorted descending with their `idx` (ties:
    smaller index first), written as value-index pairs into `dst` (2 or 4 times the columns)."""
    for t in (dst, src, idx):
        check_vec(t, "TSORT32")
    if src.dtype not in SORT_DTYPES or dst.dtype != src.dtype:
        raise DeviceError(
            f"TSORT32: src and dst are fp32 or fp16 of one dtype, got {src.dtype.name} -> {dst.dtype.name}"
        )
    if idx.dtype.itemsize != 4:
        raise DeviceError(f"TSORT32: indices are 32-bit, got {idx.dtype.name}")
    r, c = src.valid_row, src.valid_col
    if c % 32:
        raise DeviceError(
            f"TSORT32: {c} valid columns are not whole 32-element blocks (the tmp form pads them)"
        )
    if (idx.valid_row, idx.valid_col) != (r, c):
        raise DeviceError(f"TSORT32: idx valid shape {idx.valid_row}x{idx.valid_col} != src {r}x{c}")
    pe = pair_elems(src.dtype)
    if (dst.valid_row, dst.valid_col) != (r, c * pe):
        raise DeviceError(f"TSORT32: dst valid shape {dst.valid_row}x{dst.valid_col} != {r}x{c * pe} (pairs)")
    v = valid_region(src).reshape(r, c // 32, 32)
    ix = valid_region(idx).view(np.uint32).reshape(r, c // 32, 32)
    order = np.lexsort((ix, -v.astype(np.float32)), axis=-1)
    sv = np.take_along_axis(v, order, -1).reshape(r, c)
    si = np.take_along_axis(ix, order, -1).reshape(r, c)
    words = np.zeros((r, c), np.uint64)
    words.view(np.uint32).reshape(r, c, 2)[..., 1] = si
    if src.dtype == np.float32:
        words.view(np.float32).reshape(r, c, 2)[..., 0] = sv
    else:
        words.view(np.float16).reshape(r, c, 4)[..., 0] = sv
    valid_region(dst)[...] = words.view(dst.dtype).reshape(r, c * pe)


def tmrgsort(dst: TileBuf, src: TileBuf, block_len: int) -> None:
    """TMRGSORT format 1: each run of 4 consecutive sorted blocks of `block_len` elements of the
    row merged (descending; ties keep block order) into one sorted run of 4 * block_len."""
    check_vec(dst, "TMRGSORT")
    check_vec(src, "TMRGSORT")
    if src.valid_row != 1 or dst.dtype != src.dtype:
        raise DeviceError("TMRGSORT: one row of pairs in, one row of the same dtype out")
    if block_len % 64 or block_len <= 0:
        raise DeviceError(f"TMRGSORT: block_len {block_len} must be a positive multiple of 64")
    c = src.valid_col
    if c % (4 * block_len) or not 1 <= c // (4 * block_len) <= 255:
        raise DeviceError(
            f"TMRGSORT: {c} valid columns are not 1..255 runs of 4 x block_len = {4 * block_len}"
        )
    if (dst.valid_row, dst.valid_col) != (1, c):
        raise DeviceError(f"TMRGSORT: dst valid shape {dst.valid_row}x{dst.valid_col} != 1x{c}")
    vals, _, raw = _pairs(src, "TMRGSORT")
    per_run = 4 * block_len // pair_elems(src.dtype)
    v = vals.reshape(-1, per_run)
    order = np.argsort(-v, axis=-1, kind="stable")  # the blocks sit in order: ties keep block order
    merged = np.take_along_axis(raw.reshape(-1, per_run), order, -1)
    valid_region(dst)[...] = merged.reshape(1, -1).view(dst.dtype)


def tmrgsort_lists(
    dst: TileBuf, srcs: list[TileBuf], tmp: TileBuf, exhausted: bool = False, target: str = "A2A3"
) -> tuple[int, ...]:
    """TMRGSORT format 2: 2-4 separate sorted lists of value-index pairs (one row each) merged
    descending (ties: the earlier list first). Returns the executed-count list (MrgSortExecutedNumList:
    the pairs taken from each of 4 lists, VMS4_SR).

    vmrgsort4 writes the merge into the workspace `tmp` and MovUb2Ub copies dst's valid columns from
    tmp to dst. With `exhausted` (Xt[12], the suspending merge) it stops after the first pick that
    empties a list, so only that many pairs are merged: the rest of dst is what tmp held there
    (pto-isa a2a3 TMrgSort.hpp; the CPU model's ReachExhausted). Here tmp itself is left as it was,
    since a kernel's tiles are values: nothing reads a workspace after the instruction."""
    what = "TMRGSORT"
    for t in (dst, tmp, *srcs):
        check_vec(t, what)
    if not 2 <= len(srcs) <= 4:
        raise DeviceError(f"{what}: format 2 merges 2 to 4 lists, got {len(srcs)}")
    if any(t.dtype != dst.dtype for t in (tmp, *srcs)) or dst.dtype not in SORT_DTYPES:
        raise DeviceError(f"{what}: every list, tmp and dst are fp32 or fp16 of one dtype")
    if any(t.rows != 1 for t in (dst, tmp, *srcs)):
        raise DeviceError(f"{what}: format 2 tiles are one row each")
    total = sum(t.valid_col for t in srcs)
    if tmp.cols < total:
        raise DeviceError(f"{what}: tmp has {tmp.cols} columns, the lists {total} (GETMRGSORTTMPSIZE)")
    ub = CAPACITIES[target]["Vec"]  # A2/A3's hard-coded UB_SIZE, A5's PTO_UBUF_SIZE_BYTES
    if (sum(t.cols for t in srcs) + tmp.cols) * dst.dtype.itemsize >= ub:
        raise DeviceError(f"{what}: the lists and tmp exceed the unified buffer ({ub} bytes on {target})")
    if (dst.valid_row, dst.valid_col) != (1, total):
        raise DeviceError(f"{what}: dst valid shape {dst.valid_row}x{dst.valid_col} != 1x{total}")
    parts = [_pairs(t, what) for t in srcs]
    vals = np.concatenate([v.reshape(-1) for v, _, _ in parts])
    raw = np.concatenate([r.reshape(-1) for _, _, r in parts])
    sizes = np.array([r.size for _, _, r in parts])
    order = np.argsort(-vals, kind="stable")  # the lists in order: ties keep list order
    merged = raw[order]
    produced = merged.size
    if exhausted:
        # it stops right after the pick that empties a list: the earliest position of a list's last pair
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        ends = rank[(np.cumsum(sizes) - 1)[sizes > 0]]
        produced = min(merged.size, 1) if sizes.min() == 0 else int(ends.min()) + 1  # checked after a pick
    words = np.ascontiguousarray(tmp.window(0, 0, 1, total)).view(np.uint64).reshape(-1)
    words[:produced] = merged[:produced]  # tmp's first pairs; dst is MovUb2Ub's copy of tmp
    valid_region(dst)[...] = words.reshape(1, -1).view(dst.dtype)
    counts = np.bincount(np.repeat(np.arange(len(srcs)), sizes)[order[:produced]], minlength=4)
    return tuple(int(n) for n in counts)


def gather_mask(dst: TileBuf, src: TileBuf, pattern: int) -> None:
    """TGATHER mask form: the positions of `pattern` along each row (e.g. P0101: 0, 2, 4 ...),
    bit-reinterpreted as dst's dtype (same element size)."""
    check_vec(dst, "TGATHER")
    check_vec(src, "TGATHER")
    if pattern not in MASK_PATTERNS:
        raise DeviceError(f"TGATHER: mask pattern {pattern} is not 1..7")
    if dst.dtype.itemsize != src.dtype.itemsize:
        raise DeviceError(f"TGATHER: output dtype {dst.dtype.name} is not the size of {src.dtype.name}")
    start, stride = MASK_PATTERNS[pattern]
    sel = valid_region(src)[:, start::stride]
    if (dst.valid_row, dst.valid_col) != sel.shape:
        raise DeviceError(f"TGATHER: dst valid shape {dst.valid_row}x{dst.valid_col} != selected {sel.shape}")
    valid_region(dst)[...] = np.ascontiguousarray(sel).view(dst.dtype)


def gather(dst: TileBuf, src: TileBuf, idx: TileBuf, rowwise: bool = True) -> None:
    """TGATHER index form: ``dst[i, j] = src[i, idx[i, j]]`` (rowwise, PyPTO's `pl.gather(x, -1,
    index)`) or ``src.flat[idx[i, j]]``; an index outside the source is refused (the device
    would read other UB bytes)."""
    for t in (dst, src, idx):
        check_vec(t, "TGATHER")
    if dst.dtype != src.dtype or idx.dtype not in (
        np.dtype(np.int32),
        np.dtype(np.uint32),
        np.dtype(np.int16),
    ):
        raise DeviceError("TGATHER: dst has src's dtype and the indices are int32 / int16")
    ix = valid_region(idx).astype(np.int64)
    if (dst.valid_row, dst.valid_col) != ix.shape:
        raise DeviceError(f"TGATHER: dst valid shape {dst.valid_row}x{dst.valid_col} != indices {ix.shape}")
    s = valid_region(src)
    limit = s.shape[1] if rowwise else s.size
    if ix.size and (ix.min() < 0 or ix.max() >= limit):
        raise DeviceError(
            f"TGATHER: index {int(ix.max()) if ix.max() >= limit else int(ix.min())} is outside "
            f"the source's {limit} valid elements"
        )
    if rowwise:
        if s.shape[0] != ix.shape[0]:
            raise DeviceError(f"TGATHER: {s.shape[0]} source rows, {ix.shape[0]} index rows")
        valid_region(dst)[...] = np.take_along_axis(s, ix, 1)
    else:
        valid_region(dst)[...] = s.reshape(-1)[ix]
