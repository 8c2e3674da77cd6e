"""Scalar primitives: index arithmetic and comparisons (integers wrap at their declared width,
// and % floor: NZ-19), conversion, the SPMD lane's block index and count, and a dynamic dimension's value (`tensor.dim`)."""

from __future__ import annotations

from typing import Any

from ..core import dtypes as dt
from ..core.primitives import _binary_scalar, _compare, _scalar_dtype, primitive
from ..core.types import ScalarType, TensorType, Type
from ..errors import CompileError

add_p = _binary_scalar("add")
sub_p = _binary_scalar("sub")
mul_p = _binary_scalar("mul")
floordiv_p = _binary_scalar("floordiv")
mod_p = _binary_scalar("mod")
min_p = _binary_scalar("min")
max_p = _binary_scalar("max")


lt_p, le_p, gt_p, ge_p, eq_p, ne_p = (_compare(n) for n in ("lt", "le", "gt", "ge", "eq", "ne"))
SCALAR_BINARY = {
    "add": add_p,
    "sub": sub_p,
    "mul": mul_p,
    "floordiv": floordiv_p,
    "mod": mod_p,
    "min": min_p,
    "max": max_p,
}
COMPARE = {"lt": lt_p, "le": le_p, "gt": gt_p, "ge": ge_p, "eq": eq_p, "ne": ne_p}


@primitive("convert", ("src",))
def convert_p(a: Type, *, dtype: dt.DType, **_: Any) -> list[Type]:
    """Scalar conversion to `dtype`."""
    _scalar_dtype(a)
    return [ScalarType(dtype)]


@primitive("tensor.dim", ("src",))
def tensor_dim_p(src: Type, *, axis: int, name: str, **_: Any) -> list[Type]:
    """`pl.tensor.dim(t, axis)` of a `pl.dynamic` dimension: its value for this call (INDEX, >= 0).
    `name` is the dimension's (the same name is the same dimension); a static one folds to an int."""
    if not isinstance(src, TensorType):
        raise CompileError(f"pl.tensor.dim reads a tensor's dimension, got {src}")
    return [ScalarType(dt.INDEX)]


@primitive("get_block_idx", ())
def get_block_idx_p(**_: Any) -> list[Type]:
    """The SPMD lane's block index (INDEX)."""
    return [ScalarType(dt.INDEX)]


@primitive("get_block_num", ())
def get_block_num_p(**_: Any) -> list[Type]:
    """The number of SPMD lanes (INDEX)."""
    return [ScalarType(dt.INDEX)]
