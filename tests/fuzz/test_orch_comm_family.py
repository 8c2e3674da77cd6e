"""The fuzz family of communicating orchestrations (issue 28 item 6, nzjit/fuzz/orch_comm.py): ranks
run three kernels each (pre, a communication pattern of gen_comm, post); every program equals its
numpy reference or is refused by the row the generator predicts (an NZ window, row L23)."""

from __future__ import annotations

import dataclasses
from collections import Counter

from nzjit.fuzz.classify import classify
from nzjit.fuzz.gen import FAMILIES, generate
from nzjit.fuzz.gen_comm import PATTERNS

SEED = 20261201


def test_communicating_orchestrations_are_equal_or_refused_as_predicted():
    assert "orch_comm" in FAMILIES
    classes: Counter[str] = Counter()
    tags: set[str] = set()
    for i in range(30):
        p = generate(SEED, i, "orch_comm")
        o = classify(p)
        assert not o.bug, (o, p.source)
        if p.expect == "refuse":  # the seed's row: remote_load has no NZ blocking
            assert (o.cls, o.rule, o.rows) == ("refused", "NZ §7", ("L23",)), (o, p.source)
        else:
            assert o.cls == "equal", (o, p.source)
        classes[o.cls] += 1
        tags.update(p.tags)
    assert classes["equal"] >= 20 and classes["refused"] >= 1, classes
    for pattern in PATTERNS:  # the sample covers every communication pattern
        assert f"comm:{pattern}" in tags, pattern
    for t in ("ranks:2", "ranks:3", "ranks:4", "pre:double", "pre:neg", "post:neg", "collective:all_to_all"):
        assert t in tags, t


def test_the_family_can_be_wrong():
    """A reference that disagrees with what the ranks exchanged is classified wrong (a bug)."""
    p = next(
        q
        for q in (generate(SEED, i, "orch_comm") for i in range(50))
        if q.expect == "ok" and "comm:shift_load" in q.tags
    )
    broken = dataclasses.replace(p, source=p.source.replace("    v = comm_reference(v)\n", "    v = v\n"))
    assert broken.source != p.source
    assert classify(broken).cls == "wrong"


def test_a_program_is_its_own_reproducer(tmp_path):
    import runpy

    p = next(q for q in (generate(SEED, i, "orch_comm") for i in range(50)) if q.expect == "ok")
    path = tmp_path / "prog.py"
    path.write_text(p.source)
    runpy.run_path(str(path), run_name="__main__")  # asserts the reference (harness main())
