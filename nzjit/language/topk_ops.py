"""The vector unit's sorting pieces in the kernel language, as PyPTO names them: `pl.arange`,
`pl.sort32`, `pl.mrgsort`, `pl.gather` (mask and index forms) and `pl.tile.MaskPattern` - what
a row top-k for MoE routing is built from (examples/topk.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..core import dtypes as dt
from ..errors import CompileError, user_source
from ..prims import vector as VP
from ..tracing import Tracer, bind
from .vector_ops import as_tile


class MaskPattern:
    """`pl.tile.MaskPattern`: TGATHER's fixed selections along a row (read right to left: the low
    bit is position 0)."""

    P0101 = 1  # positions 0, 2, 4, ... (the values of fp32 value-index pairs)
    P1010 = 2  # positions 1, 3, 5, ... (their indices)
    P0001 = 3  # positions 0, 4, 8, ...
    P0010 = 4  # positions 1, 5, 9, ...
    P0100 = 5  # positions 2, 6, 10, ...
    P1000 = 6  # positions 3, 7, 11, ...
    P1111 = 7  # every position


def arange(start: Any, shape: Sequence[int], dtype: dt.DType = dt.INT32, descending: bool = False) -> Tracer:
    """`pl.arange(start, shape, dtype=pl.INT32, descending=False)` (PyPTO's `ci`, TCI): a `[1, N]` Vec
    tile `start, start + 1, ...` (or descending)."""
    return bind(
        VP.ci_p,
        [[start]],
        {"shape": tuple(int(s) for s in shape), "dtype": dtype, "descending": bool(descending)},
        dtype=dtype,
    )[0]


def sort32(src: Any, idx: Any) -> Tracer:
    """`pl.sort32(src, idx)` (TSORT32): value-index pairs, each 32-element block sorted descending."""
    return bind(VP.sort32_p, [[as_tile(src, "pl.sort32")], [as_tile(idx, "pl.sort32")]])[0]


def mrgsort(
    src0: Any,
    src1: Any = None,
    src2: Any = None,
    src3: Any = None,
    tmp: Any = None,
    exhausted: bool = False,
    *,
    block_len: int | None = None,
) -> Tracer:
    """`pl.mrgsort(src, block_len=)` (TMRGSORT format 1): runs of 4 sorted blocks of `block_len`
    elements merged into sorted runs of 4 * block_len; `pl.mrgsort(src0, src1[, src2[, src3]],
    tmp=)` (format 2): 2-4 separate sorted one-row lists merged into one row (`tmp` is the
    instruction's workspace of their total length). `exhausted=True` is the suspending merge: it
    stops once a list is used up, so only the first min(list lengths) pairs are sure to be merged
    (enough for a top-k with k pairs per list); the rest of the row is what `tmp` held."""
    if block_len is not None:
        if any(x is not None for x in (src1, src2, src3, tmp)):
            raise CompileError(
                "pl.mrgsort: format 1 (block_len=) and format 2 (src1, ..., tmp=) are exclusive",
                user_source(),
            )
        return bind(VP.mrgsort_p, [[as_tile(src0, "pl.mrgsort")]], {"block_len": int(block_len)})[0]
    if src1 is None or tmp is None:
        raise CompileError(
            "pl.mrgsort takes block_len= (format 1) or src0, src1[, src2[, src3]] and tmp= (format 2)",
            user_source(),
            help="e.g. pl.mrgsort(a, b, tmp=pl.create_tile(...))",
        )
    lists = [as_tile(x, "pl.mrgsort") for x in (src0, src1, src2, src3) if x is not None]
    return bind(VP.mrgsort2_p, [lists, [as_tile(tmp, "pl.mrgsort")]], {"exhausted": bool(exhausted)})[0]


def gather(
    input: Any,
    dim: int | None = None,
    index: Any = None,
    *,  # noqa: A002 - PyPTO's name
    mask_pattern: int | None = None,
    output_dtype: dt.DType | None = None,
) -> Tracer:
    """`pl.gather(x, mask_pattern=, output_dtype=)` (TGATHER mask form: e.g. the values or the
    index bits of value-index pairs) or `pl.gather(x, -1, index)` (`out[b, k] = x[b, index[b, k]]`)."""
    t = as_tile(input, "pl.gather")
    if mask_pattern is not None:
        out = output_dtype or t.type.dtype
        return bind(VP.gather_mask_p, [[t]], {"pattern": int(mask_pattern), "dtype": out})[0]
    if index is None or dim not in (-1, 1):
        raise CompileError("pl.gather takes mask_pattern=, or dim=-1 and an index tile", user_source())
    return bind(VP.gather_p, [[t], [as_tile(index, "pl.gather")]], {"rowwise": True})[0]


def tile_gather(src: Any, indices: Any, tmp: Any = None) -> Tracer:
    """`pl.tile.gather(src, indices, tmp)`: `dst[i, j] = src.flat[indices[i, j]]` (TGATHER index form)."""
    return bind(
        VP.gather_p,
        [[as_tile(src, "pl.tile.gather")], [as_tile(indices, "pl.tile.gather")]],
        {"rowwise": False},
    )[0]


def tile_gather_mask(src: Any, mask_pattern: int, *, output_dtype: dt.DType | None = None) -> Tracer:
    """`pl.tile.gather_mask(src, mask_pattern, output_dtype=None)`."""
    return gather(src, mask_pattern=mask_pattern, output_dtype=output_dtype)
