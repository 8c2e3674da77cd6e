"""Static tile geometry the hardware requires, checked where a kernel makes the tile."""

from __future__ import annotations

from typing import Any

from ..errors import CompileError
from .dtypes import DType, c0_of

FRACTAL_ROWS = 16


def ceil16(rows: int) -> int:
    """Rows rounded up to whole 16-row fractals (hardware-model.md §8 `ceil16`)."""
    return -(-rows // FRACTAL_ROWS) * FRACTAL_ROWS


def check_mat_fractals(what: str, shape: tuple[Any, ...], dtype: DType, source: Any, *,
                       partial_rows: bool = False) -> None:
    """An ND -> NZ Mat tile is whole 16 x c0 fractals (hardware-model.md §1.3, §3). Its columns must
    be whole C0 lines: the load zero-fills a partial line, which no tile shape describes. With
    `partial_rows` (a Left operand: a decode batch of M < 16 tokens) rows need not be whole
    fractals: the tile is padded to ceil16(rows) rows of which the load writes the first `rows`
    (`mat_tile_type`); otherwise they must be."""
    if dtype.is_sub_byte or len(shape) < 2 or not all(isinstance(d, int) for d in shape[-2:]):
        return
    rows, cols, c0 = shape[-2], shape[-1], c0_of(dtype)
    if cols % c0 or (rows % FRACTAL_ROWS and not partial_rows):
        raise CompileError(f"{what}: the Mat tile of an ND window {list(shape)} {dtype.name} is not whole "
                           f"16 x {c0} fractals: {_needs(partial_rows)} a multiple of c0 = {c0}", source,
                           help=_help(partial_rows, c0))


def _needs(partial_rows: bool) -> str:
    return "columns must be" if partial_rows else "rows must be a multiple of 16 and columns"


def _help(partial_rows: bool, c0: int) -> str:
    if partial_rows:
        return f"pad the operand's K axis in GM to a multiple of {c0} (zeros) and slice the window to it"
    return ("only the Left operand (x in x @ w) may have fewer rows than whole fractals (a decode batch); "
            "pad this operand in GM to whole fractals and slice the result")
