"""Audit cases of tile creation, padding and scalars (items 3 and 6), tiles as values (item 4), the
top-k pieces (item 5) and the moves between memories (item 1)."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from nzjit import pl
from tests.vector.audit_base import (
    I32,
    MAT,
    MSG_MEM,
    C,
    Case,
    In,
    Mem,
    R,
    Refusal,
    _r32,
)


def creation_cases() -> list[Case]:
    return [
        Case(
            "pl.create_tile(shape, dtype=, target_memory=)",
            3,
            "tile.create",
            "pto.alloc_tile",
            lambda t: pl.reshape(
                pl.row_max(t, pl.create_tile([R, C], dtype=pl.FP32, target_memory=Mem.Vec)), [1, R]
            ),
            lambda x: x.max(axis=1).reshape(1, -1),
            out=((1, R), pl.FP32),
            refusals=(Refusal("shape", lambda t: pl.create_tile([R, 3], dtype=pl.FP32), "32-byte blocks"),),
        ),
        Case(
            "pl.full(shape, dtype=, value=)",
            3,
            "tile.full",
            "pto.texpands",
            lambda t: pl.add(t, pl.full([R, C], dtype=pl.FP32, value=2.5)),
            lambda x: _r32(x + 2.5),
            refusals=(
                Refusal(
                    "value", lambda t: pl.full([R, C], dtype=pl.FP32, value=t), "the value must be a number"
                ),
                Refusal("value", lambda t: pl.full([R, C], dtype=pl.FP32), "needs dtype= and value="),
                Refusal("shape", lambda t: pl.full([R, 3], dtype=pl.FP32, value=1.0), "32-byte blocks"),
            ),
        ),
        Case(
            "pl.tile.fillpad(tile, pad_value=pl.PadValue.min)",
            6,
            "tile.fillpad",
            "pto.tfillpad",
            lambda t: pl.tile.fillpad(t, pad_value=pl.PadValue.min),
            lambda x: np.where(np.arange(C) < 40, x, -np.inf).astype(np.float32),
            ins=(In(valid=(R, 40)),),
            refusals=(
                Refusal("value", lambda t: pl.tile.fillpad(t, pad_value=3.0), "pass pl.PadValue.zero"),
                Refusal("memory", lambda t: pl.tile.fillpad(t), MSG_MEM, ins=(MAT,)),
            ),
        ),
        Case(
            "pl.mul(tile, pl.Scalar[pl.FP32])",
            6,
            "tile.muls",
            "pto.tmuls",
            lambda t, s: pl.mul(t, s),
            lambda x, s: _r32(x * np.float64(np.float32(s))),  # the parameter is an fp32
            ins=(In(), In(scalar=0.3)),
            refusals=(
                Refusal(
                    "dtype", lambda t, s: pl.mul(t, s), "does not combine with", ins=(I32, In(scalar=0.3))
                ),
            ),
        ),
        Case(
            "pl.mul(fp16 tile, pl.Scalar[pl.FP16])",
            6,
            "tile.muls",
            "pto.tmuls",
            lambda t, s: pl.mul(t, s),
            lambda x, s: (x.astype(np.float64) * np.float64(np.float16(s))).astype(
                np.float16
            ),  # one rounding
            ins=(In(dtype=pl.FP16), In(scalar=0.3, dtype=pl.FP16)),
            out=((R, C), pl.FP16),
            doc="pl.Scalar[pl.FP32]` (and FP16, BF16)",
        ),
        Case(
            "pl.add(tile, pl.Scalar[pl.BF16])",
            6,
            "tile.adds",
            "pto.tadds",
            lambda t, s: pl.add(t, s),
            lambda x, s: _r32(x + np.float64(ml_dtypes.bfloat16(s))),  # the value rounded to bf16 first
            ins=(In(), In(scalar=0.3, dtype=pl.BF16)),
            doc="pl.Scalar[pl.FP32]` (and FP16, BF16)",
        ),
    ]


def tile_value_cases() -> list[Case]:
    return [
        Case(
            "tile[r0:r1, c0:c1]",
            4,
            "tile.slice",
            "pto.textract",
            lambda t: t[0:8, 32:64],
            lambda x: x[0:8, 32:64],
            doc="s[r0:r1, c0:c1]",
            out=((8, 32), pl.FP32),
            refusals=(Refusal("shape", lambda t: t[:, 3:20], "32-byte block"),),
        ),
        Case(
            "tile[r0:r1, c0:c1] = value",
            4,
            "tile.assemble",
            "pto.tinsert",
            _assign,
            lambda x: np.concatenate([x[:, :32], np.full((R, 32), -1.0, np.float32)], axis=1),
            doc="t[r0:r1, c0:c1] = v",
            refusals=(Refusal("shape", _assign_bad, "block"),),
        ),
        Case(
            "pl.reshape(tile, shape)",
            4,
            "tile.reshape",
            "pto.treshape",
            lambda t: pl.reshape(t, [R * C // 32, 32]),
            lambda x: x.reshape(R * C // 32, 32),
            out=((R * C // 32, 32), pl.FP32),
            refusals=(
                Refusal("shape", lambda t: pl.reshape(t, [R, C + 8]), "reshape"),
                Refusal("shape", lambda t: pl.reshape(t, [R, C]), "fillpad first", ins=(In(valid=(R, 40)),)),
            ),
        ),
    ]


def _assign(t):
    t[:, 32:64] = pl.full([R, 32], dtype=pl.FP32, value=-1.0)
    return t


def _assign_bad(t):
    t[:, 4:36] = pl.full([R, 32], dtype=pl.FP32, value=-1.0)
    return t


def _sorted_pairs(x: np.ndarray, base: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Each 32-value block's (values, indices) sorted descending, ties by the smaller index."""
    r, c = x.shape
    blocks = x.reshape(r, c // 32, 32)
    idx = np.broadcast_to(base + np.arange(c).reshape(c // 32, 32), blocks.shape)
    order = np.lexsort((idx, -blocks), axis=-1)
    return np.take_along_axis(blocks, order, -1).reshape(r, c), np.take_along_axis(idx, order, -1).reshape(
        r, c
    )


def _as_pairs(v: np.ndarray, i: np.ndarray) -> np.ndarray:
    w = np.zeros(v.shape, np.uint64)
    w.view(np.float32).reshape(*v.shape, 2)[..., 0] = v
    w.view(np.uint32).reshape(*v.shape, 2)[..., 1] = i
    return w.view(np.float32).reshape(v.shape[0], -1)


def _sort32_ref(x: np.ndarray) -> np.ndarray:
    return _as_pairs(*_sorted_pairs(x))


def _merged_ref(x: np.ndarray, run: int) -> np.ndarray:
    """sort32 then the 4-way merge of `run`-value runs: stable by index within equal values."""
    r, c = x.shape
    idx = np.broadcast_to(np.arange(c), x.shape).reshape(r, c // run, run)
    v = x.reshape(r, c // run, run)
    order = np.lexsort((idx, -v), axis=-1)
    return _as_pairs(
        np.take_along_axis(v, order, -1).reshape(r, c), np.take_along_axis(idx, order, -1).reshape(r, c)
    )


def _pairs_of(t):
    return pl.sort32(t, pl.arange(0, [1, 128], dtype=pl.INT32))


_ROW = In(shape=(1, 128))


def topk_cases() -> list[Case]:
    return [
        Case(
            "pl.arange(start, [1, N], dtype=)",
            5,
            "tile.ci",
            "pto.tci",
            lambda t: pl.add(t, pl.arange(5, [1, 128], dtype=pl.INT32)),
            lambda x: x + 5 + np.arange(128, dtype=np.int32),
            ins=(In(shape=(1, 128), dtype=pl.INT32, data="int"),),
            out=((1, 128), pl.INT32),
            refusals=(
                Refusal("dtype", lambda t: pl.arange(0, [1, 128], dtype=pl.FP32), "int16 or int32", at="run"),
            ),
        ),
        Case(
            "pl.sort32(src, idx)",
            5,
            "tile.sort32",
            "pto.tsort32",
            _pairs_of,
            _sort32_ref,
            ins=(_ROW,),
            out=((1, 256), pl.FP32),
            refusals=(
                Refusal(
                    "shape",
                    lambda t: pl.sort32(t, pl.arange(0, [1, 40], dtype=pl.INT32)),
                    "sorts whole 32-element blocks",
                    ins=(In(shape=(1, 40)),),
                    at="run",
                ),
                Refusal(
                    "dtype",
                    lambda t: pl.sort32(t, pl.arange(0, [1, 128], dtype=pl.INT16)),
                    "idx must be an INT32 / UINT32 tile",
                    ins=(_ROW,),
                    at="compile",
                ),
            ),
        ),
        Case(
            "pl.mrgsort(src, block_len=)",
            5,
            "tile.mrgsort",
            "pto.tmrgsort",
            lambda t: pl.mrgsort(_pairs_of(t), block_len=64),
            lambda x: _merged_ref(x, 128),
            ins=(_ROW,),
            out=((1, 256), pl.FP32),
            refusals=(
                Refusal("value", lambda t: pl.mrgsort(_pairs_of(t), block_len=48), "block_len", ins=(_ROW,)),
            ),
        ),
        Case(
            "pl.mrgsort(src0, src1, src2, src3, tmp)",
            5,
            "tile.mrgsort_format2",
            "pto.tmrgsort",
            lambda t: _four_lists(t, False),
            lambda x: _merged_ref(x, 128),
            ins=(_ROW,),
            out=((1, 256), pl.FP32),
            fuzz_params={"exhausted": False},
            refusals=(
                Refusal(
                    "shape",
                    lambda t: pl.mrgsort(t, t, tmp=pl.create_tile([1, 64], dtype=pl.FP32)),
                    "tmp has 64 columns",
                    ins=(_ROW,),
                ),
            ),
        ),
        Case(
            "pl.mrgsort(..., tmp, exhausted=True)",
            5,
            "tile.mrgsort_format2",
            "pto.tmrgsort",
            lambda t: _four_lists(t, True)[:, 0:64],  # 32 pairs: exact, every list has 32
            lambda x: _merged_ref(x, 128)[:, 0:64],
            ins=(_ROW,),
            out=((1, 64), pl.FP32),
            fuzz_params={"exhausted": True},
            doc="exhausted=True",
            refusals=(
                Refusal(
                    "shape",
                    lambda t: pl.mrgsort(t, t, tmp=pl.create_tile([1, 128], dtype=pl.FP32), exhausted=True),
                    "tmp has 128 columns, the lists 256",
                    ins=(_ROW,),
                ),
                Refusal(
                    "dtype",
                    lambda t: pl.mrgsort(
                        t, pl.cast(t, pl.FP16), tmp=pl.create_tile([1, 256], dtype=pl.FP32), exhausted=True
                    ),
                    "FP32 / FP16 value-index pair tiles of one dtype",
                    ins=(_ROW,),
                ),
            ),
        ),
        Case(
            "pl.gather(tile, mask_pattern=, output_dtype=)",
            5,
            "tile.gather_mask",
            "pto.tgather",
            lambda t: pl.gather(_pairs_of(t), mask_pattern=pl.tile.MaskPattern.P1010, output_dtype=pl.INT32),
            lambda x: _sorted_pairs(x)[1].astype(np.int32),
            ins=(_ROW,),
            out=((1, 128), pl.INT32),
            refusals=(
                Refusal(
                    "dtype",
                    lambda t: pl.gather(t, mask_pattern=1, output_dtype=pl.INT8),
                    "output_dtype pl.INT8 is not the size of pl.FP32",
                    ins=(_ROW,),
                    at="run",
                ),
            ),
        ),
        Case(
            "pl.gather(tile, -1, index)",
            5,
            "tile.gather",
            "pto.tgather",
            lambda t, i: pl.gather(t, -1, i),
            lambda x, i: np.take_along_axis(x, i.astype(np.int64), 1),
            ins=(In(), In(dtype=pl.INT32, data="perm")),
            fuzz_params={"rowwise": True},
            refusals=(
                Refusal(
                    "value",
                    lambda t, i: pl.gather(t, 0, i),
                    "dim=-1",
                    ins=(In(), In(dtype=pl.INT32, data="perm")),
                ),
            ),
        ),
        Case(
            "pl.tile.gather(src, indices, tmp)",
            5,
            "tile.gather",
            "pto.tgather",
            lambda t, i: pl.tile.gather(t, i),
            lambda x, i: x.reshape(-1)[i.astype(np.int64)],
            ins=(In(), In(dtype=pl.INT32, data="perm")),
            fuzz_params={"rowwise": False},
            refusals=(
                Refusal(
                    "value",
                    lambda t, i: pl.tile.gather(t, pl.add(i, 5000)),
                    "outside the source's 1024 valid elements",
                    ins=(In(), In(dtype=pl.INT32, data="perm")),
                    at="run",
                ),
            ),
        ),
    ]


def _four_lists(t, exhausted):
    """sort32's four sorted 32-value blocks of the row as four lists (64 elements each)."""
    pairs = _pairs_of(t)
    lists = [pairs[:, 64 * i : 64 * i + 64] for i in range(4)]
    return pl.mrgsort(*lists, pl.create_tile([1, 256], dtype=pl.FP32), exhausted=exhausted)


# ----------------------------------------------------------------------------------- moves
def _mm(a, b):
    return pl.matmul(a, b)


_A = In(shape=(R, 32), dtype=pl.FP16, memory=Mem.Mat)
_B = In(shape=(32, C), dtype=pl.FP16, memory=Mem.Mat)
_AI = In(shape=(R, 32), dtype=pl.INT8, memory=Mem.Mat, data="int")
_BI = In(shape=(32, C), dtype=pl.INT8, memory=Mem.Mat, data="int")


def _f32mm(a, b):
    return a.astype(np.float32) @ b.astype(np.float32)


def move_cases() -> list[Case]:
    out = []
    for target, prim, instr in (
        (pl.A2A3, "tile.tpush_to_aiv", "pto.tpush_to_aiv"),
        (pl.A5, "tile.move_fixpipe", "pto.tmov"),
    ):
        out.append(
            Case(
                f"pl.move(acc, target_memory=pl.Mem.Vec) on {target.value}",
                1,
                prim,
                instr,
                lambda a, b: pl.add(pl.move(_mm(a, b), target_memory=Mem.Vec), 1.0),
                lambda a, b: _r32(_f32mm(a, b).astype(np.float64) + 1.0),
                ins=(_A, _B),
                rtol=1e-6,
                target=target,
                doc="Acc -> Vec",
                refusals=(
                    Refusal(
                        "dtype",
                        lambda a, b: pl.move(_mm(a, b), target_memory=Mem.Vec, dtype=pl.INT8),
                        "the fixpipe converts",
                    ),
                    Refusal(
                        "memory",
                        lambda a, b: pl.move(_mm(a, b), target_memory=Mem.Left),
                        "no Acc -> Left move",
                    ),
                    *(
                        ()
                        if target is pl.A2A3
                        else (
                            Refusal(  # A5's fixpipe: a destination row of at most 4096 bytes
                                "shape",
                                lambda a, b: pl.move(_mm(a, b), target_memory=Mem.Vec),
                                "rows of at most 4096 bytes, got 2048 pl.FP32",
                                ins=(_A, In(shape=(32, 2048), dtype=pl.FP16, memory=Mem.Mat)),
                            ),
                        )
                    ),
                ),
            )
        )
        out.append(
            Case(
                f"pl.move(acc, target_memory=pl.Mem.Vec, dtype=pl.FP16, scale=s) on {target.value}",
                1,
                prim,
                instr,
                lambda a, b: pl.move(_mm(a, b), target_memory=Mem.Vec, dtype=pl.FP16, scale=0.01),
                lambda a, b: (a.astype(np.int64) @ b.astype(np.int64)).astype(np.float32) * np.float32(0.01),
                ins=(_AI, _BI),
                out=((R, C), pl.FP16),
                rtol=1e-3,
                target=target,
                fuzz_params={"dtype": pl.FP16},
                doc="DEQF16",
                refusals=(
                    Refusal(
                        "dtype",
                        lambda a, b: pl.move(_mm(a, b), target_memory=Mem.Vec, dtype=pl.FP32, scale=0.5),
                        "dequantises an INT32 Acc tile to pl.FP16",
                        ins=(_AI, _BI),
                    ),
                ),
            )
        )
    for target, prim, instr in (
        (pl.A2A3, "tile.tpush_to_aic", "pto.tpush_to_aic"),
        (pl.A5, "tile.move", "pto.tmov"),
    ):
        out.append(
            Case(
                f"pl.move(vec, target_memory=pl.Mem.Mat) on {target.value}",
                1,
                prim,
                instr,
                lambda v, b: pl.matmul(
                    pl.move(pl.move(v, target_memory=Mem.Mat), target_memory=Mem.Left),
                    pl.move(b, target_memory=Mem.Right),
                ),
                _f32mm,
                ins=(In(shape=(R, 32), dtype=pl.FP16), _B),
                rtol=1e-6,
                target=target,
                doc="Vec -> Mat",
                refusals=(
                    Refusal(
                        "shape",
                        lambda v, b: pl.move(v, target_memory=Mem.Mat),
                        "whole 16 x 16 fractals",
                        ins=(In(shape=(8, 32), dtype=pl.FP16), _B),
                    ),
                ),
            )
        )
    out.append(
        Case(
            "pl.move(tile, target_memory=pl.Mem.Vec) (Vec -> Vec)",
            1,
            "tile.move",
            "pto.tmov",
            lambda t: pl.move(t, target_memory=Mem.Vec),
            lambda x: x,
            doc="Vec -> Vec",
            refusals=(
                Refusal("memory", lambda t: pl.move(t, target_memory=Mem.Left), "no Vec -> Left move"),
            ),
        )
    )
    return out
