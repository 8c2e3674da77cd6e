"""The communicating-ranks fuzzer (issue 28, nzjit/fuzz/gen_comm.py): a bounded random run in which
no program may be wrong, crash or go undiagnosed, and checks that the classifier can fail."""

from __future__ import annotations

import dataclasses
import faulthandler
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nzjit.fuzz.gen_comm import _PATTERNS, generate_comm, run_comm

SEED = 20261201


@pytest.fixture(autouse=True)
def _watchdog():
    """A communicating program the simulator failed to stop must not hang the suite."""
    faulthandler.dump_traceback_later(300.0, exit=True, file=sys.stderr)
    yield
    faulthandler.cancel_dump_traceback_later()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31 - 1), index=st.integers(0, 10**6))
def test_random_communicating_program_is_equal_or_diagnosed(seed, index):
    p = generate_comm(seed, index)
    o = run_comm(p)
    assert not o.bug, f"{p.name} {p.tags}: {o.cls}: {o.detail}\n{p.source}"


def _find(pred, pattern=None, limit=400):
    for i in range(limit):
        p = generate_comm(SEED, i, pattern)
        if pred(p):
            return p
    raise AssertionError("no generated program matches")


@pytest.mark.parametrize("pattern", sorted(_PATTERNS))
def test_every_pattern_has_an_exact_program(pattern):
    p = _find(lambda p: p.expect == "ok", pattern)
    assert run_comm(p).cls == "equal"


@pytest.mark.parametrize(
    "bug,expect",
    [
        ("drop_notify", "hang"),
        ("wrong_expected", "hang"),
        ("drop_wait", "race"),
        ("drop_barrier", "race"),
        ("skip_one_rank", "hang"),
        ("plain_store", "race"),
        ("set_not_add", "hang"),
    ],
)
def test_every_injected_bug_is_diagnosed_as_predicted(bug, expect):
    p = _find(lambda p: f"bug:{bug}" in p.tags)
    assert p.expect == expect
    o = run_comm(p)
    assert (o.cls, o.bug) == (expect, False), o.detail


def test_the_classifier_can_fail():
    ok = _find(lambda p: p.expect == "ok", "shift_load")
    broken = dataclasses.replace(
        ok, source=ok.source.replace("def reference(d):\n", "def reference(d):\n    d = d + 1\n")
    )
    assert run_comm(broken).cls == "wrong" and run_comm(broken).bug
    hang = _find(lambda p: p.expect == "hang")
    assert run_comm(dataclasses.replace(hang, expect="race")).cls == "missed"
    assert run_comm(dataclasses.replace(ok, expect="hang")).cls == "missed"
