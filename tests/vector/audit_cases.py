"""The audit of the vector unit (issue 22 item 8 over items 1-6): one case per op of the issue, each
with its primitive, its pto-isa instruction, its numpy reference, its refusals and what it claims
about lane batching. tests/vector/test_vector_audit.py runs every claim; docs/vector_audit.py
renders the table in docs/vector-ops.md from this catalogue, so the table cannot say more than
the tests check.

No `from __future__ import annotations` here: the kernels' annotations are built from each case's
shapes when the kernel is defined (pl.Tensor[[rows, cols], dtype] with the case's values).
"""

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import ml_dtypes
import numpy as np

from nzjit import pl

LANES = 2
R, C = 16, 64
Mem = pl.Mem


@dataclass(frozen=True)
class In:
    """One kernel input: a tensor window each lane loads (rows are per lane), or a scalar."""

    shape: tuple[int, int] = (R, C)
    dtype: Any = pl.FP32
    memory: Any = Mem.Vec
    data: str = "normal"  # normal | pos (> 0.1) | int (small integers) | sorted | perm
    valid: tuple[int, int] | None = None
    scalar: float | None = None  # a pl.Scalar[dtype] parameter of this value
    whole: bool = False  # every lane loads the same rows (a shared operand)

    def np_dtype(self) -> np.dtype:
        return np.dtype(self.dtype.np_dtype)


@dataclass(frozen=True)
class Refusal:
    """A refusal the op must give: `kind` (memory, dtype, shape, broadcast, value, target), its body
    on `ins` (default: the case's), the message it must match, and when (compile or run)."""

    kind: str
    body: Callable[..., Any]
    match: str
    ins: tuple[In, ...] | None = None
    target: Any = None
    at: str = "compile"


@dataclass(frozen=True)
class Case:
    op: str  # the pl spelling
    item: int  # issue 22's item
    prim: str  # the primitive it stages
    instr: str  # the pto-isa instruction in its PTO text
    body: Callable[..., Any]  # the loaded operands -> the tile to store
    ref: Callable[..., np.ndarray]  # the lane's input arrays -> the lane's expected output
    ins: tuple[In, ...] = (In(),)
    out: tuple[tuple[int, int], Any] = ((R, C), pl.FP32)
    rtol: float = 0.0  # 0: exact bits
    target: Any = pl.A2A3
    batched: bool | str = True  # True, or why the body runs lane by lane
    refusals: tuple[Refusal, ...] = field(default_factory=tuple)
    fuzz_params: dict[str, Any] = field(default_factory=dict)  # what tells this form apart in the IR
    doc: str | None = None  # what docs/vector-ops.md must mention (default: the pl name)


def _r32(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, np.float64).astype(np.float32)


# ------------------------------------------------------------------------- shared refusals
MAT = In(memory=Mem.Mat, shape=(R, 32), dtype=pl.FP16)
BF16 = In(dtype=pl.BF16)
I32 = In(dtype=pl.INT32, data="int")
NARROW = In(shape=(R, 32))
MSG_MEM = "works on Vec tiles"
MSG_BF16 = "the A2A3 vector unit has no pl.BF16"


def unary_refusals(fn: Callable[..., Any], float_only: bool = True) -> tuple[Refusal, ...]:
    out = [
        Refusal("memory", fn, MSG_MEM, ins=(MAT,)),
        Refusal("dtype", fn, MSG_BF16, ins=(BF16,)),
    ]
    if float_only:
        out.append(
            Refusal(
                "dtype", fn, "the A2A3 vector unit has no pl.INT32|works on FP32 / FP16 tiles", ins=(I32,)
            )
        )
    return tuple(out)


def binary_refusals(fn: Callable[..., Any]) -> tuple[Refusal, ...]:
    return (
        Refusal("memory", fn, MSG_MEM, ins=(MAT, MAT)),
        Refusal("dtype", fn, MSG_BF16, ins=(BF16, BF16)),
        Refusal("shape", fn, "operands differ", ins=(In(), NARROW)),
        Refusal("broadcast", fn, "operands differ", ins=(In(), In(shape=(R, 8)))),
    )


