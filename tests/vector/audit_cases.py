"""The audit of the vector unit (issue 22 item 8 over items 1-6): one case per op of the issue, each
with its primitive, its pto-isa instruction, its numpy reference, its refusals and what it claims
about lane batching (tests/vector/audit_base.py says what a case is; audit_alu.py and
audit_tiles.py hold them). tests/vector/test_vector_audit.py runs every claim; docs/vector_audit.py
renders the table in docs/vector-ops.md from this catalogue, so the table cannot say more than
the tests check.
"""

from __future__ import annotations

from tests.vector import audit_alu, audit_tiles
from tests.vector.audit_base import LANES, Case, In, Refusal, data, kernel_for

__all__ = ["LANES", "Case", "In", "Refusal", "all_cases", "data", "kernel_for"]


def all_cases() -> list[Case]:
    """Every case, moves first (item 1), then the ALU (2, 3), creation, tiles as values, top-k."""
    return [
        *audit_tiles.move_cases(),
        *audit_alu.binary_cases(),
        *audit_alu.unary_cases(),
        *audit_alu.cast_cases(),
        *audit_alu.reduction_cases(),
        *audit_alu.broadcast_cases(),
        *audit_tiles.creation_cases(),
        *audit_tiles.tile_value_cases(),
        *audit_tiles.topk_cases(),
    ]
