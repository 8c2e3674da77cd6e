"""PTO text for a lowered graph (the `pto` package) and the assembler-compat check (ptoas_check.py)."""

from .ptoas_check import PtoasError, check_ptoas

__all__ = ["PtoasError", "check_ptoas", "emit_pto"]


def emit_pto(graph, kernel=None):
    """The PTO text of a lowered graph (codegen/pto), imported on first use."""
    from .pto import emit_pto as _emit

    return _emit(graph, kernel)
