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
    assert (
        run_case(
            type(equal)(equal.name, "equal", equal.run, lambda: [r + 1 for r in equal.ref()], equal.watched)
        )[0]
        == "wrong"
    )


def test_the_campaign_runs_the_safety_probes_and_reports_them():
    from nzjit.fuzz.campaign import run_campaign, summary

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rep = run_campaign(2, seed=3, jobs=1, safety=12)
    assert sum(rep.safety.values()) == 12 and not [k for k in rep.safety if k.startswith("wrong")]
    assert "safety probes (12, issue 24):" in summary(rep)


# ------------------------------------------------------------- lane races (issue 24 items 2, 10)
def _pinned(name_part: str, seed_range=range(6), n=60):
    for seed in seed_range:
        for c in safety_cases(seed, n):
            if name_part in c.name:
                return c
    raise AssertionError(f"no probe {name_part!r}")


@pytest.mark.parametrize(
    "probe,expect",
    [
        ("lane windows lane * step, arg 32", "refused"),  # lanes 0 and 1 share columns 32:64
        ("lane windows lane * step, arg 0", "refused"),
        ("lane windows lane * step, arg 64", "equal"),  # touching, not overlapping
        ("lane windows lane * step, arg 80", "equal"),
        ("lane windows min(lane, c) * 64, arg 1", "refused"),  # lanes 1..3 clamped to one window
        ("lane windows min(lane, c) * 64, arg 3", "equal"),
        ("lane windows max(lane - c, 0) * 64, arg 2", "refused"),  # lanes 0..2 share column 0
        ("lane windows max(lane - c, 0) * 64, arg 0", "equal"),
        ("lane reads block lane + 1", "refused"),  # a neighbour's block: read and written concurrently
        ("lane reads block lane + 0", "equal"),
    ],
)
def test_lane_dependent_windows_are_refused_exactly_when_they_overlap(probe, expect):
    case = _pinned(probe)
    assert case.expect == expect
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cls, detail = run_case(case)
    assert cls == expect, detail
    if expect == "refused":
        assert detail == "LaneRaceError"


def test_a_refusal_of_the_wrong_class_is_wrong():
    case = _pinned("lane windows lane * step, arg 32")
    from nzjit.errors import CompileError

    def compile_refusal():
        raise CompileError("not the run-time log")

    wrong = type(case)(case.name, "refused", compile_refusal, case.ref, case.watched, case.error)
    assert run_case(wrong)[0] == "wrong"


def test_the_probes_cover_unpacked_nz_aliased_arguments_and_lane_races():
    names = [c.name for c in safety_cases(0, 200)]
    for part in (
        "NZ provenance, unpacked",
        "aliasing",
        "lane windows, step 0",
        "lane windows lane * step",
        "lane windows min(lane, c)",
        "lane windows max(lane - c, 0)",
        "lane reads block",
        "device",
        "host",
    ):
        assert any(part in n for n in names), part


def test_a_generated_program_whose_lanes_race_is_refused_at_run_time_as_row_r2():
    """tile_mm, offsets `max(nb * 48 - 48, 0)` over pl.spmd(3): lanes 0 and 1 store one window.
    The harness's reference (`lanes`) finds the race too, so accepting it would be `wrong`."""
    from nzjit.fuzz.classify import classify
    from nzjit.fuzz.gen import generate

    p = generate(53068, 53068)
    assert "for nb in lanes(3):" in p.source and "off:max_diff" in p.tags
    o = classify(p)
    assert (o.cls, o.rule, o.rows) == ("refused", "lane-race", ("R2",)), o
    assert o.detail == "the reference races too" and o.surprise == ""


def _harness():
    import numpy as np

    import runtime
    from nzjit.fuzz.harness import HARNESS

    env = {"np": np, "runtime": runtime}
    exec(HARNESS, env)
    return env


def test_the_reference_harness_finds_lane_races_by_brute_force():
    """`lanes(n)`: each lane's reads (`win`) and writes (`put`) are recorded; a write of one lane
    meeting another lane's read or write is MustRefuse; a lane's own bytes and NaN "don't care"
    marks are not races."""
    import numpy as np

    h = _harness()
    lanes, put, win, must = h["lanes"], h["put"], h["win"], h["MustRefuse"]
    out = np.zeros((4, 16))
    for lane in lanes(4):  # disjoint windows, each lane re-reading its own: fine
        put(out, (0, lane * 4), (4, 4), lane)
        win(out, (0, lane * 4), (4, 4))
    for lane in lanes(4):  # don't-care marks overlap other lanes' windows: not writes
        put(out, (0, lane * 4), (4, 4), lane)
        put(out, (0, (lane * 4 + 4) % 16), (4, 2), np.nan)
    with pytest.raises(must, match="two lanes write"):
        for lane in lanes(4):
            put(out, (0, min(lane, 2) * 4), (4, 4), lane)
    with pytest.raises(must, match="lane 0 reads an element another lane writes"):
        for lane in lanes(2):
            win(out, (0, 4), (4, 4))  # lane 0 reads what lane 1 writes afterwards
            put(out, (0, lane * 4), (4, 4), lane)
    x = np.ones((4, 16))
    for _lane in lanes(4):  # every lane reading one input: not a race
        win(x, (0, 0), (4, 16))


def test_vec_ew_predicts_the_lane_races_of_lanes_reading_the_output():
    """fam_vec_ew: a lane that reads (an InOut output) a block another lane stores is a lane race,
    predicted as row R2; its own block, or reads in a pl.range loop, are not."""
    from nzjit.fuzz.fam_store import _reads_anothers_block

    assert _reads_anothers_block("reversed", "own", 3, 1)  # lane 0 reads block 2, lane 2 writes it
    assert not _reads_anothers_block("own", "own", 4, 2)  # each lane its own rows
    assert _reads_anothers_block("shared", "own", 4, 1)  # lane 1 reads block 0, lane 0 writes it
    assert not _reads_anothers_block("reversed", "reversed", 5, 3)
    from nzjit.fuzz.classify import classify
    from nzjit.fuzz.gen import generate

    p = generate(5, 2, family="vec_ew")
    assert "ew:self_read" in p.tags and "R2" in p.expect_rows
    o = classify(p)
    assert (o.cls, o.rows, o.surprise) == ("refused", ("R2",), "")
