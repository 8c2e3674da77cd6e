"""Element types of the IR: one `DType` object per kernel-language dtype, backed by numpy/ml_dtypes."""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np


@dataclass(frozen=True, eq=False)
class DType:
    """A scalar element type. Identity is equality: there is exactly one object per dtype."""

    name: str  # kernel-language name, e.g. "INT8"
    short: str  # printer / PTO name, e.g. "i8"
    bits: int
    np_dtype: np.dtype
    kind: str  # "int", "uint", "float", "bool", "index"

    @property
    def is_float(self) -> bool:
        """True for the floating-point dtypes."""
        return self.kind == "float"

    @property
    def is_int(self) -> bool:
        """True for the signed, unsigned and index integer dtypes (not BOOL)."""
        return self.kind in ("int", "uint", "index")

    @property
    def is_signed(self) -> bool:
        """True for signed integers, INDEX and floats."""
        return self.kind in ("int", "index", "float")

    @property
    def is_sub_byte(self) -> bool:
        """INT4/UINT4/FP4 (and BOOL, a 1-bit predicate) have no whole-byte C0 line (NZ-33)."""
        return self.bits < 8 or self.kind == "bool"

    @property
    def itemsize(self) -> int:
        """Bytes per element; a sub-byte dtype counts as 1."""
        return max(1, self.bits // 8)

    def __repr__(self) -> str:
        return f"pl.{self.name}"

    def wrap(self, value: int) -> int:
        """Reduce a Python int to this integer type's declared width (two's complement)."""
        if not self.is_int:
            return value
        mask = (1 << self.bits) - 1
        v = value & mask
        if self.is_signed and v >> (self.bits - 1):
            v -= 1 << self.bits
        return v


def _d(name: str, short: str, bits: int, np_dtype: object, kind: str) -> DType:
    return DType(name, short, bits, np.dtype(np_dtype), kind)  # type: ignore[call-overload]


BOOL = _d("BOOL", "i1", 1, np.bool_, "bool")
INT4 = _d("INT4", "i4", 4, ml_dtypes.int4, "int")
UINT4 = _d("UINT4", "ui4", 4, ml_dtypes.uint4, "uint")
FP4 = _d("FP4", "f4E2M1FN", 4, ml_dtypes.float4_e2m1fn, "float")
INT8 = _d("INT8", "i8", 8, np.int8, "int")
UINT8 = _d("UINT8", "ui8", 8, np.uint8, "uint")
FP8E4M3 = _d("FP8E4M3", "f8E4M3FN", 8, ml_dtypes.float8_e4m3fn, "float")
FP8E5M2 = _d("FP8E5M2", "f8E5M2", 8, ml_dtypes.float8_e5m2, "float")
INT16 = _d("INT16", "i16", 16, np.int16, "int")
UINT16 = _d("UINT16", "ui16", 16, np.uint16, "uint")
FP16 = _d("FP16", "f16", 16, np.float16, "float")
BF16 = _d("BF16", "bf16", 16, ml_dtypes.bfloat16, "float")
INT32 = _d("INT32", "i32", 32, np.int32, "int")
UINT32 = _d("UINT32", "ui32", 32, np.uint32, "uint")
FP32 = _d("FP32", "f32", 32, np.float32, "float")
INT64 = _d("INT64", "i64", 64, np.int64, "int")
INDEX = _d("INDEX", "index", 64, np.int64, "index")

ALL_DTYPES: tuple[DType, ...] = (
    BOOL, INT4, UINT4, FP4, INT8, UINT8, FP8E4M3, FP8E5M2, INT16, UINT16,
    FP16, BF16, INT32, UINT32, FP32, INT64, INDEX,
)  # fmt: skip

_BY_NUMPY = {d.np_dtype: d for d in ALL_DTYPES if d is not INDEX}


def from_numpy(dt: np.dtype) -> DType:
    """The kernel dtype of a numpy dtype (int64 maps to INT64, never to INDEX)."""
    try:
        return _BY_NUMPY[np.dtype(dt)]
    except KeyError:
        raise TypeError(f"numpy dtype {dt} has no nzjit dtype") from None


def c0_of(dtype: DType) -> int:
    """Elements in one 32-byte C0 line (NZ-4): 256 / bits."""
    return 256 // dtype.bits
