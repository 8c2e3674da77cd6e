"""Every primitive's rule, one module per family; importing this package registers them all
(`plan.py` does). See `nzjit/backend/rule.py` for the registration API."""

from __future__ import annotations

from . import (
    comm,
    control,
    cube,
    cube_batch,
    memory,
    scalar,
    tensor,
    tensor_scalar,
    vector,
    vector_alu,
    vector_select,
    vector_tiles,
)

__all__ = [
    "comm",
    "control",
    "cube",
    "cube_batch",
    "memory",
    "scalar",
    "tensor",
    "tensor_scalar",
    "vector",
    "vector_alu",
    "vector_select",
    "vector_tiles",
]
