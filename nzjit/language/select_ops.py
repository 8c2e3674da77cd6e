"""Data-dependent choices per element, as PyPTO spells them (issue 23 item 3):

    mask = pl.cmp(x, y, cmp_type=4)            # x > y, a packed UINT8 predicate tile (TCMP)
    mask = pl.cmp(x, 0.0, cmp_type=2)          # x < 0.0: a scalar right operand is pl.cmps (TCMPS)
    out = pl.sel(mask, x, y, tmp)              # x where the mask bit is set, else y (TSEL)
    out = pl.sels(mask, x, tmp, 0.0)           # x where set, else the scalar (TSELS)

`cmp_type` is PyPTO's code: 0=EQ, 1=NE, 2=LT, 3=LE, 4=GT, 5=GE. `tmp` is the scratch tile TSEL
keeps its per-row compare mask in (PyPTO: a UINT8 [1, 32] from pl.create_tile); it may be left out,
and the compiler supplies one. Tensor windows are loaded into Vec tiles first, as everywhere in the
vector unit. The target's dtype lists are checked here, when the line is traced.
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from runtime import vector_select as RS

from ..core import dtypes as dt
from ..errors import CompileError, user_source
from ..prims import select as SP
from ..tracing import Tracer, bind, current_state
from .vector_ops import as_tile, is_scalar

_CODES = "0=EQ, 1=NE, 2=LT, 3=LE, 4=GT, 5=GE"


def _mode(what: str, cmp_type: Any) -> str:
    if isinstance(cmp_type, bool) or not isinstance(cmp_type, numbers.Integral) or not 0 <= int(cmp_type) < 6:
        raise CompileError(
            f"{what}: cmp_type must be an int code, got {cmp_type!r}",
            user_source(),
            help=f"cmp_type is {_CODES}",
        )
    return SP.CMP_MODES[int(cmp_type)]


def _dtype(what: str, tile: Tracer, table: dict[str, frozenset[np.dtype]]) -> None:
    target = current_state().target
    d = tile.type.dtype
    if d.np_dtype not in table[target]:
        names = ", ".join(sorted(dt.from_numpy(x).short for x in table[target]))
        raise CompileError(
            f"{what}: the {target} vector unit compares or selects no {d!r} tiles (it takes {names})",
            user_source(),
            help="pl.cast the tile first",
        )


def _int32_mode(what: str, tile: Tracer, mode: str) -> None:
    """pto-isa: A2/A3's int32 compare path runs EQ whatever the mode, so another mode would be wrong."""
    if current_state().target == "A2A3" and tile.type.dtype is dt.INT32 and mode != "eq":
        raise CompileError(
            f"{what}: the A2A3 vector unit compares INT32 tiles for equality only (its int32 "
            f"path runs EQ whatever the mode), so cmp_type {SP.CMP_MODES.index(mode)} "
            f"({mode.upper()}) would be computed as EQ",
            user_source(),
            help="pl.cast both sides to pl.FP32 first (exact for |x| < 2**24)",
        )


def cmp(lhs: Any, rhs: Any, cmp_type: int = 0) -> Tracer:
    """`pl.cmp(lhs, rhs, cmp_type=0)`: the packed predicate mask of `lhs <cmp_type> rhs` (TCMP);
    a scalar `rhs` dispatches to `pl.cmps`."""
    if is_scalar(rhs):
        return cmps(lhs, rhs, cmp_type)
    mode = _mode("pl.cmp", cmp_type)
    a, b = as_tile(lhs, "pl.cmp"), as_tile(rhs, "pl.cmp")
    _dtype("pl.cmp", a, RS.CMP_DTYPES)
    _int32_mode("pl.cmp", a, mode)
    return bind(SP.cmp_p, [[a], [b]], {"mode": mode})[0]


