"""Cube primitives: matmuls on tensors (before tiling) and on Mat tiles, and the cube's own steps
after AutoTileMatmulL0: TEXTRACT into Left/Right and the MAD into an Acc tile."""

from __future__ import annotations

from typing import Any

from ..core import dtypes as dt
from ..core.primitives import (
    _fail,
    _matmul_out_dtype,
    _matmul_shape,
    _mm_operands,
    _squeeze2,
    _tensor,
    _tile,
    primitive,
)
from ..core.types import Mem, TensorType, TileType, Type


@primitive("tensor.matmul", ("a", "b"))
def tensor_matmul_p(a: Type, b: Type, *, b_trans: bool = False, out_dtype: Any = None, **_: Any) -> list[Type]:
    """`pl.matmul` on tensors (before tiling): `[M,K] x [K,N]` (or `B^T` with `b_trans`) -> `[M,N]` of the
    accumulator dtype."""
    ta, tb = _tensor(a, "pl.matmul"), _tensor(b, "pl.matmul")
    m, n = _matmul_shape(_squeeze2(ta.shape), _squeeze2(tb.shape), b_trans, "pl.matmul")
    return [TensorType((m, n), _matmul_out_dtype(ta.dtype, tb.dtype, out_dtype, "pl.matmul"))]


@primitive("tensor.matmul_acc", ("acc", "a", "b"))
def tensor_matmul_acc_p(acc: Type, a: Type, b: Type, *, b_trans: bool = False, **_: Any) -> list[Type]:
    """`pl.matmul_acc` on tensors: `acc + a @ b`; the accumulator must have the product's shape and dtype."""
    tc, ta, tb = _tensor(acc, "pl.matmul_acc"), _tensor(a, "pl.matmul_acc"), _tensor(b, "pl.matmul_acc")
    m, n = _matmul_shape(_squeeze2(ta.shape), _squeeze2(tb.shape), b_trans, "pl.matmul_acc")
    if tuple(tc.shape) != (m, n) or tc.dtype is not _matmul_out_dtype(ta.dtype, tb.dtype, None, "pl.matmul_acc"):
        raise _fail(f"pl.matmul_acc: accumulator {tc} does not match the product [{m},{n}]")
    return [tc]


@primitive("tile.matmul", ("a", "b"))
def tile_matmul_p(a: Type, b: Type, *, b_trans: bool = False, out_dtype: Any = None, **_: Any) -> list[Type]:
    """`pl.matmul` on Mat (or Left/Right) tiles: `[M,N]` Acc tile of the accumulator dtype."""
    ta, tb = _mm_operands(a, b, "pl.matmul")
    m, n = _matmul_shape(_squeeze2(ta.shape), _squeeze2(tb.shape), b_trans, "pl.matmul")
    return [TileType((m, n), _matmul_out_dtype(ta.dtype, tb.dtype, out_dtype, "pl.matmul"), Mem.Acc)]


@primitive("tile.matmul_acc", ("acc", "a", "b"))
def tile_matmul_acc_p(acc: Type, a: Type, b: Type, *, b_trans: bool = False, **_: Any) -> list[Type]:
    """`pl.matmul_acc` on tiles: `acc + a @ b`; the accumulator must be the product's Acc tile."""
    tc = _tile(acc, "pl.matmul_acc")
    ta, tb = _mm_operands(a, b, "pl.matmul_acc")
    m, n = _matmul_shape(_squeeze2(ta.shape), _squeeze2(tb.shape), b_trans, "pl.matmul_acc")
    want = TileType((m, n), _matmul_out_dtype(ta.dtype, tb.dtype, None, "pl.matmul_acc"), Mem.Acc)
    if tc.shape != want.shape or tc.dtype is not want.dtype or tc.memory is not Mem.Acc:
        raise _fail(f"pl.matmul_acc: accumulator {tc} does not match the product {want}")
    return [tc]


@primitive("tile.extract", ("src", "offsets"))
def tile_extract_p(src: Type, *offs: Type, shape: tuple[int, int], memory: Mem, transpose: bool = False,
                   valid_shape: tuple[int, int] | None = None, **_: Any) -> list[Type]:
    """Mat -> Left/Right (TEXTRACT) of a window; `transpose` reads the window as its transpose. TEXTRACT
    moves whole fractals; `valid_shape` is the part a decode batch's rows fill (hardware-model.md §6:
    TMATMUL takes m = Left.validRow)."""
    s = _tile(src, "tile.extract")
    return [TileType(tuple(shape), s.dtype, memory, None if valid_shape is None else tuple(valid_shape))]


@primitive("tile.mad", ("left", "right"))
def tile_mad_p(left: Type, right: Type, *, out_dtype: dt.DType, **_: Any) -> list[Type]:
    """The cube's MAD: Left `[M,K]` x Right `[K,N]` -> a fresh Acc `[M,N]` of `out_dtype`."""
    tl, tr = _tile(left, "tile.mad"), _tile(right, "tile.mad")
    if tl.memory is not Mem.Left or tr.memory is not Mem.Right or tl.shape[1] != tr.shape[0]:
        raise _fail(f"tile.mad needs Left [M,K] and Right [K,N] tiles, got {tl} and {tr}")
    shape = (tl.shape[0], tr.shape[1])
    # TMATMUL computes m = Left.validRow rows (hardware-model.md §6): a decode batch's Acc tile is
    # whole 16-row fractals of which its M rows are valid (the store writes those only)
    rows = tl.shape[0] if tl.fully_valid else tl.valid_shape[0]  # type: ignore[index]
    return [TileType(shape, out_dtype, Mem.Acc, None if rows == shape[0] else (rows, shape[1]))]


@primitive("tile.mad_acc", ("acc", "left", "right"))
def tile_mad_acc_p(acc: Type, left: Type, right: Type, **_: Any) -> list[Type]:
    """MAD accumulating into an existing Acc tile (same rule as `tile.mad`, the accumulator's dtype)."""
    tc = _tile(acc, "tile.mad_acc")
    (want,) = tile_mad_p.type_rule(left, right, out_dtype=tc.dtype)
    assert isinstance(want, TileType)  # tile.mad's rule makes an Acc tile
    if want.valid_shape is not None and tc.valid_shape != want.valid_shape:  # the valid rows of a decode batch's accumulator stay M
        raise _fail(f"tile.mad_acc: accumulator {tc} does not have the product's valid rows {want}")
    return [tc]