def scalar_refusals(fn: Callable[..., Any]) -> tuple[Refusal, ...]:
    return (
        Refusal("memory", lambda t: fn(t, 2.0), MSG_MEM, ins=(MAT,)),
        Refusal("dtype", lambda t: fn(t, 2.0), MSG_BF16, ins=(BF16,)),
        Refusal(
            "dtype", lambda t: fn(t, 2.5), "does not combine with|vector unit has no pl.INT32", ins=(I32,)
        ),
    )


_NP_BINARY = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": np.divide,
    "maximum": np.maximum,
    "minimum": np.minimum,
}
_INSTR = {"add": "tadd", "sub": "tsub", "mul": "tmul", "div": "tdiv", "maximum": "tmax", "minimum": "tmin"}
_SHORT = {"add": "add", "sub": "sub", "mul": "mul", "div": "div", "maximum": "max", "minimum": "min"}
_SCALAR_PRIM = {
    "add": "adds",
    "sub": "subs",
    "mul": "muls",
    "div": "divs",
    "maximum": "maximums",
    "minimum": "minimums",
}


def _binary_cases() -> list[Case]:
    out = []
    for name, f in _NP_BINARY.items():
        fn = getattr(pl, name)
        b_in = In(data="pos") if name == "div" else In()
        out.append(
            Case(
                f"pl.{name}(tile, tile)",
                2,
                f"tile.{name}",
                f"pto.{_INSTR[name]}",
                lambda t, u, fn=fn: fn(t, u),
                lambda x, z, f=f: _r32(f(x.astype(np.float64), z)),
                ins=(In(), b_in),
                refusals=binary_refusals(lambda t, u, fn=fn: fn(t, u)),
            )
        )
        out.append(
            Case(
                f"pl.{name}(tile, scalar)",
                2,
                f"tile.{_SCALAR_PRIM[name]}",
                f"pto.t{_SHORT[name]}s",
                lambda t, fn=fn: fn(t, 0.75),
                lambda x, f=f: _r32(f(x.astype(np.float64), 0.75)),
                refusals=scalar_refusals(fn),
            )
        )
    return out


def _broadcast_cases() -> list[Case]:
    out = []
    for kind, red in (("row", "row_sum"), ("col", "col_sum")):
        axis = 1 if kind == "row" else 0
        for suffix, f in (
            ("", None),
            ("_add", np.add),
            ("_sub", np.subtract),
            ("_mul", np.multiply),
            ("_div", np.divide),
        ):
            fn = getattr(pl, f"{kind}_expand{suffix}")
            vec_shape = (R, 1) if kind == "row" else (1, C)

            def body(t, u, fn=fn, red=red):
                return fn(t, getattr(pl, red)(pl.abs(u)) if red == "col_sum" else pl.row_sum(pl.abs(u)))

            def ref(x, z, f=f, axis=axis):
                v = _r32(np.abs(z).astype(np.float64).sum(axis=axis, keepdims=True))
                return _r32(np.broadcast_to(v, x.shape)) if f is None else _r32(f(x.astype(np.float64), v))

            bad_vec = (R, 16) if kind == "row" else (1, 32)  # [R, 8] is TROWEXPAND's 32-byte-block form
            out.append(
                Case(
                    f"pl.{kind}_expand{suffix}(tile, {list(vec_shape)})",
                    3,
                    f"tile.{kind}_expand{suffix}",
                    f"pto.t{kind}expand{suffix[1:]}",
                    body,
                    ref,
                    ins=(In(), In(data="int")),
                    refusals=(
                        Refusal("memory", lambda t, u, fn=fn: fn(t, u), MSG_MEM, ins=(MAT, MAT)),
                        Refusal(
                            "broadcast",
                            lambda t, u, fn=fn: fn(t, u),
                            "per-row operand must be" if kind == "row" else "per-column operand must be",
                            ins=(In(), In(shape=bad_vec)),
                        ),
                        Refusal(
                            "dtype",
                            lambda t, u, fn=fn: fn(t, u),
                            "operand dtypes differ",
                            ins=(In(), In(shape=(R, C), dtype=pl.FP16)),
                        ),
                    ),
                )
            )
    for name, f in (("maximum", np.maximum), ("minimum", np.minimum)):
        fn = getattr(pl, name)
        for kind, axis in (("row", 1), ("col", 0)):
            red = pl.row_max if kind == "row" else pl.col_max
            out.append(
                Case(
                    f"pl.{name}(tile, {'[R, 1]' if kind == 'row' else '[1, C]'})",
                    2,
                    f"tile.{kind}_expand_{_SHORT[name]}",
                    f"pto.t{kind}expand{_SHORT[name]}",
                    lambda t, u, fn=fn, red=red: fn(t, red(u)),
                    lambda x, z, f=f, axis=axis: f(x, z.max(axis=axis, keepdims=True)),
                    ins=(In(), In()),
                    refusals=(
                        Refusal(
                            "broadcast",
                            lambda t, u, fn=fn, red=red: fn(t, red(u)),
                            "operands differ",
                            ins=(In(), In(shape=(R, 32) if kind == "col" else (8, C))),
                        ),
                        Refusal(
                            "dtype", lambda t, u, fn=fn, red=red: fn(t, red(u)), MSG_BF16, ins=(BF16, BF16)
                        ),
                    ),
                )
            )
    return out


