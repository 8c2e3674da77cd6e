"""The vector unit's compare and select instructions (pto-isa TCMP / TCMPS / TSEL / TSELS) on UB
tile bytes, as runtime/vector.py's other instructions: operands are row-major Vec tiles and an
instruction iterates over a valid region only.

The predicate mask. TCMP writes a UINT8 tile of packed predicate bits, one bit per compared
element; pto-isa calls the packing "target-defined". Here (our choice, documented): row `i` of the
mask holds row `i`'s predicates, element `j` is bit `j % 8` (least significant first) of byte
`j // 8`. A `[R, C]` comparison writes `ceil(C / 8)` valid bytes per row; the mask tile's rows are
padded to whole 32-byte blocks, as PyPTO's type rule makes them (`[R, roundup(ceil(C / 8), 32)]`).

A2/A3 facts kept (pto-isa docs/isa/TCMP.md, TCMPS.md, TSEL.md):
* TCMP takes int32, half and float; TCMPS also int16 and uint16; A5 takes more.
* For int32 sources the A2/A3 implementation runs the EQ compare whatever the mode: modelled
  here as the device does it (the compiler refuses such a kernel before it runs).
* TSEL / TSELS select 2- or 4-byte elements on A2/A3 (1 to 8 bytes on A5), the same dtype for dst
  and sources, over dst's valid region; a `tmp` tile holds the per-row compare mask on A2/A3
  (A5 accepts it and does not use it).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from .errors import DeviceError
from .tile import TileBuf
from .vector import check_vec, valid_region

__all__ = [
    "CMP_MODES",
    "CMP_DTYPES",
    "CMPS_DTYPES",
    "SEL_DTYPES",
    "mask_cols",
    "tcmp",
    "tcmps",
    "tsel",
    "tsels",
]

#: PyPTO's cmp_type codes, by position: EQ=0, NE=1, LT=2, LE=3, GT=4, GE=5.
CMP_MODES = ("eq", "ne", "lt", "le", "gt", "ge")
_CMP = {
    "eq": np.equal,
    "ne": np.not_equal,
    "lt": np.less,
    "le": np.less_equal,
    "gt": np.greater,
    "ge": np.greater_equal,
}

_F16, _F32, _BF16 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(ml_dtypes.bfloat16)
_I8, _U8, _I16, _U16, _I32, _U32, _I64, _U64 = (
    np.dtype(t) for t in (np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64)
)

#: Source dtypes of TCMP / TCMPS / TSEL(S), per target.
CMP_DTYPES = {
    "A2A3": frozenset({_I32, _F16, _F32}),
    "A5": frozenset({_U32, _I32, _I64, _U64, _U16, _I16, _U8, _I8, _F32, _F16, _BF16}),
}
CMPS_DTYPES = {"A2A3": frozenset({_I32, _F32, _F16, _U16, _I16}), "A5": CMP_DTYPES["A5"]}
SEL_DTYPES = {
    "A2A3": frozenset({_I16, _U16, _I32, _U32, _F16, _BF16, _F32}),
    "A5": frozenset({_I8, _U8, _I16, _U16, _I32, _U32, _I64, _U64, _F16, _BF16, _F32}),
}


def mask_cols(cols: int) -> int:
    """Bytes of a mask row for `cols` predicates (the packed bits, before the 32-byte padding)."""
    return -(-cols // 8)


def _dtype(what: str, d: np.dtype, table: dict[str, frozenset[np.dtype]], target: str) -> None:
    allowed = table.get(target)
    if allowed is None:
        raise DeviceError(f"unknown target {target!r}")
    if d not in allowed:
        names = ", ".join(sorted(x.name for x in allowed))
        raise DeviceError(f"{what}: {d.name} is not a source dtype of {what} on {target} ({names})")


def _check_mask_tile(what: str, mask: TileBuf) -> None:
    check_vec(mask, what)
    if mask.dtype != _U8:
        raise DeviceError(f"{what}: the predicate mask is a uint8 tile, got {mask.dtype.name}")


def _write_mask(what: str, dst: TileBuf, pred: np.ndarray) -> None:
    vr, vc = pred.shape
    if (dst.valid_row, dst.valid_col) != (vr, mask_cols(vc)):
        raise DeviceError(
            f"{what}: the mask's valid shape {dst.valid_row}x{dst.valid_col} is not the packed shape "
            f"{vr}x{mask_cols(vc)} of a {vr}x{vc} comparison"
        )
    valid_region(dst)[...] = np.packbits(pred, axis=-1, bitorder="little")


def _mode(what: str, mode: str, d: np.dtype, target: str) -> str:
    if mode not in _CMP:
        raise DeviceError(f"{what}: unknown compare mode {mode!r} (one of {', '.join(CMP_MODES)})")
    return "eq" if target == "A2A3" and d == _I32 else mode  # the A2/A3 int32 path compares EQ only


def tcmp(dst: TileBuf, a: TileBuf, b: TileBuf, mode: str, target: str = "A2A3") -> None:
    """TCMP: the packed predicate `a <mode> b` over a's valid region into the mask `dst`."""
    for t in (a, b):
        check_vec(t, "TCMP")
    _check_mask_tile("TCMP", dst)
    if a.dtype != b.dtype:
        raise DeviceError(f"TCMP: source dtypes differ ({a.dtype.name} and {b.dtype.name})")
    _dtype("TCMP", a.dtype, CMP_DTYPES, target)
    if (b.valid_row, b.valid_col) != (a.valid_row, a.valid_col):
        raise DeviceError(
            f"TCMP: source valid shapes differ ({a.valid_row}x{a.valid_col} and {b.valid_row}x{b.valid_col})"
        )
    op = _CMP[_mode("TCMP", mode, a.dtype, target)]
    _write_mask("TCMP", dst, op(valid_region(a), valid_region(b)))


