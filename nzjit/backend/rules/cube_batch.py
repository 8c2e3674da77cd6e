"""The reference rule of `tile.batch_matmul` (the stages before FlattenTileNdTo2D unrolls it).

A rank-3 tile's bytes are its batches' rows one after another (`tile_dims` folds the leading axis
into rows), so batch `b` of `[B, R, C]` is rows `b*R .. b*R + R`. Each batch is the same 2-D
product, on the same operands, that the unrolled TMATMUL computes (`reference_matmul`), so every
stage gives the same bits. The `[B, M, N]` product is a reference value (no instruction holds a
rank-3 Acc tile) that the store writes as it is.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ... import prims as P
from ...core.ir import Eqn
from ...core.types import TileType
from ...prims.cube_batch import batch_dims
from ..rule import rule
from ..values import HostValue, TransposedTile
from .tensor import reference_matmul


def batches(v: Any, t: TileType) -> np.ndarray:
    """The `[B, rows, cols]` logical array of a batch_matmul operand of IR type `t` (a transposed
    view is its tile's batches, each transposed)."""
    bsz, rows, cols = batch_dims(t)
    if type(v) is TransposedTile:
        return v.tile.logical().reshape(bsz, cols, rows).transpose(0, 2, 1)
    return v.logical().reshape(bsz, rows, cols)


def _product(e: Eqn, ins: list[Any]) -> np.ndarray:
    out_t = e.outputs[0].type
    ta, tb = (x.type for x in e.inputs[-2:])
    assert isinstance(out_t, TileType) and isinstance(ta, TileType) and isinstance(tb, TileType)
    a, b = batches(ins[-2], ta), batches(ins[-1], tb)
    bsz, m, n = out_t.shape
    dtype = out_t.dtype.np_dtype
    prod = np.empty((bsz, m, n), dtype)
    for i in range(bsz):  # one 2-D product per batch, as the unrolled TMATMULs (a size-1 side broadcast)
        prod[i] = reference_matmul(a[i % a.shape[0]], b[i % b.shape[0]], False, dtype)
    return prod


@rule(P.tile_batch_matmul_p, multiplies=True)
def _tile_batch_matmul(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    return [HostValue(_product(e, ins))]  # a store or an accumulation reads it (FlattenTileNdTo2D)


@rule(P.tile_batch_matmul_acc_p, multiplies=True)
def _tile_batch_matmul_acc(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    prod = _product(e, ins)
    return [HostValue((ins[0].logical() + prod).astype(prod.dtype))]  # as TMATMUL_ACC: float32 / int32 wrap
