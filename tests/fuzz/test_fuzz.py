"""The randomized campaign in the test suite (issue 10): a bounded hypothesis run over the generator
(no program may be wrong or crash), and deterministic checks that the classifier classifies each
kind of program correctly, including that it can fail (a broken reference is "wrong").
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import runtime
from nzjit.fuzz.campaign import run_campaign, summary
from nzjit.fuzz.classify import classify, run_source
from nzjit.fuzz.gen import FAMILIES, Program, generate
from nzjit.fuzz.repro import reproducer_text, write_reproducer
from nzjit.fuzz.rules import BY_ID, rows_of

#: Generator tags of the defects in test_known_defects.py (reported; remove a tag with its fix).
KNOWN_DEFECT_TAGS: tuple[str, ...] = ()
SEED = 20260917


def _find(pred, family: str | None = None, seed: int = SEED, limit: int = 4000) -> Program:
    for i in range(limit):
        p = generate(seed, i, family, KNOWN_DEFECT_TAGS)
        if pred(p):
            return p
    raise AssertionError("no generated program matches")


def _ok(family: str | None = None) -> Program:
    return _find(lambda p: p.expect == "ok", family)


# ----------------------------------------------------------------------------- the property
@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31 - 1), index=st.integers(0, 10**6))
def test_random_program_is_equal_or_refused(seed, index):
    p = generate(seed, index, exclude=KNOWN_DEFECT_TAGS)
    o = classify(p)
    assert not o.bug, reproducer_text(p, o)


# ------------------------------------------------------------------ each kind is classified
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_accepted_program_of_each_family_is_equal(family):
    p = _ok(family)
    o = classify(p)
    assert o.cls == "equal", (o, p.source)
    assert not o.warnings


@pytest.mark.parametrize(
    "form",
    [
        "loop:lane",
        "loop:cores",
        "loop:block_idx",
        "loop:direct",
        "loop:python",
        "off:split",
        "off:min",
        "off:fdiv",
        "off:max",
        "kloop:pipe",
        "acc_store_nz",
        "x_nz",
        "lead:index",
        "lead:chain",
        "lead:partial",
        "lead:scalar",
        "valid:dynamic",
        "valid:static",
        "rank:4",
        "big:split",
        "probe:nz_lhs",
        "probe:dyn_batch3",
        "probe:a5_load",
        "probe:gap",
    ],
)
def test_accepted_form_is_equal(form):
    # the first generated program of each form that the spec accepts runs equal; a form whose lanes
    # store one window (off:max_diff clamps tiles 0 and 1 to n0 = 0) is predicted refused (R2,
    # fuzz/forms.lanes_share_window), so an "ok" label promises no lane race either
    for i in range(4000):
        p = generate(SEED, i, None, KNOWN_DEFECT_TAGS)
        if not (p.expect == "ok" and form in p.tags):
            continue
        o = classify(p)
        assert o.cls == "equal", (o, p.source)
        return
    raise AssertionError(f"no generated program of form {form} is predicted accepted")


def test_lanes_sharing_a_window_are_predicted_refused():
    # issue 24 row R2: off:max_diff over concurrent lanes maps tiles 0 and 1 to one output window;
    # the generator predicts the run-time lane race, and the run and the reference both see it
    shared = [
        p
        for i in range(600)
        if "lanes_share_window" in (p := generate(SEED, i, None, KNOWN_DEFECT_TAGS)).tags
    ]
    assert shared, "no generated program clamps two lanes onto one window"
    for p in shared[:3]:
        assert p.expect == "refuse" and "R2" in p.expect_rows and "off:max_diff" in p.tags
        o = classify(p)
        assert (o.cls, o.rule, o.rows, o.detail, o.surprise) == (
            "refused",
            "lane-race",
            ("R2",),
            "the reference races too",
            "",
        ), (o, p.source)


REFUSAL_ROWS = [
    "L1",
    "L2",
    "L3",
    "L6",
    "L7",
    "L11",
    "L12",
    "L13",
    "L15",
    "L17",
    "L20",
    "L22",
    "L24",
    "L25",
    "X1",
    "X2",
    "X4",
    "X5",
    "X6",
    "X7",
    "S1",
    "S1b",
    "S2",
    "S4",
    "S5",
    "S6",
    "S9",
    "S10",
]


@pytest.mark.parametrize("row", REFUSAL_ROWS)
def test_refusal_of_each_rule_row(row):
    """A program the spec refuses for exactly one row is refused, and the message names that row."""
    p = _find(lambda p: p.expect == "refuse" and p.expect_rows == {row})
    o = classify(p)
    assert o.cls == "refused", (o, p.source)
    assert row in o.rows, (o.rule, o.error, BY_ID[row])


# ------------------------------------------------------------------- the classifier can fail
def test_broken_reference_is_wrong():
    p = _ok("tensor_mm")
    src = p.source.replace(
        "\n    return outs\n", "\n    outs['out'].reshape(-1)[0] += 1\n    return outs\n", 1
    )
    assert src != p.source
    o = run_source(src, "broken_ref")
    assert o.cls == "wrong" and o.bug
    assert "1 of" in o.detail and "checked elements differ" in o.detail


def test_partial_sums_stored_by_spmd_lanes_are_equal():
    """Lanes store the first K step's sums and keep accumulating (a batched run defers stores)."""
    p = _find(lambda p: p.expect == "ok" and "partial_store" in p.tags and "loop:lane" in p.tags, "tile_mm")
    o = classify(p)
    assert o.cls == "equal", (o, p.source)


