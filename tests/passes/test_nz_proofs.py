"""Symbolic trailing offsets (issue 4, NZ-16..19): what the prover accepts (with the exact IR it
leaves), what it refuses (message and kernel line), and a property test of its soundness.

The numbers of the accepted kernels are checked on real NZ bytes in
tests/e2e/test_nz_symbolic_e2e.py. No `from __future__ import annotations`: kernel annotations
use closure values.
"""

import inspect
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import nzjit
from nzjit import pl
from nzjit import prims as P
from nzjit.core import dtypes as D
from nzjit.core.ir import Eqn, Graph, Literal, Var
from nzjit.core.types import ScalarType
from nzjit.errors import InternalError
from nzjit.passes import proofs
from nzjit.passes.proofs import Prover


def _line(kernel, text):
    lines, start = inspect.getsourcelines(kernel.__wrapped__)
    return start + next(i for i, s in enumerate(lines) if text in s)


def _refused(kernel, text, *phrases, rule=None):
    with pytest.raises(nzjit.CompileError) as ei:
        kernel.lower()
    msg = str(ei.value)
    where = f"{kernel.__wrapped__.__code__.co_filename}:{_line(kernel, text)}: "
    assert msg.startswith(where), (msg, where)
    for p in phrases:
        assert p in msg, (p, msg)
    if rule is not None:
        assert ei.value.rule == rule, msg
    assert ei.value.help
    return msg


def _blocked_loads(g):
    return [e for e in g.walk() if e.primitive.name == "tile.load" and e.params.get("blocked")]


def _defining(g, v):
    return next(e for e in g.walk() if v in e.outputs)


def _lit(v, dtype=D.INDEX):
    return Literal(v, ScalarType(dtype))


N, K = 1024, 1024


