"""The safety probes (issue 24 item 10): unpacked NZ arguments, packed ND ones, double packing,
aliased arguments and one-window lane stores, each refused (nothing changed) or equal to numpy."""

from __future__ import annotations

import warnings

import pytest

from nzjit.fuzz.gen_program_safety import run_case, safety_campaign, safety_cases


@pytest.mark.parametrize("seed", [0, 1])
def test_every_safety_probe_is_refused_or_equal(seed):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        classes = safety_campaign(seed, 40)
    assert not [k for k in classes if k.startswith("wrong")], classes
    assert classes["refused"] > 0 and classes["equal"] > 0


def test_the_classifier_calls_a_silently_wrong_run_wrong():
    case = next(c for c in safety_cases(0, 40) if c.expect == "refused" and "aliasing" in c.name)
    broken = type(case)(case.name, "refused", lambda: [], case.ref, case.watched)  # "ran" instead
    assert run_case(broken)[0] == "wrong"
    equal = next(c for c in safety_cases(0, 40) if c.expect == "equal")
    assert run_case(type(equal)(equal.name, "equal", equal.run, lambda: [r + 1 for r in equal.ref()],
                                equal.watched))[0] == "wrong"


def test_the_campaign_runs_the_safety_probes_and_reports_them():
    from nzjit.fuzz.campaign import run_campaign, summary

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rep = run_campaign(2, seed=3, jobs=1, safety=12)
    assert sum(rep.safety.values()) == 12 and not [k for k in rep.safety if k.startswith("wrong")]
    assert "safety probes (12, issue 24):" in summary(rep)
