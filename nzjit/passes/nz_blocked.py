"""The blocked form of an NZ tensor: logical `[..., R, C]` -> `[B, C/c0, R/16, 16, c0]` (NZ-5),
with every refusal of a type that has none (NZ-4, NZ-6, NZ-11, NZ-14, NZ-28, NZ-33). Both halves
of BlockNzTensorViews address this shape: the views and loads (block_nz.py) and the accumulator
stores (block_nz_store.py)."""

from __future__ import annotations

import math

from runtime.dtypes import FRACTAL_ROWS

from ..core.dtypes import c0_of
from ..core.types import Dim, DynDim, TensorType
from ..errors import CompileError, Source


def blocked_shape(t: TensorType, what: str, source: Source | None) -> tuple[Dim, ...]:
    """Logical NZ `[..., R, C]` -> `[B, C/c0, R/16, 16, c0]`, refusing what has no blocked form."""
    d = t.dtype
    if d.is_sub_byte:
        raise CompileError(
            f"{what}: {d.name} is a sub-byte dtype; NZ needs whole-byte elements "
            "(INT4, UINT4, FP4 and BOOL are not supported for NZ)",
            source,
            rule="NZ-33",
            help="use an 8-bit or wider dtype for NZ tensors",
        )
    if d.bits > 32:
        raise CompileError(
            f"{what}: 64-bit dtype {d.name} has no NZ layout (hardware-model.md §1.1)",
            source,
            rule="NZ-4",
            help="use ND for 64-bit data",
        )
    if t.rank < 2:
        raise CompileError(
            f"{what}: an NZ tensor needs rank >= 2 (the last two axes are the fractal "
            f"plane), got shape {list(t.shape)}",
            source,
            rule="NZ-6",
            help="declare the tensor as [..., R, C], or keep it pl.ND",
        )
    if t.strides is not None or (t.valid_shape is not None and tuple(t.valid_shape) != tuple(t.shape)):
        raise CompileError(
            f"{what}: an NZ tensor cannot carry explicit strides or a partial valid_shape",
            source,
            rule="NZ-14",
            help="NZ strides follow from the blocked shape (NZ-7); give valid_shape to the pl.load instead",
        )
    c0 = c0_of(d)
    r, c = t.shape[-2], t.shape[-1]
    for axis, dim in (("rows", r), ("columns", c)):
        if isinstance(dim, DynDim):
            raise CompileError(
                f"{what}: the NZ {axis} axis {dim} is dynamic; divisibility cannot be proven",
                source,
                rule="NZ-11",
                help="declare the last two axes static",
            )
    assert isinstance(r, int) and isinstance(c, int)
    if r % FRACTAL_ROWS:
        raise CompileError(
            f"{what}: NZ rows {r} must be a multiple of 16 (a partial fractal has no representation)",
            source,
            rule="NZ-5",
            help="pad the rows to a multiple of 16",
        )
    if c % c0:
        raise CompileError(
            f"{what}: NZ columns {c} must be a multiple of c0 = {c0} for {d.name} (a "
            "partial C0 line has no representation)",
            source,
            rule="NZ-4",
            help=f"pad the columns to a multiple of {c0}",
        )
    lead = t.shape[:-2]
    if len(lead) > 1 and any(isinstance(x, DynDim) for x in lead):
        raise CompileError(
            f"{what}: leading axis of {list(t.shape)} is dynamic; folding rank > 3 into "
            "the batch slot multiplies static extents",
            source,
            rule="NZ-28",
            help="make the leading axes static, or use a rank-3 [B, R, C] tensor",
        )
    batch: Dim = 1
    if len(lead) == 1:
        batch = lead[0]
    elif lead:
        batch = math.prod([x for x in lead if isinstance(x, int)])
    return (batch, c // c0, r // FRACTAL_ROWS, FRACTAL_ROWS, c0)