# --------------------------------------------------------------------------- accepted: IR facts
def test_spmd_product_is_divided_whole():  # NZ-16 assignment row, NZ-17
    @pl.kernel
    def k(w: pl.Tensor[[N, K], pl.INT8, pl.NZ]):
        for nb in pl.spmd(N // 256):
            n0 = nb * 256
            pl.load(w, [n0, 0], [256, 512], target_memory=pl.Mem.Mat)

    g = k.lower().ir(after="BlockNzTensorViews")
    (ld,) = _blocked_loads(g)
    row = ld.operands("offsets")[2]
    div = _defining(g, row)
    assert div.primitive.name == "floordiv" and div.inputs[1] == _lit(16)
    n0 = div.inputs[0]
    assert n0.hint == "n0"
    mul = _defining(g, n0)  # `n0 = nb * 256` stays in the IR: never re-associated to nb * 16
    assert mul.primitive.name == "mul" and mul.inputs[0].hint == "nb" and mul.inputs[1] == _lit(256)
    assert not any(e.primitive.name == "mul" and _lit(16) in e.inputs for e in g.walk())
    assert ld.operands("offsets")[1] == _lit(0)
    (proof,) = ld.params["proofs"]
    assert proof.startswith("16 | n0 by n0 = nb * 256") and "n0 >= 0 by nb = block index" in proof
    text = str(g)  # the printed IR shows the proof beside the blocked coordinate
    assert "n0_rblk:index = floordiv n0 16" in text and "# 16 | n0 by n0 = nb * 256" in text


def test_pipeline_variable_is_a_column_block():  # NZ-16 loop row
    @pl.kernel
    def k(w: pl.Tensor[[N, K], pl.INT8, pl.NZ]):
        for k0 in pl.pipeline(512, K, 512, stage=2):
            pl.load(w, [0, k0], [256, 512], target_memory=pl.Mem.Mat)

    g = k.lower().ir(after="BlockNzTensorViews")
    (ld,) = _blocked_loads(g)
    div = _defining(g, ld.operands("offsets")[1])
    assert div.primitive.name == "floordiv" and div.inputs[0].hint == "k0" and div.inputs[1] == _lit(32)
    (proof,) = ld.params["proofs"]
    assert proof == ("32 | k0 by k0 in pl.pipeline(512, 1024, 512); k0 >= 0 by k0 = loop from 512 step 512")


def test_split_k_lane_arithmetic():  # NZ-16 `x % k`, `x // k` rows
    @pl.kernel
    def k(w: pl.Tensor[[256, K], pl.INT8, pl.NZ]):
        for blk in pl.spmd(4):
            n0 = (blk // 2) * 128
            for kb in pl.range(0, 512, 256):
                k0 = (blk % 2) * 512 + kb
                pl.load(w, [n0, k0], [128, 256], target_memory=pl.Mem.Mat)

    g = k.lower().ir(after="BlockNzTensorViews")
    (ld,) = _blocked_loads(g)
    row, col = ld.operands("offsets")[2], ld.operands("offsets")[1]
    assert [_defining(g, x).inputs[0].hint for x in (row, col)] == ["n0", "k0"]
    p_row, p_col = ld.params["proofs"]
    assert p_row.startswith("16 | n0 by n0 = blk // 2 * 128")
    assert p_col.startswith("32 | k0 by k0 = blk % 2 * 512 + kb") and "kb in pl.range(0, 512, 256)" in p_col
    assert "blk = block index" in p_col and "kb = loop from 0 step 256" in p_col


def test_range_with_a_symbolic_start():  # NZ-16 "loop with symbolic start" row
    @pl.kernel
    def k(w: pl.Tensor[[N, K], pl.INT8, pl.NZ]):
        for _lane in pl.spmd(2):
            core = pl.get_block_idx()
            for ob in pl.range(core, 4, 2):
                o0 = ob * 256
                pl.load(w, [o0, 0], [256, 512], target_memory=pl.Mem.Mat)

    g = k.lower().ir(after="BlockNzTensorViews")
    (ld,) = _blocked_loads(g)
    (proof,) = ld.params["proofs"]
    assert "o0 = ob * 256" in proof and "ob in pl.range(core, 4, 2)" in proof
    assert "core = pl.get_block_idx()" in proof
    assert "ob = loop from core step 2" in proof


def test_min_and_max_of_multiples():  # NZ-16 min/max row
    @pl.kernel
    def k(w: pl.Tensor[[N, K], pl.INT8, pl.NZ]):
        for nb in pl.spmd(4):
            n0 = pl.min(nb * 256, 512)
            k0 = pl.max(nb * 512 - 1024, 0)  # max: either operand non-negative
            pl.load(w, [n0, k0], [256, 512], target_memory=pl.Mem.Mat)

    (ld,) = _blocked_loads(k.lower().ir(after="BlockNzTensorViews"))
    assert len(ld.params["proofs"]) == 2


def test_offset_of_another_dtype_keeps_its_dtype():  # NZ-17: the division is in the offset's dtype
    @pl.kernel
    def k(w: pl.Tensor[[N, K], pl.INT8, pl.NZ], x: pl.Scalar[pl.INT32]):
        n0 = pl.max(x * 256, 0)
        pl.load(w, [n0, 0], [256, 512], target_memory=pl.Mem.Mat)

    g = k.lower().ir(after="BlockNzTensorViews")
    (ld,) = _blocked_loads(g)
    div = _defining(g, ld.operands("offsets")[2])
    assert div.primitive.name == "floordiv" and div.outputs[0].type == ScalarType(D.INT32)
    assert div.inputs[1] == _lit(16, D.INT32)
    mx = _defining(g, div.inputs[0])
    assert mx.primitive.name == "max"
    assert _defining(g, mx.inputs[0]).inputs[1] == _lit(256, D.INT32)  # x * 256 as written


# ------------------------------------------------------------------------------ refusals
def test_refuse_unaligned_product():  # NZ-16: alignment cannot be proven
    @pl.kernel
    def k(w: pl.Tensor[[N, K], pl.INT8, pl.NZ]):
        for nb in pl.spmd(4):
            n0 = nb * 8
            pl.load(w, [n0, 0], [256, 512], target_memory=pl.Mem.Mat)  # load

    _refused(k, "# load", "cannot be proven", "multiple of 16", "n0 = nb * 8", rule="NZ-16")


def test_refuse_difference():  # NZ-16/18: a difference never proves a sign
    @pl.kernel
    def k(w: pl.Tensor[[N, K], pl.INT8, pl.NZ]):
        for nb in pl.spmd(4):
            n0 = nb * 256 - 256
            pl.load(w, [n0, 0], [256, 512], target_memory=pl.Mem.Mat)  # load

    _refused(k, "# load", "non-negative", "difference", rule="NZ-18")


def test_refuse_mod_of_a_dividend_of_unknown_sign():  # NZ-16: the dividend must be non-negative
    @pl.kernel
    def k(w: pl.Tensor[[N, K], pl.INT8, pl.NZ]):
        for blk in pl.spmd(4):
            k0 = ((blk - 1) % 2) * 512
            pl.load(w, [0, k0], [256, 512], target_memory=pl.Mem.Mat)  # load

    _refused(k, "# load", "non-negative", "dividend", "(blk - 1) % 2 * 512", rule="NZ-18")


def test_refuse_pipeline_step_below_c0():  # NZ-16: start and step must both be multiples
    @pl.kernel
    def k(w: pl.Tensor[[64, 64], pl.INT8, pl.NZ]):
        for k0 in pl.pipeline(0, 32, 16):
            pl.load(w, [0, k0], [64, 32], target_memory=pl.Mem.Mat)  # load

    _refused(k, "# load", "cannot be proven", "multiple of c0 = 32", "pl.pipeline(0, 32, 16)", rule="NZ-16")


def test_refuse_an_offset_carried_through_a_loop():  # NZ-16: iter args are never resolved
    @pl.kernel
    def k(w: pl.Tensor[[N, K], pl.INT8, pl.NZ]):
        n0 = pl.cast(0, pl.INDEX)
        for _i in pl.range(4):
            pl.load(w, [n0, 0], [256, 512], target_memory=pl.Mem.Mat)  # load
            n0 = n0 + 256

    _refused(k, "# load", "loop-carried", "never resolved")


def test_refuse_the_value_a_loop_leaves_behind():  # NZ-16: a loop's result is a carry too
    @pl.kernel
    def k(w: pl.Tensor[[N, K], pl.INT8, pl.NZ]):
        n0 = pl.cast(0, pl.INDEX)
        for _i in pl.range(3):
            n0 = n0 + 256
        pl.load(w, [n0, 0], [256, 512], target_memory=pl.Mem.Mat)  # load

    _refused(k, "# load", "loop", "never resolved")


def test_refuse_a_kernel_scalar_argument():  # NZ-16: a scalar argument's sign is unknown
    @pl.kernel
    def direct(w: pl.Tensor[[N, K], pl.INT8, pl.NZ], n0: pl.Scalar[pl.INDEX]):
        pl.load(w, [n0, 0], [256, 512], target_memory=pl.Mem.Mat)  # load

    @pl.kernel
    def scaled(w: pl.Tensor[[N, K], pl.INT8, pl.NZ], nb: pl.Scalar[pl.INDEX]):
        pl.load(w, [nb * 256, 0], [256, 512], target_memory=pl.Mem.Mat)  # load

    _refused(direct, "# load", "cannot be proven a multiple of 16", rule="NZ-16")
    _refused(scaled, "# load", "non-negative", "kernel argument", rule="NZ-18")


def test_refuse_a_product_that_may_wrap():  # NZ-17: sign does not survive a wrap
    @pl.kernel
    def k(w: pl.Tensor[[N, K], pl.INT8, pl.NZ], x: pl.Scalar[pl.INT32]):
        n0 = pl.max(x, 0) * 256  # (1 << 23) * 256 wraps to a negative INT32
        pl.load(w, [n0, 0], [256, 512], target_memory=pl.Mem.Mat)  # load

    _refused(k, "# load", "non-negative", "may wrap", "32-bit", rule="NZ-18")


def test_refuse_a_non_constant_divisor():  # NZ-16: only a positive constant k
    @pl.kernel
    def k(w: pl.Tensor[[N, K], pl.INT8, pl.NZ]):
        for nb in pl.spmd(4):
            n0 = (nb * 512) // (nb + 1)
            pl.load(w, [n0, 0], [256, 512], target_memory=pl.Mem.Mat)  # load

    _refused(k, "# load", "cannot be proven a multiple of 16")


def test_proof_budget_bounds_a_pathological_expression():  # NZ-16: proofs stay bounded
    @pl.kernel
    def k(w: pl.Tensor[[N, K], pl.INT8, pl.NZ]):
        for nb in pl.spmd(2):
            n0 = nb * 16
            for _ in range(proofs.BUDGET + 10):  # unrolled: a chain longer than the budget
                n0 = (n0 + 16) - 16 + nb * 0
            pl.load(w, [n0, 0], [256, 512], target_memory=pl.Mem.Mat)  # load

    msg = _refused(k, "# load")
    assert "budget" in msg


def test_the_divisor_must_be_a_power_of_two():  # NZ-17: asserted internally
    x = Var(ScalarType(D.INDEX), "x")
    pv = Prover(Graph([x], [], []))
    with pytest.raises(nzjit.InternalError, match="power of two"):
        pv.multiple(x, 24)
    with pytest.raises(nzjit.InternalError, match="power of two"):
        pv.multiple(x, 0)
    y = Var(ScalarType(D.INT8), "y")
    with pytest.raises(nzjit.InternalError, match="does not divide 2"):
        Prover(Graph([y], [], [])).multiple(y, 512)
    assert not isinstance(nzjit.InternalError("x"), ValueError)


# --------------------------------------------------------------------- property: soundness (NZ-16/17)
# Random index expressions over constants, kernel scalars, an spmd lane, get_block_idx() and a
# range loop variable, in INDEX or INT32 (so products wrap). Whenever the prover says "a multiple
# of d" / "non-negative", every evaluation (with wrap, floor // and %, NZ-19) must agree.
LANES = 4
LOOP = {"start": 16, "stop": 400, "step": 48}
SPECIAL = [0, 1, 16, 32, 256, 512, 1 << 20, 1 << 23, 1 << 24, 1 << 31, 1 << 40, 1 << 62, -16, -1]


def _leaves():
    lit = st.one_of(
        st.integers(-64, 4096), st.sampled_from(SPECIAL), st.integers(0, 64).map(lambda v: v * 16)
    )
    return st.one_of(
        st.tuples(st.just("lit"), lit), st.tuples(st.sampled_from(["arg", "uarg", "lane", "blk", "iv"]))
    )


def _exprs():
    def extend(sub):
        const_div = st.tuples(
            st.sampled_from(["floordiv", "mod"]),
            sub,
            st.tuples(st.just("lit"), st.sampled_from([1, 2, 3, 4, 16, 32, 256, -2, 0])),
        )
        binary = st.tuples(st.sampled_from(["add", "sub", "mul", "min", "max", "floordiv", "mod"]), sub, sub)
        return st.one_of(binary, const_div)

    return st.recursive(_leaves(), extend, max_leaves=8)


class _Builder:
    """Builds `expr` as equations of a graph: spmd(LANES) { blk = get_block_idx; range(...) { expr } }."""

    def __init__(self, dt):
        self.dt = dt
        self.arg = Var(ScalarType(dt), "a")
        self.uarg = Var(ScalarType(D.UINT32 if dt is D.INT32 else D.INDEX), "u")
        self.lane = Var(ScalarType(D.INDEX), "lane")
        self.iv = Var(ScalarType(D.INDEX), "iv")
        self.blk = Var(ScalarType(D.INDEX), "blk")
        self.eqns = []

    def emit(self, prim, ins, dtype=None):
        out = Var(ScalarType(dtype or self.dt))
        params = {"arity": (1, 1) if len(ins) == 2 else (1,)}
        if prim is P.convert_p:
            params["dtype"] = dtype
        self.eqns.append(Eqn(prim, tuple(ins), (out,), params))
        return out

    def to_dt(self, v):
        if v.type == ScalarType(self.dt):
            return v
        return self.emit(P.convert_p, [v], self.dt)

    def build(self, t):
        if t[0] == "lit":
            return _lit(self.dt.wrap(t[1]), self.dt)
        if len(t) == 1:
            return self.to_dt(
                {"arg": self.arg, "uarg": self.uarg, "lane": self.lane, "blk": self.blk, "iv": self.iv}[t[0]]
            )
        a, b = self.build(t[1]), self.build(t[2])
        return self.emit(P.SCALAR_BINARY[t[0]], [a, b])

    def graph(self, root):
        inner = Graph([self.iv], self.eqns, [])
        rng = Eqn(
            P.for_p,
            (_lit(LOOP["start"]), _lit(LOOP["stop"]), _lit(LOOP["step"])),
            (),
            {"arity": (3, 0, 0), "kind": "range", "body": inner},
        )
        gbi = Eqn(P.get_block_idx_p, (), (self.blk,), {"arity": ()})
        lanes = Graph([self.lane], [gbi, rng], [])
        spmd = Eqn(
            P.for_p, (_lit(0), _lit(LANES), _lit(1)), (), {"arity": (3, 0, 0), "kind": "spmd", "body": lanes}
        )
        return Graph([self.arg, self.uarg], [spmd], [root] if isinstance(root, Var) else [])


def _evaluate(t, env, dt):
    """The backend's semantics: wrap at the declared width after every op, floor // and %."""
    if t[0] == "lit":
        return dt.wrap(t[1])
    if len(t) == 1:
        return dt.wrap(env[t[0]])
    a, b = _evaluate(t[1], env, dt), _evaluate(t[2], env, dt)
    if t[0] in ("floordiv", "mod") and b == 0:
        raise ZeroDivisionError
    op = {"add": a + b, "sub": a - b, "mul": a * b, "min": min(a, b), "max": max(a, b)}.get(t[0])
    if op is None:
        op = a // b if t[0] == "floordiv" else a % b
    return dt.wrap(op)


def _environments(rnd, dt, n=40):
    lo, hi = proofs.dtype_range(dt)
    ulo, uhi = proofs.dtype_range(D.UINT32 if dt is D.INT32 else D.INDEX)
    ivs = list(range(LOOP["start"], LOOP["stop"], LOOP["step"]))
    extremes = [lo, hi, 0, 1, 1 << 23, 1 << 24, -(1 << 24), 16]
    for _ in range(n):
        lane = rnd.randrange(LANES)
        yield {
            "arg": rnd.choice(extremes) if rnd.random() < 0.5 else rnd.randint(lo, hi),
            "uarg": rnd.choice([ulo, uhi, 0, 1 << 31]) if rnd.random() < 0.5 else rnd.randint(ulo, uhi),
            "lane": lane,
            "blk": lane,
            "iv": rnd.choice(ivs),
        }


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(expr=_exprs(), dt=st.sampled_from([D.INDEX, D.INT32]), seed=st.integers(0, 2**32))
def test_prover_is_sound_under_wrap(expr, dt, seed):  # NZ-16, NZ-17, NZ-19
    rnd = random.Random(seed)  # leaf values: many per expression, cheaper than hypothesis draws
    b = _Builder(dt)
    root = b.build(expr)
    pv = Prover(b.graph(root))
    claims = {d: pv.multiple(root, d)[0] for d in (8, 16, 32)}
    nonneg = pv.nonneg(root)[0]
    fact = pv.fact(root)
    for env in _environments(rnd, dt):
        try:
            v = _evaluate(expr, env, dt)
        except ZeroDivisionError:
            continue
        assert fact.lo <= v <= fact.hi, (expr, env, v, fact)
        if nonneg:
            assert v >= 0, (expr, env, v)
        for d, ok in claims.items():
            if ok:
                assert v % d == 0, (expr, env, v, d)


def test_prover_property_examples():  # the table's rows, evaluated the same way
    for expr, d, mult, nonneg in [
        (("mul", ("lane",), ("lit", 256)), 16, True, True),
        (("sub", ("mul", ("lane",), ("lit", 256)), ("lit", 256)), 16, True, False),
        (("mul", ("mod", ("sub", ("blk",), ("lit", 1)), ("lit", 2)), ("lit", 512)), 32, True, False),
        (("mul", ("max", ("arg",), ("lit", 0)), ("lit", 256)), 16, True, False),  # may wrap
        (("max", ("mul", ("arg",), ("lit", 256)), ("lit", 0)), 16, True, True),
        (("mul", ("lane",), ("lit", 8)), 16, False, True),
        (("add", ("mul", ("mod", ("blk",), ("lit", 2)), ("lit", 512)), ("iv",)), 16, True, True),
    ]:
        b = _Builder(D.INT32)
        root = b.build(expr)
        pv = Prover(b.graph(root))
        assert (pv.multiple(root, d)[0], pv.nonneg(root)[0]) == (mult, nonneg), expr
    r = random.Random(0)
    assert all(
        _evaluate(("mul", ("lane",), ("lit", 256)), env, D.INT32) % 16 == 0
        for env in _environments(r, D.INT32)
    )


def _enumerable():
    leaf = st.one_of(
        st.tuples(st.just("lit"), st.one_of(st.integers(-64, 512), st.sampled_from(SPECIAL))),
        st.tuples(st.sampled_from(["lane", "blk", "iv"])),
    )
    return st.recursive(
        leaf,
        lambda sub: st.tuples(
            st.sampled_from(["add", "sub", "mul", "min", "max", "floordiv", "mod"]), sub, sub
        ),
        max_leaves=6,
    )


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(expr=_enumerable(), dt=st.sampled_from([D.INDEX, D.INT32]))
def test_exact_max_is_the_largest_value(expr, dt):  # NZ-12: the bounds refusal asks for the exact maximum
    b = _Builder(dt)
    root = b.build(expr)
    if not isinstance(root, Var):
        return
    envs = [
        {"lane": lane, "blk": lane, "iv": iv}
        for lane in range(LANES)
        for iv in range(LOOP["start"], LOOP["stop"], LOOP["step"])
    ]
    try:
        values = [_evaluate(expr, env, dt) for env in envs]
    except ZeroDivisionError:
        return  # the backend's x // 0 is not the reference's
    got = Prover(b.graph(root)).exact_max(root)
    # get_block_idx() and the pl.spmd variable are the same lane, but exact_max enumerates them as
    # independent leaves: then it may exceed the maximum (a conservative refusal), never fall short
    leaves = {t for t in ("lane", "blk") if f"('{t}',)" in repr(expr)}
    assert got == max(values) if len(leaves) < 2 else got >= max(values), expr


def test_unnamed_offsets_print_as_written():  # diagnostics: `a + b - c`, `a - b + c` need no parentheses
    @pl.kernel
    def k(w: pl.Tensor[[N, K], pl.INT8, pl.NZ]):
        for i in pl.range(0, 64, 16):
            pl.load(w, [i + 16 - 8, 0], [16, 32], target_memory=pl.Mem.Mat)  # load

    _refused(k, "# load", "row offset 'i + 16 - 8, i in pl.range", rule="NZ-16")

    @pl.kernel
    def k2(w: pl.Tensor[[N, K], pl.INT8, pl.NZ]):
        for i in pl.range(0, 64, 16):
            pl.load(w, [i - 8 + 16, 0], [16, 32], target_memory=pl.Mem.Mat)  # load

    _refused(k2, "# load", "row offset 'i - 8 + 16, i in pl.range", rule="NZ-16")


def test_the_divisor_bound_is_two_to_the_width():  # NZ-17: d must divide 2^W; d == 2^W does
    x = Var(ScalarType(D.INT4), "x")
    pv = Prover(Graph([x], [], []))
    assert pv.multiple(x, 16)[0] is False  # 16 divides 2^4: asked, answered (no factor known)
    with pytest.raises(InternalError, match="does not divide 2\\^4"):
        pv.multiple(x, 32)