def _unary_cases() -> list[Case]:
    table = [
        ("exp", np.exp, "normal", 1e-6),
        ("log", np.log, "pos", 1e-6),
        ("sqrt", np.sqrt, "pos", 0.0),
        ("rsqrt", lambda x: 1 / np.sqrt(x), "pos", 1e-6),
        ("recip", lambda x: 1 / x, "pos", 0.0),
        ("abs", np.abs, "normal", 0.0),
        ("neg", np.negative, "normal", 0.0),
        ("relu", lambda x: np.maximum(x, 0), "normal", 0.0),
    ]
    out = []
    for name, f, data, rtol in table:
        fn = getattr(pl, name)
        float_only = name not in ("neg", "relu")
        out.append(
            Case(
                f"pl.{name}(tile)",
                2,
                f"tile.{name}",
                f"pto.t{name}",
                lambda t, fn=fn: fn(t),
                lambda x, f=f: _r32(f(x.astype(np.float64))),
                ins=(In(data=data),),
                rtol=rtol,
                refusals=unary_refusals(fn, float_only),
            )
        )
    out.append(
        Case(
            "pl.rsqrt(tile, high_precision=True)",
            3,
            "tile.rsqrt",
            "pto.trsqrt",
            lambda t: pl.rsqrt(t, high_precision=True),
            lambda x: _r32(1 / _r32(np.sqrt(x.astype(np.float64)))),
            ins=(In(data="pos"),),
            fuzz_params={"high_precision": True},
            refusals=unary_refusals(lambda t: pl.rsqrt(t, high_precision=True)),
        )
    )
    out.append(
        Case(
            "pl.tile.lrelu(tile, slope)",
            3,
            "tile.lrelu",
            "pto.tlrelu",
            lambda t: pl.tile.lrelu(t, 0.125),
            lambda x: np.maximum(x, _r32(x * 0.125)),
            refusals=(
                Refusal("memory", lambda t: pl.tile.lrelu(t, 0.1), MSG_MEM, ins=(MAT,)),
                Refusal(
                    "dtype",
                    lambda t: pl.tile.lrelu(t, 1),
                    "needs a float tile",
                    ins=(I32,),
                ),
                Refusal("value", lambda t: pl.tile.lrelu(t, t), "the slope must be a number or a pl.Scalar"),
            ),
        )
    )
    return out


def _to_odd_f16(x: np.ndarray) -> np.ndarray:
    """fp32 -> fp16 rounded to odd: toward zero, then an inexact result gets the odd neighbour."""
    x64 = x.astype(np.float64)
    h = x.astype(np.float16)
    toward = np.where(np.abs(h.astype(np.float64)) > np.abs(x64), np.nextafter(h, np.float16(0)), h)
    exact = toward.astype(np.float64) == x64
    odd = (toward.view(np.uint16) & 1) == 1
    away = np.nextafter(toward, np.where(x64 < 0, np.float16(-np.inf), np.float16(np.inf)).astype(np.float16))
    return np.where(exact | odd, toward, away)


