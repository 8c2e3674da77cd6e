"""Index-scalar arithmetic of the kernel language: `a <op> b` folded in Python when both are
numbers, else one scalar primitive of the traced operand's dtype (constants checked to fit it).
Its own module so that the language's modules below `ops` (valid regions) can use it."""

from __future__ import annotations

import builtins
import numbers
from typing import Any

import numpy as np

from .. import prims as P
from ..core import dtypes as dt
from ..core.types import DynDim, ScalarType
from ..errors import CompileError, user_source
from ..tracing import Tracer, bind


def _is_num(x: Any) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool | np.bool_)


def check_constant(x: Any, dtype: dt.DType) -> None:
    """A Python int meeting a scalar of a declared width must fit it (no silent wrap of a constant)."""
    if isinstance(x, numbers.Integral) and dtype.is_int:
        v = int(x)
        lo, hi = (
            (-(1 << (dtype.bits - 1)), (1 << (dtype.bits - 1)) - 1)
            if dtype.is_signed
            else (0, (1 << dtype.bits) - 1)
        )
        if not lo <= v <= hi:
            raise CompileError(
                f"the constant {v} does not fit {dtype!r} (range {lo} .. {hi})",
                user_source(),
                help="use a wider scalar (pl.cast) or a constant in range",
            )


def _scalar_dtype_of(*xs: Any) -> dt.DType:
    for x in xs:
        if isinstance(x, Tracer):
            if not isinstance(x.type, ScalarType):
                raise CompileError(f"scalar arithmetic on a non-scalar value {x.type}", user_source())
            return x.type.dtype
    return dt.INDEX


def _python_scalar(name: str, a: Any, b: Any) -> Any:
    return {
        "add": lambda: a + b,
        "sub": lambda: a - b,
        "mul": lambda: a * b,
        "floordiv": lambda: a // b,
        "mod": lambda: a % b,
        "min": lambda: builtins.min(a, b),
        "max": lambda: builtins.max(a, b),
        "lt": lambda: a < b,
        "le": lambda: a <= b,
        "gt": lambda: a > b,
        "ge": lambda: a >= b,
        "eq": lambda: a == b,
        "ne": lambda: a != b,
    }[name]()


def scalar_binary(name: str, a: Any, b: Any) -> Any:
    """`a <op> b` on index scalars; integers wrap at their declared width, // and % floor (NZ-19)."""
    a, b = (
        DynDim.kernel_value(x) if isinstance(x, DynDim) else x for x in (a, b)
    )  # x.shape[0] of a pl.dynamic
    if not isinstance(a, Tracer) and not isinstance(b, Tracer):
        return _python_scalar(name, a, b)
    for x in (a, b):
        if not isinstance(x, Tracer) and not _is_num(x):
            raise CompileError(f"cannot combine a traced scalar with {type(x).__name__}", user_source())
    if name in ("floordiv", "mod") and not isinstance(b, Tracer) and b == 0:
        raise CompileError(f"integer {name} by zero", user_source())
    dtype = _scalar_dtype_of(a, b)
    for x in (a, b):
        check_constant(x, dtype)
    prim = P.SCALAR_BINARY.get(name) or P.COMPARE[name]
    return bind(prim, [[a], [b]], dtype=dtype)[0]
