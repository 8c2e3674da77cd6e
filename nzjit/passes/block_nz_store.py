"""Accumulator write-back into an NZ tensor (NZ-20..24): the store half of BlockNzTensorViews."""

from __future__ import annotations

from typing import Any

from ..core.ir import Eqn
from ..errors import CompileError


def rewrite_nz_store(blk: Any, e: Eqn) -> None:
    """Rewrite `pl.store(acc, offsets, out)` into an FP32 NZ target, or refuse it (NZ-21)."""
    raise CompileError("storing into an NZ tensor is not supported yet", e.source, rule="NZ-21",
                       help="store into an ND tensor")


def split_nz_store(tiler: Any, mm: Eqn, st: Eqn) -> None:
    """AutoTileMatmulL0's N-only split of a matmul whose only consumer is an NZ store (NZ-22)."""
    raise CompileError("splitting a matmul stored into an NZ tensor is not supported yet", st.source,
                       rule="NZ-22")