def test_wrong_device_bytes_are_wrong(monkeypatch):
    """A runtime that packs NZ inputs wrongly (here: not at all, but marked NZ) gives wrong
    values, caught."""
    p = _find(lambda p: p.expect == "ok" and "dtype:INT8" in p.tags, "tile_mm")
    monkeypatch.setattr(runtime, "pack_nz", lambda a, out=None: runtime.as_nz(np.ascontiguousarray(a)))
    assert classify(p).cls == "wrong"


def test_reference_without_value_that_runs_is_wrong():
    p = _ok("tile_mm")
    src = p.source.replace("\n    return outs\n", "\n    raise MustRefuse('window out of bounds')\n", 1)
    o = run_source(src, "must_refuse")
    assert o.cls == "wrong" and "reference refuses" in o.detail


def test_other_exception_is_crash():
    p = _ok("acc_store")
    src = p.source.replace("def execute():\n", "def execute():\n    raise KeyError('boom')\n", 1)
    o = run_source(src, "crash")
    assert o.cls == "crash" and o.error.startswith("KeyError")


def test_dispatch_error_is_a_refusal():
    p = _ok("tensor_mm")
    src = p.source.replace("    res = kernel(*args)\n", "    res = kernel(*args[:-1], 'not an array')\n", 1)
    assert src != p.source
    o = run_source(src, "dispatch")
    assert o.cls == "refused" and o.error.startswith("DispatchError")


def test_refusals_are_attributed_to_rows():
    assert rows_of("NZ-5", "x.py:3: [NZ-5] NZ tensor: NZ rows 24 must be a multiple of 16") == ("L1",)
    assert rows_of(
        "NZ-16", "load of NZ tensor 'w': the row offset 'n0' cannot be proven a multiple of 16"
    ) == ("L6",)
    assert rows_of(
        "NZ-16", "store into NZ tensor 'out': the column offset 'n0' cannot be proven a multiple"
    ) == ("S8",)
    assert rows_of(
        "NZ-21", "store into NZ tensor 'o': attribute atomic=True (atomic accumulation) is not"
    ) == ("S9",)
    assert rows_of("none", "anything") == ()


# -------------------------------------------------------------- reproducers and the command
def test_reproducer_is_standalone(tmp_path):
    p = _ok("tile_mm")
    good = tmp_path / "good.py"
    good.write_text(p.source)
    r = subprocess.run([sys.executable, str(good)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "OK: equal to the numpy reference" in r.stdout, r.stderr
    broken = Program(
        p.seed,
        p.index,
        p.family,
        p.tags,
        p.expect,
        p.expect_rows,
        p.source.replace("\n    return outs\n", "\n    outs['out'][...] = 0\n    return outs\n", 1),
    )
    o = classify(broken)
    path = write_reproducer(broken, o, str(tmp_path / "out"))
    assert os.path.basename(path) == f"wrong_{p.seed}_{p.index}.py"
    r = subprocess.run([sys.executable, path], capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "wrong result" in r.stderr


def test_generation_is_deterministic():
    assert generate(3, 17).source == generate(3, 17).source
    assert generate(3, 17).source != generate(3, 18).source


def test_campaign_reports_classes_and_rows(tmp_path):
    rep = run_campaign(40, seed=11, jobs=1, out_dir=str(tmp_path), exclude=KNOWN_DEFECT_TAGS)
    text = summary(rep)
    assert len(rep.records) == 40 and not rep.bugs, text
    for head in ("programs by class:", "refusals by rule:", "refusals by rule-table row"):
        assert head in text


def test_command_line(tmp_path):
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "nzjit.fuzz",
            "--n",
            "12",
            "--seed",
            "4",
            "--jobs",
            "1",
            "--out",
            str(tmp_path),
            "--exclude",
            ",".join(KNOWN_DEFECT_TAGS),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "nzjit.fuzz: 12 programs, seed 4" in r.stdout and "wrong         0" in r.stdout