def _cast_cases() -> list[Case]:
    rounding = {
        "rint": np.rint,
        "round": lambda x: np.sign(x) * np.floor(np.abs(x) + 0.5),
        "floor": np.floor,
        "ceil": np.ceil,
        "trunc": np.trunc,
    }
    out = []
    for mode, f in rounding.items():
        out.append(
            Case(
                f'pl.cast(tile, pl.INT32, mode="{mode}")',
                2,
                "tile.cvt",
                "pto.tcvt",
                lambda t, mode=mode: pl.cast(pl.mul(t, 4.0), pl.INT32, mode=mode),
                lambda x, f=f: f(_r32(x * 4.0).astype(np.float64)).astype(np.int32),
                out=((R, C), pl.INT32),
                fuzz_params={"mode": mode},
                refusals=(
                    Refusal(
                        "memory",
                        lambda t, mode=mode: pl.cast(t, pl.INT32, mode=mode),
                        "pl.cast",
                        ins=(In(memory=Mem.Mat, shape=(R, 32)),),
                    ),
                    Refusal(
                        "dtype",
                        lambda t, mode=mode: pl.cast(t, pl.INT8, mode=mode),
                        r"has no pl.FP32 -> pl.INT8 conversion \(TCVT\)",
                    ),
                    Refusal("value", lambda t: pl.cast(t, pl.INT32, mode="nearest"), "mode"),
                ),
            )
        )
    out.append(
        Case(
            'pl.cast(tile, pl.FP16, mode="odd")',
            2,
            "tile.cvt",
            "pto.tcvt",
            lambda t: pl.cast(t, pl.FP16, mode="odd"),
            lambda x: _to_odd_f16(x),
            out=((R, C), pl.FP16),
            fuzz_params={"mode": "odd"},
            refusals=(
                Refusal(
                    "dtype", lambda t: pl.cast(t, pl.INT8, mode="odd"), r"no pl.FP32 -> pl.INT8 conversion"
                ),
                Refusal("memory", lambda t: pl.cast(t, pl.FP32, mode="odd"), "Vec tile", ins=(MAT,)),
            ),
        )
    )
    out.append(
        Case(
            "pl.cast(tile, pl.FP16)",
            2,
            "tile.cast",
            "pto.tcvt",
            lambda t: pl.cast(t, pl.FP16),
            lambda x: x.astype(np.float16),
            out=((R, C), pl.FP16),
            refusals=(
                Refusal(
                    "shape", lambda t: pl.cast(t, pl.FP16), "whole 32-byte blocks", ins=(In(shape=(R, 8)),)
                ),
            ),
        )
    )
    return out


def _reduction_cases() -> list[Case]:
    out = []
    for kind in ("row", "col"):
        axis = 1 if kind == "row" else 0
        for op, f in (("max", np.max), ("sum", np.sum), ("min", np.min)):
            fn = getattr(pl, f"{kind}_{op}")
            shape = (1, R) if kind == "row" else (1, C)
            if kind == "row":

                def body(t, fn=fn):
                    return pl.reshape(fn(t), [1, R])
            else:

                def body(t, fn=fn):
                    return fn(t)

            data = "int" if op == "sum" else "normal"  # integer sums are exact in any tree order
            out.append(
                Case(
                    f"pl.{kind}_{op}(tile)",
                    3,
                    f"tile.{kind}_{op}",
                    f"pto.t{kind}{op}",
                    body,
                    lambda x, f=f, axis=axis: f(x, axis=axis).reshape(1, -1).astype(np.float32),
                    ins=(In(data=data),),
                    out=(shape, pl.FP32),
                    refusals=(
                        Refusal("memory", lambda t, fn=fn: fn(t), MSG_MEM, ins=(MAT,)),
                        Refusal("dtype", lambda t, fn=fn: fn(t), MSG_BF16, ins=(BF16,)),
                    ),
                )
            )
        if kind == "row":
            out.append(
                Case(
                    "pl.row_sum(tile, tmp)",
                    3,
                    "tile.row_sum",
                    "pto.trowsum",
                    lambda t, s: pl.reshape(pl.row_sum(t, s), [1, R]),
                    lambda x, s: x.sum(axis=1).reshape(1, -1).astype(np.float32),
                    ins=(In(data="int"), In()),
                    out=((1, R), pl.FP32),
                    refusals=(
                        Refusal(
                            "dtype",
                            lambda t, s: pl.row_sum(t, s),
                            "tmp .* must have the source's dtype",
                            ins=(In(), In(dtype=pl.FP16)),
                        ),
                        Refusal(
                            "shape",
                            lambda t, s: pl.reshape(pl.row_sum(t, s), [1, R]),
                            "tmp",
                            ins=(In(), In(shape=(R, 8))),
                            at="run",
                        ),
                    ),
                )
            )
    return out


