"""The generated pages of docs/ are what their generators give today (never hand-copied): the rule
map, the op reference (every registered primitive) and the error catalogue (every rule nzjit
refuses by, each message produced by running its kernel, each fix compiling). On a mismatch:
`python docs/generate.py`."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "docs"))

import error_catalogue  # noqa: E402
import op_reference  # noqa: E402
import rule_map  # noqa: E402

STALE = "is stale: run `python docs/generate.py` and commit the result"


@pytest.mark.parametrize("gen", [rule_map, op_reference, error_catalogue], ids=lambda m: m.__name__)
def test_committed_page_is_what_the_generator_gives(gen):
    assert gen.OUT.exists(), f"{gen.OUT.name} is missing: run python docs/generate.py"
    assert gen.OUT.read_text() == gen.render(), f"docs/{gen.OUT.name} {STALE}"


def test_op_reference_has_every_registered_primitive():
    import nzjit.pl  # noqa: F401 - registers the primitives
    from nzjit.core.primitives import all_primitives

    text = op_reference.render()
    for name in all_primitives():
        assert f"\n## `{name}`\n" in text, name


def test_op_reference_probe_finds_what_the_type_rules_accept():
    from nzjit import prims as P

    mm = op_reference.probe(P.tile_matmul_acc_p)
    assert dict(mm["operands"])["acc"] == {"tile@Acc"}
    assert dict(mm["operands"])["a"] == {"tile@Mat", "tile@Left", "tile@Right"}
    assert "i32 x i8 x i8 -> i32" in mm["signatures"] and "f32 x f16 x f16 -> f32" in mm["signatures"]
    assert not any(s.startswith("i32 x i32") for s in mm["signatures"])  # INT32 is no cube operand
    add = op_reference.probe(P.ELEMENTWISE["add"])
    assert dict(add["operands"]) == {"x0": {"tile@Vec"}, "x1": {"tile@Vec"}}
    assert op_reference.probe(P.for_p) is None  # a loop: its body decides
    assert "pl.matmul_acc: accumulator {tc} does not match the product {want}" in op_reference.refusals(
        P.tile_matmul_acc_p
    )


def test_error_catalogue_covers_every_rule_nzjit_refuses_by():
    have = {e.rule for e in error_catalogue.ENTRIES}
    missing = error_catalogue.rules_raised_in_source() - have
    assert not missing, f"rules raised in nzjit/ without a catalogue entry: {sorted(missing)}"


@pytest.mark.parametrize(
    "entry", error_catalogue.ENTRIES, ids=lambda e: f"{e.rule or 'tracing'}-{e.title[:30]}"
)
def test_error_catalogue_fix_compiles(entry):
    assert error_catalogue.fixed_compiles(entry), f"the fix of {entry.title!r} does not compile"
