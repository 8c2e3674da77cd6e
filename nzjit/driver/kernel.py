"""`Kernel`: a traced InCore kernel. Calling it checks the arguments, compiles once per signature
(cache.py) and runs on a Worker through the calling convention (calls.py)."""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Callable, Sequence
from typing import Any

from ..core.types import Target
from ..errors import Source, api_boundary
from . import calls
from .cache import CompileCache
from .lowered import Lowered
from .params import Param, entry_params


class Kernel:
    """A traced InCore kernel. Calling it checks the arguments, compiles once per signature, runs."""

    @api_boundary
    def __init__(self, fn: Callable[..., Any], target: Target = Target.A2A3) -> None:
        self.fn = fn
        self.target = target
        self.__name__ = fn.__name__
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn
        code = fn.__code__
        self.params: list[Param] = entry_params(fn, "kernel", Source(code.co_filename, code.co_firstlineno))
        self.cache = CompileCache(self)
        try:
            src = inspect.getsource(fn)
        except OSError:
            src = fn.__code__.co_code.hex()
        self.source_key = hashlib.sha1(src.encode()).hexdigest()

    def __repr__(self) -> str:
        return f"<pl.kernel {self.__name__}>"

    @property
    def trace_count(self) -> int:
        """How many times the body was traced (once per signature)."""
        return self.cache.trace_count

    @property
    def _direct_plans(self) -> dict[Any, Any]:
        """The cached call plans of direct calls (tests count them)."""
        return self.cache.call_plans

    def signature_key(self, args: Sequence[Any]) -> tuple[Any, ...]:
        """The compile cache key of `args` (see `CompileCache.signature_key`)."""
        return self.cache.signature_key(args)

    def clear_cache(self) -> None:
        """Forget every compiled form (the next call traces again)."""
        self.cache.clear()

    @api_boundary
    def lower(self, *args: Any) -> Lowered:
        """Trace and run every pass; args (or nzjit.spec placeholders) only select the cache entry."""
        return self.cache.lowered(args)

    #: `kernel(*args, device=)`: the API boundary straight around calls.call_kernel (a cached call
    #: pays for one wrapper frame, not two)
    __call__ = api_boundary(calls.call_kernel)
