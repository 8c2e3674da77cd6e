"""The vector unit in the kernel language, named and shaped as PyPTO's `pypto.language`:
`pl.add / sub / mul / div / maximum / minimum` (tile-tile, tile-scalar, `[R, 1]` / `[1, C]`
broadcasts), unary math, `pl.cast(..., mode=)`, reductions, row / column broadcasts, tile
creation, fills, padding and `pl.move` between memories.

Every op also takes tensor windows (`pl.add(x[:, 0:64], y[:, 0:64])`): the window is loaded into
a Vec tile first, as PyPTO's tensor-level forms place their data; assign the result back with
`out[...] = tile`. Rules that depend on the kernel's target (bf16 arithmetic, the conversions
TCVT has, which moves exist) are checked here, when the line is traced.
"""

from __future__ import annotations

import enum
import math
import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np

from runtime import vector as RV

from .. import prims as P
from ..core import dtypes as dt
from ..core.types import Mem, ScalarType, TensorType, TileType, static_dim
from ..errors import CompileError, user_source
from ..prims import vector as VP
from ..tracing import Tracer, bind, current_state
from . import ops


class PadValue(enum.Enum):
    """`pl.PadValue`: what TFILLPAD writes outside a tile's valid region."""

    null = "null"
    zero = "zero"
    max = "max"
    min = "min"


#: PyPTO's `pl.MemorySpace` (`pl.Mem` is its short alias).
MemorySpace = Mem

_SUFFIX = {"add": "_add", "sub": "_sub", "mul": "_mul", "div": "_div", "maximum": "_max", "minimum": "_min"}
_FLOAT_ONLY = ("div", "exp", "log", "sqrt", "rsqrt", "recip")


def _fail(msg: str, help: str | None = None) -> CompileError:
    return CompileError(msg, user_source(), help=help)


def is_scalar(x: Any) -> bool:
    """A scalar operand: a traced scalar, or a Python / numpy real number (not a bool)."""
    if isinstance(x, Tracer):
        return isinstance(x.type, ScalarType)
    return isinstance(x, numbers.Real) and not isinstance(x, bool | np.bool_)


def _check_literal(what: str, value: Any, d: dt.DType) -> None:
    """A Python constant meeting a tile of an integer dtype must fit it (the instruction converts its
    scalar to the tile's dtype: a constant out of range would wrap silently)."""
    if isinstance(value, Tracer) or not d.is_int:
        return
    if isinstance(value, numbers.Integral):
        info = np.iinfo(d.np_dtype)
        if not info.min <= int(value) <= info.max:
            raise _fail(
                f"{what}: the constant {int(value)} does not fit the {d!r} tile ({info.min} .. {info.max})",
                help="use a constant in range, or pl.cast the tile to a wider dtype",
            )
    elif isinstance(value, numbers.Real):
        raise _fail(
            f"{what}: a float constant {value!r} does not combine with a {d!r} tile",
            help="pass an int, or pl.cast the tile to a float dtype",
        )


def as_tile(x: Any, what: str) -> Tracer:
    """A Vec tile operand: a tile as is, a tensor window loaded into Vec (the tensor-level form)."""
    if isinstance(x, Tracer) and isinstance(x.type, TileType):
        return x
    if isinstance(x, Tracer) and isinstance(x.type, TensorType):
        t = x.type
        if t.rank != 2 or not t.is_static:
            raise _fail(
                f"{what} on a tensor needs a static 2-D window, got {t}",
                help="slice a 2-D window (x[r0:r0 + R, :]) or pl.load it yourself",
            )
        # the load takes a partially valid view's region (language/valid_regions.py) as the tile's
        return ops.load(x, [0, 0], [static_dim(d) for d in t.shape], target_memory=Mem.Vec)
    raise _fail(f"{what} takes tiles or tensor windows, got {x!r}")


