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

Each row is one function of `RULES` (below), a pure map from the facts of the premises to the fact
claimed; nzjit/verify/prover_rules.py asks z3, for each, that the claim holds for every value at
the declared width that satisfies the premises (tests/verify/test_prover_rules_smt.py).

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
from collections.abc import Callable
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
            f = rule_wrap(f, dt)
        self._memo[x] = f
        return f

    def _compute(self, x: Atom, budget: list[int]) -> Fact:
        """The fact of `x` before the wrap at its width: one rule of RULES per kind of binding."""
        dt = _dtype(x)
        if isinstance(x, Literal):
            return rule_constant(int(x.value))
        nm = x.hint or "%tmp"
        if x in self.aliases:  # a captured value: the enclosing binding
            return rule_copy(self._fact(self.aliases[x], budget), x.hint)
        if x in self.carries:
            return rule_unknown(
                dt, nm, f"{nm} is loop-carried: its value changes every iteration and is never resolved"
            )
        if x in self.loop_vars:
            start, stop, step, kind = self.loop_vars[x]
            if kind == "spmd":
                return rule_spmd_lane(self._fact(stop, budget), x.hint or "%iv", dt)
            fs, fe, ft = self._fact(start, budget), self._fact(stop, budget), self._fact(step, budget)
            return rule_loop_var(fs, fe, ft, x.hint or "%iv", dt)
        e = self.defs.get(x)
        if e is None:
            return rule_unknown(dt, nm, f"{nm} is a kernel argument: nothing is known about its value")
        p = e.primitive.name
        if p in ("get_block_idx", "get_block_num"):
            lane_stop = self.lanes.get(x)
            s = None if lane_stop is None else self._fact(lane_stop, budget)  # outside pl.spmd: one lane
            return (rule_block_idx if p == "get_block_idx" else rule_block_num)(s, nm, dt)
        if p == "for":
            return rule_unknown(dt, nm, f"{nm} is the result of a loop (loop-carried): never resolved")
        if p == "convert":
            return rule_copy(self._fact(e.inputs[0], budget), x.hint)
        if p == "tensor.read":  # issue 23: a scalar from GM; only a clamp built around it bounds it
            return rule_unknown(
                dt,
                nm,
                f"{nm} is read from GM (pl.read): its value is the call's, unknown when "
                "compiled; clamp it: pl.max(pl.min(v, hi), 0)",
            )
        if p not in _SYM or len(e.inputs) != 2:
            return rule_unknown(dt, nm, f"{nm} is not index arithmetic ({p})")
        a = self._fact(e.inputs[0], budget)  # no generator: two frames per level of recursion
        b = self._fact(e.inputs[1], budget)
        f = _binary(p, a, b, e.inputs[1])
        if x.hint:  # a named binding shows as its name inside larger expressions
            f = Fact(f.factor, f.nonneg, x.hint, f.nonneg_why, f.lo, f.hi)
        return f

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
            lane_stop = self.lanes[x]
            n = self.root(lane_stop) if lane_stop is not None else Literal(1, ScalarType(INDEX))
            if not isinstance(n, Literal):
                return False
            lane_eqn = self.defs[x]
            out[x] = (
                range(int(n.value))
                if lane_eqn.primitive.name == "get_block_idx"
                else range(int(n.value), int(n.value) + 1)
            )
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
        return x.type.dtype.wrap(_EVAL[e.primitive.name](*args))

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


# ------------------------------------------------------------------------------ the rules
# Each rule is a pure function from the facts of its premises to the fact it claims; RULES names
# them all, and nzjit/verify/prover_rules.py has one z3 query per name (a test fails when a rule
# has none). A claim is about the exact value of the binding; `wrap` then claims what is left of
# it after the wrap at the declared width, which is what the device computes.
_FULL_LO, _FULL_HI = -(1 << 63), 1 << 63  # no dtype known: anything a 64-bit operation can give


def _range_of(dt: DType | None) -> tuple[int, int]:
    return dtype_range(dt) if dt is not None else (_FULL_LO, _FULL_HI)


def rule_constant(v: int) -> Fact:
    """An integer constant: a multiple of |v|, non-negative when v >= 0, the interval [v, v]."""
    return Fact(abs(v), v >= 0, str(v), f"{v} >= 0" if v >= 0 else f"{v} < 0", v, v, _ATOM if v >= 0 else 0)


def rule_unknown(dt: DType | None, name: str, why: str) -> Fact:
    """A kernel argument, loop-carried value, loop result or non-index value: anything of its dtype."""
    lo, hi = _range_of(dt)
    return Fact(1, False, name, why, lo, hi)


