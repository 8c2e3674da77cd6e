"""The partition of an Acc store into a blocked NZ view for one run (NZ-20, NZ-21)."""

from __future__ import annotations

from typing import Any

import runtime

from ..core.ir import Eqn
from ..passes.block_nz_store import ACC_COL_ALIGN


def nz_store_partition(e: Eqn, part: Any, valid_col: int) -> tuple[int, ...]:
    """The NZ store's partition for this run: with dynamic valid columns (`nz_dynamic_cols`, the
    static partition is the tile's whole width) its column blocks are the run-time valid columns,
    so validCol equals the partition's columns and nothing past them is written; valid columns
    that are not whole 16-column blocks are refused before anything is written (NZ-21)."""
    if not e.params.get("nz_dynamic_cols") or valid_col == part[1] * part[4]:
        return tuple(part)
    if valid_col % ACC_COL_ALIGN or not 0 < valid_col <= part[1] * part[4]:
        raise runtime.DeviceError(
            f"{e.source}: NZ-21: the accumulator tile stored into NZ has {valid_col} valid columns at "
            f"run time; the NZ store writes whole {ACC_COL_ALIGN}-column blocks of valid columns "
            f"(pto-isa TStoreAccNz2nz: validCol % {ACC_COL_ALIGN} == 0), so nothing was written; "
            f"help: make the N tail a multiple of {ACC_COL_ALIGN} columns, or store into an ND output"
        )
    return (part[0], valid_col // part[4], *part[2:])
