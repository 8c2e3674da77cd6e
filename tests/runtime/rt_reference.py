"""Literal, loop-based port of hardware-model.md §8 pseudo-code (test oracle only).

Deliberately written element by element / burst by burst, independent of the vectorised
runtime, so that the two can be compared byte for byte on random geometries.
"""

from __future__ import annotations

import numpy as np


def u16(x: int) -> int:
    return x & 0xFFFF


def ceil16(x: int) -> int:
    return (x + 15) // 16 * 16


def dma_burst(src_mem, src_addr, dst_mem, dst_addr, n_burst, len_burst, src_gap, dst_gap):
    n_burst, len_burst, src_gap, dst_gap = map(u16, (n_burst, len_burst, src_gap, dst_gap))
    assert 1 <= n_burst <= 4095 and len_burst >= 1
    for k in range(n_burst):
        s = src_addr + k * (len_burst + src_gap) * 32
        d = dst_addr + k * (len_burst + dst_gap) * 32
        dst_mem[d : d + 32 * len_burst] = src_mem[s : s + 32 * len_burst]


def nz_load(gm, view_addr, gshape, gstride, esize, tile_rows, valid_row, l1, tile_addr=0):
    g0, g1, g2, g3, g4 = gshape
    s0, s1 = gstride[0], gstride[1]
    gap_true = (((s1 - g2 * g3 * g4) * esize) % 2**64) >> 5
    gap_sent = u16(gap_true % 2**32)
    for i in range(g0):
        src = view_addr + ((i * s0) % 2**32) * esize
        dst = tile_addr + i * tile_rows * g1 * g4 * esize
        dma_burst(gm, src, l1, dst, g1, valid_row, gap_sent, tile_rows - valid_row)


def nz_store_acc(gm, view_addr, gshape, gm_dtype, l0c_vals, acc_rows, valid_row, valid_col):
    """l0c_vals: flat float32/int32 array of the Acc tile image (elements)."""
    g0, g1, g2, g3, g4 = gshape
    E = np.dtype(gm_dtype).itemsize
    m, n = valid_row & 0xFFFF, valid_col & 0xFFF
    c0_bytes = E * g4
    dst_stride = (g2 * g3 * c0_bytes) >> 5
    for c in range(n):
        J, e = c // g4, c % g4
        for r in range(m):
            a = (c // 16) * acc_rows * 16 + r * 16 + c % 16
            v = np.array([l0c_vals[a]]).astype(gm_dtype).view(np.uint8)
            d = view_addr + J * dst_stride * 32 + r * c0_bytes + e * E
            gm[d : d + E] = v


def nd2nz_load(gm, view_addr, rows, cols, s3, esize, l1, tile_rows):
    c0 = 32 // esize
    pitch = u16(s3)
    for r in range(rows):
        for c in range(-(-cols // c0) * c0):
            d = ((c // c0) * tile_rows * c0 + r * c0 + c % c0) * esize
            if c < cols:
                s = view_addr + (r * pitch + c) * esize
                l1[d : d + esize] = gm[s : s + esize]
            else:
                l1[d : d + esize] = 0


def mad(l0c_vals, A, B, m, k, n, init):
    """l0c_vals: flat element array of the Acc tile; A, B logical (rows >= m / k)."""
    if m == 1:
        m = 16
    M16 = ceil16(m)
    for i in range(m):
        for j in range(n):
            a = (j // 16) * M16 * 16 + i * 16 + j % 16
            acc = 0 if init else l0c_vals[a]
            if A.dtype == np.int8:
                s = int(np.dot(A[i, :k].astype(np.int64), B[:k, j].astype(np.int64)))
                l0c_vals[a] = np.int64(acc + s).astype(np.int32)
            else:
                l0c_vals[a] = np.float32(acc) + np.dot(
                    A[i, :k].astype(np.float32), B[:k, j].astype(np.float32)
                )
