"""The tensor forms of `pl.set_validshape` and `pl.transpose` (issue 23 item 5), as PyPTO has them,
and the `pl.` names that dispatch on a tile or a tensor.

- `pl.tensor.set_validshape(tensor, valid_rows, valid_cols)`: the same GM bytes with another
  valid region, no data movement (PyPTO: metadata of a 2-D tensor). It is a whole-tensor view
  (`tensor.slice` at [0, 0] with valid operands). A tensor-level op that loads the view (`pl.add(v,
  v)`, `pl.tensor.transpose(v)`) loads its valid region only: the tile's valid shape, so the
  op computes and a store writes that region. An explicit `pl.load` of the view gives its own
  window, as for any slice.
- `pl.tensor.transpose(tensor, axis1, axis2, valid_shape=None)`: the tensor-level form of the Vec
  transpose (TTRANS): the 2-D tensor (or its valid region) loaded into Vec and transposed; with
  `valid_shape`, the result's valid region (PyPTO's optional operand).
"""

from __future__ import annotations

import numbers
from typing import Any

from ..core.types import DynDim, TensorType
from ..errors import CompileError, user_source
from ..tracing import Tracer
from . import ops
from . import select_ops as tile_forms
from .vector_ops import as_tile


def _is_tensor(x: Any) -> bool:
    return isinstance(x, Tracer) and isinstance(x.type, TensorType)


def tensor_set_validshape(tensor: Any, valid_rows: Any, valid_cols: Any) -> Tracer:
    """`pl.tensor.set_validshape(tensor, valid_rows, valid_cols)` (module docstring)."""
    what = "pl.tensor.set_validshape"
    if not _is_tensor(tensor):
        raise CompileError(
            f"{what} takes a tensor, got {tensor!r}", user_source(), help="pl.tile.set_validshape of a tile"
        )
    t = tensor.type
    if t.rank != 2 or any(isinstance(d, DynDim) for d in t.shape):
        raise CompileError(
            f"{what} needs a static 2-D tensor, got {t}",
            user_source(),
            help="slice a static 2-D window first (pl.slice(x, [R, C], [r0, c0]))",
        )
    vals = [valid_rows, valid_cols]
    for v, d, axis in zip(vals, t.shape, ("rows", "cols")):
        if isinstance(v, Tracer):
            if not v.type.dtype.is_int:
                raise CompileError(f"{what}: valid {axis} is an integer scalar, got {v.type}", user_source())
        elif not isinstance(v, numbers.Integral) or isinstance(v, bool) or not 0 <= int(v) <= int(d):
            raise CompileError(
                f"{what}: valid {axis} {v!r} must be an int in [0, {d}] or an integer scalar",
                user_source(),
                help=f"the valid region lies inside the tensor's {list(t.shape)}",
            )
    return ops.slice(tensor, list(t.shape), [0, 0], valid_shape=vals)  # the slice records the region


def set_validshape(x: Any, valid_rows: Any, valid_cols: Any) -> Tracer:
    """`pl.set_validshape(x, valid_rows, valid_cols)`: the tensor form for a tensor, else the tile's."""
    if _is_tensor(x):
        return tensor_set_validshape(x, valid_rows, valid_cols)
    return tile_forms.set_validshape(x, valid_rows, valid_cols)


def tensor_transpose(tensor: Any, axis1: int = 0, axis2: int = 1, valid_shape: Any = None) -> Tracer:
    """`pl.tensor.transpose(tensor, axis1, axis2, valid_shape=None)` (module docstring)."""
    if not _is_tensor(tensor):
        raise CompileError(
            f"pl.tensor.transpose takes a tensor, got {tensor!r}",
            user_source(),
            help="pl.transpose of a Vec tile",
        )
    out = tile_forms.transpose(as_tile(tensor, "pl.tensor.transpose"), axis1, axis2)
    if valid_shape is not None:
        vs = list(valid_shape)
        if len(vs) != 2:
            raise CompileError(f"pl.tensor.transpose: valid_shape has 2 extents, got {vs!r}", user_source())
        out = tile_forms.set_validshape(out, vs[0], vs[1])
    return out


def transpose(x: Any, axis1: int = 0, axis2: int = 1) -> Tracer:
    """`pl.transpose(x, axis1, axis2)`: the tensor form for a tensor, else the Vec tile's."""
    if _is_tensor(x):
        return tensor_transpose(x, axis1, axis2)
    return tile_forms.transpose(x, axis1, axis2)
