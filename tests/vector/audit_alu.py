"""Audit cases of the vector ALU (issue 22 items 2 and 3): tile-tile and tile-scalar arithmetic,
unary math, conversions, reductions and the row / column broadcasts."""

from __future__ import annotations

import numpy as np

from nzjit import pl
from tests.vector.audit_base import (
    BF16,
    I32,
    MAT,
    MSG_BF16,
    MSG_MEM,
    C,
    Case,
    In,
    Mem,
    R,
    Refusal,
    _r32,
    binary_refusals,
    scalar_refusals,
    unary_refusals,
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


def binary_cases() -> list[Case]:
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


def broadcast_cases() -> list[Case]:
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


def unary_cases() -> list[Case]:
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


def cast_cases() -> list[Case]:
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


def reduction_cases() -> list[Case]:
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
