"""Fixpipe dtype conversion on the Acc (L0C) -> GM / UB path.

Only the pairs pto-isa supports without quantisation are allowed (hardware-model.md §4.1):
fp32 -> fp32 / fp16 / bf16 and int32 -> int32.  The fp32 -> fp16 / bf16 rounding mode is not
documented; round-to-nearest-even is assumed (what numpy and ml_dtypes do), and pre-ReLU is
applied before the conversion, as the fixpipe does.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from .errors import DeviceError

__all__ = ["ACC_OUT_DTYPES", "check_acc_pair", "fixpipe_convert"]

ACC_OUT_DTYPES: dict[np.dtype, frozenset[np.dtype]] = {
    np.dtype(np.float32): frozenset(
        {np.dtype(np.float32), np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)}
    ),
    np.dtype(np.int32): frozenset({np.dtype(np.int32)}),
}


def check_acc_pair(acc_dtype: np.dtype, out_dtype: np.dtype) -> None:
    """static check of CheckAcc2gm: Acc dtype and the non-quant output dtype must pair up."""
    allowed = ACC_OUT_DTYPES.get(np.dtype(acc_dtype))
    if allowed is None or np.dtype(out_dtype) not in allowed:
        raise DeviceError(
            f"static check failed: Acc {np.dtype(acc_dtype).name} -> {np.dtype(out_dtype).name} "
            "is not a supported fixpipe conversion (fp32 -> fp32/fp16/bf16, int32 -> int32)"
        )


def fixpipe_convert(values: np.ndarray, out_dtype: np.dtype, relu: bool = False) -> np.ndarray:
    """Apply pre-ReLU then convert (RNE) to ``out_dtype``."""
    if relu:
        values = np.maximum(values, values.dtype.type(0))
    return values.astype(out_dtype, copy=False)