def _creation_cases() -> list[Case]:
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


def _tile_value_cases() -> list[Case]:
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


def _top(x: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    order = np.argsort(-x, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(x, order, 1), order.astype(np.int32)


def _pairs_of(t):
    return pl.sort32(t, pl.arange(0, [1, 128], dtype=pl.INT32))


_ROW = In(shape=(1, 128))


def _topk_cases() -> list[Case]:
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


def _move_cases() -> list[Case]:
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


def all_cases() -> list[Case]:
    return [
        *_move_cases(),
        *_binary_cases(),
        *_unary_cases(),
        *_cast_cases(),
        *_reduction_cases(),
        *_broadcast_cases(),
        *_creation_cases(),
        *_tile_value_cases(),
        *_topk_cases(),
    ]


def data(spec: In, lanes: int, rng: np.random.Generator) -> Any:
    """The input array of every lane stacked along the rows (or the scalar)."""
    if spec.scalar is not None:
        return np.float64(spec.scalar)
    r, c = spec.shape
    rows = r if spec.whole else lanes * r
    d = spec.np_dtype()
    if spec.data == "int":
        lo, hi = (-8, 8) if d.kind in "iu" or d.itemsize > 1 else (-8, 8)
        return rng.integers(lo, hi, (rows, c)).astype(d)
    if spec.data == "perm":  # indices within a row (the row-wise gather) and within the tile
        return np.stack([rng.permutation(c) for _ in range(rows)]).astype(d)
    x = rng.standard_normal((rows, c))
    if spec.data == "pos":
        x = np.abs(x) + 0.1
    return x.astype(d)


__all__ = ["LANES", "Case", "In", "Refusal", "all_cases", "data", "math"]


# ---------------------------------------------------------------------------------- kernels
def _annotation(spec: In, lanes: int) -> Any:
    if spec.scalar is not None:
        return pl.Scalar[spec.dtype]
    r, c = spec.shape
    return pl.Tensor[[r if spec.whole else lanes * r, c], spec.dtype]


def _load(x: Any, spec: In, lane: Any) -> Any:
    if spec.scalar is not None:
        return x
    kw = {} if spec.valid is None else {"valid_shape": list(spec.valid)}
    row = 0 if spec.whole else lane * spec.shape[0]
    return pl.load(x, [row, 0], list(spec.shape), target_memory=spec.memory, **kw)


def kernel_for(
    ins: tuple[In, ...],
    out: tuple[tuple[int, int], Any] | None,
    body: Callable[..., Any],
    target: Any,
    lanes: int = LANES,
) -> Any:
    """An SPMD kernel of `lanes` lanes: each loads its rows of every input, runs `body` and stores the
    result into its rows of `y` (no `y` when `out` is None: a refusal's kernel)."""
    specs = list(ins)
    ann = [_annotation(s, lanes) for s in specs]

    def lane_body(lane: Any, y: Any, *xs: Any) -> None:
        result = body(*[_load(x, s, lane) for x, s in zip(xs, specs)])
        if y is not None:
            pl.store(result, [lane * out[0][0], 0], y)

    if out is None:
        ys = []
    else:
        (orow, ocol), od = out
        ys = [pl.Out[pl.Tensor[[lanes * orow, ocol], od]]]
    sig = [*ann, *ys]
    if len(sig) == 1:

        @pl.kernel(target=target)
        def k1(a: sig[0]):
            for lane in pl.spmd(lanes):
                lane_body(lane, None, a)

        return k1
    if len(sig) == 2:

        @pl.kernel(target=target)
        def k2(a: sig[0], b: sig[1]):
            for lane in pl.spmd(lanes):
                lane_body(lane, *((b, a) if ys else (None, a, b)))

        return k2
    if len(sig) == 3:

        @pl.kernel(target=target)
        def k3(a: sig[0], b: sig[1], c: sig[2]):
            for lane in pl.spmd(lanes):
                lane_body(lane, *((c, a, b) if ys else (None, a, b, c)))

        return k3
    raise AssertionError(f"{len(sig)} parameters: add a kernel form")
