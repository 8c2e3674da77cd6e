"""Element conversion as the vector core performs it (TCVT): rounding to a float dtype with a
pto::RoundMode, and rounding plus saturation to an integer dtype. Pure value functions on numpy
arrays; runtime/vector.py applies them to tiles."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from .errors import DeviceError
from .native import lines as _native  # None where runtime/_lines.c was not built

__all__ = ["ROUND_MODES", "round_to", "convert", "convert_into"]

BF16 = np.dtype(ml_dtypes.bfloat16)

#: pto::RoundMode, by PyPTO's names (code = position).
ROUND_MODES = ("none", "rint", "round", "floor", "ceil", "trunc", "odd")


def _bits(d: np.dtype) -> np.dtype:
    by_size: dict[int, np.dtype] = {2: np.dtype(np.uint16), 4: np.dtype(np.uint32), 8: np.dtype(np.uint64)}
    return by_size[d.itemsize]


#: Integer dtypes whose every value a float64 holds exactly, and the float targets whose numpy
#: cast from them is correctly rounded (ml_dtypes' bf16 is left to float64). Float sources keep
#: the cast through float64: it quiets signalling NaNs, a direct cast keeps their payload bits.
_EXACT_IN_F64 = frozenset(np.dtype(t) for t in (np.int8, np.int16, np.int32, np.uint8, np.uint16, np.uint32))
_NUMPY_FLOATS = frozenset(np.dtype(t) for t in (np.float16, np.float32, np.float64))


def round_to(x: np.ndarray, dtype: np.dtype, mode: str) -> np.ndarray:
    """``x`` (any real dtype) rounded to the float `dtype` with a pto::RoundMode: rint (nearest,
    ties to even), round (nearest, ties away), floor, ceil, trunc (toward zero), odd (round to odd)."""
    if mode in ("rint", "none") and x.dtype in _EXACT_IN_F64 and np.dtype(dtype) in _NUMPY_FLOATS:
        # every value of x is a float64 exactly, so one cast rounds the exact value (nearest,
        # ties to even) as the cast through float64 below does, without the float64 copy
        return x.astype(dtype)
    x64 = x.astype(np.float64)
    r = x64.astype(dtype)  # nearest, ties to even
    if mode in ("rint", "none"):
        return r
    r64 = r.astype(np.float64)
    inexact = (x64 != r64) & np.isfinite(r64)
    up = np.abs(x64) > np.abs(r64)  # the other neighbour has the larger magnitude
    bits = r.view(_bits(dtype)).astype(np.int64)
    other = np.where(up, bits + 1, bits - 1).astype(_bits(dtype)).view(dtype)
    o64 = other.astype(np.float64)
    if mode == "round":
        tie = inexact & (np.abs(o64 - x64) == np.abs(x64 - r64))
        pick = tie & up
    elif mode == "trunc":
        pick = ~up
    elif mode == "floor":
        pick = o64 < r64
    elif mode == "ceil":
        pick = o64 > r64
    elif mode == "odd":
        pick = (bits & 1) == 0
    else:
        raise DeviceError(f"unknown round mode {mode!r}; expected one of {ROUND_MODES}")
    out = np.where(inexact & pick, other, r)
    return out.astype(dtype)


def convert_into(out: np.ndarray, x: np.ndarray, mode: str = "round") -> None:
    """``out[...] = convert(x, out.dtype, mode)``. float32 -> fp16 rounded to nearest (rint /
    none) of C-contiguous arrays runs in one compiled pass (`runtime._lines.narrow_f16`, the
    CPU's F16C conversion: ~5x faster than numpy's element by element one, the same bits for
    every value it takes); a NaN or an overflow to inf, or no F16C, takes numpy's path."""
    if (
        _native is not None
        and mode in ("rint", "none")
        and x.dtype == _F32
        and out.dtype == _F16
        and x.shape == out.shape
        and x.flags.c_contiguous
        and out.flags.c_contiguous
        and _native.narrow_f16(x, out.view(np.uint16))
    ):
        return
    out[...] = convert(x, out.dtype, mode)


_F32, _F16 = np.dtype(np.float32), np.dtype(np.float16)


def _round_int(x: np.ndarray, mode: str) -> np.ndarray:
    if mode in ("rint", "none"):
        return np.rint(x)
    if mode == "round":
        return np.sign(x) * np.floor(np.abs(x) + 0.5)
    if mode in ("floor", "ceil", "trunc"):
        return {"floor": np.floor, "ceil": np.ceil, "trunc": np.trunc}[mode](x)
    raise DeviceError(f"round mode {mode!r} does not apply to a float -> integer conversion")


def convert(x: np.ndarray, dtype: np.dtype, mode: str = "round") -> np.ndarray:
    """The element conversion TCVT performs: float targets rounded with `mode`; integer targets
    rounded with `mode` and saturated (NaN -> 0), the target-default saturation of the device."""
    dtype = np.dtype(dtype)
    if dtype.kind == "f" or dtype == BF16:
        return round_to(x, dtype, mode)
    info = np.iinfo(dtype)
    if x.dtype.kind in "iu":
        return np.clip(x.astype(np.int64), info.min, info.max).astype(dtype)
    with np.errstate(invalid="ignore"):
        v = _round_int(x.astype(np.float64), mode)
        v = np.where(np.isnan(v), 0, v)
        return np.clip(v, info.min, info.max).astype(dtype)
