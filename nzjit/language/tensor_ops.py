"""Tensor-level queries and scalar access in the kernel language, as PyPTO spells them:
`pl.tensor.dim(t, axis)` (and `t.shape[axis]` of a `pl.dynamic` dimension used as a value),
`pl.read(t, indices)` / `pl.write(t, indices, value)` (also `pl.tensor.read` / `pl.tensor.write`).

A scalar read from GM has the call's value, unknown when the kernel is compiled: an index or a
window offset computed from it is proven in bounds only when it is clamped by construction
(`pl.min(v, hi)`, a multiple `v * 256` of an aligned step); otherwise the window's rule refuses it,
and an element index the backend cannot bound is refused at run time (nothing written back).

A `pl.dynamic("B")` dimension is a name in the types; its value is the call's. `pl.tensor.dim`
gives it as an INDEX scalar (`tensor.dim`, read from the call's dimensions by the backend and from
the kernel function's `index` argument by the PTO text); a static dimension folds to its int.
Arithmetic and ordering on the `DynDim` itself (`x.shape[0] // 128`, `pl.range(x.shape[0])`)
go through the same primitive (`DynDim.kernel_value`, set below).
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any

from ..core import dtypes as dt
from ..core.types import DynDim, TensorType, TileType
from ..errors import CompileError, user_source
from ..prims import tensor_assign_p, tensor_dim_p, tensor_read_p, tensor_write_p
from ..tracing import Tracer, bind, current_state, literal
from .ops import _offsets
from .scalar_math import check_constant
from .tile_values import assemble as tile_assemble
from .tile_values import store


def dim(tensor: Any, axis: int) -> Any:
    """`pl.tensor.dim(tensor, axis)`: the extent of `axis` (negative counts from the end); an int
    for a static dimension, a traced INDEX scalar for a `pl.dynamic` one."""
    if not isinstance(tensor, Tracer) or not isinstance(tensor.type, TensorType):
        raise CompileError(f"pl.tensor.dim reads a tensor's dimension, got {tensor!r}", user_source())
    t = tensor.type
    if isinstance(axis, bool) or not isinstance(axis, numbers.Integral) or not -t.rank <= int(axis) < t.rank:
        raise CompileError(
            f"pl.tensor.dim: axis {axis!r} is not an axis of the rank-{t.rank} tensor {t}", user_source()
        )
    a = int(axis) % t.rank
    d = t.shape[a]
    if not isinstance(d, DynDim):
        return int(d)
    return bind(tensor_dim_p, [[tensor]], {"axis": a, "name": d.name})[0]


def _indices(t: Any, offset: Any, what: str) -> list[Any]:
    if isinstance(t, Tracer) and isinstance(t.type, TileType):
        raise CompileError(
            f"{what} of a tile is not built: a tile's element is a vector register lane here",
            user_source(),
            help="pl.store the tile and read the tensor, or pl.cmp / pl.sel on it",
        )
    if not isinstance(t, Tracer) or not isinstance(t.type, TensorType):
        raise CompileError(f"{what} takes a tensor, got {t!r}", user_source())
    idx = list(offset) if isinstance(offset, Sequence) else [offset]
    return _offsets(idx, what)


def read(src: Any, offset: Any) -> Tracer:
    """`pl.read(tensor, indices)`: the element at `indices` (one per axis; a bare index for 1-D) as
    a scalar of the tensor's dtype."""
    return bind(tensor_read_p, [[src], _indices(src, offset, "pl.read")])[0]


def write(dst: Any, offset: Any, value: Any) -> Tracer:
    """`pl.write(tensor, indices, value)`: set the element at `indices` to `value` (a scalar of the
    tensor's dtype, or a number that fits it)."""
    idx = [x if isinstance(x, Tracer) else literal(x, dt.INDEX) for x in _indices(dst, offset, "pl.write")]
    d = dst.type.dtype
    check_constant(value, d)
    return bind(tensor_write_p, [[dst], idx, [value]], dtype=d)[0]  # a number value: a literal of d


def _kernel_value(d: DynDim) -> Tracer:
    """`d` as a traced value: `pl.tensor.dim` of the first kernel parameter that has it."""
    st = current_state()
    root = st.frames[0]
    for p in root.params:
        if isinstance(p.type, TensorType) and d in p.type.shape:
            return dim(Tracer(p, root), p.type.shape.index(d))
    raise CompileError(
        f"the dynamic dimension {d.name} is no parameter's: it has no value in this kernel", user_source()
    )


DynDim.kernel_value = staticmethod(_kernel_value)


def assemble(target: Any, source: Any, offset: Sequence[Any], *, atomic: Any = None) -> Tracer:
    """`pl.assemble(target, source, offset)`: `source` written into `target` at `offset`; returns the
    updated target. A tensor target takes a tile (a store, `pl.store(source, offset, target)`) or a
    computed tensor value such as a matmul result (`target[window] = source`); a tile target is
    `pl.tile.assemble` (TINSERT). PyPTO's `atomic=` combine is not built (refused)."""
    if atomic not in (None, False) and str(atomic) not in ("AtomicType.None_", "None_"):
        raise CompileError(
            f"pl.assemble(atomic={atomic!r}) is not built: an atomic combine into GM",
            user_source(),
            help="accumulate in an Acc tile (pl.matmul_acc) or a Vec tile (pl.add), then assemble it",
        )
    if isinstance(target, Tracer) and isinstance(target.type, TileType):
        return tile_assemble(target, source, offset)
    if not isinstance(target, Tracer) or not isinstance(target.type, TensorType):
        raise CompileError(f"pl.assemble writes into a tensor or a tile, got {target!r}", user_source())
    offs = _offsets(list(offset), "pl.assemble")
    if len(offs) != target.type.rank:
        raise CompileError(
            f"pl.assemble into a rank-{target.type.rank} tensor takes {target.type.rank} offsets, "
            f"got {len(offs)}",
            user_source(),
        )
    if isinstance(source, Tracer) and isinstance(source.type, TileType):
        return store(source, offs, target)
    if not isinstance(source, Tracer) or not isinstance(source.type, TensorType):
        raise CompileError(f"pl.assemble writes a tile or a computed tensor, got {source!r}", user_source())
    shape = (1,) * (target.type.rank - source.type.rank) + tuple(source.type.shape)
    return bind(tensor_assign_p, [[target], [source], offs], {"shape": shape})[0]
