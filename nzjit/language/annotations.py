"""Parameter annotations: pl.Tensor[[d0, d1], dtype, layout], pl.Out[...], pl.InOut[...], pl.Scalar[dtype]."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ..core import dtypes as dt
from ..core.types import Dim, DynDim, Layout, ScalarType, TensorType


def dynamic(name: str) -> DynDim:
    """A dimension known at call time; the same name is the same dimension across parameters."""
    return DynDim(name)


@dataclass(frozen=True)
class TensorAnnotation:
    """`pl.Tensor[[dims], dtype, layout]` (or wrapped in `pl.Out` / `pl.InOut`): shape, dtype, layout and
    direction."""

    shape: tuple[Dim, ...]
    dtype: dt.DType
    layout: Layout = Layout.ND
    direction: str = "in"  # "in", "out", "inout"

    @property
    def type(self) -> TensorType:
        """The parameter's IR type (no strides yet: MaterializeTensorStrides fills them)."""
        return TensorType(self.shape, self.dtype, self.layout)


@dataclass(frozen=True)
class ScalarAnnotation:
    """`pl.Scalar[dtype]`: a scalar parameter."""

    dtype: dt.DType
    direction: str = "in"

    @property
    def type(self) -> ScalarType:
        """The parameter's IR type."""
        return ScalarType(self.dtype)


class _TensorFactory:
    def __getitem__(self, item: Any) -> TensorAnnotation:
        if not isinstance(item, tuple) or len(item) not in (2, 3):
            raise TypeError("write pl.Tensor[[d0, d1, ...], dtype] or pl.Tensor[[...], dtype, pl.NZ]")
        shape, dtype = item[0], item[1]
        layout = item[2] if len(item) == 3 else Layout.ND
        if not isinstance(dtype, dt.DType):
            raise TypeError(f"pl.Tensor dtype must be a pl dtype, got {dtype!r}")
        if not isinstance(layout, Layout):
            raise TypeError(f"pl.Tensor layout must be pl.ND or pl.NZ, got {layout!r}")
        dims: list[Dim] = []
        for d in shape:
            if isinstance(d, bool) or not isinstance(d, int | DynDim):
                raise TypeError(f"a pl.Tensor dimension is an int or pl.dynamic(name), got {d!r}")
            dims.append(d)
        return TensorAnnotation(tuple(dims), dtype, layout)


class _DirectionFactory:
    def __init__(self, direction: str) -> None:
        self.direction = direction

    def __getitem__(self, ann: TensorAnnotation) -> TensorAnnotation:
        if not isinstance(ann, TensorAnnotation):
            raise TypeError(f"pl.{self.direction.capitalize()}[...] wraps a pl.Tensor[...]")
        return dataclasses.replace(ann, direction=self.direction)  # keeps a subclass (pld.DistributedTensor)


class _ScalarFactory:
    def __getitem__(self, dtype: dt.DType) -> ScalarAnnotation:
        # float scalars are vector operands (TADDS & co.); sub-byte and fp8 floats have no scalar form
        if not isinstance(dtype, dt.DType) or not (
            dtype.is_int or dtype is dt.BOOL or dtype in (dt.FP32, dt.FP16, dt.BF16)
        ):
            raise TypeError(
                "pl.Scalar[...] takes an integer dtype or pl.FP32 / pl.FP16 / pl.BF16 or pl.BOOL, "
                "e.g. pl.Scalar[pl.INT32]"
            )
        return ScalarAnnotation(dtype)


Tensor = _TensorFactory()
Out = _DirectionFactory("out")
InOut = _DirectionFactory("inout")
Scalar = _ScalarFactory()
