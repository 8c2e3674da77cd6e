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
def tensor_matmul_p(
    a: Type, b: Type, *, b_trans: bool = False, out_dtype: Any = None, **_: Any
) -> list[Type]:
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
    if tuple(tc.shape) != (m, n) or tc.dtype is not _matmul_out_dtype(
        ta.dtype, tb.dtype, None, "pl.matmul_acc"
    ):
        raise _fail(f"pl.matmul_acc: accumulator {tc} does not match the product [{m},{n}]")
    return [tc]


def _valid_or_none(t: TileType) -> tuple[Any, ...] | None:
    return None if t.fully_valid else tuple(t.valid_shape)  # type: ignore[arg-type]


def _valid2(t: TileType) -> tuple[Any, Any]:
    """A 2-D operand's valid (rows, cols): its static extents, None where dynamic."""
    shape = _squeeze2(t.shape)
    if t.valid_shape is None:
        return shape[-2], shape[-1]
    vs = tuple(t.valid_shape)[-2:]
    return vs[0], vs[1]


def product_valid(
    ta: TileType, tb: TileType, b_trans: bool, m: int, n: int, what: str, gemv: bool = False
) -> tuple[Any, ...] | None:
    """The valid region of `a @ b` (TMATMUL: m = Left.validRow, k = Left.validCol, n =
    Right.validCol; hardware-model.md §6): the lhs's valid rows by the rhs's valid N, None when
    that is the whole product. A K tail is the lhs's valid K; the rhs's valid K must cover it (its
    rows past K are never read; PyPTO's rule: "the rhs logical K must cover the lhs logical K").
    A dynamic K tail is TMATMUL's run-time k (the Left tile's validCol): the cover is then checked
    at run time. TGEMV takes k from the Right tile's valid rows instead, which would read the Left
    row's stale columns past a shorter dynamic K, so a gemv's K tail must be static."""
    ar, ak = _valid2(ta)
    bk, bn = _valid2(tb)[::-1] if b_trans else _valid2(tb)
    if gemv and (ak is None or bk is None):
        raise _fail(
            f"{what}: a dynamic valid K (contraction) extent of {ta if ak is None else tb} is not "
            "supported by TGEMV, whose k is the Right tile's valid rows",
            rule="k-tail",
            help="use pl.matmul (TMATMUL takes k from the Left row's valid columns at run time), "
            "or a static valid K",
        )
    if isinstance(ak, int) and isinstance(bk, int) and bk < ak:
        raise _fail(
            f"{what}: the rhs's valid K {bk} does not cover the lhs's valid K {ak} ({ta} x {tb})",
            help="give the rhs a valid_shape whose K is at least the lhs's",
        )
    valid = (ar, bn)
    return None if valid == (m, n) else valid


@primitive("tile.matmul", ("a", "b"))
def tile_matmul_p(
    a: Type, b: Type, *, b_trans: bool = False, out_dtype: Any = None, gemv: bool = False, **_: Any
) -> list[Type]:
    """`pl.matmul` on Mat (or Left/Right) tiles: `[M,N]` Acc tile of the accumulator dtype, valid
    where the lhs's valid rows meet the rhs's valid columns (`product_valid`)."""
    ta, tb = _mm_operands(a, b, "pl.matmul")
    m, n = _matmul_shape(_squeeze2(ta.shape), _squeeze2(tb.shape), b_trans, "pl.matmul")
    return [
        TileType(
            (m, n),
            _matmul_out_dtype(ta.dtype, tb.dtype, out_dtype, "pl.matmul"),
            Mem.Acc,
            product_valid(ta, tb, b_trans, m, n, "pl.tile.gemv" if gemv else "pl.matmul", gemv),
        )
    ]


@primitive("tile.matmul_acc", ("acc", "a", "b"))
def tile_matmul_acc_p(
    acc: Type, a: Type, b: Type, *, b_trans: bool = False, gemv: bool = False, **_: Any
) -> list[Type]:
    """`pl.matmul_acc` on tiles: `acc + a @ b`; the accumulator must be the product's Acc tile."""
    tc = _tile(acc, "pl.matmul_acc")
    ta, tb = _mm_operands(a, b, "pl.matmul_acc")
    m, n = _matmul_shape(_squeeze2(ta.shape), _squeeze2(tb.shape), b_trans, "pl.matmul_acc")
    want = TileType(
        (m, n),
        _matmul_out_dtype(ta.dtype, tb.dtype, None, "pl.matmul_acc"),
        Mem.Acc,
        product_valid(ta, tb, b_trans, m, n, "pl.tile.gemv_acc" if gemv else "pl.matmul_acc", gemv),
    )
    if tc.shape != want.shape or tc.dtype is not want.dtype or tc.memory is not Mem.Acc:
        raise _fail(f"pl.matmul_acc: accumulator {tc} does not match the product {want}")
    if _valid_or_none(tc) != _valid_or_none(want):
        raise _fail(
            f"pl.matmul_acc: the accumulator's valid region {tc} is not the product's {want}",
            help="accumulate products of operands with the same valid rows and columns",
        )
    return [tc]


