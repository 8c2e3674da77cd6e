"""Alignment and sign proofs for symbolic NZ offsets (NZ-16), as a tiny symbolic module.

Every index expression gets two facts, tinygrad-style: a known constant factor (`factor`, 0 for
the value zero: a multiple of everything) and whether it is provably non-negative. They are
computed by walking back through the bindings that one read-only scan of the graph collects:

| binding                                | factor                      | non-negative when            |
|----------------------------------------|-----------------------------|------------------------------|
| integer constant c                     | |c|                         | c >= 0                       |
| a * b                                  | fa * fb                     | both                         |
| a + b                                  | gcd(fa, fb)                 | both                         |
| a - b                                  | gcd(fa, fb)                 | never (a difference)         |
| min(a, b) / max(a, b)                  | gcd(fa, fb)                 | min: both; max: either       |
| x // k, k > 0 constant                 | fx / k when k | fx, else 1  | x >= 0                       |
| x % k, k > 0 constant                  | gcd(fx, k)                  | x >= 0 (conservative)        |
| loop variable (start, step)            | gcd(fstart, fstep)          | start and step               |
| get_block_idx / get_block_num          | 1                           | always                       |
| loop-carried value, kernel scalar      | 1                           | never (not resolved)         |

Divisibility is only ever asked for a power of two d that divides 2^W (W the operand width), so a
value that wrapped at its width is still a multiple of d (NZ-17).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..core.ir import Atom, Eqn, Graph, Literal, Var
from ..errors import InternalError

BUDGET = 256  # nodes per query: keeps a proof over a pathological expression bounded


@dataclass(frozen=True)
class Fact:
    factor: int  # the value is a multiple of this (0: the value is 0)
    nonneg: bool
    expr: str  # the expression, for diagnostics
    nonneg_why: str  # the leaves that make it non-negative (or why not)


class _Budget(Exception):
    pass


class Prover:
    """Answers `is x a multiple of d` and `is x >= 0` from the bindings of one graph."""

    def __init__(self, graph: Graph) -> None:
        self.defs: dict[Var, Eqn] = {}
        self.loop_vars: dict[Var, tuple[Atom, Atom, str]] = {}
        self.aliases: dict[Var, Atom] = {}
        self.carries: set[Var] = set()
        self._scan(graph)
        self._memo: dict[Atom, Fact] = {}

    def _scan(self, g: Graph) -> None:
        for e in g.eqns:
            for v in e.outputs:
                self.defs[v] = e
            body = e.params.get("body")
            if isinstance(body, Graph):
                nb, nc, nk = e.params["arity"]
                start, _stop, step = e.inputs[:3]
                self.loop_vars[body.params[0]] = (start, step, e.params["kind"])
                for p, a in zip(body.params[1 : 1 + nc], e.inputs[nb : nb + nc]):
                    self.aliases[p] = a
                self.carries.update(body.params[1 + nc :])
                self._scan(body)

    # ------------------------------------------------------------------------------ queries
    def multiple(self, x: Atom, d: int) -> tuple[bool, Fact]:
        if d <= 0 or d & (d - 1):
            raise InternalError(f"NZ-17: alignment divisor {d} must be a power of two")
        width = getattr(x.type.dtype, "bits", 64)
        if d > 1 << width:
            raise InternalError(f"NZ-17: divisor {d} does not divide 2^{width}")
        f = self.fact(x)
        return (f.factor % d == 0), f

    def nonneg(self, x: Atom) -> tuple[bool, Fact]:
        f = self.fact(x)
        return f.nonneg, f

    def fact(self, x: Atom) -> Fact:
        try:
            return self._fact(x, [BUDGET])
        except _Budget:
            return Fact(1, False, self.name(x), "the proof budget ran out on this expression")

    # ------------------------------------------------------------------------------ the walk
    def name(self, x: Atom) -> str:
        if isinstance(x, Literal):
            return str(x.value)
        return x.hint or "%tmp"

    def _fact(self, x: Atom, budget: list[int]) -> Fact:
        if x in self._memo:
            return self._memo[x]
        budget[0] -= 1
        if budget[0] < 0:
            raise _Budget
        f = self._compute(x, budget)
        self._memo[x] = f
        return f

    def _compute(self, x: Atom, budget: list[int]) -> Fact:
        if isinstance(x, Literal):
            v = int(x.value)
            return Fact(abs(v), v >= 0, str(v), f"{v} >= 0" if v >= 0 else f"{v} < 0")
        nm = self.name(x)
        if x in self.aliases:
            inner = self._fact(self.aliases[x], budget)  # a captured value: the enclosing binding
            return Fact(inner.factor, inner.nonneg, inner.expr, inner.nonneg_why)
        if x in self.carries:
            return Fact(1, False, nm, f"{nm} is loop-carried: its value changes every iteration and is "
                        "never resolved")
        if x in self.loop_vars:
            start, step, kind = self.loop_vars[x]
            fs, ft = self._fact(start, budget), self._fact(step, budget)
            if kind == "spmd":
                return Fact(1, True, nm, f"{nm} = block index")
            ok = fs.nonneg and ft.nonneg
            why = (f"{nm} = loop from {fs.expr} step {ft.expr}" if ok else
                   f"loop variable {nm} starts at {fs.expr} ({fs.nonneg_why}) with step {ft.expr}")
            return Fact(math.gcd(fs.factor, ft.factor), ok, f"{nm}", why)
        e = self.defs.get(x)
        if e is None:
            return Fact(1, False, nm, f"{nm} is a kernel argument: its sign is unknown")
        p = e.primitive.name
        if p in ("get_block_idx", "get_block_num"):
            return Fact(1, True, nm, f"{nm} = {'block index' if p == 'get_block_idx' else 'block count'}")
        if p == "convert":
            inner = self._fact(e.inputs[0], budget)
            widen = x.type.dtype.bits >= e.inputs[0].type.dtype.bits  # type: ignore[union-attr]
            return Fact(inner.factor, inner.nonneg and widen, nm, inner.nonneg_why)
        if len(e.inputs) != 2:
            return Fact(1, False, nm, f"{nm} is not index arithmetic")
        a, b = (self._fact(i, budget) for i in e.inputs)
        sym = {"add": "+", "sub": "-", "mul": "*", "floordiv": "//", "mod": "%", "min": "min",
               "max": "max"}.get(p)
        if sym is None:
            return Fact(1, False, nm, f"{nm} is not index arithmetic")
        expr = f"{sym}({a.expr}, {b.expr})" if p in ("min", "max") else f"{a.expr} {sym} {b.expr}"
        both = f"{a.nonneg_why}; {b.nonneg_why}"
        if p == "mul":
            return Fact(a.factor * b.factor, a.nonneg and b.nonneg, expr, both)
        if p == "add":
            return Fact(math.gcd(a.factor, b.factor), a.nonneg and b.nonneg, expr, both)
        if p == "sub":
            return Fact(math.gcd(a.factor, b.factor), False, expr,
                        f"{expr} is a difference: its sign is never proven")
        if p in ("min", "max"):
            ok = (a.nonneg and b.nonneg) if p == "min" else (a.nonneg or b.nonneg)
            return Fact(math.gcd(a.factor, b.factor), ok, expr, both)
        k = e.inputs[1]
        if not (isinstance(k, Literal) and int(k.value) > 0):
            return Fact(1, False, expr, f"{expr} divides by a non-constant")
        kv = int(k.value)
        if p == "floordiv":
            factor = a.factor // kv if a.factor % kv == 0 else 1
            return Fact(factor, a.nonneg, expr, a.nonneg_why if a.nonneg else
                        f"the dividend {a.expr} is not provably non-negative ({a.nonneg_why})")
        return Fact(math.gcd(a.factor, kv), a.nonneg, expr, a.nonneg_why if a.nonneg else
                    f"the dividend {a.expr} is not provably non-negative ({a.nonneg_why})")

    def describe(self, x: Atom) -> str:
        """`n0 = nb * 256`: the binding a diagnostic or proof note shows."""
        f = self.fact(x)
        return f.expr if f.expr == self.name(x) else f"{self.name(x)} = {f.expr}"


PROVABLE_FORMS = ("constants; products `nb * 256`; sums; `pl.range`/`pl.pipeline` variables whose start "
                  "and step are multiples; pl.spmd lanes and get_block_idx(); `x % k` and `x // k` by a "
                  "positive constant; pl.min / pl.max of multiples")