def _check_dtype(what: str, op: str, tile: Tracer) -> None:
    """The kernel target's vector dtypes (runtime.vector's tables, pto-isa's lists)."""
    target = current_state().target
    d = tile.type.dtype
    table = RV.MATH_DTYPES if op in _FLOAT_ONLY else RV.ALU_DTYPES
    if d.np_dtype not in table[target]:
        names = ", ".join(sorted(dt.from_numpy(x).short for x in table[target]))
        raise _fail(
            f"{what}: the {target} vector unit has no {d!r} {op} (it takes {names})",
            help="pl.cast the tile to pl.FP32 first, and back after",
        )


def _vec(x: Any, what: str, op: str) -> Tracer:
    t = as_tile(x, what)
    if t.type.memory is not Mem.Vec:  # type: ignore[union-attr]
        raise _fail(
            f"{what} works on Vec tiles, got {t.type}",
            help="load with target_memory=pl.Mem.Vec, or pl.move a cube result to pl.Mem.Vec",
        )
    _check_dtype(what, op, t)
    return t


# --------------------------------------------------------------------------------- binary ops
def binary(name: str, lhs: Any, rhs: Any, high_precision: bool = False) -> Tracer:
    """`lhs <name> rhs`: tile-tile, tile-scalar (TADDS ...), or a `[R, 1]` / `[1, C]` right operand
    broadcast along the rows / columns (TROWEXPAND* / TCOLEXPAND*). `high_precision` (pl.div only)
    selects TDIV's precision mode, which PyPTO exposes on the tile-tile form only."""
    what = f"pl.{name}"
    a = _vec(lhs, what, name)
    if high_precision and (
        is_scalar(rhs) or getattr(getattr(rhs, "type", None), "shape", None) != getattr(a.type, "shape", None)
    ):
        raise _fail(
            f"{what}: high_precision requires a Tile rhs of the lhs's shape (TDIV's precision mode; "
            f"the scalar and broadcast forms have none in PyPTO), got {rhs!r}",
            help="drop high_precision, or pl.full / pl.row_expand the divisor to the lhs's shape first",
        )
    if is_scalar(rhs):
        _check_literal(what, rhs, a.type.dtype)
        return bind(VP.BINARY_SCALAR[name], [[a], [rhs]], dtype=a.type.dtype)[0]
    b = _vec(rhs, what, name)
    sa, sb = a.type.shape, b.type.shape  # type: ignore[union-attr]
    if sa != sb and len(sa) == 2 and len(sb) == 2:
        if sb == (sa[0], 1):
            return bind(VP.EXPAND[f"row_expand{_SUFFIX[name]}"], [[a], [b]])[0]
        if sb == (1, sa[1]):
            return bind(VP.EXPAND[f"col_expand{_SUFFIX[name]}"], [[a], [b]])[0]
    prim = P.ELEMENTWISE.get(name) or VP.BINARY[name]
    return bind(prim, [[a], [b]], {"high_precision": True} if high_precision else None)[0]


def add(lhs: Any, rhs: Any) -> Tracer:
    """`pl.add(lhs, rhs)`: elementwise sum; `rhs` a tile, a `[R, 1]` / `[1, C]` tile or a scalar."""
    return binary("add", lhs, rhs)


def sub(lhs: Any, rhs: Any) -> Tracer:
    """`pl.sub(lhs, rhs)`: elementwise difference."""
    return binary("sub", lhs, rhs)


def mul(lhs: Any, rhs: Any) -> Tracer:
    """`pl.mul(lhs, rhs)`: elementwise product."""
    return binary("mul", lhs, rhs)


def div(lhs: Any, rhs: Any, high_precision: bool = False) -> Tracer:
    """`pl.div(lhs, rhs, high_precision=False)`: elementwise quotient of float tiles. `high_precision`
    (tile-tile only, as PyPTO) is TDIV's HIGH_PRECISION algorithm: ignored on A2/A3, IEEE-754
    division on A5 (runtime.vector.unary's docstring says what the simulator computes)."""
    return binary("div", lhs, rhs, bool(high_precision))


def maximum(lhs: Any, rhs: Any) -> Tracer:
    """`pl.maximum(lhs, rhs)`: elementwise maximum."""
    return binary("maximum", lhs, rhs)


