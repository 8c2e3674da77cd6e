"""The vector unit (AIV) of the simulated device: pto-isa's Vec instructions on UB tile bytes.

Every instruction reads and writes the raw bytes of :class:`TileBuf` s in the ``Vec`` space
(the unified buffer, 192 KiB on A2/A3) and iterates over the destination's valid region
(``valid_row x valid_col``) only, as the device does: bytes outside it keep what they held.
Operand tiles must be row-major (``ND``); a ``[R, 1]`` tile is the one-column DN form that row
reductions write and row broadcasts read (its bytes are the same).

Precision (what the hardware documents, and what we fix where it does not):

* fp32 and int arithmetic is exact IEEE / wrapping two's-complement arithmetic.
* fp16 add / sub / mul / div / sqrt / max / min are correctly rounded fp16 operations: they are
  computed in fp32 and rounded once (RNE), which gives the same bits (fp32 carries more than
  2 * 11 + 2 significand bits, so the double rounding is innocuous).
* exp / log / rsqrt / recip are approximations on the device whose error pto-isa does not
  document; here they are the fp32 function rounded to the tile dtype. Kernels should assume
  a few ulp of the dtype (tests use rtol 1e-6 for fp32, 2e-3 for fp16).
* sums are binary trees (pto-isa's vcgadd / vcadd reduction), rounded to the tile dtype at
  every level: deterministic, and for fp16 the error of fp16 accumulation.
* bf16 has no arithmetic on A2/A3 (TADD & co. take int32, int16, half, float there): convert
  to fp32 first. A5 adds bf16.

The value functions (BINARY_OPS, UNARY_OPS, ``reduce_values``, ``convert``, ``round_to`` of runtime/rounding.py) take
arrays of any rank whose last two axes are a valid region: the leading axes (e.g. SPMD lanes)
are independent, so a batched form computes exactly what one instruction per lane computes.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .errors import DeviceError
from .memory import CAPACITIES
from .rounding import ROUND_MODES, convert, convert_into, round_to
from .tile import TileBuf
from .vector_tree import BF16, F16, F32, tree_sum
from .vector_tree import compute_dtype as _compute_dtype

__all__ = [
    "UB_BYTES",
    "ALU_DTYPES",
    "MATH_DTYPES",
    "ROUND_MODES",
    "CVT_PAIRS",
    "BINARY_OPS",
    "UNARY_OPS",
    "REDUCE_OPS",
    "PAD_VALUES",
    "valid_region",
    "check_vec",
    "binary",
    "binary_scalar",
    "unary",
    "lrelu",
    "row_reduce",
    "col_reduce",
    "row_expand",
    "col_expand",
    "expands",
    "cvt",
    "convert",
    "fillpad",
    "pad_scalar",
    "round_to",
    "BINARY_INSTR",
    "HIGH_PRECISION",
    "extract",
    "insert",
    "reshape",
    "reduce_values",
]

I8, U8, I16, I32, I64 = (np.dtype(t) for t in (np.int8, np.uint8, np.int16, np.int32, np.int64))

#: The unified buffer of one vector core (pto-isa UB_SIZE on A2/A3).
UB_BYTES = CAPACITIES["A2A3"]["Vec"]

#: dtypes of the elementwise ALU (TADD / TSUB / TMUL / TMAX / TMIN and their S forms) per target.
ALU_DTYPES: dict[str, frozenset[np.dtype]] = {
    "A2A3": frozenset({F32, F16, I32, I16}),
    "A5": frozenset({F32, F16, BF16, I32, I16, I8, U8, I64}),
}
#: dtypes of the float-only instructions (TDIV, TEXP, TLOG, TSQRT, TRSQRT, TRECIP).
MATH_DTYPES: dict[str, frozenset[np.dtype]] = {
    "A2A3": frozenset({F32, F16}),
    "A5": frozenset({F32, F16, BF16}),
}

#: TCVT's source -> destination pairs on A2/A3 (pto-isa docs/isa/TCVT.md); A5 has more.
CVT_PAIRS: dict[str, dict[np.dtype, frozenset[np.dtype]]] = {
    "A2A3": {
        F32: frozenset({F16, F32, BF16, I16, I32, I64}),
        F16: frozenset({F32, I32, I16, I8, U8}),
        BF16: frozenset({F32, I32}),
        I16: frozenset({F16, F32}),
        I32: frozenset({F32, I16, I64, F16}),
        I64: frozenset({F32, I32}),
        I8: frozenset({F16}),
        U8: frozenset({F16}),
    },
    "A5": {
        F32: frozenset({F16, F32, BF16, I16, I32, I64}),
        F16: frozenset({F32, I32, I16, I8, U8}),
        BF16: frozenset({F32, I32, F16}),
        I16: frozenset({U8, F16, F32, I32}),
        I32: frozenset({F32, I16, I64, U8}),
        I64: frozenset({F32, I32}),
        I8: frozenset({F16, I16, I32}),
        U8: frozenset({F16}),
    },
}


BINARY_OPS: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": np.divide,
    "max": np.maximum,
    "min": np.minimum,
}
#: pto-isa instruction of each binary op (tile-tile, tile-scalar, row broadcast, column broadcast).
BINARY_INSTR = {
    op: (f"T{op.upper()}", f"T{op.upper()}S", f"TROWEXPAND{op.upper()}", f"TCOLEXPAND{op.upper()}")
    for op in BINARY_OPS
}
UNARY_OPS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "exp": np.exp,
    "log": np.log,
    "sqrt": np.sqrt,
    "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "recip": lambda x: 1.0 / x,
    "abs": np.abs,
    "neg": np.negative,
    "relu": lambda x: np.maximum(x, x.dtype.type(0)),
}
_FLOAT_ONLY = frozenset({"div", "exp", "log", "sqrt", "rsqrt", "recip"})
#: The instructions with a HIGH_PRECISION algorithm (pto-isa's PrecisionType template argument)
#: that PyPTO exposes as `high_precision=`, and what it changes per target: "ignored" (pto-isa:
#: "only available on A5, the PrecisionType option is ignored on A3"), "ieee" (A5's Div754
#: IEEE-754 division: the correctly rounded result, which the default model already computes),
#: "fp64" (computed in fp64, rounded once), "sqrt-div" (TSQRT then TDIV, two roundings).
HIGH_PRECISION: dict[str, dict[str, str]] = {
    "div": {"A2A3": "ignored", "A5": "ieee"},
    "recip": {"A2A3": "ignored", "A5": "ieee"},
    "log": {"A2A3": "ignored", "A5": "fp64"},
    "rsqrt": {"A2A3": "sqrt-div", "A5": "sqrt-div"},
}
REDUCE_OPS = ("sum", "max", "min")
PAD_VALUES = ("zero", "max", "min")


# ------------------------------------------------------------------------------------ operands
def check_vec(t: TileBuf, what: str) -> None:
    """A Vec-unit operand: a live row-major tile in the unified buffer."""
    t._live()
    if t.space != "Vec":
        raise DeviceError(f"{what}: operands live in the unified buffer (Vec), got a {t.space} tile")
    if t.layout != "ND" and not (t.layout == "DN" and t.cols == 1):
        raise DeviceError(
            f"{what}: the tile must be row-major (ND) or a one-column DN tile, got "
            f"{t.layout} {t.rows}x{t.cols}"
        )


def valid_region(t: TileBuf) -> np.ndarray:
    """The writable ``valid_row x valid_col`` view of a row-major (or one-column DN) tile's bytes,
    as its dtype."""
    return t.data.view(t.dtype).reshape(t.rows, t.cols)[: t.valid_row, : t.valid_col]


def _dtypes(what: str, op: str, d: np.dtype, target: str) -> None:
    table = MATH_DTYPES if op in _FLOAT_ONLY else ALU_DTYPES
    allowed = table.get(target)
    if allowed is None:
        raise DeviceError(f"unknown target {target!r}")
    if d not in allowed:
        names = ", ".join(sorted(x.name for x in allowed))
        raise DeviceError(
            f"{what}: {d.name} is not a {op} dtype of the {target} vector unit ({names}); "
            "convert with TCVT first"
        )


def _same_valid(what: str, dst: TileBuf, *srcs: TileBuf) -> None:
    for s in srcs:
        if (s.valid_row, s.valid_col) != (dst.valid_row, dst.valid_col):
            raise DeviceError(
                f"{what}: source valid shape {s.valid_row}x{s.valid_col} differs from the "
                f"destination's {dst.valid_row}x{dst.valid_col}"
            )


def _same_dtype(what: str, *ts: TileBuf) -> None:
    for t in ts[1:]:
        if t.dtype != ts[0].dtype:
            raise DeviceError(f"{what}: operand dtypes differ ({ts[0].dtype.name} and {t.dtype.name})")


def _write(dst: TileBuf, values: np.ndarray) -> None:
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        valid_region(dst)[...] = values.astype(dst.dtype, copy=False)


def _apply(region: np.ndarray, fn: Callable[..., np.ndarray], *args: np.ndarray) -> None:
    """``region = fn(*args)`` (a destination's valid region, as its dtype), computed in
    `_compute_dtype`: straight into the region when that is its own dtype (the same ufunc on the
    same values: the same bits, without the temporary and the second pass), else computed, then
    rounded. The kernels below (``_*_k``) take valid regions: the instructions and their prepared
    forms (vector_prep.py) run the same code after the same checks."""
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        if _compute_dtype(region.dtype) == region.dtype and isinstance(fn, np.ufunc):
            fn(*args, out=region)
        else:
            region[...] = fn(*args).astype(region.dtype, copy=False)


# ---------------------------------------------------------------------------------- elementwise
def binary(op: str, dst: TileBuf, a: TileBuf, b: TileBuf, target: str = "A2A3") -> None:
    """TADD / TSUB / TMUL / TDIV / TMAX / TMIN: ``dst = a <op> b`` over dst's valid region."""
    what = BINARY_INSTR[op][0]
    for t in (dst, a, b):
        check_vec(t, what)
    _same_dtype(what, dst, a, b)
    _dtypes(what, op, dst.dtype, target)
    _same_valid(what, dst, a, b)
    _binary_k(op, valid_region(dst), valid_region(a), valid_region(b))


def _binary_k(op: str, region: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
    c = _compute_dtype(region.dtype)
    _apply(region, BINARY_OPS[op], a.astype(c, copy=False), b.astype(c, copy=False))


def binary_scalar(op: str, dst: TileBuf, a: TileBuf, scalar: float | int, target: str = "A2A3") -> None:
    """TADDS / TSUBS / TMULS / TDIVS / TMAXS / TMINS: ``dst = a <op> scalar``; the scalar is first
    converted to the tile's dtype (the intrinsic takes ``TileData::DType scalar``)."""
    what = BINARY_INSTR[op][1]
    check_vec(dst, what)
    check_vec(a, what)
    _same_dtype(what, dst, a)
    _dtypes(what, op, dst.dtype, target)
    _same_valid(what, dst, a)
    _binary_scalar_k(op, valid_region(dst), valid_region(a), scalar)


def _binary_scalar_k(op: str, region: np.ndarray, a: np.ndarray, scalar: float | int) -> None:
    d = region.dtype
    c = _compute_dtype(d)
    s = (
        np.asarray(scalar).astype(d).astype(c, copy=False)
        if d.kind == "f"
        else np.asarray(scalar).astype(c, copy=False)
    )
    x = a.astype(c, copy=False)
    if c == d and d.kind == "f":  # straight into the region (`_apply`): the same
        _apply(region, BINARY_OPS[op], x, s)  # ufunc on the same values, without a temporary
        return
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        region[...] = BINARY_OPS[op](x, s).astype(d, copy=False)  # `_write`


def unary(op: str, dst: TileBuf, src: TileBuf, target: str = "A2A3", high_precision: bool = False) -> None:
    """TEXP / TLOG / TSQRT / TRSQRT / TRECIP / TABS / TNEG / TRELU over dst's valid region.

    `high_precision` (PyPTO's flag on log / recip / rsqrt, pto-isa's PrecisionType template
    argument, see HIGH_PRECISION):

    * TRSQRT, both targets: the documented high-precision form (the A2/A3 overload with a tmp
      tile, TRsqrtHighPrecision; A5's HIGH_PRECISION): a correctly rounded square root, then a
      correctly rounded division of 1 by it, each rounded to the tile dtype (TSQRT then TDIV). The
      default is the device's approximate vrsqrt, modelled as 1 / sqrt rounded once.
    * TLOG / TRECIP on A2/A3: "the PrecisionType option is ignored on A3" (pto-isa TLOG.md,
      TRECIP.md): the same bits as the default.
    * TLOG on A5: the HIGH_PRECISION algorithm (LogPrecisionImpl), modelled as the logarithm
      computed in fp64 and rounded once to the tile dtype; the default vln is the fp32 function.
    * TRECIP on A5: IEEE-754 division of 1 (Div754), which the default model already is."""
    what = f"T{op.upper()}"
    check_vec(dst, what)
    check_vec(src, what)
    _same_dtype(what, dst, src)
    _dtypes(what, op, dst.dtype, target)
    _same_valid(what, dst, src)
    algorithm = HIGH_PRECISION.get(op, {}).get(target) if high_precision else None
    _unary_k(op, valid_region(dst), valid_region(src), algorithm)


def _unary_k(op: str, region: np.ndarray, src: np.ndarray, algorithm: str | None) -> None:
    d = region.dtype
    c = _compute_dtype(d)
    x = src.astype(c, copy=False)
    if algorithm == "sqrt-div":
        with np.errstate(invalid="ignore", divide="ignore"):
            root = np.sqrt(x).astype(d).astype(c, copy=False)  # TSQRT's rounded result
        _apply(region, np.divide, np.ones((), c), root)
        return
    if algorithm == "fp64":
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            region[...] = UNARY_OPS[op](x.astype(np.float64)).astype(d, copy=False)  # `_write`
        return
    _apply(region, UNARY_OPS[op], x)


def lrelu(dst: TileBuf, src: TileBuf, slope: float, target: str = "A2A3") -> None:
    """TLRELU: ``max(x, slope * x)`` (the slope in the tile's dtype)."""
    check_vec(dst, "TLRELU")
    check_vec(src, "TLRELU")
    _same_dtype("TLRELU", dst, src)
    _dtypes("TLRELU", "lrelu", dst.dtype, target)
    _same_valid("TLRELU", dst, src)
    c = _compute_dtype(dst.dtype)
    x = valid_region(src).astype(c, copy=False)
    s = np.asarray(slope).astype(dst.dtype).astype(c, copy=False)
    prod = (x * s).astype(dst.dtype).astype(c, copy=False)  # the product is a rounded instruction result
    _write(dst, np.maximum(x, prod))


def expands(dst: TileBuf, value: float | int) -> None:
    """TEXPANDS: every valid element of ``dst`` set to ``value`` (converted to its dtype)."""
    check_vec(dst, "TEXPANDS")
    with np.errstate(over="ignore", invalid="ignore"):
        valid_region(dst)[...] = np.asarray(value).astype(dst.dtype)


# ---------------------------------------------------------------------------------- reductions
def reduce_values(op: str, x: np.ndarray, axis: int, dtype: np.dtype) -> np.ndarray:
    """The reduction TROW* / TCOL* compute (sum: the rounded binary tree; max, min) of values `x` of
    the tile dtype `dtype` along `axis`. Leading axes are independent: an array of many lanes'
    valid regions ``[L, R, C]`` reduces each lane as its own instruction would (axis -1 or -2)."""
    if op == "sum":
        return tree_sum(x, axis, dtype)
    return (np.maximum if op == "max" else np.minimum).reduce(x, axis=axis)  # np.max / np.min's own call


def row_reduce(op: str, dst: TileBuf, src: TileBuf, tmp: TileBuf | None = None, target: str = "A2A3") -> None:
    """TROWSUM / TROWMAX / TROWMIN: ``dst[i, 0] = reduce_j src[i, j]`` over src's valid region;
    dst is ``[R, 1]`` (DN) or row-major. On A2/A3 ``tmp`` is the instruction's scratch (its bytes
    are clobbered); its documented safe size is src's shape, one 32-byte block per row for ints."""
    what = f"TROW{op.upper()}"
    check_vec(dst, what)
    check_vec(src, what)
    _same_dtype(what, dst, src)
    _dtypes(what, "reduce", dst.dtype, target)
    if src.valid_row == 0 or src.valid_col == 0:
        raise DeviceError(f"{what}: the source valid region is empty")
    if dst.valid_row != src.valid_row:
        raise DeviceError(
            f"{what}: destination valid rows {dst.valid_row} != source valid rows {src.valid_row}"
        )
    if target == "A2A3":
        if tmp is None:
            raise DeviceError(f"{what}: A2/A3 needs a tmp tile (scratch of the reduction)")
        check_vec(tmp, what)
        need = (
            src.valid_row * 32
            if src.dtype.kind in "iu"
            else src.valid_row * src.valid_col * src.dtype.itemsize
        )
        if tmp.nbytes < need:
            raise DeviceError(
                f"{what}: tmp holds {tmp.nbytes} bytes, the reduction needs {need} "
                "(the source's valid shape for floats, one 32-byte block per row for ints)"
            )
    _row_reduce_k(
        op, dst.data.view(dst.dtype).reshape(dst.rows, dst.cols)[: dst.valid_row, 0], valid_region(src)
    )


def _row_reduce_k(op: str, column: np.ndarray, src: np.ndarray) -> None:
    column[...] = reduce_values(op, src, -1, src.dtype).astype(column.dtype)


def col_reduce(op: str, dst: TileBuf, src: TileBuf, target: str = "A2A3") -> None:
    """TCOLSUM / TCOLMAX / TCOLMIN: ``dst[0, j] = reduce_i src[i, j]``; dst is ``[1, C]``."""
    what = f"TCOL{op.upper()}"
    check_vec(dst, what)
    check_vec(src, what)
    _same_dtype(what, dst, src)
    _dtypes(what, "reduce", dst.dtype, target)
    if dst.valid_col != src.valid_col:
        raise DeviceError(f"{what}: destination valid columns {dst.valid_col} != source {src.valid_col}")
    values = reduce_values(op, valid_region(src), -2, src.dtype)
    dst.data.view(dst.dtype).reshape(dst.rows, dst.cols)[0, : dst.valid_col] = values.astype(dst.dtype)


# ---------------------------------------------------------------------------------- broadcasts
def _per_row(what: str, row: TileBuf, dst: TileBuf) -> np.ndarray:
    """The expanded operand of TROWEXPAND*: mode 1, ``[R, 1]`` one scalar per row; mode 2, a
    row-major 32-byte block per row (its first element is the row's value: the block repeats)."""
    if row.valid_row != dst.valid_row:
        raise DeviceError(
            f"{what}: the per-row operand has {row.valid_row} valid rows, the tile {dst.valid_row}"
        )
    block = 32 // row.dtype.itemsize
    if row.valid_col not in (1, block):
        raise DeviceError(
            f"{what}: the per-row operand must be [R, 1] (one value per row) or one 32-byte "
            f"block ({block} elements) per row, got {row.valid_row}x{row.valid_col}"
        )
    return _per_row_k(valid_region(row), dst.valid_col)


def _per_row_k(v: np.ndarray, cols: int) -> np.ndarray:
    """The per-row operand's region `v` expanded to `cols` columns (its block repeats)."""
    if v.shape[1] == 1:
        return v
    block = 32 // v.dtype.itemsize
    return np.tile(v, (1, -(-cols // block)))[:, :cols]


def _per_col(what: str, col: TileBuf, dst: TileBuf, lanes: int = 1) -> np.ndarray:
    if col.valid_col != dst.valid_col:
        raise DeviceError(
            f"{what}: the per-column operand has {col.valid_col} valid columns, the tile {dst.valid_col}"
        )
    if lanes > 1:  # stacked lanes: each lane's row 0, broadcast down that lane's rows only
        v = col.data.view(col.dtype).reshape(col.rows, col.cols)[:: col.rows // lanes, : col.valid_col]
        return v.reshape(lanes, 1, col.valid_col)
    return col.data.view(col.dtype).reshape(col.rows, col.cols)[:1, : col.valid_col]


def row_expand(op: str, dst: TileBuf, a: TileBuf | None, row: TileBuf, target: str = "A2A3") -> None:
    """TROWEXPAND (op "expand": dst[i, j] = row[i]) and TROWEXPANDADD / SUB / MUL / DIV / MAX / MIN
    (dst = a <op> row[i])."""
    what = "TROWEXPAND" if op == "expand" else BINARY_INSTR[op][2]
    _broadcast(what, op, dst, a, row, target, _per_row)


def col_expand(
    op: str, dst: TileBuf, a: TileBuf | None, col: TileBuf, target: str = "A2A3", lanes: int = 1
) -> None:
    """TCOLEXPAND (op "expand": dst[i, j] = col[j]) and TCOLEXPANDADD / SUB / MUL / DIV / MAX / MIN.
    `lanes` > 1: dst, a and col are the images of that many lanes stacked along the rows (each
    wholly valid rows), and each lane's rows take its own col's row 0 - one instruction per lane,
    on the same element values (the lane-batched form)."""
    what = "TCOLEXPAND" if op == "expand" else BINARY_INSTR[op][3]
    if lanes > 1 and (dst.rows % lanes or col.rows % lanes or dst.valid_row != dst.rows):
        raise DeviceError(f"{what}: {lanes} stacked lanes need whole valid rows of whole images")
    _broadcast(what, op, dst, a, col, target, lambda w, v, d: _per_col(w, v, d, lanes), lanes)


def _broadcast(
    what: str,
    op: str,
    dst: TileBuf,
    a: TileBuf | None,
    v: TileBuf,
    target: str,
    expanded: Callable[[str, TileBuf, TileBuf], np.ndarray],
    lanes: int = 1,
) -> None:
    check_vec(dst, what)
    check_vec(v, what)
    _same_dtype(what, dst, v)
    _dtypes(what, "add" if op == "expand" else op, dst.dtype, target)
    e = expanded(what, v, dst)
    # stacked lanes (col_expand): the region as (lanes, rows, cols), e as (lanes, 1, cols)
    shape = (lanes, dst.valid_row // lanes, dst.valid_col) if lanes > 1 else (dst.valid_row, dst.valid_col)
    if op != "expand":
        assert a is not None
        check_vec(a, what)
        _same_dtype(what, dst, a)
        _same_valid(what, dst, a)
    _broadcast_k(
        op, valid_region(dst).reshape(shape), None if op == "expand" or a is None else valid_region(a), e
    )


def _broadcast_k(op: str, region: np.ndarray, a: np.ndarray | None, e: np.ndarray) -> None:
    """`region` (viewed as its broadcast shape) = e, or a <op> e (`a`: the tile operand's region)."""
    if op == "expand":
        region[...] = np.broadcast_to(e, region.shape)
        return
    assert a is not None
    c = _compute_dtype(region.dtype)
    _apply(region, BINARY_OPS[op], a.astype(c, copy=False).reshape(region.shape), e.astype(c, copy=False))


# ----------------------------------------------------------------------------------- conversion
def cvt(dst: TileBuf, src: TileBuf, mode: str = "round", target: str = "A2A3") -> None:
    """TCVT: ``dst = convert(src)`` over the valid region with pto::RoundMode `mode`."""
    check_vec(dst, "TCVT")
    check_vec(src, "TCVT")
    if mode not in ROUND_MODES:
        raise DeviceError(f"TCVT: unknown round mode {mode!r}; expected one of {ROUND_MODES}")
    pairs = CVT_PAIRS[target].get(src.dtype, frozenset())
    if dst.dtype not in pairs:
        raise DeviceError(
            f"TCVT: {src.dtype.name} -> {dst.dtype.name} is not a conversion of the {target} "
            f"vector unit (from {src.dtype.name}: {', '.join(sorted(p.name for p in pairs)) or 'none'})"
        )
    _same_valid("TCVT", dst, src)
    convert_into(valid_region(dst), valid_region(src), mode)


# -------------------------------------------------------------------------------------- padding
def pad_scalar(dtype: np.dtype, pad: str) -> float | int:
    """The value TFILLPAD writes: 0, or +inf / -inf for floats, the integer range ends for ints."""
    if pad == "zero":
        return 0
    if pad not in PAD_VALUES:
        raise DeviceError(f"TFILLPAD: pad value {pad!r} is not one of {PAD_VALUES}")
    if np.dtype(dtype).kind == "f" or np.dtype(dtype) == BF16:
        return float("inf") if pad == "max" else float("-inf")
    info = np.iinfo(dtype)
    return int(info.max if pad == "max" else info.min)


def fillpad(dst: TileBuf, src: TileBuf, pad: str) -> None:
    """TFILLPAD: dst = src inside src's valid region, the pad value everywhere else of dst's
    static shape; dst becomes fully valid."""
    check_vec(dst, "TFILLPAD")
    check_vec(src, "TFILLPAD")
    if dst.dtype.itemsize != src.dtype.itemsize or dst.dtype.itemsize not in (1, 2, 4):
        raise DeviceError("TFILLPAD: source and destination elements must be the same 1, 2 or 4 bytes")
    if dst.rows < src.valid_row or dst.cols < src.valid_col:
        raise DeviceError(
            f"TFILLPAD: the destination {dst.rows}x{dst.cols} is smaller than the source's valid "
            f"region {src.valid_row}x{src.valid_col}"
        )
    full = dst.data.view(dst.dtype).reshape(dst.rows, dst.cols)
    keep = valid_region(src)
    vr, vc = keep.shape
    # in place over the same bytes and shape: the valid region is already where it belongs
    same = (
        keep.dtype.itemsize == full.dtype.itemsize
        and keep.strides == full.strides
        and keep.__array_interface__["data"][0] == full.__array_interface__["data"][0]
    )
    if not same and np.shares_memory(keep, full):  # keep the values before the pad overwrites them
        keep = keep.copy()
    value = np.asarray(pad_scalar(dst.dtype, pad)).astype(dst.dtype)
    full[:vr, vc:] = value  # the pad around the valid region, then the region itself
    full[vr:, :] = value
    if not same:
        full[:vr, :vc] = keep.view(dst.dtype)
    dst.valid_row, dst.valid_col = dst.rows, dst.cols


# ------------------------------------------------------------------------------ tiles as values
def _check_window(what: str, t: TileBuf, r0: int, c0: int, rows: int, cols: int) -> None:
    if r0 < 0 or c0 < 0 or r0 + rows > t.rows or c0 + cols > t.cols:
        raise DeviceError(
            f"{what}: window ({r0}, {c0}) + {rows}x{cols} is outside the {t.rows}x{t.cols} tile"
        )
    if (c0 * t.dtype.itemsize) % 32:
        raise DeviceError(
            f"{what}: column offset {c0} is {c0 * t.dtype.itemsize} bytes; a Vec window starts on a "
            "32-byte block"
        )


def extract(dst: TileBuf, src: TileBuf, r0: int, c0: int) -> None:
    """A Vec -> Vec window copy (a sub-tile as a value): dst's valid region = src[r0:, c0:]."""
    check_vec(dst, "TEXTRACT")
    check_vec(src, "TEXTRACT")
    _same_dtype("TEXTRACT", dst, src)
    _check_window("TEXTRACT", src, r0, c0, dst.valid_row, dst.valid_col)
    full = src.data.view(src.dtype).reshape(src.rows, src.cols)
    valid_region(dst)[...] = full[r0 : r0 + dst.valid_row, c0 : c0 + dst.valid_col]


def insert(dst: TileBuf, src: TileBuf, r0: int, c0: int) -> None:
    """TINSERT on Vec tiles: src's valid region written into dst at (r0, c0)."""
    check_vec(dst, "TINSERT")
    check_vec(src, "TINSERT")
    _same_dtype("TINSERT", dst, src)
    _check_window("TINSERT", dst, r0, c0, src.valid_row, src.valid_col)
    full = dst.data.view(dst.dtype).reshape(dst.rows, dst.cols)
    full[r0 : r0 + src.valid_row, c0 : c0 + src.valid_col] = valid_region(src)


def reshape(dst: TileBuf, src: TileBuf) -> None:
    """The same bytes seen with another shape (pto.treshape): both tiles fully valid, same size."""
    check_vec(dst, "TRESHAPE")
    check_vec(src, "TRESHAPE")
    if dst.nbytes != src.nbytes or dst.dtype != src.dtype:
        raise DeviceError(
            f"TRESHAPE: {src.rows}x{src.cols} {src.dtype.name} and {dst.rows}x{dst.cols} "
            f"{dst.dtype.name} are not the same bytes"
        )
    if (src.valid_row, src.valid_col) != (src.rows, src.cols):
        raise DeviceError(
            "TRESHAPE: the source has a partial valid region; its bytes outside it are not data"
        )
    dst.data[...] = src.data