def cmps(lhs: Any, rhs: Any, cmp_type: int = 0) -> Tracer:
    """`pl.cmps(lhs, scalar, cmp_type=0)`: the packed predicate of a tile against a scalar (TCMPS)."""
    mode = _mode("pl.cmps", cmp_type)
    a = as_tile(lhs, "pl.cmps")
    _dtype("pl.cmps", a, RS.CMPS_DTYPES)
    _int32_mode("pl.cmps", a, mode)
    if not is_scalar(rhs):
        raise CompileError(
            f"pl.cmps compares with a scalar, got {rhs!r}", user_source(), help="use pl.cmp for two tiles"
        )
    return bind(SP.cmps_p, [[a], [rhs]], {"mode": mode}, dtype=a.type.dtype)[0]


def sel(mask: Any, lhs: Any, rhs: Any, tmp: Any = None) -> Tracer:
    """`pl.sel(mask, lhs, rhs, tmp)`: `lhs` where the mask bit is set, else `rhs` (TSEL)."""
    a, b = as_tile(lhs, "pl.sel"), as_tile(rhs, "pl.sel")
    _dtype("pl.sel", a, RS.SEL_DTYPES)
    extra = [] if tmp is None else [as_tile(tmp, "pl.sel")]
    return bind(SP.sel_p, [[as_tile(mask, "pl.sel")], [a], [b], extra])[0]


def set_validshape(x: Any, valid_rows: Any, valid_cols: Any) -> Tracer:
    """`pl.set_validshape(tile, valid_rows, valid_cols)` (ints or integer scalars): the tile's bytes
    with another valid region (a tensor's form is tensor_forms.tensor_set_validshape)."""
    if isinstance(x, Tracer) and hasattr(x.type, "layout"):  # a tensor: its valid shape is the load's
        raise CompileError(
            "pl.tile.set_validshape takes a tile, got a tensor",
            user_source(),
            help="pl.tensor.set_validshape(x, rows, cols) (or pl.set_validshape) for a tensor",
        )
    t = as_tile(x, "pl.set_validshape")
    vals = [valid_rows, valid_cols]
    for v in vals:
        if not (isinstance(v, Tracer) or (isinstance(v, numbers.Integral) and not isinstance(v, bool))):
            raise CompileError(
                f"pl.set_validshape: a valid extent is an int or an integer scalar, got {v!r}", user_source()
            )
    static = tuple(None if isinstance(v, Tracer) else int(v) for v in vals)
    return bind(SP.set_validshape_p, [[t], [v for v in vals if isinstance(v, Tracer)]], {"static": static})[0]


def transpose(x: Any, axis1: int = 0, axis2: int = 1) -> Tracer:
    """`pl.transpose(tile, axis1, axis2)` of a 2-D Vec tile (TTRANS, a copy; the compiler supplies its
    tmp). A tensor's form is tensor_forms.tensor_transpose."""
    if isinstance(x, Tracer) and hasattr(x.type, "layout"):
        raise CompileError(
            "pl.tile.transpose takes a Vec tile, got a tensor",
            user_source(),
            help="pl.tensor.transpose(x, 0, 1) (or pl.transpose) for a tensor, or pass b_trans=True / "
            "a_trans=True to pl.matmul",
        )
    t = as_tile(x, "pl.transpose")
    axes = (
        sorted(int(a) % 2 for a in (axis1, axis2))
        if all(isinstance(a, int) for a in (axis1, axis2))
        else None
    )
    if axes != [0, 1]:
        raise CompileError(
            f"pl.transpose of a 2-D tile swaps axes 0 and 1, got {axis1!r}, {axis2!r}", user_source()
        )
    return bind(SP.tile_transpose_p, [[t]])[0]


def sels(mask: Any, src: Any, tmp: Any = None, scalar: Any = None) -> Tracer:
    """`pl.sels(mask, src, tmp, scalar)`: `src` where the mask bit is set, else `scalar` (TSELS)."""
    a = as_tile(src, "pl.sels")
    _dtype("pl.sels", a, RS.SEL_DTYPES)
    if scalar is None or not is_scalar(scalar):
        raise CompileError(
            f"pl.sels selects a scalar where the mask is clear, got {scalar!r}",
            user_source(),
            help="pl.sels(mask, src, tmp, 0.0)",
        )
    extra = [] if tmp is None else [as_tile(tmp, "pl.sels")]
    return bind(SP.sels_p, [[as_tile(mask, "pl.sels")], [a], extra, [scalar]], dtype=a.type.dtype)[0]
