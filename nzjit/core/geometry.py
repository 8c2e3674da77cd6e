"""Static tile geometry the hardware requires, checked where a kernel makes the tile."""

from __future__ import annotations

from typing import Any

from ..errors import CompileError
from .dtypes import DType, c0_of


def check_mat_fractals(what: str, shape: tuple[Any, ...], dtype: DType, source: Any) -> None:
    """An ND -> NZ Mat tile is whole 16 x c0 fractals (hardware-model.md §1.3, §3): a window of 8
    rows, or of 16 INT8 columns, has no Mat tile of its own shape."""
    if dtype.is_sub_byte or len(shape) < 2 or not all(isinstance(d, int) for d in shape[-2:]):
        return
    rows, cols, c0 = shape[-2], shape[-1], c0_of(dtype)
    if rows % 16 or cols % c0:
        raise CompileError(f"{what}: the Mat tile of an ND window {list(shape)} {dtype.name} is not whole "
                           f"16 x {c0} fractals: rows must be a multiple of 16 and columns a multiple of "
                           f"c0 = {c0}", source,
                           help="pad the operand in GM to whole fractals (e.g. 16 rows for a decode batch "
                                "of 8) and slice the result")