def rule_copy(inner: Fact, name: str | None) -> Fact:
    """A captured copy or a conversion: the same value (a narrowing conversion is the `wrap` rule's)."""
    return Fact(
        inner.factor,
        inner.nonneg,
        name or inner.expr,
        inner.nonneg_why,
        inner.lo,
        inner.hi,
        _ATOM if name else inner.prec,
        "" if name else inner.op,
    )


def _lanes(stop: Fact | None) -> int:
    """The most lanes a launch of `stop` lanes has: a launch's block dim is a uint32 (MAX_LANES)."""
    return 1 if stop is None else max(0, min(stop.hi, MAX_LANES))


def rule_block_idx(stop: Fact | None, name: str, dt: DType | None) -> Fact:
    """get_block_idx() of a launch of `stop` lanes (None: outside pl.spmd, one lane): in [0, lanes - 1]."""
    return Fact(1, True, name, f"{name} = block index", 0, max(0, _lanes(stop) - 1))


def rule_block_num(stop: Fact | None, name: str, dt: DType | None) -> Fact:
    """get_block_num(): the lane count itself, in [1, lanes] (a launch has at least one lane)."""
    return Fact(1, True, name, f"{name} = block count", 1, max(1, _lanes(stop)))


def rule_spmd_lane(stop: Fact, name: str, dt: DType | None) -> Fact:
    """The variable of `pl.spmd(stop)`: the lane's block index."""
    return Fact(1, True, name, f"{name} = block index", 0, max(0, _lanes(stop) - 1))


def rule_loop_var(fs: Fact, fe: Fact, ft: Fact, name: str, dt: DType | None) -> Fact:
    """`start + i*step` for i >= 0 while short of stop (no wrap: the loop stops before stop): a multiple
    of gcd(start, step), non-negative when start and step are, between start and stop."""
    lo, hi = min(fs.lo, fe.lo + 1), max(fs.hi, fe.hi - 1)
    if ft.lo >= 1:  # counting up: from start to stop - 1
        lo, hi = fs.lo, fe.hi - 1
    ok = fs.nonneg and ft.nonneg
    why = (
        f"{name} = loop from {fs.expr} step {ft.expr}"
        if ok
        else f"loop variable {name} starts at {fs.expr} ({fs.nonneg_why}) with step {ft.expr}"
        + ("" if ft.nonneg else f" ({ft.nonneg_why})")
    )
    return Fact(math.gcd(fs.factor, ft.factor), ok, name, why, lo, max(lo, hi))


def rule_wrap(f: Fact, dt: DType) -> Fact:
    """Clamp a fact to what a value of `dt` can be: an exact interval outside the dtype's range
    means the arithmetic may have wrapped (NZ-17): full range, factor gcd(f, 2^W), sign unknown."""
    lo, hi = dtype_range(dt)
    if lo <= f.lo and f.hi <= hi:
        return f
    factor = math.gcd(f.factor, 1 << dt.bits) if f.factor else 0
    why = (
        f.nonneg_why
        if not f.nonneg
        else (
            f"{f.expr} may wrap at its {dt.bits}-bit width (its exact range leaves [{lo}, {hi}]), so its "
            "sign is unknown"
        )
    )
    return Fact(factor, False, f.expr, why, lo, hi, f.prec, f.op)


def _operand(f: Fact, prec: int, op: str, right: bool) -> str:
    if f.prec > prec or (f.prec == prec and (not right or (f.op == op and op in ("add", "mul")))):
        return f.expr
    return f"({f.expr})"


def _expr(p: str, a: Fact, b: Fact) -> tuple[str, int]:
    sym = _SYM[p]
    if p in ("min", "max"):
        return f"{sym}({a.expr}, {b.expr})", _ATOM
    prec = _PREC[p]
    return f"{_operand(a, prec, p, False)} {sym} {_operand(b, prec, p, True)}", prec


def _claim(p: str, a: Fact, b: Fact, factor: int, nonneg: bool, why: str, lo: int, hi: int) -> Fact:
    expr, prec = _expr(p, a, b)
    return Fact(factor, nonneg and lo >= 0, expr, why, lo, hi, prec, p)


def _both(a: Fact, b: Fact) -> str:
    return f"{a.nonneg_why}; {b.nonneg_why}"


def rule_mul(a: Fact, b: Fact) -> Fact:
    """a * b: a multiple of fa * fb, non-negative when both are; the interval of the four corners."""
    ends = [a.lo * b.lo, a.lo * b.hi, a.hi * b.lo, a.hi * b.hi]
    return _claim("mul", a, b, a.factor * b.factor, a.nonneg and b.nonneg, _both(a, b), min(ends), max(ends))


def rule_add(a: Fact, b: Fact) -> Fact:
    """a + b: a multiple of gcd(fa, fb), non-negative when both are."""
    return _claim(
        "add",
        a,
        b,
        math.gcd(a.factor, b.factor),
        a.nonneg and b.nonneg,
        _both(a, b),
        a.lo + b.lo,
        a.hi + b.hi,
    )


