"""The traced value: a mutable handle on a Var of a trace frame.

Tracing owns the value and its Python protocol (`bool()`, `int()`, iteration are refused); the
kernel language owns what its operators stage. `Tracer.operators` is the language's meaning of
`+ - * // %`, comparisons, `t[i]` and `t[i] = v`; `nzjit.language.ops` sets it once when it is
imported (as JAX's lax gives meaning to a tracer's operators), so tracing never imports the
language above it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, ClassVar, NamedTuple

from ..core import dtypes as dt
from ..core.ir import Var
from ..core.types import ScalarType, TensorType, TileType, Type
from ..errors import CompileError, user_source
from . import frames
from .frames import TraceFrame


class Operators(NamedTuple):
    """What the Python operators of a `Tracer` stage (`nzjit.language.ops` provides them)."""

    scalar_binary: Callable[[str, Any, Any], Any]  # (name, a, b): + - * // % min max and comparisons
    elementwise: Callable[..., Any]  # (name, *tiles): the elementwise Vec tile ops
    getitem: Callable[[Any, Any], Any]  # (tensor, key): tensor.slice
    setitem: Callable[[Any, Any, Any], None]  # (tensor, key, value): tensor.assign


class Tracer:
    """A traced value. Operators stage primitives; Python control flow on it is refused."""

    __slots__ = ("var", "frame", "__weakref__")

    #: The kernel language's operators (set by nzjit.language.ops; see the module docstring).
    operators: ClassVar[Operators]

    def __init__(self, var: Var, frame: TraceFrame) -> None:
        self.var = var
        self.frame = frame

    # -- introspection
    @property
    def type(self) -> Type:
        """The IR type of the traced value."""
        return self.var.type

    @property
    def shape(self) -> tuple[Any, ...]:
        """The tensor or tile shape; `()` for a scalar."""
        t = self.var.type
        if isinstance(t, TensorType | TileType):
            return tuple(t.shape)
        return ()

    @property
    def dtype(self) -> dt.DType:
        """The element dtype."""
        return self.var.type.dtype

    def __repr__(self) -> str:
        return f"Tracer<{self.var.hint or '_'}:{self.var.type}>"

    # -- refusals: Python needs a concrete value here
    def __bool__(self) -> bool:
        handler = frames.branch_handler
        if handler is not None and isinstance(self.var.type, ScalarType) and self.var.type.dtype is dt.BOOL:
            return bool(handler.open_if(self))  # an `if` on a traced BOOL is staged (language/branch.py)
        raise CompileError(
            "a Python `if`/`while`/`and`/`or` on a traced value cannot be staged: the "
            "kernel is traced once, so the branch would be fixed at trace time",
            user_source(),
            help="compute both sides, or use pl.min / pl.max",
        )

    def __index__(self) -> int:
        raise CompileError(
            "a traced value is used where Python needs a concrete int (e.g. a plain "
            "`range` bound or list index)",
            user_source(),
            help="use pl.range(...) for a loop over traced bounds",
        )

    __int__ = __index__

    def __iter__(self) -> Iterator[Any]:
        raise CompileError(
            "a traced value cannot be iterated in Python",
            user_source(),
            help="loop with pl.range / pl.pipeline / pl.spmd",
        )

    # -- scalar arithmetic
    def _bin(self, name: str, other: Any, reverse: bool = False) -> Tracer:
        op = self.operators.scalar_binary
        return op(name, other, self) if reverse else op(name, self, other)

    def __add__(self, o: Any) -> Any:
        return self._tile_or_scalar("add", o)

    def __radd__(self, o: Any) -> Any:
        return self._bin("add", o, True)

    def __sub__(self, o: Any) -> Any:
        return self._tile_or_scalar("sub", o)

    def __rsub__(self, o: Any) -> Any:
        return self._bin("sub", o, True)

    def __mul__(self, o: Any) -> Any:
        return self._tile_or_scalar("mul", o)

    def __rmul__(self, o: Any) -> Any:
        return self._bin("mul", o, True)

    def __floordiv__(self, o: Any) -> Any:
        return self._bin("floordiv", o)

    def __rfloordiv__(self, o: Any) -> Any:
        return self._bin("floordiv", o, True)

    def __mod__(self, o: Any) -> Any:
        return self._bin("mod", o)

    def __rmod__(self, o: Any) -> Any:
        return self._bin("mod", o, True)

    def __neg__(self) -> Any:
        return self._bin("sub", 0, True)

    def __lt__(self, o: Any) -> Any:
        return self._bin("lt", o)

    def __le__(self, o: Any) -> Any:
        return self._bin("le", o)

    def __gt__(self, o: Any) -> Any:
        return self._bin("gt", o)

    def __ge__(self, o: Any) -> Any:
        return self._bin("ge", o)

    def __eq__(self, o: Any) -> Any:
        return self._bin("eq", o)

    def __ne__(self, o: Any) -> Any:
        return self._bin("ne", o)

    __hash__ = object.__hash__

    def _unsupported(self, *_: Any) -> Any:
        raise CompileError(
            "this operator is not part of the kernel language's scalar arithmetic "
            "(`+ - * // %`, comparisons, pl.min / pl.max)",
            user_source(),
            help="use // for (floor) division",
        )

    __truediv__ = __rtruediv__ = __pow__ = __rpow__ = __lshift__ = __rshift__ = _unsupported
    __and__ = __rand__ = __or__ = __ror__ = __xor__ = __invert__ = _unsupported

    def __pos__(self) -> Tracer:
        return self

    def _tile_or_scalar(self, name: str, o: Any) -> Any:
        if isinstance(self.var.type, TileType):
            return self.operators.elementwise(name, self, o)
        return self._bin(name, o)

    # -- tensor indexing
    def __getitem__(self, key: Any) -> Tracer:
        return self.operators.getitem(self, key)

    def __setitem__(self, key: Any, value: Any) -> None:
        self.operators.setitem(self, key, value)