@primitive("tile.extract", ("src", "offsets"))
def tile_extract_p(
    src: Type,
    *offs: Type,
    shape: tuple[int, int],
    memory: Mem,
    transpose: bool = False,
    valid_shape: tuple[int, int] | None = None,
    **_: Any,
) -> list[Type]:
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
    # TMATMUL computes m = Left.validRow rows, n = Right.validCol columns (hardware-model.md §6): a
    # decode batch's Acc tile is whole 16-row fractals of which its M rows are valid, a ragged N
    # tile's its valid columns (the store writes those only)
    rows = tl.shape[0] if tl.fully_valid else tl.valid_shape[0]  # type: ignore[index]
    cols = tr.shape[1] if tr.fully_valid else tr.valid_shape[1]  # type: ignore[index]
    return [TileType(shape, out_dtype, Mem.Acc, None if (rows, cols) == shape else (rows, cols))]


@primitive("tile.mad_acc", ("acc", "left", "right"))
def tile_mad_acc_p(acc: Type, left: Type, right: Type, **_: Any) -> list[Type]:
    """MAD accumulating into an existing Acc tile (same rule as `tile.mad`, the accumulator's dtype)."""
    tc = _tile(acc, "tile.mad_acc")
    (want,) = tile_mad_p.type_rule(left, right, out_dtype=tc.dtype)
    assert isinstance(want, TileType)  # tile.mad's rule makes an Acc tile
    if (
        want.valid_shape is not None and tc.valid_shape != want.valid_shape
    ):  # the valid rows / cols of the accumulator stay
        raise _fail(f"tile.mad_acc: accumulator {tc} does not have the product's valid rows {want}")
    return [tc]


#: The bias table of A2/A3 (hardware-model.md §7): 1 KiB, 256 FP32 / INT32 entries.
BIAS_TABLE_BYTES = 1024


def _check_bias(
    bias: Type, want_dtype: dt.DType, n: int, valid_n: Any, what: str, memories: tuple[Mem, ...]
) -> TileType:
    """A `[1, N]` bias tile of the accumulator's dtype (pto-isa TMATMUL_BIAS: Bias dtype = C dtype,
    one row), in one of `memories`, whose valid columns cover the product's."""
    tb = _tile(bias, what)
    shape = _squeeze2(tb.shape)
    if len(shape) != 2 or shape[0] != 1 or shape[1] != n:
        raise _fail(f"{what}: the bias must be a [1, {n}] tile (one entry per output column), got {tb}")
    if tb.dtype is not want_dtype:
        raise _fail(
            f"{what}: the bias {tb} must have the accumulator's dtype {want_dtype.name} "
            "(FP32 for float operands, INT32 for INT8)",
            help=f"load the bias as {want_dtype.name}",
        )
    if tb.memory not in memories:
        raise _fail(
            f"{what}: the bias {tb} must be a {' or '.join(m.value for m in memories)} tile",
            help="load it with target_memory=pl.Mem.Mat",
        )
    bn = _valid2(tb)[1]
    if isinstance(bn, int) and isinstance(valid_n, int) and bn < valid_n:
        raise _fail(f"{what}: the bias's valid columns {bn} do not cover the product's {valid_n}")
    return tb


@primitive("tile.matmul_bias", ("a", "b", "bias"))
def tile_matmul_bias_p(
    a: Type, b: Type, bias: Type, *, b_trans: bool = False, gemv: bool = False, **_: Any
) -> list[Type]:
    """`pl.tile.matmul_bias(a, b, bias)` on Mat tiles: `a @ b + bias`, the `[1, N]` bias (Mat or Bias,
    the accumulator's dtype) added to every row by the cube (TMATMUL_BIAS)."""
    (out,) = tile_matmul_p.type_rule(a, b, b_trans=b_trans, gemv=gemv)
    assert isinstance(out, TileType)
    vn = out.shape[1] if out.fully_valid else out.valid_shape[1]  # type: ignore[index]
    _check_bias(bias, out.dtype, out.shape[1], vn, "pl.tile.matmul_bias", (Mem.Mat, Mem.Bias))
    return [out]


@primitive("tile.mad_bias", ("left", "right", "bias"))
def tile_mad_bias_p(left: Type, right: Type, bias: Type, *, out_dtype: dt.DType, **_: Any) -> list[Type]:
    """TMATMUL_BIAS: Left x Right + a one-row Bias tile of `out_dtype` -> a fresh Acc tile."""
    (out,) = tile_mad_p.type_rule(left, right, out_dtype=out_dtype)
    assert isinstance(out, TileType)
    vn = out.shape[1] if out.fully_valid else out.valid_shape[1]  # type: ignore[index]
    tb = _check_bias(bias, out_dtype, out.shape[1], vn, "tile.mad_bias", (Mem.Bias,))
    if tb.nbytes > BIAS_TABLE_BYTES:
        raise _fail(
            f"tile.mad_bias: the bias {tb} needs {tb.nbytes} bytes; the bias table holds {BIAS_TABLE_BYTES}"
        )
    return [out]
