"""TTRANS on Vec tiles (pto-isa docs/isa/TTRANS.md): `dst = src^T` over src's valid region.

A2/A3: source and destination row-major, the same element size (1, 2 or 4 bytes: uint8 / int8,
uint16 / int16 / half / bfloat16, uint32 / int32 / float); the transpose size is src's valid
rows x cols. The instruction takes a tmp tile: `W * ceil(H / RowStride) * RowStride * sizeof(T)`
bytes for an [H, W] source (RowStride 32 for 1-byte, 16 for 2- and 4-byte types); `tmp_bytes`.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from .errors import DeviceError
from .tile import TileBuf
from .vector import check_vec, valid_region

__all__ = ["TRANS_DTYPES", "tmp_bytes", "ttrans"]

TRANS_DTYPES = frozenset(
    np.dtype(t)
    for t in (
        np.uint8,
        np.int8,
        np.uint16,
        np.int16,
        np.float16,
        ml_dtypes.bfloat16,
        np.uint32,
        np.int32,
        np.float32,
    )
)


def tmp_bytes(rows: int, cols: int, dtype: np.dtype) -> int:
    """TTRANS's documented tmp size for an [rows, cols] source."""
    stride = 32 if dtype.itemsize == 1 else 16
    return cols * (-(-rows // stride) * stride) * dtype.itemsize


def ttrans(dst: TileBuf, src: TileBuf, tmp: TileBuf | None) -> None:
    """TTRANS: `dst[j, i] = src[i, j]` over src's valid region (dst's valid is its transpose)."""
    check_vec(dst, "TTRANS")
    check_vec(src, "TTRANS")
    if src.dtype != dst.dtype or src.dtype not in TRANS_DTYPES:
        raise DeviceError(
            f"TTRANS: {src.dtype.name} -> {dst.dtype.name} is not a transpose of a 1-, 2- or 4-byte type"
        )
    vr, vc = src.valid_row, src.valid_col
    if (dst.valid_row, dst.valid_col) != (vc, vr):
        raise DeviceError(
            f"TTRANS: the destination's valid {dst.valid_row}x{dst.valid_col} is not the transpose "
            f"of the source's {vr}x{vc}"
        )
    need = tmp_bytes(vr, vc, src.dtype)
    if tmp is not None and tmp.nbytes < need:
        raise DeviceError(f"TTRANS: the tmp tile has {tmp.nbytes} bytes, a {vr}x{vc} transpose needs {need}")
    valid_region(dst)[...] = valid_region(src).T
