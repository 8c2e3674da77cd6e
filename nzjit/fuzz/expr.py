"""Index expressions of generated kernels: kernel text, reference text and the NZ-16 facts.

Every offset a generated kernel uses is an `Expr` that renders twice: once for the kernel
(`pl.min(nb * 64, 192)`, `pl.get_block_idx()`) and once for the plain-Python reference that
mirrors the kernel's loops (`min(nb * 64, 192)`, the lane variable). Each node also carries the
facts of the spec's NZ-16 table, computed here independently of `nzjit/passes/proofs.py`, so the
campaign can say what the spec predicts (mapped or refused) and report where the compiler
disagrees. Python folds arithmetic on plain ints before the tracer sees it, so constant nodes
fold here too (`const`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Expr:
    """An index expression: kernel text `k`, reference text `r` and the NZ-16 facts (known factor,
    non-negative)."""

    k: str  # kernel text
    r: str  # reference text
    factor: int  # a known multiple (0: the value is 0), NZ-16 composition rules
    nonneg: bool  # provably >= 0 by the NZ-16 rules
    const: int | None = None  # a plain Python int at trace time (folded, a literal in the IR)
    atom: bool = True  # needs no parentheses
    unk: bool = False  # built from a plain `range` variable: a literal whose value changes per trip

    def par(self) -> tuple[str, str]:
        """(kernel text, reference text), parenthesised unless the node is an atom."""
        if self.atom:
            return self.k, self.r
        return f"({self.k})", f"({self.r})"

    def proves(self, d: int) -> tuple[bool, bool] | None:
        """(multiple of d, non-negative) as the spec predicts for this offset; None: unknown here
        (a Python value that changes per unrolled iteration)."""
        if self.const is not None:
            return self.const % d == 0, self.const >= 0
        if self.unk:
            return None
        return self.factor % d == 0, self.nonneg


def lit(v: int) -> Expr:
    """A plain int constant (folded by Python at trace time, a literal in the IR)."""
    return Expr(str(v), str(v), abs(v), v >= 0, v, v >= 0)


def var(name: str, factor: int = 1, nonneg: bool = True, ref: str | None = None) -> Expr:
    """A traced value: loop variable, lane, kernel scalar."""
    return Expr(name, ref or name, factor, nonneg)


def pyvar(name: str) -> Expr:
    """The variable of a plain Python `range` loop (unrolled: a different literal per trip)."""
    return Expr(name, name, 1, True, None, True, True)


def _consts(a: Expr, b: Expr) -> tuple[int, int] | None:
    """The two constants, when both operands are constants."""
    return (a.const, b.const) if a.const is not None and b.const is not None else None


def _py(a: Expr, b: Expr) -> bool:
    """Facts unknown here: a plain `range` variable is a different literal on every trip."""
    return a.unk or b.unk


def mul(a: Expr, b: Expr) -> Expr:
    """`a * b`: the factors multiply, non-negative when both are (NZ-16)."""
    if (c := _consts(a, b)) is not None:
        ca, cb = c
        return lit(ca * cb)
    (ak, ar), (bk, br) = a.par(), b.par()
    return Expr(
        f"{ak} * {bk}", f"{ar} * {br}", a.factor * b.factor, a.nonneg and b.nonneg, atom=False, unk=_py(a, b)
    )


def add(a: Expr, b: Expr) -> Expr:
    """`a + b`: the gcd of the factors, non-negative when both are (NZ-16)."""
    if (c := _consts(a, b)) is not None:
        ca, cb = c
        return lit(ca + cb)
    return Expr(
        f"{a.k} + {b.k}",
        f"{a.r} + {b.r}",
        math.gcd(a.factor, b.factor),
        a.nonneg and b.nonneg,
        atom=False,
        unk=_py(a, b),
    )


def sub(a: Expr, b: Expr) -> Expr:
    """A difference proves divisibility but never a sign (NZ-16)."""
    if (c := _consts(a, b)) is not None:
        ca, cb = c
        return lit(ca - cb)
    bk, br = b.par()
    return Expr(
        f"{a.k} - {bk}", f"{a.r} - {br}", math.gcd(a.factor, b.factor), False, atom=False, unk=_py(a, b)
    )


def floordiv(a: Expr, k: int) -> Expr:
    """`a // k`: keeps `factor // k` when `k` divides the factor, else only 1; the sign is kept (NZ-16)."""
    if a.const is not None:
        return lit(a.const // k)
    ak, ar = a.par()
    f = a.factor // k if a.factor % k == 0 else 1
    return Expr(f"{ak} // {k}", f"{ar} // {k}", f, a.nonneg, atom=False, unk=a.unk)


def mod(a: Expr, k: int) -> Expr:
    """`a % k`: a multiple of gcd(factor, k); the sign is kept (NZ-16)."""
    if a.const is not None:
        return lit(a.const % k)
    ak, ar = a.par()
    return Expr(f"{ak} % {k}", f"{ar} % {k}", math.gcd(a.factor, k), a.nonneg, atom=False, unk=a.unk)


def pmin(a: Expr, b: Expr) -> Expr:
    """pl.min: both operands multiples; non-negative when both are."""
    if (c := _consts(a, b)) is not None:
        ca, cb = c
        return lit(min(ca, cb))
    return Expr(
        f"pl.min({a.k}, {b.k})",
        f"min({a.r}, {b.r})",
        math.gcd(a.factor, b.factor),
        a.nonneg and b.nonneg,
        unk=_py(a, b),
    )


def pmax(a: Expr, b: Expr) -> Expr:
    """pl.max: non-negative when either operand is."""
    if (c := _consts(a, b)) is not None:
        ca, cb = c
        return lit(max(ca, cb))
    return Expr(
        f"pl.max({a.k}, {b.k})",
        f"max({a.r}, {b.r})",
        math.gcd(a.factor, b.factor),
        a.nonneg or b.nonneg,
        unk=_py(a, b),
    )


def named(name: str, e: Expr) -> Expr:
    """The variable a kernel assigns `name = e` to: same facts, the name as text."""
    return Expr(name, name, e.factor, e.nonneg, e.const, True, e.unk)