def minimum(lhs: Any, rhs: Any) -> Tracer:
    """`pl.minimum(lhs, rhs)`: elementwise minimum."""
    return binary("minimum", lhs, rhs)


# ---------------------------------------------------------------------------------- unary ops
def _unary(name: str, x: Any, **params: Any) -> Tracer:
    t = _vec(x, f"pl.{name}", name)
    prim = P.ELEMENTWISE["exp"] if name == "exp" else VP.UNARY[name]
    return bind(prim, [[t]], params or None)[0]


def exp(x: Any) -> Tracer:
    """`pl.exp(x)`: elementwise e**x (float tiles)."""
    return _unary("exp", x)


def log(x: Any, high_precision: bool = False) -> Tracer:
    """`pl.log(x, high_precision=False)`: elementwise natural logarithm."""
    return _unary("log", x, high_precision=bool(high_precision))


def sqrt(x: Any) -> Tracer:
    """`pl.sqrt(x)`: elementwise square root."""
    return _unary("sqrt", x)


def rsqrt(x: Any, high_precision: bool = False) -> Tracer:
    """`pl.rsqrt(x, high_precision=False)`: elementwise 1 / sqrt(x)."""
    return _unary("rsqrt", x, high_precision=bool(high_precision))


def recip(x: Any, high_precision: bool = False) -> Tracer:
    """`pl.recip(x, high_precision=False)`: elementwise 1 / x."""
    return _unary("recip", x, high_precision=bool(high_precision))


def _tile_only(name: str, x: Any) -> Tracer:
    """`pl.neg` / `pl.abs`: a tensor window is loaded into Vec (the tensor-level form), a Vec tile
    gets the target's dtype check, then the elementwise op of the ELEMENTWISE table; anything
    else (a Mat tile, a Python value) is refused by ops.elementwise / the type rule."""
    if isinstance(x, Tracer) and isinstance(x.type, TensorType):
        x = as_tile(x, f"pl.{name}")
    if isinstance(x, Tracer) and isinstance(x.type, TileType) and x.type.memory is Mem.Vec:
        _check_dtype(f"pl.{name}", name, x)
    return ops.elementwise(name, x)


def abs(x: Any) -> Tracer:  # noqa: A001 - the kernel language's pl.abs
    """`pl.abs(x)`: elementwise |x| of an FP32 / FP16 Vec tile (TABS)."""
    return _tile_only("abs", x)


def neg(x: Any) -> Tracer:
    """`pl.neg(x)`: elementwise -x of a Vec tile (integers wrap, as two's complement does)."""
    return _tile_only("neg", x)


def relu(x: Any) -> Tracer:
    """`pl.relu(x)` / `pl.tile.relu(x)`: elementwise max(x, 0)."""
    return _unary("relu", x)


def lrelu(x: Any, slope: Any) -> Tracer:
    """`pl.tile.lrelu(tile, slope)`: elementwise max(x, slope * x)."""
    t = _vec(x, "pl.tile.lrelu", "lrelu")
    if not is_scalar(slope):
        raise _fail(f"pl.tile.lrelu: the slope must be a number or a pl.Scalar, got {slope!r}")
    return bind(VP.lrelu_p, [[t], [slope]], dtype=t.type.dtype)[0]


# ---------------------------------------------------------------------------------- conversion
def _mode(mode: Any) -> str:
    if isinstance(mode, int) and not isinstance(mode, bool) and 0 <= mode < len(RV.ROUND_MODES):
        return RV.ROUND_MODES[mode]
    if isinstance(mode, str) and mode in RV.ROUND_MODES:
        return mode
    raise _fail(f"pl.cast: unknown mode {mode!r}", help=f"use one of {', '.join(RV.ROUND_MODES)} (or 0..6)")


