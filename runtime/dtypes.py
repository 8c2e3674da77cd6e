"""Bit widths and NZ line widths (c0) of numpy / ml_dtypes dtypes.

The NZ fractal is defined in bytes (a C0 line is always 32 bytes, hardware-model.md §1.1), so
every NZ computation starts from the element width.  ``np.dtype.itemsize`` is not enough:
ml_dtypes stores ``int4`` / ``float4_e2m1fn`` in one byte per element, but the hardware packs
them two per byte, so their NZ line would not be 32 elements of 1 byte.  Those dtypes, and
``bool``, are therefore *sub-byte* and refused for NZ (NZ-33).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

__all__ = ["itemsize_bits", "is_sub_byte", "c0_of", "C0_BYTES", "FRACTAL_ROWS"]

#: Bytes of one NZ C0 line (``C0_SIZE_BYTE`` in pto-isa constants.hpp).
C0_BYTES = 32
#: Rows of one NZ fractal (``FRACTAL_NZ_ROW``).
FRACTAL_ROWS = 16


_BITS: dict[object, int] = {}


def itemsize_bits(dtype: np.dtype | type) -> int:
    """Logical width of one element in bits (cached per dtype; see :func:`_itemsize_bits`)."""
    bits = _BITS.get(dtype)
    if bits is None:
        bits = _itemsize_bits(dtype)
        if len(_BITS) < 256:
            _BITS[dtype] = bits
    return bits


def _itemsize_bits(dtype: np.dtype | type) -> int:
    """Logical width of one element in bits (4 for int4 even though ml_dtypes stores a byte).

    ``bool`` counts as 1 bit: the NPU treats predicate data as packed bits, so it has no
    byte-granular NZ form (NZ-33).
    """
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return 1
    if dt.kind == "V" or dt.type.__module__.startswith("ml_dtypes"):
        for info in (ml_dtypes.finfo, ml_dtypes.iinfo):
            try:
                return int(info(dt).bits)
            except (ValueError, TypeError):
                continue
    return dt.itemsize * 8


def is_sub_byte(dtype: np.dtype | type) -> bool:
    """True for dtypes narrower than one byte per element (int4, uint4, fp4, fp6, int2, bool)."""
    return itemsize_bits(dtype) < 8


def c0_of(dtype: np.dtype | type) -> int:
    """Elements per 32-byte C0 line: ``256 // bits`` (NZ-4).

    Raises ``ValueError`` for sub-byte dtypes (NZ-33: no whole-byte C0 line) and for 64-bit
    dtypes (hardware-model.md §1.1: TLOAD of b64 is ND2ND / DN2DN only, a 4-element C0 line does
    not exist on the cube path).
    """
    dt = np.dtype(dtype)
    bits = itemsize_bits(dt)
    if bits < 8:
        raise ValueError(
            f"NZ-33: sub-byte dtype {dt.name} ({bits}-bit) has no NZ layout; "
            "store it as ND, or widen it to int8 before packing"
        )
    if bits > 32:
        raise ValueError(
            f"NZ-4: {bits}-bit dtype {dt.name} has no NZ layout (pto-isa loads b64 as ND only); "
            "use ND, or a 32-bit or narrower dtype"
        )
    return 256 // bits
