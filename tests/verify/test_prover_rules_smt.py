"""Every prover rule proven by z3 (issue 29, NZ-16..19): for each rule of proofs.RULES, its query
holds for every value at the declared width satisfying the premises; a rule without a query
fails; and a wrong rule (the three silently-wrong mutants of the issue) yields a counterexample.
"""

import pytest

from nzjit.passes import proofs

z3 = pytest.importorskip("z3")
from nzjit.verify import prover_rules as R  # noqa: E402


def test_every_rule_has_a_query():  # a rule added to the prover without its z3 query fails here
    assert set(R.QUERIES) == set(proofs.RULES)
    assert proofs._BINARY.items() <= proofs.RULES.items()  # the prover's dispatch uses the table


@pytest.mark.parametrize("rule", sorted(proofs.RULES))
def test_rule_holds_for_every_value(rule):  # NZ-16, NZ-17 (wrap), NZ-19 (floor semantics)
    checks = R.check_rule(rule, n=12)
    assert checks, rule
    bad = [str(c) for c in checks if not c.proven]
    assert not bad, "\n".join(bad[:5])


def _counterexamples(rule):
    return [c for c in R.check_rule(rule, n=12) if not c.proven]


def test_a_loop_factor_from_the_step_only_is_caught(monkeypatch):  # NZ-16 loop row
    real = proofs.rule_loop_var

    def wrong(fs, fe, ft, name, dt):
        f = real(fs, fe, ft, name, dt)
        return proofs.Fact(ft.factor, f.nonneg, f.expr, f.nonneg_why, f.lo, f.hi)

    monkeypatch.setattr(proofs, "rule_loop_var", wrong)
    cex = _counterexamples("loop_var")
    assert any(c.premises[0].lo == 8 and c.premises[2].lo == 16 for c in cex)  # pl.range(8, 24, 16)


def test_a_factor_kept_across_a_wrap_is_caught(monkeypatch):  # NZ-17
    real = proofs.rule_wrap

    def wrong(f, dt):
        g = real(f, dt)
        return proofs.Fact(f.factor, g.nonneg, g.expr, g.nonneg_why, g.lo, g.hi)

    monkeypatch.setattr(proofs, "rule_wrap", wrong)
    cex = _counterexamples("wrap")
    assert any(c.premises[0].factor == 48 and c.dtype == "INT32" for c in cex)


def test_a_floordiv_factor_without_the_divisibility_check_is_caught(monkeypatch):  # NZ-16 `x // k`
    real = proofs.rule_floordiv

    def wrong(a, k):
        f = real(a, k)
        return proofs.Fact(a.factor // k.lo, f.nonneg, f.expr, f.nonneg_why, f.lo, f.hi)

    monkeypatch.setitem(proofs.RULES, "floordiv", wrong)
    cex = _counterexamples("floordiv")
    assert any(c.premises[0].factor == 49 and c.premises[1].lo == 3 for c in cex)  # (i * 49) // 3
    ce = next(c for c in cex if c.premises[0].factor == 49 and c.premises[1].lo == 3)
    assert ce.counterexample["result"] % 16 != 0  # e.g. i = 3: 147 // 3 = 49
