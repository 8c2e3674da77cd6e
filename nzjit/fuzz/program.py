"""The program under construction (`G`), the generated `Program` and the dtype tables of the
fuzzer's generators (gen.py assembles; families in fam_*.py).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from .expr import Expr

_T = TypeVar("_T")

# name -> (numpy dtype text, bits, data low, data high (exclusive))
DTYPES: dict[str, tuple[str, int, int, int]] = {
    "INT8": ("np.int8", 8, -128, 128),
    "UINT8": ("np.uint8", 8, 0, 256),
    "INT16": ("np.int16", 16, -3000, 3000),
    "FP16": ("np.float16", 16, -4, 5),
    "BF16": ("ml_dtypes.bfloat16", 16, -4, 5),
    "FP32": ("np.float32", 32, -4, 5),
    "INT32": ("np.int32", 32, -3000, 3000),
    "FP8E4M3": ("ml_dtypes.float8_e4m3fn", 8, -4, 5),
    "INT4": ("ml_dtypes.int4", 4, -8, 8),
    "UINT4": ("ml_dtypes.uint4", 4, 0, 16),
    "FP4": ("ml_dtypes.float4_e2m1fn", 4, -2, 3),
    "BOOL": ("np.bool_", 1, 0, 2),
    "INT64": ("np.int64", 64, -3000, 3000),
}
MATMUL = ("INT8", "FP16", "BF16", "FP32")
ACC = {"INT8": "INT32", "FP16": "FP32", "BF16": "FP32", "FP32": "FP32"}
SUB_BYTE = ("INT4", "UINT4", "FP4", "BOOL")


def c0_of(dt: str) -> int:
    """Elements per 32-byte C0 line of the dtype `dt`."""
    return 256 // DTYPES[dt][1]


def nbytes(shape: Sequence[int], dt: str) -> int:
    """Bytes of a tensor of `shape` and `dt` (a sub-byte element counts as one byte)."""
    return math.prod(shape) * max(1, DTYPES[dt][1] // 8)


@dataclass(frozen=True)
class Program:
    """One generated program: its module source and what the spec predicts for it."""

    seed: int
    index: int
    family: str
    tags: tuple[str, ...]
    expect: str  # "ok" (spec: accepted and exact), "refuse" (spec: refused), "any" (not predicted)
    expect_rows: frozenset[str]  # when "refuse": the rule-table rows (rules.py) that may fire
    source: str
    partial: bool = False  # part of the program was not predicted (expect_rows may be incomplete)

    @property
    def name(self) -> str:
        """`seed_index`, the name of the program's reproducer."""
        return f"{self.seed}_{self.index}"


