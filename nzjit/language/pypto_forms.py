"""PyPTO's spellings of loops, scopes and decorators, on nzjit's own machinery (issue 23 item 6).

A kernel file written for `pypto.language` runs on nzjit after changing only its imports:

- `pl.parallel(start, stop, step, chunk=...)`: a staged loop whose trips are independent. nzjit
  stages it as `pl.range` (a sequential run is one correct schedule of independent trips);
  `chunk` is a scheduling hint and is accepted as such.
- `pl.unroll(stop)` / `pl.unroll(start, stop, step)`: unrolled at trace time (a Python range over
  static bounds; a traced bound is refused).
- `pl.pipeline(stop, stage=2)` as well as `pl.pipeline(start, stop, step, stage=2)`.
- `with pl.at(level=pl.Level.CORE_GROUP, optimizations=[...], name_hint="...")` and
  `with pl.incore():`: a scope marking an InCore region. Inside a `@pl.kernel` every statement is
  already InCore, so the scope stages nothing; its arguments are checked (a level must be a
  `pl.Level`) so that a misspelt scope is refused rather than ignored.
- `@pl.jit.incore`, `@pl.function(type=pl.FunctionType.InCore)`: `@pl.kernel`;
  `@pl.jit`, `@pl.jit.host`, `@pl.function(type=pl.FunctionType.Orchestration)`: `@pl.orchestration`.
"""

from __future__ import annotations

import builtins
import enum
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from ..core.types import Target
from ..errors import CompileError, user_source
from ..tracing import Tracer
from .kernel import kernel, orchestration
from .loops import pipeline as _pipeline
from .loops import range as _range


def parallel(
    *args: Any, chunk: int | None = None, init_values: tuple[Any, ...] | None = None
) -> Iterator[Any]:
    """pl.parallel(stop) / (start, stop[, step]): independent trips, staged as pl.range (with
    PyPTO's `init_values`, explicit carries, as pl.range has them)."""
    if chunk is not None and (not isinstance(chunk, int) or chunk < 1):
        raise CompileError(f"pl.parallel chunk must be a positive int, got {chunk!r}", user_source())
    return _range(*args, init_values=init_values)


def unroll(*args: Any) -> builtins.range:
    """pl.unroll(stop) / (start, stop[, step]): a loop unrolled at trace time (static bounds)."""
    if not 1 <= len(args) <= 3:
        raise CompileError("pl.unroll takes (stop), (start, stop) or (start, stop, step)", user_source())
    if any(isinstance(a, Tracer) for a in args):
        raise CompileError(
            "pl.unroll needs static bounds: it is unrolled when the kernel is traced",
            user_source(),
            help="use pl.range for a loop over traced bounds",
        )
    return builtins.range(*args)


def pipeline(*args: Any, stage: int = 2) -> Iterator[Tracer]:
    """pl.pipeline(stop, stage=2) or pl.pipeline(start, stop[, step], stage=2)."""
    if not 1 <= len(args) <= 3:
        raise CompileError("pl.pipeline takes (stop), (start, stop) or (start, stop, step)", user_source())
    start, stop, step = (
        (0, args[0], 1) if len(args) == 1 else (args[0], args[1], args[2] if len(args) == 3 else 1)
    )
    return _pipeline(start, stop, step, stage=stage)


class Level(enum.Enum):
    """PyPTO's hierarchy levels of a `pl.at` scope."""

    CORE_GROUP = "core_group"
    CORE = "core"
    AIC = "aic"
    AIV = "aiv"
    HOST = "host"


@contextmanager
def at(
    level: Level = Level.CORE_GROUP, optimizations: Sequence[Any] | None = None, name_hint: str | None = None
) -> Iterator[None]:
    """`with pl.at(level=..., optimizations=[...], name_hint=...)`: an InCore scope (module docstring)."""
    if not isinstance(level, Level):
        raise CompileError(
            f"pl.at level must be a pl.Level, got {level!r}",
            user_source(),
            help="e.g. pl.at(level=pl.Level.CORE_GROUP)",
        )
    if level is Level.HOST:
        raise CompileError(
            "pl.at(level=pl.Level.HOST) inside a kernel: a kernel body runs on the core",
            user_source(),
            help="move host code into a @pl.jit / @pl.orchestration function",
        )
    if name_hint is not None and not isinstance(name_hint, str):
        raise CompileError(f"pl.at name_hint must be a str, got {name_hint!r}", user_source())
    if optimizations is not None and not isinstance(optimizations, list | tuple):
        raise CompileError(f"pl.at optimizations must be a list, got {optimizations!r}", user_source())
    yield


def incore() -> Any:
    """`with pl.incore():` - the same scope as pl.at(level=pl.Level.CORE_GROUP)."""
    return at(Level.CORE_GROUP)


class FunctionType(enum.Enum):
    """PyPTO's function kinds for `@pl.function(type=...)`."""

    InCore = "incore"
    Orchestration = "orchestration"
    Opaque = "opaque"


def function(
    fn: Callable[..., Any] | None = None,
    *,
    type: FunctionType = FunctionType.Opaque,  # noqa: A002
    target: Target = Target.A2A3,
) -> Any:
    """@pl.function(type=pl.FunctionType.InCore) is @pl.kernel; type=Orchestration is @pl.orchestration."""

    def deco(f: Callable[..., Any]) -> Any:
        if type is FunctionType.InCore:
            return kernel(f, target=target)
        if type is FunctionType.Orchestration:
            return orchestration(f)
        raise CompileError(
            f"@pl.function(type={type}) is not a kernel or an orchestration on nzjit",
            user_source(),
            help="use type=pl.FunctionType.InCore or pl.FunctionType.Orchestration",
        )

    return deco if fn is None else deco(fn)


class _Jit:
    """`@pl.jit` / `@pl.jit.host` (an orchestration) and `@pl.jit.incore` (a kernel)."""

    def __call__(self, fn: Callable[..., Any]) -> Any:
        return orchestration(fn)

    def host(self, fn: Callable[..., Any]) -> Any:
        """@pl.jit.host: a host-side orchestration."""
        return orchestration(fn)

    def incore(self, fn: Callable[..., Any] | None = None, *, target: Target = Target.A2A3) -> Any:
        """@pl.jit.incore: an InCore device kernel."""
        return kernel(fn, target=target)


jit = _Jit()

__all__ = ["FunctionType", "Level", "at", "function", "incore", "jit", "parallel", "pipeline", "unroll"]
