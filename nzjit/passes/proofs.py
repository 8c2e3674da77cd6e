"""Alignment and sign proofs for symbolic NZ offsets (NZ-16..18), as a tiny symbolic module.

Every index expression gets three facts, tinygrad-style: a known constant factor (`factor`, 0 for
the value zero: a multiple of everything), whether it is provably non-negative, and the interval
`[lo, hi]` its *run-time* value lies in (after wrapping at its declared width). They are computed
by walking back through the bindings that one read-only scan of the graph collects:

| binding                                | factor                      | non-negative when            |
|----------------------------------------|-----------------------------|------------------------------|
| integer constant c                     | |c|                         | c >= 0                       |
| a * b                                  | fa * fb                     | both                         |
| a + b                                  | gcd(fa, fb)                 | both                         |
| a - b                                  | gcd(fa, fb)                 | never (a difference)         |
| min(a, b) / max(a, b)                  | gcd(fa, fb)                 | min: both; max: either       |
| x // k, k > 0 constant                 | fx / k when k | fx, else 1  | x >= 0                       |
| x % k, k > 0 constant                  | gcd(fx, k)                  | x >= 0 (conservative, NZ-16) |
| loop variable (start, step)            | gcd(fstart, fstep)          | start and step               |
| get_block_idx / get_block_num          | 1                           | always                       |
| loop-carried value, kernel scalar      | 1                           | never (not resolved)         |

Wrap (NZ-17). Integer arithmetic wraps at its declared width W. Divisibility survives a wrap
because the divisor asked for is a power of two dividing 2^W (asserted: InternalError otherwise),
so a possibly-wrapped value keeps the factor `gcd(f, 2^W)`. Sign does not survive a wrap
(`(1 << 23) * 256` is negative in INT32), which the table above cannot see; so the interval is
tracked too, and a value whose exact interval leaves its dtype's range is treated as wrapped: full
range, not provably non-negative. This is stricter than the table only where overflow is
possible; the intervals come from the same bindings (a loop variable lies in
`[start, stop - 1]`, a lane index in `[0, lanes - 1]`, a kernel scalar anywhere in its dtype).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from ..core.dtypes import INDEX, DType
from ..core.ir import Atom, Eqn, Graph, Literal, Var
from ..core.types import ScalarType
from ..errors import InternalError

BUDGET = 256  # nodes per query: keeps a proof over a pathological expression bounded
MAX_LANES = (1 << 32) - 1  # a launch's block dim is a uint32: lane indices lie below it
_SYM = {"add": "+", "sub": "-", "mul": "*", "floordiv": "//", "mod": "%", "min": "min", "max": "max"}
_PREC = {"add": 1, "sub": 1, "mul": 2, "floordiv": 2, "mod": 2}
_ATOM = 3


@dataclass(frozen=True)
class Fact:
    """What is proven of an index value: a known factor, non-negativity (and why), its run-time interval and
    its text."""

    factor: int  # the value is a multiple of this (0: the value is 0)
    nonneg: bool
    expr: str  # the expression as an operand: a name, a constant, or the unnamed expansion
    nonneg_why: str  # the leaves that make it non-negative (or why not)
    lo: int = -(1 << 63)  # the run-time value lies in [lo, hi]
    hi: int = (1 << 63) - 1
    prec: int = _ATOM  # for parenthesising `expr` as an operand
    op: str = ""
    exhausted: bool = False  # the proof budget ran out: nothing is known


class _Budget(Exception):
    pass


def dtype_range(d: DType) -> tuple[int, int]:
    """The values an integer of dtype `d` can hold."""
    if d.kind == "bool":
        return 0, 1
    if d.kind == "uint":
        return 0, (1 << d.bits) - 1
    return -(1 << (d.bits - 1)), (1 << (d.bits - 1)) - 1


def _dtype(x: Atom) -> DType | None:
    d = getattr(x.type, "dtype", None)
    return d if isinstance(d, DType) and (d.is_int or d.kind == "bool") else None


class Prover:
    """Answers `is x a multiple of d` and `is x >= 0` from the bindings of one graph."""

    def __init__(self, graph: Graph) -> None:
        self.defs: dict[Var, Eqn] = {}
        self.loop_vars: dict[Var, tuple[Atom, Atom, Atom, str]] = {}  # iv -> start, stop, step, kind
        self.aliases: dict[Var, Atom] = {}
        self.carries: set[Var] = set()
        self.lanes: dict[Var, Atom | None] = {}  # get_block_idx/num -> stop of the enclosing pl.spmd
        self._scan(graph, None)
        self._memo: dict[Atom, Fact] = {}

    def _scan(self, g: Graph, spmd_stop: Atom | None) -> None:
        for e in g.eqns:
            for v in e.outputs:
                self.defs[v] = e
            if e.primitive.name in ("get_block_idx", "get_block_num"):
                self.lanes[e.outputs[0]] = spmd_stop
            body = e.params.get("body")
            if isinstance(body, Graph):
                nb, nc, nk = e.params["arity"]
                kind = e.params.get("kind")  # None: a staged `if` arm (cond), no trip bounds
                if kind is not None:
                    start, stop, step = e.inputs[:3]
                    self.loop_vars[body.params[0]] = (start, stop, step, kind)
                for p, a in zip(body.params[1 : 1 + nc], e.inputs[nb : nb + nc]):
                    self.aliases[p] = a
                self.carries.update(body.params[1 + nc :])
                self._scan(body, e.inputs[1] if kind == "spmd" else spmd_stop)

    # ------------------------------------------------------------------------------ queries
    def multiple(self, x: Atom, d: int) -> tuple[bool, Fact]:
        """Is `x` (its wrapped run-time value) a multiple of `d`? `d` must be a power of two that
        divides 2^W, W the width of `x` (NZ-17): then a wrapped multiple stays a multiple."""
        if d <= 0 or d & (d - 1):
            raise InternalError(f"NZ-17: alignment divisor {d} must be a power of two")
        dt = _dtype(x)
        width = dt.bits if dt is not None else 64
        if d > 1 << width:
            raise InternalError(f"NZ-17: divisor {d} does not divide 2^{width}")
        f = self.fact(x)
        return (f.factor % d == 0), f

    def nonneg(self, x: Atom) -> tuple[bool, Fact]:
        """Is `x` (its wrapped run-time value) provably non-negative? With the fact (NZ-17, NZ-18)."""
        f = self.fact(x)
        return f.nonneg, f

    def fact(self, x: Atom) -> Fact:
        """The facts of `x`; when the proof budget runs out, nothing is known (factor 1, not non-negative)."""
        try:
            return self._fact(x, [BUDGET])
        except _Budget:
            nm = self.name(x)
            return Fact(1, False, nm, f"the proof budget ({BUDGET} nodes) ran out on {nm}", exhausted=True)

    # ------------------------------------------------------------------------------ the walk
    def name(self, x: Atom) -> str:
        """How `x` is named in messages: its constant, kernel name or expanded expression."""
        if isinstance(x, Literal):
            return str(x.value)
        if x.hint:
            return x.hint
        f = self._memo.get(x)
        return f.expr if f is not None else "an index expression"

    def _fact(self, x: Atom, budget: list[int]) -> Fact:
        if x in self._memo:
            return self._memo[x]
        budget[0] -= 1
        if budget[0] < 0:
            raise _Budget
        f = self._compute(x, budget)
        dt = _dtype(x)
        if dt is not None:
            f = _wrapped(f, dt)
        self._memo[x] = f
        return f

    def _leaf(self, x: Var, factor: int, nonneg: bool, why: str, lo: int | None = None,
              hi: int | None = None) -> Fact:
        dt = _dtype(x)
        dlo, dhi = dtype_range(dt) if dt is not None else (-(1 << 63), (1 << 63) - 1)
        return Fact(factor, nonneg, x.hint or "%tmp", why, dlo if lo is None else lo, dhi if hi is None else hi)

    def _compute(self, x: Atom, budget: list[int]) -> Fact:
        if isinstance(x, Literal):
            v = int(x.value)
            return Fact(abs(v), v >= 0, str(v), f"{v} >= 0" if v >= 0 else f"{v} < 0", v, v,
                        _ATOM if v >= 0 else 0)
        nm = x.hint or "%tmp"
        if x in self.aliases:  # a captured value: the enclosing binding
            inner = self._fact(self.aliases[x], budget)
            return Fact(inner.factor, inner.nonneg, x.hint or inner.expr, inner.nonneg_why, inner.lo, inner.hi,
                        _ATOM if x.hint else inner.prec, "" if x.hint else inner.op)
        if x in self.carries:
            return self._leaf(x, 1, False, f"{nm} is loop-carried: its value changes every iteration and "
                              "is never resolved")
        if x in self.loop_vars:
            return self._loop_var(x, budget)
        e = self.defs.get(x)
        if e is None:
            return self._leaf(x, 1, False, f"{nm} is a kernel argument: nothing is known about its value")
        p = e.primitive.name
        if p in ("get_block_idx", "get_block_num"):
            lo, hi = self._lane_range(x, budget)
            what = "block index" if p == "get_block_idx" else "block count"
            if p == "get_block_num":
                lo, hi = max(lo + 1, 0), hi + 1
            return self._leaf(x, 1, True, f"{nm} = {what}", lo, hi)
        if p == "for":
            return self._leaf(x, 1, False, f"{nm} is the result of a loop (loop-carried): never resolved")
        if p == "convert":
            inner = self._fact(e.inputs[0], budget)
            return Fact(inner.factor, inner.nonneg, x.hint or inner.expr, inner.nonneg_why, inner.lo, inner.hi,
                        _ATOM if x.hint else inner.prec, "" if x.hint else inner.op)
        if p not in _SYM or len(e.inputs) != 2:
            return self._leaf(x, 1, False, f"{nm} is not index arithmetic ({p})")
        a = self._fact(e.inputs[0], budget)  # no generator: two frames per level of recursion
        b = self._fact(e.inputs[1], budget)
        f = _binary(p, a, b, e.inputs[1])
        if x.hint:  # a named binding shows as its name inside larger expressions
            f = Fact(f.factor, f.nonneg, x.hint, f.nonneg_why, f.lo, f.hi)
        return f

    def _lane_range(self, x: Var, budget: list[int]) -> tuple[int, int]:
        stop = self.lanes.get(x)
        if stop is None:  # outside pl.spmd the kernel is one lane: index 0
            return 0, 0
        s = self._fact(stop, budget)
        return 0, max(0, min(s.hi, MAX_LANES) - 1)

    def _loop_var(self, x: Var, budget: list[int]) -> Fact:
        start, stop, step, kind = self.loop_vars[x]
        nm = x.hint or "%iv"
        fs, fe, ft = self._fact(start, budget), self._fact(stop, budget), self._fact(step, budget)
        if kind == "spmd":
            return self._leaf(x, 1, True, f"{nm} = block index", 0, max(0, min(fe.hi, MAX_LANES) - 1))
        # iv = start + i*step, no wrap (the loop stops before stop): between start and stop - 1
        lo, hi = min(fs.lo, fe.lo + 1), max(fs.hi, fe.hi - 1)
        if ft.lo >= 1:
            lo, hi = fs.lo, fe.hi - 1
        ok = fs.nonneg and ft.nonneg
        why = (f"{nm} = loop from {fs.expr} step {ft.expr}" if ok else
               f"loop variable {nm} starts at {fs.expr} ({fs.nonneg_why}) with step {ft.expr}"
               + ("" if ft.nonneg else f" ({ft.nonneg_why})"))
        return self._leaf(x, math.gcd(fs.factor, ft.factor), ok, why, lo, max(lo, hi))

    # ------------------------------------------------------------------------------ diagnostics
    def root(self, x: Atom) -> Atom:
        """The value a captured loop-body input stands for (closure conversion copies it)."""
        while isinstance(x, Var) and x in self.aliases:
            x = self.aliases[x]
        return x

    def binding(self, x: Atom) -> str | None:
        """The binding that defines `x`, as the kernel wrote it: `n0 = nb * 256`,
        `k0 in pl.pipeline(512, 4096, 512)`; None for constants and kernel arguments."""
        x = self.root(x)
        if not isinstance(x, Var):
            return None
        nm = x.hint or self.fact(x).expr
        if x in self.loop_vars:
            start, stop, step, kind = self.loop_vars[x]
            s = [self.fact(a).expr for a in (start, stop, step)]
            args = s[1] if kind == "spmd" else ", ".join(s)
            return f"{nm} in pl.{kind}({args})"
        e = self.defs.get(x)
        if e is None or x in self.carries:
            return None
        p = e.primitive.name
        if p in ("get_block_idx", "get_block_num"):
            return f"{nm} = pl.{p}()"
        if p in _SYM and len(e.inputs) == 2:
            a, b = (self.fact(i) for i in e.inputs)
            rhs = _binary(p, a, b, e.inputs[1]).expr
            return f"{nm} = {rhs}" if x.hint else rhs
        return None

    def exact_max(self, x: Atom, limit: int = 1 << 16) -> int | None:
        """The largest value `x` takes, by enumerating the loop variables and lanes it depends on
        (each with constant bounds, at most `limit` combinations); None when that is not possible.
        Interval bounds over-approximate (`(lane // 2) * 128 + (lane % 2) * 64` for lane < 3
        reaches 128, not 192), so a refusal for an overhanging window asks for the exact value."""
        leaves: dict[Var, range] = {}
        if not self._leaves(x, leaves, [BUDGET]):
            return None
        combos = 1
        for r in leaves.values():
            combos *= max(1, len(r))
        if combos > limit or any(len(r) == 0 for r in leaves.values()):
            return None
        order = list(leaves)
        best: int | None = None
        for values in itertools.product(*(leaves[v] for v in order)):
            env = dict(zip(order, values))
            val = self._eval(x, env)
            best = val if best is None or val > best else best
        return best

    def _leaves(self, x: Atom, out: dict[Var, range], budget: list[int]) -> bool:
        budget[0] -= 1
        if budget[0] < 0:
            return False
        x = self.root(x)
        if isinstance(x, Literal):
            return True
        if x in self.loop_vars:
            start, stop, step, kind = self.loop_vars[x]
            bounds = [self.root(b) for b in (start, stop, step)]
            if not all(isinstance(b, Literal) for b in bounds):
                return False
            lo, hi, st = (int(b.value) for b in bounds)  # type: ignore[union-attr]
            out[x] = range(lo, hi, st) if st > 0 else range(0)
            return True
        if x in self.lanes:
            stop = self.lanes[x]
            stop = self.root(stop) if stop is not None else Literal(1, ScalarType(INDEX))
            if not isinstance(stop, Literal):
                return False
            e = self.defs[x]
            out[x] = range(int(stop.value)) if e.primitive.name == "get_block_idx" else range(int(stop.value), int(stop.value) + 1)
            return True
        e = self.defs.get(x)
        if e is None or e.primitive.name not in _EVAL:
            return False
        return all(self._leaves(a, out, budget) for a in e.inputs)

    def _eval(self, x: Atom, env: dict[Var, int]) -> int:
        x = self.root(x)
        if isinstance(x, Literal):
            return int(x.value)
        if x in env:
            return env[x]
        e = self.defs[x]
        args = [self._eval(a, env) for a in e.inputs]
        return x.type.dtype.wrap(_EVAL[e.primitive.name](*args))  # type: ignore[union-attr]

    def describe(self, x: Atom) -> str:
        """`n0 = nb * 256, nb in pl.spmd(4)`: the bindings a diagnostic or proof note shows
        (the offset's own binding, then those of the names it uses)."""
        if isinstance(x, Literal):
            return str(x.value)
        out: list[str] = []
        seen: set[Var] = set()

        def visit(v: Atom, depth: int) -> None:
            v = self.root(v)  # a captured copy of a value: show the original once
            if not isinstance(v, Var) or v in seen or len(out) >= 6 or depth > 8:
                return
            seen.add(v)
            b = self.binding(v)
            if b is not None and (v.hint or depth == 0):
                out.append(b)
            if v in self.loop_vars:
                start, _stop, step, _kind = self.loop_vars[v]
                visit(start, depth + 1)
                visit(step, depth + 1)
            e = self.defs.get(v)
            if e is not None and e.primitive.name in _SYM:
                for a in e.inputs:
                    visit(a, depth + 1)

        visit(x, 0)
        return ", ".join(out) if out else self.fact(x).expr


def _wrapped(f: Fact, dt: DType) -> Fact:
    """Clamp a fact to what a value of `dt` can be: an exact interval outside the dtype's range
    means the arithmetic may have wrapped (NZ-17): full range, factor gcd(f, 2^W), sign unknown."""
    lo, hi = dtype_range(dt)
    if lo <= f.lo and f.hi <= hi:
        return f
    factor = math.gcd(f.factor, 1 << dt.bits) if f.factor else 0
    why = f.nonneg_why if not f.nonneg else (
        f"{f.expr} may wrap at its {dt.bits}-bit width (its exact range leaves [{lo}, {hi}]), so its "
        "sign is unknown")
    return Fact(factor, False, f.expr, why, lo, hi, f.prec, f.op)


def _operand(f: Fact, prec: int, op: str, right: bool) -> str:
    if f.prec > prec or (f.prec == prec and (not right or (f.op == op and op in ("add", "mul")))):
        return f.expr
    return f"({f.expr})"


def _binary(p: str, a: Fact, b: Fact, rhs: Atom) -> Fact:
    """The fact of `a <p> b` from the facts of its operands (the table in the module docstring)."""
    sym = _SYM[p]
    if p in ("min", "max"):
        expr, prec = f"{sym}({a.expr}, {b.expr})", _ATOM
    else:
        prec = _PREC[p]
        expr = f"{_operand(a, prec, p, False)} {sym} {_operand(b, prec, p, True)}"
    both = f"{a.nonneg_why}; {b.nonneg_why}"

    def fact(factor: int, nonneg: bool, why: str, lo: int, hi: int) -> Fact:
        return Fact(factor, nonneg and lo >= 0, expr, why, lo, hi, prec, p)

    if p == "mul":
        ends = [a.lo * b.lo, a.lo * b.hi, a.hi * b.lo, a.hi * b.hi]
        return fact(a.factor * b.factor, a.nonneg and b.nonneg, both, min(ends), max(ends))
    if p == "add":
        return fact(math.gcd(a.factor, b.factor), a.nonneg and b.nonneg, both, a.lo + b.lo, a.hi + b.hi)
    if p == "sub":
        return fact(math.gcd(a.factor, b.factor), False, f"{expr} is a difference: its sign is never proven",
                    a.lo - b.hi, a.hi - b.lo)
    if p == "min":
        return fact(math.gcd(a.factor, b.factor), a.nonneg and b.nonneg, both, min(a.lo, b.lo), min(a.hi, b.hi))
    if p == "max":
        ok = a.nonneg or b.nonneg
        why = a.nonneg_why if a.nonneg else b.nonneg_why if b.nonneg else both
        return fact(math.gcd(a.factor, b.factor), ok, why, max(a.lo, b.lo), max(a.hi, b.hi))
    if not (isinstance(rhs, Literal) and int(rhs.value) > 0):
        return Fact(1, False, expr, f"{expr} divides by {b.expr}, not a positive constant", -(1 << 63),
                    (1 << 63) - 1, prec, p)
    k = int(rhs.value)
    why = a.nonneg_why if a.nonneg else f"the dividend {a.expr} is not provably non-negative ({a.nonneg_why})"
    if p == "floordiv":  # floor division (NZ-19)
        factor = a.factor // k if a.factor % k == 0 else 1
        return fact(factor, a.nonneg, why, a.lo // k, a.hi // k)
    lo, hi = (a.lo, a.hi) if 0 <= a.lo and a.hi < k else (0, k - 1)  # floor modulo: in [0, k)
    return fact(math.gcd(a.factor, k), a.nonneg, why, lo, hi)


_EVAL = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
         "floordiv": lambda a, b: a // b if b else 0, "mod": lambda a, b: a % b if b else 0,
         "min": min, "max": max, "convert": lambda a: a}

PROVABLE_FORMS = ("constants; products `nb * 256`; sums; `pl.range`/`pl.pipeline` variables whose start "
                  "and step are multiples; pl.spmd lanes and get_block_idx(); `x % k` and `x // k` by a "
                  "positive constant; pl.min / pl.max of multiples")