def tcmps(dst: TileBuf, a: TileBuf, scalar: float | int, mode: str, target: str = "A2A3") -> None:
    """TCMPS: the packed predicate `a <mode> scalar` (the scalar converted to a's dtype first)."""
    check_vec(a, "TCMPS")
    _check_mask_tile("TCMPS", dst)
    _dtype("TCMPS", a.dtype, CMPS_DTYPES, target)
    op = _CMP[_mode("TCMPS", mode, a.dtype, target)]
    with np.errstate(over="ignore", invalid="ignore"):
        s = np.asarray(scalar).astype(a.dtype)
    _write_mask("TCMPS", dst, op(valid_region(a), s))


def _predicates(what: str, mask: TileBuf, rows: int, cols: int) -> np.ndarray:
    """The `rows x cols` booleans of `mask` (its valid bytes must cover them)."""
    _check_mask_tile(what, mask)
    if mask.valid_row < rows or mask.valid_col * 8 < cols:
        raise DeviceError(
            f"{what}: the mask's valid {mask.valid_row}x{mask.valid_col} bytes do not cover the "
            f"{rows}x{cols} selection (a row of {cols} elements needs {mask_cols(cols)} bytes)"
        )
    bits = valid_region(mask)[:rows, : mask_cols(cols)]
    return np.unpackbits(bits, axis=-1, count=cols, bitorder="little").astype(bool)


def _check_sel(what: str, dst: TileBuf, srcs: tuple[TileBuf, ...], tmp: TileBuf | None, target: str) -> None:
    for t in (dst, *srcs):
        check_vec(t, what)
        if t.dtype != dst.dtype:
            raise DeviceError(f"{what}: operand dtypes differ ({dst.dtype.name} and {t.dtype.name})")
        if t.valid_row < dst.valid_row or t.valid_col < dst.valid_col:
            raise DeviceError(
                f"{what}: a source's valid {t.valid_row}x{t.valid_col} does not cover the destination's "
                f"{dst.valid_row}x{dst.valid_col}"
            )
    _dtype(what, dst.dtype, SEL_DTYPES, target)
    if target == "A2A3":
        if tmp is None:
            raise DeviceError(f"{what}: A2/A3 needs a tmp tile for the per-row compare mask")
        check_vec(tmp, what)
        if tmp.nbytes < 16:
            raise DeviceError(f"{what}: the tmp tile holds a 16-byte compare mask, it has {tmp.nbytes} bytes")


def tsel(
    dst: TileBuf, mask: TileBuf, a: TileBuf, b: TileBuf, tmp: TileBuf | None, target: str = "A2A3"
) -> None:
    """TSEL: `dst = a where mask else b` over dst's valid region."""
    _check_sel("TSEL", dst, (a, b), tmp, target)
    vr, vc = dst.valid_row, dst.valid_col
    pred = _predicates("TSEL", mask, vr, vc)
    valid_region(dst)[...] = np.where(pred, valid_region(a)[:vr, :vc], valid_region(b)[:vr, :vc])


def tsels(
    dst: TileBuf, mask: TileBuf, a: TileBuf, tmp: TileBuf | None, scalar: float | int, target: str = "A2A3"
) -> None:
    """TSELS: `dst = a where mask else scalar` (the scalar converted to dst's dtype)."""
    _check_sel("TSELS", dst, (a,), tmp, target)
    vr, vc = dst.valid_row, dst.valid_col
    pred = _predicates("TSELS", mask, vr, vc)
    with np.errstate(over="ignore", invalid="ignore"):
        s = np.asarray(scalar).astype(dst.dtype)
    valid_region(dst)[...] = np.where(pred, valid_region(a)[:vr, :vc], s)
