# The compiled line swap (runtime/_lines.c); built optionally by setup.py, so it has no Python
# source for a type checker to read.
import numpy as np
from typing_extensions import Buffer

#: source rows per band of the loop (a caller splits work in whole bands)
BAND: int

def swap(
    src: np.ndarray | Buffer,
    dst: np.ndarray | Buffer,
    planes: int,
    n_i: int,
    n_j: int,
    i_lo: int,
    i_hi: int,
    /,
) -> None:
    """Copy the 32-byte lines src[b, i, j] to dst[b, j, i] for i_lo <= i < i_hi and every b, j."""

def widen_bf16(src: np.ndarray, dst: np.ndarray, /) -> None:
    """dst[...] = src widened: bf16 bit patterns (uint16, any strides) to float32 bit patterns (uint32)."""

def lookup16(src: np.ndarray, dst: np.ndarray, table: np.ndarray, /) -> None:
    """dst[i] = table[src[i]]: 2-byte items in, 4-byte results of a 65536-entry table out."""

def narrow_f16(src: np.ndarray, dst: np.ndarray, /) -> bool:
    """dst[i] = fp16 bits (uint16) of float32 src[i], rounded to nearest even, both C-contiguous;
    False when not all converted (no F16C, a NaN, a value that rounds to inf): the caller converts."""

def widen_i8_runs(src: np.ndarray, dst: np.ndarray, /) -> None:
    """dst[...] = float32(src): int8, innermost axis contiguous (at most 8 axes), into a C-contiguous float32 dst."""

def widen_f16_runs(src: np.ndarray, dst: np.ndarray, /) -> bool:
    """dst[...] = float32 bits of fp16 src (uint16, innermost axis contiguous, at most 8 axes) into a
    C-contiguous uint32 dst; False when not all converted (no F16C, a NaN): the caller converts."""

def tree_sum(src: np.ndarray, dst: np.ndarray, rounding: int, baseline: bool = False, /) -> int:
    """dst[r] = the rounded binary-tree sum of float32 row r of src (rounding 0 none, 1 fp16, 2 bf16); returns the number of NaN rows. baseline: the SSE2 loop even on an AVX2 CPU (tests)."""

def widen_bf16_runs(src: np.ndarray, dst: np.ndarray, baseline: bool = False, /) -> None:
    """dst[...] = src << 16: bf16 bits (uint16, innermost axis contiguous, at most 8 axes) into a
    C-contiguous uint32 dst; baseline: the scalar loop even on an AVX2 CPU (tests)."""
