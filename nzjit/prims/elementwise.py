"""Elementwise primitives on Vec tiles: `pl.cast` and `pl.add / sub / mul / maximum / exp / neg / abs`."""

from __future__ import annotations

from typing import Any

from ..core import dtypes as dt
from ..core.primitives import _elementwise, _tile, primitive
from ..core.types import Type


@primitive("tile.cast", ("src",))
def tile_cast_p(src: Type, *, dtype: dt.DType, **_: Any) -> list[Type]:
    """`pl.cast` of a tile to `dtype` (same shape and memory)."""
    s = _tile(src, "pl.cast")
    return [s.with_(dtype=dtype)]


ELEMENTWISE = {n: _elementwise(n, k) for n, k in
               (("add", 2), ("sub", 2), ("mul", 2), ("maximum", 2), ("exp", 1), ("neg", 1))}
ELEMENTWISE["abs"] = _elementwise("abs", 1, (dt.FP32, dt.FP16))  # TABS: float / half only (pto-isa)
