"""The compile cache of a kernel, one for every concern of a call:

    argument signature -> `Lowered` (the traced graph after every pass) -> call plan

`lowered(args)` traces and lowers once per signature (a cheap first-level key of the arguments
as they come in front of the canonical `signature_key`); `call_plans` keeps the checked call
plans of direct calls (backend/direct_call.py), keyed by the call's signature and options.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

import runtime

from ..core.types import DynDim, ScalarType, TensorType
from ..passes.guard_bypass import ON_ANYWHERE, active_bypasses
from ..tracing import trace
from .lowered import Lowered
from .params import Spec, dtype_name

#: First-level keys kept per kernel (beyond them the canonical key alone answers).
MAX_FAST_KEYS = 256


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


class CompileCache:
    """One kernel's compiled forms: Lowered per signature, call plans per call signature."""

    def __init__(self, kernel: Any) -> None:
        self.kernel = kernel
        self.by_signature: dict[Any, Lowered] = {}
        self.by_arguments: dict[Any, Lowered] = {}  # the first-level key: shapes / dtypes as given
        self.call_plans: dict[Any, Any] = {}
        self.trace_count = 0  # how many times the body was traced (once per signature)
        #: bumped by `clear`: a cached program plan (backend/program_cache.py) keys on it
        self.generation = 0
        self.lock = threading.Lock()

    def signature_key(self, args: Sequence[Any]) -> tuple[Any, ...]:
        """One entry per parameter: a tensor's shape (a dynamic dimension by its name: the graph is
        the same for every extent, so no hidden recompiles) and dtype, a scalar's dtype. Omitted
        Out parameters and placeholders key by their annotation; values never enter the key."""
        k = self.kernel
        params = k.params
        n_in = sum(1 for p in params if not p.is_pure_output)
        it = iter(args)
        full = (
            list(args)
            if len(args) == len(params)
            else ([None if p.is_pure_output else next(it, None) for p in params] if len(args) == n_in else [])
        )
        key: list[Any] = [k.source_key, k.target]
        for i, p in enumerate(params):
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
                dtype = dtype_name(a.dtype)
            key.append((shape, dtype))
        return tuple(key)

    def lowered(self, args: Sequence[Any]) -> Lowered:
        """The Lowered of these arguments' signature (traced and lowered on first use)."""
        fast: tuple[Any, ...] = tuple(
            (a.shape, a.dtype) if isinstance(a, np.ndarray | runtime.DeviceTensor | Spec) else type(a)
            for a in args
        )
        off = active_bypasses() if ON_ANYWHERE[0] else ()  # a test's guard bypass: its own entry
        if off:
            fast = (off, *fast)
        low = self.by_arguments.get(fast)
        if low is not None:
            return low
        key = self.signature_key(args)
        if off:
            key = (off, *key)
        k = self.kernel
        with self.lock:
            low = self.by_signature.get(key)
            if low is None:
                with _collector_paused():
                    graph = trace(
                        k.fn,
                        [p.type for p in k.params],
                        [p.name for p in k.params],
                        k.__name__,
                        k.target.value,
                    )
                    self.trace_count += 1
                    low = Lowered(k, graph)
                self.by_signature[key] = low
            if len(self.by_arguments) < MAX_FAST_KEYS:
                self.by_arguments[fast] = low
        return low

    def clear(self) -> None:
        """Forget every compiled form (the next call traces again)."""
        with self.lock:
            self.by_signature.clear()
            self.by_arguments.clear()
            self.call_plans.clear()
            self.generation += 1