def cast(
    x: Any, target_type: dt.DType | None = None, mode: Any = None, *, dtype: dt.DType | None = None
) -> Any:
    """`pl.cast(x, target_type, mode="round")`. With a `mode` a Vec tile converts through TCVT with
    that pto::RoundMode (rint: nearest even, round: nearest away, floor, ceil, trunc, odd);
    without one the conversion is the older `tile.cast` (nearest even for floats, toward zero for
    float -> int). Scalars convert as `pl.cast` always did."""
    to = target_type if target_type is not None else dtype
    if to is None:
        raise _fail("pl.cast needs the target dtype (target_type=)")
    if isinstance(x, Tracer) and isinstance(x.type, TensorType):
        x = as_tile(x, "pl.cast")  # the tensor-level form: the window is loaded into Vec
    if mode is None or not (isinstance(x, Tracer) and isinstance(x.type, TileType)):
        return ops.cast(x, to)
    t = as_tile(x, "pl.cast")
    target = current_state().target
    src = t.type.dtype
    pairs = RV.CVT_PAIRS[target].get(src.np_dtype, frozenset())
    if to.np_dtype not in pairs:
        raise _fail(
            f"pl.cast: the {target} vector unit has no {src!r} -> {to!r} conversion (TCVT)",
            help="convert in two steps through pl.FP16 or pl.FP32 (e.g. FP32 -> FP16 -> INT8)",
        )
    return bind(VP.cvt_p, [[t]], {"dtype": to, "mode": _mode(mode)})[0]


# -------------------------------------------------------------------------- reductions / expands
def _reduce(name: str, x: Any, tmp: Any) -> Tracer:
    t = _vec(x, f"pl.{name}", "reduce")
    tt = t.type
    assert isinstance(tt, TileType)  # _vec checked it is a Vec tile
    shape, d = tt.shape, tt.dtype
    if name.startswith("row") and (shape[0] * d.itemsize) % 32:
        raise _fail(
            f"pl.{name}: the [{shape[0]}, 1] result is a DN column of {shape[0] * d.itemsize} bytes; a "
            "Vec column is whole 32-byte blocks",
            help=f"reduce a multiple of {32 // d.itemsize} rows "
            "(pad with pl.tile.fillpad and a larger window)",
        )
    groups: list[list[Any]] = [[t], [] if tmp is None else [as_tile(tmp, f"pl.{name} tmp")]]
    return bind(VP.REDUCE[name], groups)[0]


def row_max(input: Any, tmp_tile: Any = None, *, tmp: Any = None) -> Tracer:  # noqa: A002 - PyPTO's name
    """`pl.row_max(tile, tmp)`: the `[R, 1]` row maxima; without `tmp` the compiler supplies the
    scratch tile A2/A3's TROWMAX needs."""
    return _reduce("row_max", input, tmp_tile if tmp_tile is not None else tmp)


def row_sum(input: Any, tmp_tile: Any = None, *, tmp: Any = None) -> Tracer:  # noqa: A002
    """`pl.row_sum(tile, tmp)`: the `[R, 1]` row sums (a binary tree, rounded per level)."""
    return _reduce("row_sum", input, tmp_tile if tmp_tile is not None else tmp)


def row_min(input: Any, tmp_tile: Any = None, *, tmp: Any = None) -> Tracer:  # noqa: A002
    """`pl.row_min(tile, tmp)`: the `[R, 1]` row minima."""
    return _reduce("row_min", input, tmp_tile if tmp_tile is not None else tmp)


def col_sum(input: Any, tmp_tile: Any = None) -> Tracer:  # noqa: A002
    """`pl.col_sum(tile)`: the `[1, C]` column sums."""
    return _reduce("col_sum", input, None)


def col_max(input: Any) -> Tracer:  # noqa: A002
    """`pl.col_max(tile)`: the `[1, C]` column maxima."""
    return _reduce("col_max", input, None)


def col_min(input: Any) -> Tracer:  # noqa: A002
    """`pl.col_min(tile)`: the `[1, C]` column minima."""
    return _reduce("col_min", input, None)


def _expand(name: str, lhs: Any, rhs: Any) -> Tracer:
    op = {
        "": "add",
        "_add": "add",
        "_sub": "sub",
        "_mul": "mul",
        "_div": "div",
        "_max": "maximum",
        "_min": "minimum",
    }[name[len("row_expand") :]]
    a, b = _vec(lhs, f"pl.{name}", op), _vec(rhs, f"pl.{name}", op)
    return bind(VP.EXPAND[name], [[a], [b]])[0]


