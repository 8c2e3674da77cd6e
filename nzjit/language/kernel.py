"""@pl.kernel: trace once, lower through the pass pipeline, cache by signature, run on a Worker."""

from __future__ import annotations

import functools
import gc
import hashlib
import inspect
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

import runtime

from ..core.dtypes import from_numpy
from ..core.types import DynDim, Layout, ScalarType, Target, TensorType, Type
from ..errors import CompileError, Source, api_boundary
from ..tracing import trace
from .annotations import ScalarAnnotation, TensorAnnotation


class Param:
    """One kernel parameter: its name, annotation and IR type."""

    def __init__(self, name: str, ann: TensorAnnotation | ScalarAnnotation) -> None:
        self.name = name
        self.ann = ann
        self.type: Type = ann.type

    @property
    def is_output(self) -> bool:
        """True for a `pl.Out` or `pl.InOut` tensor: the kernel writes it."""
        return isinstance(self.ann, TensorAnnotation) and self.ann.direction in ("out", "inout")

    @property
    def is_pure_output(self) -> bool:
        """True for a `pl.Out` tensor: it may be omitted and is then allocated by the call."""
        return isinstance(self.ann, TensorAnnotation) and self.ann.direction == "out"

    def spec(self) -> runtime.dispatch.ParamSpec:
        """The runtime's `ParamSpec` of this tensor parameter (dynamic dims by name) for dispatch checks."""
        assert isinstance(self.ann, TensorAnnotation)
        shape = tuple(d.name if isinstance(d, DynDim) else d for d in self.ann.shape)
        return runtime.dispatch.ParamSpec(self.name, shape, self.ann.dtype.np_dtype,
                                          self.ann.layout.value, self.is_output)


class Spec:
    """`nzjit.spec(shape, dtype)`: a placeholder argument for `kernel.lower`."""

    def __init__(self, shape: Sequence[int], dtype: Any) -> None:
        self.shape = tuple(shape)
        self.dtype = dtype


def spec(shape: Sequence[int], dtype: Any) -> Spec:
    """`nzjit.spec(shape, dtype)`: a placeholder argument for `kernel.lower`."""
    return Spec(shape, dtype)


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while a kernel compiles: tracing and the passes
    allocate tens of thousands of long-lived IR objects, and the collections they would trigger
    rescan all of them (about a tenth of the compile time) to find no garbage cycles. A collector
    the caller had switched off stays off."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


