"""A mypy plugin that accepts kernel annotations as they are written.

`pl.Tensor[[64, 2048], pl.INT8, pl.NZ]` is an expression that builds an annotation object at run
time; to mypy it is not a type ("Bracketed expression is not valid as a type"). With this plugin
(`plugins = ["nzjit.mypy_plugin"]` in the mypy configuration), `pl.Tensor[...]`, `pl.Out[...]`,
`pl.InOut[...]`, `pl.Scalar[...]` and `pld.DistributedTensor[...]` are read as what the parameter
is inside the kernel body: a traced value (`nzjit.tracing.Tracer`). Their arguments (shapes, dtypes, layouts) are checked at
run time by `@pl.kernel`, with the kernel line, not by mypy.

This module imports mypy; nzjit itself never imports it.
"""

from __future__ import annotations

from collections.abc import Callable

from mypy.plugin import AnalyzeTypeContext, Plugin
from mypy.types import AnyType, Type, TypeOfAny

#: The annotation factories of nzjit.language.annotations (re-exported as pl.Tensor, ...) and
#: the window parameter of nzjit.pld.
ANNOTATIONS = frozenset(
    [
        *(f"nzjit.language.annotations.{n}" for n in ("Tensor", "Out", "InOut", "Scalar")),
        "nzjit.pld.DistributedTensor",
    ]
)
TRACER = "nzjit.tracing.Tracer"


def _traced_value(ctx: AnalyzeTypeContext) -> Type:
    """The parameter's type in the body: a Tracer (Any when mypy has not loaded nzjit.tracing)."""
    try:
        return ctx.api.named_type(TRACER, [])
    except (KeyError, AssertionError):  # nzjit.tracing is not part of this build
        return AnyType(TypeOfAny.special_form)


class NzjitPlugin(Plugin):
    """Kernel annotations are types: see the module docstring."""

    def get_type_analyze_hook(self, fullname: str) -> Callable[[AnalyzeTypeContext], Type] | None:
        """The hook for nzjit's annotation factories (they become traced values), else None."""
        return _traced_value if fullname in ANNOTATIONS else None


def plugin(version: str) -> type[Plugin]:
    """mypy's entry point."""
    return NzjitPlugin
