"""nzjit: trace Ascend PTO kernels written in Python, lower NZ layouts, run them byte-exactly on a
simulated A2/A3 NPU (the `runtime` package), and emit the PTO text an assembler consumes."""

from __future__ import annotations

from . import pl
from .errors import CompileError, InternalError, Source
from .language.kernel import Kernel, Spec, spec

#: The package version, its one source of truth: pyproject.toml reads it (`dynamic = ["version"]`,
#: setuptools takes the literal without importing the package).
__version__ = "0.1.0"

__all__ = [
    "__version__",
    "pl",
    "CompileError",
    "InternalError",
    "Source",
    "Kernel",
    "Spec",
    "spec",
    "check_ptoas",
]


def check_ptoas(text: str, version: str = "0.61") -> None:
    """The assembler-compat check of emitted PTO text (codegen/ptoas_check.py)."""
    from .codegen.ptoas_check import check_ptoas as _check

    _check(text, version)