def row_expand(target: Any, row_vec: Any) -> Tracer:
    """`pl.row_expand(target, row_vec)`: a tile of target's shape, row i all `row_vec[i, 0]`."""
    return _expand("row_expand", target, row_vec)


def row_expand_add(lhs: Any, rhs: Any, tmp: Any = None) -> Tracer:
    """`pl.row_expand_add(tile, row)`: tile + row[i] on row i."""
    return _expand("row_expand_add", lhs, rhs)


def row_expand_sub(lhs: Any, rhs: Any) -> Tracer:
    """`pl.row_expand_sub(tile, row)`: tile - row[i] on row i."""
    return _expand("row_expand_sub", lhs, rhs)


def row_expand_mul(lhs: Any, rhs: Any) -> Tracer:
    """`pl.row_expand_mul(tile, row)`: tile * row[i] on row i."""
    return _expand("row_expand_mul", lhs, rhs)


def row_expand_div(lhs: Any, rhs: Any) -> Tracer:
    """`pl.row_expand_div(tile, row)`: tile / row[i] on row i."""
    return _expand("row_expand_div", lhs, rhs)


def col_expand(target: Any, col_vec: Any) -> Tracer:
    """`pl.col_expand(target, col_vec)`: a tile of target's shape, column j all `col_vec[0, j]`."""
    return _expand("col_expand", target, col_vec)


def col_expand_add(lhs: Any, rhs: Any) -> Tracer:
    """`pl.col_expand_add(tile, col)`: tile + col[j] on column j."""
    return _expand("col_expand_add", lhs, rhs)


def col_expand_sub(lhs: Any, rhs: Any) -> Tracer:
    """`pl.col_expand_sub(tile, col)`: tile - col[j] on column j."""
    return _expand("col_expand_sub", lhs, rhs)


def col_expand_mul(lhs: Any, rhs: Any) -> Tracer:
    """`pl.col_expand_mul(tile, col)`: tile * col[j] on column j."""
    return _expand("col_expand_mul", lhs, rhs)


def col_expand_div(lhs: Any, rhs: Any) -> Tracer:
    """`pl.col_expand_div(tile, col)`: tile / col[j] on column j."""
    return _expand("col_expand_div", lhs, rhs)


# ---------------------------------------------------------------------------- creation / padding
def _vec_shape(what: str, shape: Sequence[int], d: dt.DType) -> tuple[int, int]:
    s = tuple(int(x) for x in shape)
    if len(s) != 2 or min(s) < 1:
        raise _fail(f"{what}: a tile shape is two positive ints, got {list(shape)}")
    r, c = s
    if c == 1 and r > 1:
        if (r * d.itemsize) % 32:
            raise _fail(
                f"{what}: a [{r}, 1] Vec tile is a DN column of {r * d.itemsize} bytes; columns are whole "
                "32-byte blocks",
                help=f"use a multiple of {32 // d.itemsize} rows",
            )
    elif (c * d.itemsize) % 32:
        raise _fail(
            f"{what}: a Vec tile row is whole 32-byte blocks; {c} {d!r} columns are {c * d.itemsize} bytes",
            help=f"use a multiple of {32 // d.itemsize} columns",
        )
    return s


def create_tile(shape: Sequence[int], dtype: dt.DType, target_memory: Mem = Mem.Vec, **_: Any) -> Tracer:
    """`pl.create_tile(shape, dtype=, target_memory=pl.Mem.Vec)` (= `pl.tile.create`): a tile whose
    bytes are whatever the buffer held (write it before reading)."""
    if target_memory is Mem.Vec:
        s = _vec_shape("pl.create_tile", shape, dtype)
    else:
        s = tuple(int(x) for x in shape)  # type: ignore[assignment]
    return bind(VP.create_p, [], {"shape": s, "dtype": dtype, "memory": target_memory})[0]