@dataclass
class G:
    """Program under construction: kernel lines, reference lines, parameters, predictions."""

    rnd: random.Random
    tags: list[str] = field(default_factory=list)
    kl: list[str] = field(default_factory=list)
    rl: list[str] = field(default_factory=list)
    params: list[tuple[str, str, str, bool]] = field(default_factory=list)  # name, annotation, kind, nz
    outs: dict[str, tuple[tuple[int, ...], str, bool]] = field(default_factory=dict)
    inputs: dict[str, str] = field(default_factory=dict)
    refuse: set[str] = field(default_factory=set)  # rows the spec says must refuse this program
    unknown: bool = False  # the generator cannot predict the outcome
    target: str = "pl.A2A3"
    total_bytes: int = 0
    dyn: dict[str, int] = field(default_factory=dict)  # dynamic dim name -> the argument's extent

    # -- randomness
    def p(self, prob: float) -> bool:
        """True with probability `prob`."""
        return self.rnd.random() < prob

    def choice(self, xs: Sequence[_T]) -> _T:
        """A uniformly random element of `xs`."""
        return self.rnd.choice(list(xs))

    def wchoice(self, pairs: Sequence[tuple[float, _T]]) -> _T:
        """A random value of `(weight, value)` pairs, by weight."""
        ws = [w for w, _ in pairs]
        vs = [v for _, v in pairs]
        return self.rnd.choices(vs, weights=ws)[0]

    def tag(self, *ts: str) -> None:
        """Record generator tags on the program (used by `--exclude` and the report)."""
        self.tags.extend(ts)

    # -- text
    def emit(self, ind: int, k: str | None, r: str | None = "") -> None:
        """A kernel line and its reference line (r="" : same text; None: kernel only)."""
        if k is not None:
            self.kl.append("    " * ind + k)
        if r is not None:
            self.rl.append("    " * ind + (k if r == "" and k is not None else r))

    # -- parameters
    def tensor(self, name: str, shape: Sequence[object], dt: str, nz: bool = False, kind: str = "in") -> None:
        """Declare a tensor parameter `name` (dims given by name are dynamic): its annotation, its random
        input data or, for `kind="out"`, an Out / InOut output."""
        dims = ", ".join(f'pl.dynamic("{d}")' if isinstance(d, str) else str(d) for d in shape)
        ann = f"pl.Tensor[[{dims}], pl.{dt}{', pl.NZ' if nz else ''}]"
        concrete = tuple(self.dyn[d] if isinstance(d, str) else int(d) for d in shape)  # type: ignore[call-overload]
        if kind == "out":
            inout = self.p(0.15)
            ann = f"pl.InOut[{ann}]" if inout else f"pl.Out[{ann}]"
            if inout:
                self.tag("inout")
            self.outs[name] = (concrete, DTYPES[dt][0], nz)
        else:
            npt, _, lo, hi = DTYPES[dt]
            self.inputs[name] = f"rng.integers({lo}, {hi}, {concrete}).astype({npt})"
            self.rl.insert(0, f"    {name} = d[{name!r}].astype(np.float64)")
        self.total_bytes += nbytes(concrete, dt)
        self.params.append((name, ann, kind, nz))

    def scalar(self, name: str, value: int, dt: str = "INDEX") -> None:
        """Declare a scalar parameter `name` of `dt` passed `value`."""
        self.params.append((name, f"pl.Scalar[pl.{dt}]", "scalar", False))
        self.inputs[name] = str(value)
        self.rl.insert(0, f"    {name} = d[{name!r}]")

    # -- predictions
    def offset(self, e: Expr, d: int, store: bool = False) -> None:
        """Predict the refusal of one trailing offset of an NZ access (NZ-12, NZ-16, NZ-18)."""
        facts = e.proves(d)
        if facts is None:
            self.unknown = True
            return
        mult, nonneg = facts
        pre = "S" if store else ""
        if e.const is not None:
            if not (mult and nonneg):
                self.refuse.add(pre + "L4" if not store else "S7")
            return
        if not mult:
            self.refuse.add("S8" if store else "L6")
        elif not nonneg:
            self.refuse.add("S8" if store else "L7")


# ----------------------------------------------------------------------------------- helpers
def data_dtype(g: G) -> str:
    """A random matmul data dtype (INT8, FP16, BF16 or FP32)."""
    return g.wchoice([(3, "INT8"), (3, "FP16"), (2, "BF16"), (2, "FP32")])


def nz_shape_ok(shape: Sequence[int], dt: str) -> bool:
    """True when the last two axes of `shape` are whole 16 x c0 fractals, as an NZ tensor needs."""
    return shape[-2] % 16 == 0 and shape[-1] % c0_of(dt) == 0


def mat_window(g: G, rows: int, cols: int, dt: str, left: bool) -> None:
    """An ND window loaded into Mat must be whole C0 lines, and whole 16-row fractals unless it is
    the Left operand: a decode batch of M rows gets a ceil16(M)-row tile with valid rows M
    (hardware-model.md §3, §6; passes/auto_tile_matmul.py). Anything else must be refused."""
    if rows % 16 and left and not cols % c0_of(dt):
        g.tag("decode_rows")
    if cols % c0_of(dt) or (rows % 16 and not left):
        g.tag("nd_mat_partial")
        g.refuse.add("X9")  # refused by AutoTileMatmulL0 (passes/auto_tile_matmul.check_mat_fractals)


def check_nz_param(g: G, shape: Sequence[object], dt: str) -> None:
    """The parameter-level NZ refusals the spec predicts (§7 rows, NZ-33)."""
    bits = DTYPES[dt][1]
    if bits < 8 or dt == "BOOL":
        g.refuse.add("X1")
        return
    if bits > 32:
        g.refuse.add("X2")
        return
    if len(shape) < 2:
        g.refuse.add("L11")
        return
    r, c = shape[-2], shape[-1]
    if isinstance(r, str) or isinstance(c, str):
        g.refuse.add("L3")
        return
    if len(shape) > 3 and any(isinstance(x, str) for x in shape[:-2]):
        g.refuse.add("L12")
    if r % 16:  # type: ignore[operator]
        g.refuse.add("L1")
    if c % c0_of(dt):  # type: ignore[operator]
        g.refuse.add("L2")
