"""The valid region of a tensor view (PyPTO's TensorView `valid_shape`): the leading part of each
axis that holds real data.

A view gets one from `pl.slice(..., valid_shape=)` or `pl.tensor.set_validshape`. A slice or an
index of such a view inherits it, shifted by the window's offsets and cut to its extents; a
`valid_shape=` given there narrows it further, never widens it. `pl.load` of a view with a region
reads only that part: the tile's valid shape is the region under the load's window, narrowed by
the load's own `valid_shape=` - so a reduction or a store of the tile sees what the device would
(PyPTO: "a load never reports source bytes that do not exist as real data").

The region lives in the trace state (`TraceState.valid_regions`, keyed by the view's variable);
the IR keeps the operands the author wrote. A reshape of a view with a region is refused: the
region would not follow the new axes."""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from typing import Any

from ..core.types import TensorType
from ..errors import CompileError, user_source
from ..tracing import Tracer, current_state
from .scalar_math import scalar_binary


def region_of(t: Any) -> tuple[Any, ...] | None:
    """The valid region of tensor view `t`, or None when all of it is valid."""
    if not isinstance(t, Tracer):
        return None
    return current_state().valid_regions.get(t.var)


def record(view: Tracer, region: Sequence[Any] | None) -> None:
    """Remember `view`'s region unless it covers the whole view (known when built)."""
    shape = view.type.shape if isinstance(view.type, TensorType) else ()
    if region is None or all(type(v) is int and v == d for v, d in zip(region, shape)):
        return
    current_state().valid_regions[view.var] = tuple(region)


def _sub(a: Any, b: Any) -> Any:
    if type(b) is int and b == 0:
        return a
    return a - b if type(a) is int and type(b) is int else scalar_binary("sub", a, b)


def narrowed(a: Any, b: Any) -> Any:
    """min(a, b): folded for ints, one `min` scalar otherwise."""
    if type(a) is int and type(b) is int:
        return builtins.min(a, b)
    if a is b:
        return a
    return scalar_binary("min", a, b)


def under_window(
    what: str, region: Sequence[Any], offsets: Sequence[Any], sizes: Sequence[Any], dims: Sequence[Any]
) -> list[Any]:
    """The part of `region` inside the window `offsets` / `sizes` of a view of extents `dims`, in
    the window's coordinates; a window wholly outside the region (known when built) is refused."""
    out = []
    for axis, (r, o, n, d) in enumerate(zip(region, offsets, sizes, dims)):
        avail = _sub(r, o)
        # a window reaching the view's end needs no min: the region lies inside the view
        reaches_end = type(o) is int and type(n) is int and type(d) is int and o + n >= d
        v = avail if reaches_end and type(avail) is not int else narrowed(avail, n)
        if type(v) is int and v <= 0:
            raise CompileError(
                f"{what} window [{o}, {o + n if type(n) is int else '?'}) on axis {axis} lies outside "
                f"the valid region (its first {r} elements) of the view it reads",
                user_source(),
                help="move the window into the valid region, or widen the region "
                "(pl.slice valid_shape= / pl.tensor.set_validshape)",
            )
        out.append(v)
    return out


def of_slice(
    src: Any,
    offsets: Sequence[Any],
    sizes: Sequence[Any],
    valid_shape: Sequence[Any] | None,
    drop: tuple[int, ...] = (),
) -> list[Any] | None:
    """The region of a slice of `src` (None: all valid): the source's region under the window,
    narrowed by `valid_shape`; an axis the slice drops (an integer index) must be valid there."""
    inherited = region_of(src)
    if inherited is None and not valid_shape:
        return None
    if inherited is None:
        region = list(valid_shape or ())  # checked inside the window by the caller
    else:
        region = under_window("the slice", inherited, offsets, sizes, src.type.shape)
        if valid_shape:
            region = [narrowed(r, v) for r, v in zip(region, valid_shape)]
    for axis in drop:
        if type(region[axis]) is not int:
            raise CompileError(
                f"indexing axis {axis} of a view whose valid extent there is known only at run time: "
                "the element indexed may not hold real data",
                user_source(),
                help="slice a window (x[i:i + 1, ...]) and load it with its valid shape instead",
            )
    return [v for axis, v in enumerate(region) if axis not in drop]


def of_load(tensor: Any, offsets: Sequence[Any], shapes: Sequence[Any], valid: list[Any]) -> list[Any]:
    """A load's valid extents: the tensor view's region under the window, narrowed by the load's
    own `valid` ([] when none was given); [] when the whole window is valid (known when built)."""
    region = region_of(tensor)
    if region is None:
        return valid
    out = under_window("pl.load", region, offsets, shapes, tensor.type.shape)
    if valid:
        out = [narrowed(r, v) for r, v in zip(out, valid)]
    if all(type(v) is int and v == s for v, s in zip(out, shapes)):
        return []
    return out


def refuse_reshape(t: Any, what: str) -> None:
    """A reshape of a view with a valid region: refused (the region would not follow the axes)."""
    region = region_of(t)
    if region is not None:
        raise CompileError(
            f"{what} of a tensor view with a valid region {list(region)}: the region would not "
            "follow the new shape",
            user_source(),
            help="reshape the tensor before narrowing its valid shape, or pl.load the region",
        )
