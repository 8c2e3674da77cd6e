"""Tensor-level queries and scalar access in the kernel language, as PyPTO spells them:
`pl.tensor.dim(t, axis)` (and `t.shape[axis]` of a `pl.dynamic` dimension used as a value).

A `pl.dynamic("B")` dimension is a name in the types; its value is the call's. `pl.tensor.dim`
gives it as an INDEX scalar (`tensor.dim`, read from the call's dimensions by the backend and from
the kernel function's `index` argument by the PTO text); a static dimension folds to its int.
Arithmetic and ordering on the `DynDim` itself (`x.shape[0] // 128`, `pl.range(x.shape[0])`)
go through the same primitive (`DynDim.kernel_value`, set below).
"""

from __future__ import annotations

import numbers
from typing import Any

from ..core.types import DynDim, TensorType
from ..errors import CompileError, user_source
from ..prims import tensor_dim_p
from ..tracing import Tracer, bind, current_state


def dim(tensor: Any, axis: int) -> Any:
    """`pl.tensor.dim(tensor, axis)`: the extent of `axis` (negative counts from the end); an int
    for a static dimension, a traced INDEX scalar for a `pl.dynamic` one."""
    if not isinstance(tensor, Tracer) or not isinstance(tensor.type, TensorType):
        raise CompileError(f"pl.tensor.dim reads a tensor's dimension, got {tensor!r}", user_source())
    t = tensor.type
    if isinstance(axis, bool) or not isinstance(axis, numbers.Integral) or not -t.rank <= int(axis) < t.rank:
        raise CompileError(f"pl.tensor.dim: axis {axis!r} is not an axis of the rank-{t.rank} tensor {t}",
                           user_source())
    a = int(axis) % t.rank
    d = t.shape[a]
    if not isinstance(d, DynDim):
        return int(d)
    return bind(tensor_dim_p, [[tensor]], {"axis": a, "name": d.name})[0]


def _kernel_value(d: DynDim) -> Tracer:
    """`d` as a traced value: `pl.tensor.dim` of the first kernel parameter that has it."""
    st = current_state()
    root = st.frames[0]
    for p in root.params:
        if isinstance(p.type, TensorType) and d in p.type.shape:
            return dim(Tracer(p, root), p.type.shape.index(d))
    raise CompileError(f"the dynamic dimension {d.name} is no parameter's: it has no value in this kernel",
                       user_source())


DynDim.kernel_value = staticmethod(_kernel_value)  # type: ignore[assignment]