def full(shape: Sequence[int], *args: Any, dtype: dt.DType | None = None, value: Any = None) -> Tracer:
    """`pl.full(shape, dtype=, value=)` (PyPTO's positional order `full(shape, dtype, value)`, and
    `full(shape, value, dtype=)` too): a Vec tile with every element `value` (TEXPANDS)."""
    for a in args:
        if isinstance(a, dt.DType):
            dtype = a
        else:
            value = a
    if dtype is None or value is None:
        raise _fail("pl.full needs dtype= and value=")
    if not is_scalar(value):
        raise _fail(f"pl.full: the value must be a number or a pl.Scalar, got {value!r}")
    _check_literal("pl.full", value, dtype)
    s = _vec_shape("pl.full", shape, dtype)
    return bind(VP.full_p, [[value]], {"shape": s, "dtype": dtype}, dtype=dtype)[0]


def _pad(pad_value: Any) -> str:
    if isinstance(pad_value, PadValue) and pad_value is not PadValue.null:
        return pad_value.value
    if isinstance(pad_value, numbers.Real) and not isinstance(pad_value, bool):
        if pad_value == 0:
            return "zero"
        if math.isinf(pad_value):
            return "max" if float(pad_value) > 0 else "min"
    raise _fail(
        f"pl.tile.fillpad: pad_value {pad_value!r} is not one the hardware has",
        help="pass pl.PadValue.zero, pl.PadValue.max or pl.PadValue.min (or 0, math.inf, -math.inf)",
    )


def fillpad(tile: Any, pad_value: Any = PadValue.zero) -> Tracer:
    """`pl.tile.fillpad(tile, pad_value=pl.PadValue.zero)`: everything outside the tile's valid
    region set to 0 / +max (+inf for floats) / -max; the result is fully valid."""
    t = as_tile(tile, "pl.tile.fillpad")
    if t.type.memory is not Mem.Vec:  # type: ignore[union-attr]
        raise _fail(f"pl.tile.fillpad works on Vec tiles, got {t.type}")
    return bind(VP.fillpad_p, [[t]], {"pad": _pad(pad_value)})[0]


def is_tensor(x: Any) -> bool:
    """`x` is a traced tensor (a GM operand, e.g. a per-channel scale tensor), not a tile."""
    return isinstance(x, Tracer) and isinstance(x.type, TensorType)


def _is_l0(x: Any) -> bool:
    return isinstance(x, Tracer) and isinstance(x.type, TileType) and x.type.memory in (Mem.Left, Mem.Right)


def matmul(a: Any, b: Any, b_trans: bool = False, out_dtype: dt.DType | None = None, **pypto: Any) -> Tracer:
    """`pl.matmul`: on Left and Right tiles (after explicit `pl.move`s) it is the cube's TMATMUL
    itself; otherwise ops.matmul (Mat tiles, AutoTileMatmulL0 places L0, or tensors)."""
    if _is_l0(a) and _is_l0(b):
        if b_trans:
            raise _fail(
                "pl.matmul of a Right tile takes it as it is; b_trans needs a Mat operand",
                help="pl.move the transposed view (pl.tile.transpose_view of the Mat tile) to Right",
            )
        if any(pypto.values()):
            raise _fail(
                f"pl.matmul of Left and Right tiles takes them as they are; {', '.join(pypto)} needs Mat "
                "operands",
                help="pass the Mat tiles and let AutoTileMatmulL0 place L0",
            )
        acc = dt.INT32 if a.type.dtype is dt.INT8 else dt.FP32
        return bind(P.tile_mad_p, [[a], [b]], {"out_dtype": out_dtype or acc})[0]
    return ops.matmul(a, b, b_trans=b_trans, out_dtype=out_dtype, **pypto)  # a_trans=, c_matrix_nz= (PyPTO's)


def matmul_acc(acc: Any, a: Any, b: Any, b_trans: bool = False, **pypto: Any) -> Tracer:
    """`pl.matmul_acc`: TMATMUL_ACC on Left and Right tiles, else ops.matmul_acc."""
    if _is_l0(a) and _is_l0(b) and not b_trans and not any(pypto.values()):
        return bind(P.tile_mad_acc_p, [[acc], [a], [b]])[0]
    return ops.matmul_acc(acc, a, b, b_trans=b_trans, **pypto)
