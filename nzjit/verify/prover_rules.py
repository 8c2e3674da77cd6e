"""One z3 query per rule of the prover (`nzjit.passes.proofs.RULES`).

A rule maps the facts of its premises (each a multiple of f, maybe non-negative, in [lo, hi]) to
the fact it claims of the result. For a premise instance, the query asks z3 for values at the
declared bit width that satisfy every premise, compute the result with the device's semantics
(two's complement at width W, floor `//` and `%`, NZ-19) and break the claim. `unsat` proves the
rule for that instance, for ALL values; a model is a counterexample. The instances are a fixed
grid of premise facts per width (factors 0, 1, 2, 3, 16, 48, 49, 256 and intervals from a single
value to the whole dtype, including the ones that make a product wrap); the claim is always the
one the real rule function computes from them, so a wrong rule (or a mutated one) is caught.

Values are exact integers; a premise keeps a run-time value inside its dtype's range, the binary
rules claim facts of the exact result and the `wrap` rule what survives its truncation to W bits,
so "the exact value" and "the value after the wrap" are both modelled exactly.

    from nzjit.verify.prover_rules import check_all
    failures = [c for c in check_all() if not c.proven]
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ..core import dtypes as D
from ..core.dtypes import DType
from ..passes import proofs
from ..passes.proofs import MAX_LANES, Fact
from . import require_z3

z3 = require_z3()

WIDTHS: tuple[DType, ...] = (D.INT16, D.INT32, D.UINT32, D.INDEX)
FACTORS = (0, 1, 2, 3, 16, 48, 49, 256)


@dataclass
class RuleCheck:
    """The outcome of one query: the rule, the premises, the claim and a counterexample if any."""

    rule: str
    dtype: str
    premises: tuple[Fact, ...]
    claim: Fact
    proven: bool
    counterexample: dict[str, int] | None = None

    def __str__(self) -> str:
        prem = "; ".join(_show(f) for f in self.premises)
        head = f"{self.rule} at {self.dtype}: [{prem}] => {_show(self.claim)}"
        return head + ("" if self.proven else f"  COUNTEREXAMPLE {self.counterexample}")


def _show(f: Fact) -> str:
    return f"{f.factor} | x, {'x >= 0, ' if f.nonneg else ''}x in [{f.lo}, {f.hi}]"


def dtype_range(d: DType) -> tuple[int, int]:
    """The values a `d` holds, from its width and kind: written here, not taken from the prover, so a
    query's premises never share a mistake with the rule they check."""
    if d.kind == "bool":
        return 0, 1
    if d.kind == "uint":
        return 0, (1 << d.bits) - 1
    return -(1 << (d.bits - 1)), (1 << (d.bits - 1)) - 1


# ------------------------------------------------------------------------------ encoding
# Values are z3 integers (exact, no width): a premise pins a run-time value to its dtype's range,
# so "at the declared bit width" is the premises' range plus the `wrap` rule's truncation. A
# multiple of f is written x == f * q (q a fresh integer): linear, where `x % f == 0` on
# bit-vectors makes z3 bit-blast a divider and time out.
def _holds(x: Any, f: Fact) -> Any:
    """z3: the value `x` satisfies fact `f` (the claim side: `%` by a constant)."""
    c = [x >= f.lo, x <= f.hi]
    if f.factor == 0:
        c.append(x == 0)
    elif f.factor > 1:
        c.append(x % f.factor == 0)
    if f.nonneg:
        c.append(x >= 0)
    return z3.And(*c)


def floor_div(x: Any, y: Any) -> Any:
    """Floor division (NZ-19), y != 0; z3's integer division is Euclidean (remainder >= 0)."""
    q, r = x / y, x % y
    return z3.If(z3.And(y < 0, r != 0), q - 1, q)


def _premise(name: str, dt: DType | None, f: Fact) -> tuple[Any, Any]:
    """A run-time value of `dt` satisfying `f`: (value, constraint)."""
    x = z3.Int(name)
    c = [x >= f.lo, x <= f.hi]
    if dt is not None:
        lo, hi = dtype_range(dt)
        c += [x >= lo, x <= hi]
    if f.factor == 0:
        c.append(x == 0)
    elif f.factor > 1:
        c.append(x == f.factor * z3.Int(name + "_q"))
    if f.nonneg:
        c.append(x >= 0)
    return x, z3.And(*c)


