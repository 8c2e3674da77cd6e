"""The fuzz family of orchestration views (issue 25 item 5, nzjit/fuzz/orch_slices.py): every
program equals its numpy reference or is refused by the rule the generator predicts (NZ-30, row L15)."""

from __future__ import annotations

from collections import Counter

import runtime
from nzjit.backend import program_cache, rank_processes
from nzjit.fuzz.classify import classify
from nzjit.fuzz.gen import FAMILIES, generate


def test_orchestration_slices_are_equal_or_refused_as_predicted():
    assert "orch_slices" in FAMILIES
    classes: Counter[str] = Counter()
    tags: set[str] = set()
    sent, hits = rank_processes.SENT[0], program_cache.HITS[0]
    for i in range(24):
        p = generate(20261201, i, "orch_slices")
        o = classify(p)
        assert not o.bug, (o, p.source)
        if p.expect == "refuse":
            assert o.cls == "refused" and o.rule == "NZ-30" and "L15" in o.rows, (o, p.source)
        else:
            assert o.cls == "equal", (o, p.source)
        classes[o.cls] += 1
        tags.update(p.tags)
    assert classes["equal"] >= 12
    # a host-array program is called on other data first: the checked call ran the cached plan
    assert program_cache.HITS[0] > hits
    # the sample covers every spelling of a view, every calling convention and every way the
    # ranks run (rank_batch.MODES, forced, or the program's own choice)
    for tag in (
        "view:index",
        "view:chain",
        "view:slice",
        "view:slice_all",
        "orch:numpy",
        "orch:omit",
        "orch:stacked",
        "orch:drop",
        *(f"orch:mode:{m}" for m in ("chosen", "groups", "one", "alone", "processes")),
    ):
        assert tag in tags, tag
    if rank_processes.usable(runtime.Cluster(2).workers):  # Linux, 2 threads: some ran in one
        assert rank_processes.SENT[0] > sent


def test_a_program_is_its_own_reproducer(tmp_path):
    p = next(
        generate(20261201, i, "orch_slices")
        for i in range(100)
        if generate(20261201, i, "orch_slices").expect == "ok"
    )
    path = tmp_path / "prog.py"
    path.write_text(p.source)
    import runpy

    runpy.run_path(str(path), run_name="__main__")  # asserts the reference (harness main())