def rule_sub(a: Fact, b: Fact) -> Fact:
    """a - b: a multiple of gcd(fa, fb); its sign is never claimed (NZ-16)."""
    expr, _ = _expr("sub", a, b)
    return _claim(
        "sub",
        a,
        b,
        math.gcd(a.factor, b.factor),
        False,
        f"{expr} is a difference: its sign is never proven",
        a.lo - b.hi,
        a.hi - b.lo,
    )


def rule_min(a: Fact, b: Fact) -> Fact:
    """min(a, b): a multiple of gcd(fa, fb) (it is one of them), non-negative when both are."""
    return _claim(
        "min",
        a,
        b,
        math.gcd(a.factor, b.factor),
        a.nonneg and b.nonneg,
        _both(a, b),
        min(a.lo, b.lo),
        min(a.hi, b.hi),
    )


def rule_max(a: Fact, b: Fact) -> Fact:
    """max(a, b): a multiple of gcd(fa, fb), non-negative when either is."""
    ok = a.nonneg or b.nonneg
    why = a.nonneg_why if a.nonneg else b.nonneg_why if b.nonneg else _both(a, b)
    return _claim("max", a, b, math.gcd(a.factor, b.factor), ok, why, max(a.lo, b.lo), max(a.hi, b.hi))


def _dividend_why(a: Fact) -> str:
    return (
        a.nonneg_why if a.nonneg else f"the dividend {a.expr} is not provably non-negative ({a.nonneg_why})"
    )


def rule_floordiv(a: Fact, k: Fact) -> Fact:
    """a // k, k a positive constant (floor, NZ-19): a multiple of fa / k only when k divides fa."""
    kv = k.lo
    factor = a.factor // kv if a.factor % kv == 0 else 1
    return _claim("floordiv", a, k, factor, a.nonneg, _dividend_why(a), a.lo // kv, a.hi // kv)


def rule_mod(a: Fact, k: Fact) -> Fact:
    """a % k, k a positive constant (floor modulo: in [0, k)): a multiple of gcd(fa, k)."""
    kv = k.lo
    lo, hi = (a.lo, a.hi) if 0 <= a.lo and a.hi < kv else (0, kv - 1)
    return _claim("mod", a, k, math.gcd(a.factor, kv), a.nonneg, _dividend_why(a), lo, hi)


def rule_divide_by_non_constant(a: Fact, b: Fact, p: str) -> Fact:
    """a // b or a % b with b not a positive constant: nothing is claimed."""
    expr, prec = _expr(p, a, b)
    return Fact(
        1, False, expr, f"{expr} divides by {b.expr}, not a positive constant", _FULL_LO, _FULL_HI, prec, p
    )


_BINARY = {"mul": rule_mul, "add": rule_add, "sub": rule_sub, "min": rule_min, "max": rule_max}


def _binary(p: str, a: Fact, b: Fact, rhs: Atom) -> Fact:
    """The fact of `a <p> b` from the facts of its operands (the table in the module docstring)."""
    if p in _BINARY:
        return _BINARY[p](a, b)
    if not (isinstance(rhs, Literal) and int(rhs.value) > 0):
        return rule_divide_by_non_constant(a, b, p)
    return (rule_floordiv if p == "floordiv" else rule_mod)(a, b)


#: Every rule the prover applies, by name. Each has a z3 query (nzjit/verify/prover_rules.py,
#: tests/verify/test_prover_rules_smt.py) that the fact it claims holds for every value at the
#: declared width satisfying its premises.
RULES: dict[str, Callable[..., Fact]] = {
    "constant": rule_constant,
    "unknown": rule_unknown,
    "copy": rule_copy,
    "block_idx": rule_block_idx,
    "block_num": rule_block_num,
    "spmd_lane": rule_spmd_lane,
    "loop_var": rule_loop_var,
    "mul": rule_mul,
    "add": rule_add,
    "sub": rule_sub,
    "min": rule_min,
    "max": rule_max,
    "floordiv": rule_floordiv,
    "mod": rule_mod,
    "divide_by_non_constant": rule_divide_by_non_constant,
    "wrap": rule_wrap,
}


_EVAL: dict[str, Callable[..., int]] = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "floordiv": lambda a, b: a // b if b else 0,
    "mod": lambda a, b: a % b if b else 0,
    "min": min,
    "max": max,
    "convert": lambda a: a,
}

PROVABLE_FORMS = (
    "constants; products `nb * 256`; sums; `pl.range`/`pl.pipeline` variables whose start "
    "and step are multiples; pl.spmd lanes and get_block_idx(); `x % k` and `x // k` by a "
    "positive constant; pl.min / pl.max of multiples"
)
