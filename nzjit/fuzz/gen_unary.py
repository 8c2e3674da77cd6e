"""Generator entries of the unary elementwise ops `pl.neg` / `pl.abs` (issue 21's proof that a new
primitive is added in one place per layer). The vec_ew family of gen.py draws them through the
small hook `unary_ops(dtype)` / `unary_step(...)`; nothing here imports gen.py."""

from __future__ import annotations

#: op -> (the numpy reference of the program's float64 reference values, the tile dtypes it takes)
UNARY: dict[str, tuple[str, tuple[str, ...]]] = {
    "neg": ("np.negative", ("FP32", "FP16", "INT32")),  # int16 data could hold -32768 (wraps)
    "abs": ("np.abs", ("FP32", "FP16")),  # TABS takes float / half only
}


def unary_ops(dtype: str) -> list[str]:
    """The unary ops a vec_ew program of tiles of `dtype` may draw (exact on every value)."""
    return [op for op, (_, dtypes) in UNARY.items() if dtype in dtypes]


def unary_step(op: str, out: str, x: str) -> tuple[str, str]:
    """(kernel line, reference line) of `out = pl.<op>(x)`: negation and absolute value are exact
    in any float type, so the float64 reference needs no rounding."""
    return f"{out} = pl.{op}({x})", f"{out} = {UNARY[op][0]}({x})"