def _refute(
    rule: str,
    dt: DType,
    premises: tuple[Fact, ...],
    claim: Fact,
    result: Any,
    constraints: list[Any],
    names: list[tuple[str, Any]],
) -> RuleCheck:
    s = z3.Solver()
    s.set("timeout", 20000)
    s.add(*constraints)
    s.add(z3.Not(_holds(result, claim)))
    r = s.check()
    if r == z3.unsat:
        return RuleCheck(rule, dt.name, premises, claim, True)
    cex = None
    if r == z3.sat:
        m = s.model()
        cex = {n: m.eval(v, model_completion=True).as_long() for n, v in names}
        cex["result"] = m.eval(result, model_completion=True).as_long()
    return RuleCheck(rule, dt.name, premises, claim, False, cex)


# ------------------------------------------------------------------------------ premise grid
def premise_facts(dt: DType) -> list[Fact]:
    """Facts a run-time value of `dt` can have: every factor with intervals from one value to the
    whole dtype (those near the top make a product or a sum wrap)."""
    lo, hi = dtype_range(dt)
    spans = [
        (lo, hi),
        (0, hi),
        (0, 15),
        (8, 23),
        (-16, 64),
        (lo, -1),
        (0, 1 << (dt.bits // 2)),
        (1 << (dt.bits - 2), hi),
        (89478486, 89478486),
        (3, 3),
    ]
    out = []
    for flo, fhi in spans:
        if not (lo <= flo <= fhi <= hi):
            continue
        for factor in FACTORS:
            if factor == 0 and not flo <= 0 <= fhi:
                continue
            out.append(Fact(factor, flo >= 0, "x", "", flo, fhi))
            if flo >= 0 and factor in (1, 16):  # a conservative fact: non-negative but not known so
                out.append(Fact(factor, False, "x", "", flo, fhi))
    return out


def _pairs(dt: DType, n: int, seed: int) -> Iterator[tuple[Fact, Fact]]:
    facts = premise_facts(dt)
    rnd = random.Random(seed)
    for _ in range(n):
        yield rnd.choice(facts), rnd.choice(facts)


def _rule_seed(rule: str, dt: DType) -> int:
    return sum(map(ord, rule)) * 1000 + dt.bits


# ------------------------------------------------------------------------------ the queries
def q_constant(n: int) -> Iterator[RuleCheck]:
    """An integer constant is exactly its value."""
    for v in (0, 1, 16, 48, -16, -1, (1 << 31) - 1, -(1 << 63), (1 << 63) - 1):
        claim = proofs.rule_constant(v)
        yield _refute("constant", D.INDEX, (), claim, z3.IntVal(v), [], [])


def q_unknown(n: int) -> Iterator[RuleCheck]:
    """Anything of its dtype: the claim is the dtype's range, factor 1, sign unknown."""
    for dt in (*WIDTHS, D.INT8, D.UINT8, D.BOOL):
        x, c = _premise("x", dt, Fact(1, False, "x", "", *dtype_range(dt)))
        claim = proofs.rule_unknown(dt, "x", "")
        yield _refute("unknown", dt, (), claim, x, [c], [("x", x)])


def q_copy(n: int) -> Iterator[RuleCheck]:
    """A captured copy or a conversion keeps the value, so it keeps the fact."""
    for dt in WIDTHS:
        for f in premise_facts(dt):
            xe, c = _premise("x", dt, f)
            claim = proofs.rule_copy(f, None)
            yield _refute("copy", dt, (f,), claim, xe, [c], [("x", xe)])


def _lane_queries(
    rule: str, fn: Callable[..., Fact], value: Callable[[Any, Any], Any]
) -> Iterator[RuleCheck]:
    for dt in WIDTHS:
        # outside pl.spmd: one lane
        lane = z3.Int("lane")
        claim = fn(None, "x", dt)
        yield _refute(rule, dt, (), claim, value(lane, z3.IntVal(1)), [lane == 0], [("lane", lane)])
        for f in premise_facts(dt):
            stop, c = _premise("stop", dt, f)
            claim = fn(f, "x", dt)
            launch = [stop >= 1, stop <= MAX_LANES, lane >= 0, lane < stop]
            yield _refute(
                rule, dt, (f,), claim, value(lane, stop), [c, *launch], [("stop", stop), ("lane", lane)]
            )


def q_block_idx(n: int) -> Iterator[RuleCheck]:
    """get_block_idx() of a launch of `stop` lanes (1 <= stop <= MAX_LANES): the lane."""
    yield from _lane_queries("block_idx", proofs.rule_block_idx, lambda lane, stop: lane)


def q_block_num(n: int) -> Iterator[RuleCheck]:
    """get_block_num(): the lane count."""
    yield from _lane_queries("block_num", proofs.rule_block_num, lambda lane, stop: stop)


def q_spmd_lane(n: int) -> Iterator[RuleCheck]:
    """The variable of pl.spmd(stop): a lane index below the stop."""
    for c in _lane_queries(
        "spmd_lane",
        lambda s, nm, dt: (
            proofs.rule_spmd_lane(s, nm, dt) if s is not None else proofs.rule_block_idx(None, nm, dt)
        ),
        lambda lane, stop: lane,
    ):
        if c.premises:  # pl.spmd always has a stop
            yield c


def q_loop_var(n: int) -> Iterator[RuleCheck]:
    """`for iv in pl.range(start, stop, step)`: iv = start + i*step, i >= 0, short of stop in the
    direction of the step (Python's range; step 0 runs start only). `i*step` is modelled as m, a
    multiple of the step's factor with the step's sign: a superset of the real values (linear, so
    z3 decides it), which makes every proof over it a proof over the loop."""
    for dt in (D.INT16, D.INT32, D.INDEX):
        rnd = random.Random(_rule_seed("loop_var", dt))
        facts = premise_facts(dt)
        cases = [(rnd.choice(facts), rnd.choice(facts), rnd.choice(facts)) for _ in range(n)]
        lo, hi = dtype_range(dt)
        # the cases: start 8 step 16; a negative start; a negative symbolic step
        cases += [
            (
                Fact(8, True, "8", "", 8, 8),
                Fact(24, True, "24", "", 24, 24),
                Fact(16, True, "16", "", 16, 16),
            ),
            (
                Fact(16, False, "-16", "", -16, -16),
                Fact(64, True, "", "", 64, 64),
                Fact(16, True, "", "", 16, 16),
            ),
            (Fact(0, True, "0", "", 0, 0), Fact(64, True, "", "", 64, 64), Fact(16, False, "s", "", lo, hi)),
        ]
        for fs, fe, ft in cases:
            start, c1 = _premise("start", dt, fs)
            stop, c2 = _premise("stop", dt, fe)
            step, c3 = _premise("step", dt, ft)
            m, iv = z3.Int("m"), z3.Int("iv")
            mult = (m == 0) if ft.factor == 0 else m == ft.factor * z3.Int("m_q")
            trip = [
                iv == start + m,
                mult,
                z3.If(
                    step > 0,
                    z3.And(m >= 0, iv < stop),
                    z3.If(step < 0, z3.And(m <= 0, iv > stop), z3.And(m == 0, iv < stop)),
                ),
            ]
            claim = proofs.rule_loop_var(fs, fe, ft, "iv", dt)
            yield _refute(
                "loop_var",
                dt,
                (fs, fe, ft),
                claim,
                iv,
                [c1, c2, c3, *trip],
                [("start", start), ("stop", stop), ("step", step), ("iv", iv)],
            )


def _binary_queries(
    rule: str, op: Callable[[Any, Any], Any], n: int, extra: Sequence[tuple[Fact, Fact]] = ()
) -> Iterator[RuleCheck]:
    fn = proofs.RULES[rule]
    for dt in WIDTHS:
        pairs = list(_pairs(dt, n, _rule_seed(rule, dt))) + list(extra if dt is D.INT32 else [])
        for fa, fb in pairs:
            a, ca = _premise("a", dt, fa)
            b, cb = _premise("b", dt, fb)
            yield _refute(rule, dt, (fa, fb), fn(fa, fb), op(a, b), [ca, cb], [("a", a), ("b", b)])


_WRAPS = [(Fact(1, False, "s", "", -(1 << 31), (1 << 31) - 1), Fact(48, True, "48", "", 48, 48))]


def q_mul(n: int) -> Iterator[RuleCheck]:
    """a * b, the exact product (its wrap is the `wrap` rule's)."""
    yield from _binary_queries("mul", lambda a, b: a * b, n, _WRAPS)


def q_add(n: int) -> Iterator[RuleCheck]:
    """a + b, the exact sum."""
    yield from _binary_queries("add", lambda a, b: a + b, n)


def q_sub(n: int) -> Iterator[RuleCheck]:
    """a - b, the exact difference."""
    yield from _binary_queries("sub", lambda a, b: a - b, n)


def q_min(n: int) -> Iterator[RuleCheck]:
    """min(a, b)."""
    yield from _binary_queries("min", lambda a, b: z3.If(a < b, a, b), n)


def q_max(n: int) -> Iterator[RuleCheck]:
    """max(a, b)."""
    yield from _binary_queries("max", lambda a, b: z3.If(a > b, a, b), n)


def _by_constant(rule: str, op: Callable[[Any, Any], Any], n: int) -> Iterator[RuleCheck]:
    fn = proofs.RULES[rule]
    for dt in WIDTHS:
        facts = premise_facts(dt)
        rnd = random.Random(_rule_seed(rule, dt))
        cases = [(rnd.choice(facts), k) for k in (1, 2, 3, 7, 16, 48, 256) for _ in range(max(1, n // 7))]
        cases += [
            (Fact(49, True, "", "", 0, 49 * 15), 3),
            (Fact(16, False, "", "", *dtype_range(dt)), 3),
            (Fact(48, True, "", "", 0, dtype_range(dt)[1] // 48 * 48), 3),
        ]
        for fa, k in cases:
            a, ca = _premise("a", dt, fa)
            fk = proofs.rule_constant(k)
            yield _refute(rule, dt, (fa, fk), fn(fa, fk), op(a, z3.IntVal(k)), [ca], [("a", a)])


def q_floordiv(n: int) -> Iterator[RuleCheck]:
    """a // k by a positive constant, floor semantics (NZ-19)."""
    yield from _by_constant("floordiv", floor_div, n)


def q_mod(n: int) -> Iterator[RuleCheck]:
    """a % k by a positive constant, a floor modulo in [0, k) (NZ-19)."""
    yield from _by_constant("mod", lambda a, k: a - floor_div(a, k) * k, n)


def q_divide_by_non_constant(n: int) -> Iterator[RuleCheck]:
    """`a // b` / `a % b` by any b (the backend gives 0 for b == 0): nothing is claimed but the range."""
    for p in ("floordiv", "mod"):
        for dt in WIDTHS:
            for fa, fb in _pairs(dt, max(2, n // 4), _rule_seed(p, dt)):
                a, ca = _premise("a", dt, fa)
                b, cb = _premise("b", dt, fb)
                q = floor_div(a, b)
                val = z3.If(b == 0, 0, q if p == "floordiv" else a - q * b)
                claim = proofs.rule_divide_by_non_constant(fa, fb, p)
                yield _refute(
                    "divide_by_non_constant", dt, (fa, fb), claim, val, [ca, cb], [("a", a), ("b", b)]
                )


def q_wrap(n: int) -> Iterator[RuleCheck]:
    """An exact value satisfying f, truncated to W bits: what `wrap` claims of the run-time value."""
    for dt in (*WIDTHS, D.INT8):
        lo, hi = dtype_range(dt)
        exact = [
            Fact(f, nn, "", "", flo, fhi)
            for f in FACTORS
            for nn in (True, False)
            for flo, fhi in ((0, hi), (0, hi * 48), (lo * 2, hi * 2), (-hi * 256, 0), (hi + 1, hi * 3))
            if not (f == 0 and not flo <= 0 <= fhi) and not (nn and flo < 0)
        ]
        for f in exact:
            v, c = _premise("v", None, f)
            r = (v - lo) % (1 << dt.bits) + lo  # two's complement (or unsigned) truncation to W bits
            yield _refute("wrap", dt, (f,), proofs.rule_wrap(f, dt), r, [c], [("v", v)])


#: rule name -> its query (a generator of checks; the argument sizes the sampled premise grid)
QUERIES: dict[str, Callable[[int], Iterator[RuleCheck]]] = {
    "constant": q_constant,
    "unknown": q_unknown,
    "copy": q_copy,
    "block_idx": q_block_idx,
    "block_num": q_block_num,
    "spmd_lane": q_spmd_lane,
    "loop_var": q_loop_var,
    "mul": q_mul,
    "add": q_add,
    "sub": q_sub,
    "min": q_min,
    "max": q_max,
    "floordiv": q_floordiv,
    "mod": q_mod,
    "divide_by_non_constant": q_divide_by_non_constant,
    "wrap": q_wrap,
}


def check_rule(rule: str, n: int = 24) -> list[RuleCheck]:
    """Every query of one rule (`n` sampled premise instances per width, plus the fixed ones)."""
    return list(QUERIES[rule](n))


def check_all(n: int = 24) -> list[RuleCheck]:
    """Every query of every rule; a rule of proofs.RULES without a query raises KeyError."""
    return [c for rule in proofs.RULES for c in QUERIES[rule](n)]
