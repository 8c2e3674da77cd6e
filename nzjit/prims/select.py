"""The vector unit's compare and select primitives and their type rules (issue 23 item 3): a
data-dependent choice per element, as PyPTO's `pl.cmp` / `pl.cmps` make a packed predicate mask
and `pl.sel` / `pl.sels` choose with it (pto-isa TCMP / TCMPS / TSEL / TSELS); and
`pl.set_validshape`, which narrows (or widens) the region those instructions work on, and the
Vec tile transpose `pl.transpose` (TTRANS).

The mask is a UINT8 Vec tile of packed predicate bits, PyPTO's shape: a `[R, C]` comparison gives
`[R, roundup(ceil(C / 8), 32)]` with the valid region `[vr, ceil(vc / 8)]` (runtime.vector_select
fixes the bit order). Target-dependent dtype lists are checked by the language layer.
"""

from __future__ import annotations

from typing import Any

from runtime import vector_trans as RT

from ..core import dtypes as dt
from ..core.primitives import Primitive, primitive
from ..core.types import Mem, ScalarType, TileType, Type
from ..errors import CompileError
from .vector import vec_tile

#: PyPTO's cmp_type codes (EQ=0, NE=1, LT=2, LE=3, GT=4, GE=5), by position.
CMP_MODES = ("eq", "ne", "lt", "le", "gt", "ge")

#: The tmp tile of a select written without one: what the compiler supplies on A2/A3 (PyPTO's
#: UINT8 [1, 32]; TSEL keeps the per-row compare mask, at most 16 bytes, in it).
SEL_TMP = TileType((1, 32), dt.UINT8, Mem.Vec)


