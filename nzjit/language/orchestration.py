"""The orchestration objects, kept importable here for existing code: they live in
nzjit/driver/orchestration.py (`@pl.orchestration` itself is in language/kernel.py)."""

from __future__ import annotations

from ..driver.orchestration import Handle, Orchestration, Program, active_program

__all__ = ["Orchestration", "Handle", "Program", "active_program"]
