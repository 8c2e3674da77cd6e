"""The vector audit's vocabulary (tests/vector/audit_cases.py): a case's inputs (`In`), its
refusals (`Refusal`), the case itself (`Case`), the refusals shared by op families, the inputs'
data and the SPMD kernel every case runs in.

No `from __future__ import annotations` here: the kernels' annotations are built from each case's
shapes when the kernel is defined (pl.Tensor[[rows, cols], dtype] with the case's values).
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

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
