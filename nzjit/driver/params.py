"""An entry's parameters: `Param` (name, annotation, IR type, the runtime's ParamSpec),
`nzjit.spec` placeholders, and reading an entry's annotations in the scope that decorated it."""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

import runtime

from ..core.dtypes import from_numpy
from ..core.types import DynDim, Type
from ..errors import CompileError, Source, _is_internal
from ..language.annotations import ScalarAnnotation, TensorAnnotation


class Param:
    """One kernel parameter: its name, annotation and IR type."""

    def __init__(self, name: str, ann: TensorAnnotation | ScalarAnnotation) -> None:
        self.name = name
        self.ann = ann
        self.type: Type = ann.type
        self._spec: runtime.dispatch.ParamSpec | None = None
        tensor = isinstance(ann, TensorAnnotation)
        #: a `pl.Out` or `pl.InOut` tensor: the kernel writes it (fixed with the annotation:
        #: every recorded call reads it per parameter, so it is not a property)
        self.is_output: bool = tensor and ann.direction in ("out", "inout")
        #: a `pl.Out` tensor: it may be omitted and is then allocated by the call
        self.is_pure_output: bool = tensor and ann.direction == "out"

    def spec(self) -> runtime.dispatch.ParamSpec:
        """The runtime's `ParamSpec` of this tensor parameter (dynamic dims by name) for dispatch
        checks; built once (it is immutable, building one is ~5 us and a call needs it twice)."""
        if self._spec is None:
            assert isinstance(self.ann, TensorAnnotation)
            shape = tuple(d.name if isinstance(d, DynDim) else d for d in self.ann.shape)
            self._spec = runtime.dispatch.ParamSpec(
                self.name, shape, self.ann.dtype.np_dtype, self.ann.layout.value, self.is_output
            )
        return self._spec


class Spec:
    """`nzjit.spec(shape, dtype)`: a placeholder argument for `kernel.lower`."""

    def __init__(self, shape: Sequence[int], dtype: Any) -> None:
        self.shape = tuple(shape)
        self.dtype = dtype


def spec(shape: Sequence[int], dtype: Any) -> Spec:
    """`nzjit.spec(shape, dtype)`: a placeholder argument for `kernel.lower`."""
    return Spec(shape, dtype)


def decorating_scope() -> dict[str, Any]:
    """Locals of the first frame outside nzjit: where `@pl.kernel` / `@pl.orchestration` was applied."""
    f = sys._getframe(1)
    while f is not None and _is_internal(f.f_code.co_filename):
        f = f.f_back  # type: ignore[assignment]
    return dict(f.f_locals) if f is not None else {}


def entry_params(fn: Callable[..., Any], what: str, source: Source) -> list[Param]:
    """The annotated parameters of the entry `fn` (`what`: "kernel" or "orchestration"); string
    annotations (PEP 563) may name locals of the scope that applied the decorator."""
    hints = inspect.get_annotations(fn, eval_str=True, locals=decorating_scope())
    params: list[Param] = []
    for name in inspect.signature(fn).parameters:
        ann = hints.get(name)
        if not isinstance(ann, TensorAnnotation | ScalarAnnotation):
            raise CompileError(
                f"{what} parameter '{name}' needs a pl.Tensor[...] or pl.Scalar[...] annotation", source
            )
        params.append(Param(name, ann))
    return params


def dtype_name(d: Any) -> str:
    """One name per dtype whether it comes as a pl dtype or a numpy one."""
    name = getattr(d, "name", None)
    if isinstance(d, np.dtype) or not isinstance(name, str) or not name.isupper():
        try:
            return from_numpy(np.dtype(d)).name
        except TypeError:
            return str(d)
    return name