class Kernel:
    """A traced InCore kernel. Calling it checks the arguments, compiles once per signature, runs."""

    @api_boundary
    def __init__(self, fn: Callable[..., Any], target: Target = Target.A2A3) -> None:
        self.fn = fn
        self.target = target
        self.__name__ = fn.__name__
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn
        # string annotations (PEP 563) may name locals of the scope that applied the decorator
        hints = inspect.get_annotations(fn, eval_str=True, locals=_decorating_scope())
        self.params: list[Param] = []
        for name in inspect.signature(fn).parameters:
            ann = hints.get(name)
            if not isinstance(ann, TensorAnnotation | ScalarAnnotation):
                code = fn.__code__
                raise CompileError(f"kernel parameter '{name}' needs a pl.Tensor[...] or pl.Scalar[...] "
                                   "annotation", Source(code.co_filename, code.co_firstlineno))
            self.params.append(Param(name, ann))
        self._cache: dict[Any, Any] = {}
        self._fast_cache: dict[Any, Any] = {}
        self._direct_plans: dict[Any, Any] = {}  # backend/call.py: checked signatures of direct calls
        self.trace_count = 0  # how many times the body was traced (once per signature)
        self._lock = threading.Lock()
        try:
            src = inspect.getsource(fn)
        except OSError:
            src = fn.__code__.co_code.hex()
        self._source_key = hashlib.sha1(src.encode()).hexdigest()

    def __repr__(self) -> str:
        return f"<pl.kernel {self.__name__}>"

    def signature_key(self, args: Sequence[Any]) -> tuple[Any, ...]:
        """One entry per parameter: a tensor's shape (a dynamic dimension by its name: the graph is
        the same for every extent, so no hidden recompiles) and dtype, a scalar's dtype. Omitted
        Out parameters and placeholders key by their annotation; values never enter the key."""
        n_in = sum(1 for p in self.params if not p.is_pure_output)
        it = iter(args)
        full = list(args) if len(args) == len(self.params) else (
            [None if p.is_pure_output else next(it, None) for p in self.params] if len(args) == n_in else [])
        key: list[Any] = [self._source_key, self.target]
        for i, p in enumerate(self.params):
            a = full[i] if i < len(full) else None
            t = p.type
            if isinstance(t, ScalarType):
                key.append(t.dtype.name)
                continue
            assert isinstance(t, TensorType)
            shape: tuple[Any, ...] = tuple(d.name if isinstance(d, DynDim) else d for d in t.shape)
            dtype = t.dtype.name
            if isinstance(a, np.ndarray | runtime.DeviceTensor | Spec):
                got = tuple(a.shape)
                if len(got) == len(shape):
                    shape = tuple(s if isinstance(s, str) else int(g) for s, g in zip(shape, got))
                dtype = _dtype_name(a.dtype)
            key.append((shape, dtype))
        return tuple(key)

    def clear_cache(self) -> None:
        """Forget every compiled form (the next call traces again)."""
        with self._lock:
            self._cache.clear()
            self._fast_cache.clear()
            self._direct_plans.clear()

    @api_boundary
    def lower(self, *args: Any) -> Any:
        """Trace and run every pass; args (or nzjit.spec placeholders) only select the cache entry."""
        from ..passes.pipeline import Lowered

        # a cheap first-level key (shapes and dtypes as they come) in front of the canonical one
        fast = tuple((a.shape, a.dtype) if isinstance(a, np.ndarray | runtime.DeviceTensor | Spec) else type(a)
                     for a in args)
        low = self._fast_cache.get(fast)
        if low is not None:
            return low
        key = self.signature_key(args)
        with self._lock:
            low = self._cache.get(key)
            if low is None:
                with _collector_paused():
                    graph = trace(self.fn, [p.type for p in self.params], [p.name for p in self.params],
                                  self.__name__, self.target.value)
                    self.trace_count += 1
                    low = Lowered(self, graph)
                self._cache[key] = low
            if len(self._fast_cache) < 256:
                self._fast_cache[fast] = low
        return low

    @api_boundary
    def __call__(self, *args: Any, device: int | None = None) -> Any:
        return _backend_call().call_kernel(self, args, device=device)


def _backend_call() -> Any:
    """backend/call.py, imported on the first call (tracing and lowering need no executor); kept
    in a global so that a call does not pay for an import statement."""
    global _call_module
    if _call_module is None:
        from ..backend import call

        _call_module = call
    return _call_module


_call_module: Any = None


def _decorating_scope() -> dict[str, Any]:
    """Locals of the first frame outside nzjit: where `@pl.kernel` was applied."""
    import sys

    from ..errors import _is_internal

    f = sys._getframe(1)
    while f is not None and _is_internal(f.f_code.co_filename):
        f = f.f_back  # type: ignore[assignment]
    return dict(f.f_locals) if f is not None else {}


def _dtype_name(d: Any) -> str:
    """One name per dtype whether it comes as a pl dtype or a numpy one."""
    name = getattr(d, "name", None)
    if isinstance(d, np.dtype) or not isinstance(name, str) or not name.isupper():
        try:
            return from_numpy(np.dtype(d)).name
        except TypeError:
            return str(d)
    return name


@api_boundary
def kernel(fn: Callable[..., Any] | None = None, *, target: Target = Target.A2A3) -> Any:
    """@pl.kernel or @pl.kernel(target=pl.A2A3): an InCore device kernel, traced on first use."""
    if fn is None:
        return functools.partial(Kernel, target=target)  # a C callable: no nzjit frame in a traceback
    return Kernel(fn, target)


@api_boundary
def orchestration(fn: Callable[..., Any]) -> Any:
    """@pl.orchestration: a host-side entry whose body calls kernels (see language/orchestration.py)."""
    from .orchestration import Orchestration

    return Orchestration(fn)


__all__ = ["Kernel", "kernel", "orchestration", "spec", "Spec", "Layout", "TensorType", "ScalarType"]
