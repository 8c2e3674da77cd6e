"""What a GM <-> tile step needs to replay a decoded instruction (runtime `load_plan` /
`store_plan`) instead of decoding it again: operand getters, the element offset of a partition,
a window's byte-offset check specialised per view geometry, and the test that a fresh tensor
is laid out as the one an instruction was decoded for."""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

from ..core.ir import Eqn
from .steps import clamp
from .values import TensorVal


def element_offset(ctx: Any, e: Eqn, offs: tuple[Any, ...], strides: tuple[int, ...]) -> int:
    """sum(offset * stride) of a partition; a negative offset is refused as `clamp` refuses it."""
    delta = 0
    for x, s in zip(offs, strides):
        if x < 0:
            clamp(ctx, e, list(offs))
        delta += x * s
    return delta


def offsets_getter(slots: tuple[int, ...]) -> Callable[[list[Any]], tuple[Any, ...]]:
    """`env -> tuple(env[i] for i in slots)`, as one C call when there are several."""
    if len(slots) > 1:
        return operator.itemgetter(*slots)
    if len(slots) == 1:
        (i,) = slots
        return lambda env: (env[i],)
    return lambda env: ()


def window_bytes(
    strides: tuple[int, ...], sizes: tuple[int, ...], shape: tuple[int, ...], itemsize: int
) -> Callable[[Any], int | None]:
    """`offsets -> byte offset` of a window of extents `sizes` in a view of `shape` / element
    `strides`, or None when an offset is negative or the window leaves the view (the caller then
    raises what `clamp` / `check_window` raise). Fixed per view geometry: one specialised check."""
    limits = tuple(d - n for d, n in zip(shape, sizes))  # x + n <= d  <=>  x <= d - n
    steps = tuple(st * itemsize for st in strides)
    if len(steps) == 2:
        (b0, b1), (l0, l1) = steps, limits

        def rank2(offs: Any) -> int | None:
            x0, x1 = offs
            if 0 <= x0 <= l0 and 0 <= x1 <= l1:
                return x0 * b0 + x1 * b1
            return None

        return rank2

    def any_rank(offs: Any) -> int | None:
        delta = 0
        for x, b, lim in zip(offs, steps, limits):
            if not 0 <= x <= lim:
                return None
            delta += x * b
        return delta

    return any_rank


def same_layout(v: Any, h: Any) -> bool:
    """`v` is a TensorVal laid out as `h` (None: nothing remembered yet): the same shape, strides,
    dtype, layout and NZ facts, only the base address may differ. The decoded instruction and the
    window check remembered for `h` then hold for `v` at `v.addr`: neither depends on the address
    (an InstrPlan is decoded at address 0, the window check on shape and strides), and GM bounds
    are checked against the allocation at the new address when the bytes move. This is what keeps
    the fast path for a fresh tensor of an earlier call's layout (the device never reuses an
    address, so every call with a host array gets new TensorVals)."""
    return (
        type(v) is TensorVal
        and h is not None
        and v.shape == h.shape
        and v.strides == h.strides
        and v.layout == h.layout
        and (v.nz is h.nz or v.nz == h.nz)
        and (v.dtype is h.dtype or v.dtype == h.dtype)
    )