def mask_type(src: TileType) -> TileType:
    """The packed predicate mask of a comparison of `src`-shaped tiles (PyPTO's type rule)."""
    r, c = src.shape
    packed = -(-c // 8)
    cols = -(-packed // 32) * 32  # a Vec row is whole 32-byte blocks
    vs = src.valid_shape if src.valid_shape is not None else src.shape
    valid: tuple[int | None, ...] | None = (vs[0], None if vs[1] is None else -(-vs[1] // 8))
    if valid == (r, cols):
        valid = None
    return TileType((r, cols), dt.UINT8, Mem.Vec, valid)


def _mode(cmp_type: Any, what: str) -> None:
    if cmp_type not in CMP_MODES:
        raise CompileError(
            f"{what}: unknown compare mode {cmp_type!r}",
            help="cmp_type is 0=EQ, 1=NE, 2=LT, 3=LE, 4=GT, 5=GE",
        )


@primitive("tile.cmp", ("lhs", "rhs"))
def cmp_p(a: Type, b: Type, *, mode: str, **_: Any) -> list[Type]:
    """`pl.cmp(lhs, rhs, cmp_type)` on two Vec tiles (TCMP): the packed predicate mask."""
    _mode(mode, "pl.cmp")
    ta, tb = vec_tile(a, "pl.cmp"), vec_tile(b, "pl.cmp")
    if ta.shape != tb.shape or ta.dtype is not tb.dtype:
        raise CompileError(
            f"pl.cmp operands differ: {ta} and {tb}", help="make both the same shape and dtype"
        )
    if ta.valid_shape != tb.valid_shape and not (ta.fully_valid and tb.fully_valid):
        raise CompileError(
            f"pl.cmp operands have different valid shapes: {ta} and {tb}",
            help="pl.tile.fillpad the smaller one",
        )
    return [mask_type(ta)]


@primitive("tile.cmps", ("src", "scalar"))
def cmps_p(a: Type, s: Type, *, mode: str, **_: Any) -> list[Type]:
    """`pl.cmps(lhs, scalar, cmp_type)` (TCMPS): the packed predicate of a tile against a scalar."""
    _mode(mode, "pl.cmps")
    t = vec_tile(a, "pl.cmps")
    if not isinstance(s, ScalarType):
        raise CompileError(f"pl.cmps: the scalar operand must be a number or a pl.Scalar, got {s}")
    return [mask_type(t)]


def _check_mask(m: Type, t: TileType, what: str) -> None:
    mask = vec_tile(m, f"{what} mask")
    want = mask_type(t.with_(valid_shape=None))
    if mask.dtype is not dt.UINT8 or mask.shape != want.shape:
        raise CompileError(
            f"{what}: the mask must be the {want.with_(valid_shape=None)} predicate tile of a "
            f"{t.with_(valid_shape=None)} comparison, got {mask}",
            help="make it with pl.cmp / pl.cmps on tiles of the selected shape",
        )


def _check_tmp(tmp: tuple[Type, ...], what: str) -> None:
    for x in tmp:
        tt = vec_tile(x, f"{what} tmp")
        if tt.nbytes < 16:
            raise CompileError(
                f"{what}: the tmp tile holds a 16-byte compare mask, {tt} has {tt.nbytes} bytes",
                help="pass pl.create_tile([1, 32], dtype=pl.UINT8), or leave tmp out",
            )


@primitive("tile.sel", ("mask", "lhs", "rhs", "tmp"))
def sel_p(m: Type, a: Type, b: Type, *tmp: Type, **_: Any) -> list[Type]:
    """`pl.sel(mask, lhs, rhs, tmp)` (TSEL): lhs where the mask bit is set, else rhs."""
    ta, tb = vec_tile(a, "pl.sel"), vec_tile(b, "pl.sel")
    if ta.shape != tb.shape or ta.dtype is not tb.dtype:
        raise CompileError(
            f"pl.sel operands differ: {ta} and {tb}", help="make both the same shape and dtype"
        )
    _check_mask(m, ta, "pl.sel")
    if ta.valid_shape != tb.valid_shape and not (ta.fully_valid and tb.fully_valid):
        raise CompileError(
            f"pl.sel operands have different valid shapes: {ta} and {tb}",
            help="pl.tile.fillpad the smaller one",
        )
    _check_tmp(tmp, "pl.sel")
    return [ta]


@primitive("tile.sels", ("mask", "src", "tmp", "scalar"))
def sels_p(m: Type, a: Type, *rest: Type, **_: Any) -> list[Type]:
    """`pl.sels(mask, src, tmp, scalar)` (TSELS): src where the mask bit is set, else the scalar."""
    *tmp, s = rest
    t = vec_tile(a, "pl.sels")
    if not isinstance(s, ScalarType):
        raise CompileError(f"pl.sels: the scalar operand must be a number or a pl.Scalar, got {s}")
    _check_mask(m, t, "pl.sels")
    _check_tmp(tuple(tmp), "pl.sels")
    return [t]


@primitive("tile.set_validshape", ("src", "valid"))
def set_validshape_p(a: Type, *valid: Type, static: tuple[int | None, int | None], **_: Any) -> list[Type]:
    """`pl.set_validshape(tile, valid_rows, valid_cols)`: the tile's bytes with another valid region
    (ints, or INDEX scalars where `static` has None)."""
    t = vec_tile(a, "pl.set_validshape")
    for v in valid:
        if not (isinstance(v, ScalarType) and v.dtype.is_int):
            raise CompileError(f"pl.set_validshape: a valid extent is an int or an integer scalar, got {v}")
    for n, d in zip(static, t.shape):
        if n is not None and not 0 < n <= d:
            raise CompileError(f"pl.set_validshape of {t} to {list(static)}: a valid extent lies in 1 .. {d}")
    vs = tuple(static)
    return [t.with_(valid_shape=None if vs == tuple(t.shape) else vs)]


def trans_tmp(src: TileType) -> TileType:
    """TTRANS's tmp tile for `src` (pto-isa's documented size, as UINT8 bytes in whole 32-byte blocks)."""
    n = RT.tmp_bytes(src.shape[0], src.shape[1], src.dtype.np_dtype)
    return TileType((1, -(-n // 32) * 32), dt.UINT8, Mem.Vec)


@primitive("tile.transpose", ("src",))
def tile_transpose_p(a: Type, **_: Any) -> list[Type]:
    """`pl.transpose(tile, 0, 1)` of a Vec tile (TTRANS): the [C, R] transpose, a copy (the compiler
    supplies TTRANS's tmp tile, as PyPTO does)."""
    t = vec_tile(a, "pl.transpose")
    r, c = t.shape
    if t.dtype.itemsize not in (1, 2, 4) or t.dtype.is_sub_byte:
        raise CompileError(f"pl.transpose: TTRANS moves 1-, 2- or 4-byte elements, got {t}")
    if (r * t.dtype.itemsize) % 32:
        raise CompileError(
            f"pl.transpose of {t}: the result's rows are the source's {r} rows of {t.dtype!r}, "
            f"{r * t.dtype.itemsize} bytes, and a Vec row is whole 32-byte blocks",
            help=f"make the source's row count a multiple of {32 // t.dtype.itemsize} (pad it: "
            "pl.tile.fillpad a taller tile)",
        )
    vs = None if t.valid_shape is None else (t.valid_shape[1], t.valid_shape[0])
    return [TileType((c, r), t.dtype, Mem.Vec, vs)]


ALL: tuple[Primitive, ...] = (cmp_p, cmps_p, sel_p, sels_p, set_validshape_p, tile_transpose_p)
