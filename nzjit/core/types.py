"""IR types: scalars, global-memory tensors and on-chip tiles. Layout and memory are part of equality.

Dim      := int | DynDim(name)
Type     := ScalarType(dtype)
          | TensorType(shape: Dim*, dtype, layout, strides?, valid_shape?)
          | TileType(shape: int*, dtype, memory, valid_shape?)
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from .dtypes import DType


def _via_value(op: str, reflected: bool = False) -> Callable[..., Any]:
    def apply(self: DynDim, other: Any) -> Any:
        v = DynDim.kernel_value(self)
        return getattr(v, f"__{'r' if reflected else ''}{op}__")(other)

    return apply


@dataclass(frozen=True)
class DynDim:
    """A dimension known only at run time; the same name is the same dimension (`==` compares
    dimensions). Inside a kernel's trace, arithmetic and ordering on it (`x.shape[0] // 16`,
    `pl.range(x.shape[0])`) use its value for the call (`pl.tensor.dim`), through `kernel_value`,
    which the kernel language sets (the core does not import it)."""

    name: str

    #: `DynDim -> traced INDEX scalar` while a kernel is traced (nzjit/language/tensor_ops.py).
    kernel_value: ClassVar[Callable[[DynDim], Any]]

    def __repr__(self) -> str:
        return self.name

    __add__, __radd__ = _via_value("add"), _via_value("add", True)
    __sub__, __rsub__ = _via_value("sub"), _via_value("sub", True)
    __mul__, __rmul__ = _via_value("mul"), _via_value("mul", True)
    __floordiv__, __rfloordiv__ = _via_value("floordiv"), _via_value("floordiv", True)
    __mod__, __rmod__ = _via_value("mod"), _via_value("mod", True)
    __lt__, __le__, __gt__, __ge__ = _via_value("lt"), _via_value("le"), _via_value("gt"), _via_value("ge")


Dim = int | DynDim


def static_dim(d: Dim) -> int:
    """`d` where the rules guarantee a static extent (an NZ tensor's last two axes, a tile's
    shape): a `DynDim` there is a compiler bug, refused with the TypeError `int()` would raise."""
    if isinstance(d, DynDim):
        raise TypeError(f"dimension {d!r} is dynamic where a static extent is required")
    return int(d)


class Layout(enum.Enum):
    """Byte order of a tensor in global memory (NZ-1)."""

    ND = "ND"
    NZ = "NZ"

    def __repr__(self) -> str:
        return f"pl.{self.value}"


class Mem(enum.Enum):
    """On-chip memory spaces of the A2/A3 AI core (hardware-model.md §7)."""

    Vec = "Vec"
    Mat = "Mat"
    Left = "Left"
    Right = "Right"
    Acc = "Acc"
    Bias = "Bias"  # the bias table (BT) TMATMUL_BIAS adds from: one row, 1 KiB on A2/A3

    def __repr__(self) -> str:
        return f"pl.Mem.{self.value}"


class Target(enum.Enum):
    """The hardware generation a kernel is compiled for."""

    A2A3 = "A2A3"
    A5 = "A5"

    def __repr__(self) -> str:
        return f"pl.{self.value}"


def dims_str(shape: tuple[Dim | None, ...]) -> str:
    """A shape as printed: comma-separated, `?` for an unknown extent."""
    return ",".join("?" if d is None else str(d) for d in shape)


@dataclass(frozen=True)
class ScalarType:
    """A scalar of `dtype` (index arithmetic, loop bounds, block indices)."""

    dtype: DType

    def __str__(self) -> str:
        return self.dtype.short


@dataclass(frozen=True)
class TensorType:
    """A tensor in global memory. `strides` is None until MaterializeTensorStrides fills it."""

    shape: tuple[Dim, ...]
    dtype: DType
    layout: Layout = Layout.ND
    strides: tuple[int, ...] | None = None
    valid_shape: tuple[Dim, ...] | None = None

    @property
    def rank(self) -> int:
        """Number of axes."""
        return len(self.shape)

    @property
    def is_static(self) -> bool:
        """True when no axis is a `DynDim`."""
        return all(isinstance(d, int) for d in self.shape)

    def with_(self, **kw: object) -> TensorType:
        """A copy with the given fields replaced."""
        return replace(self, **kw)  # type: ignore[arg-type]

    def __str__(self) -> str:
        s = f"{self.dtype.short}[{dims_str(self.shape)}]"
        if self.layout is Layout.NZ:
            s += "{NZ}"
        if self.strides is not None:
            s += f"/[{dims_str(self.strides)}]"
        return s


@dataclass(frozen=True)
class TileType:
    """An on-chip tile. `valid_shape` entries are None where the extent is dynamic (an operand)."""

    shape: tuple[int, ...]
    dtype: DType
    memory: Mem
    valid_shape: tuple[int | None, ...] | None = None

    @property
    def rank(self) -> int:
        """Number of axes."""
        return len(self.shape)

    @property
    def nbytes(self) -> int:
        """On-chip bytes of the whole tile (its static shape, not its valid part)."""
        n = 1
        for d in self.shape:
            n *= d
        return n * self.dtype.itemsize

    @property
    def fully_valid(self) -> bool:
        """True when the whole static shape is valid."""
        return self.valid_shape is None or tuple(self.valid_shape) == tuple(self.shape)

    def with_(self, **kw: object) -> TileType:
        """A copy with the given fields replaced."""
        return replace(self, **kw)  # type: ignore[arg-type]

    def __str__(self) -> str:
        s = f"{self.dtype.short}[{dims_str(self.shape)}]@{self.memory.value}"
        if self.valid_shape is not None and not self.fully_valid:
            s += f"<valid {dims_str(self.valid_shape)}>"
        return s


Type = ScalarType | TensorType | TileType
