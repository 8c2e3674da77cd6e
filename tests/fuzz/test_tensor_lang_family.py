"""The fuzzer's tensor-language family (issue 23 item 9: fuzz entries for pl.read / pl.write,
pl.tensor.dim, pl.transpose, init_values + pl.yield_ and branches on traced values): each form it
draws is generated at a pinned seed, classified against its numpy reference, and equal; a broken
reference of the family is caught (the classification can fail)."""

from __future__ import annotations

import pytest

from nzjit.fuzz.classify import classify, run_source
from nzjit.fuzz.gen import generate

SEED = 23


def _find(*tags, limit=400):
    for i in range(limit):
        p = generate(SEED, i, "tensor_lang")
        if all(t in p.tags for t in tags):
            return p
    raise AssertionError(f"no tensor_lang program with {tags}")


@pytest.mark.parametrize(
    "tags",
    [
        ("branch:read",),  # if/else on a scalar read from GM, inside the staged loop
        ("branch:trip",),  # if/else on the trip index
        ("init_values:True",),  # pl.range(..., init_values=(acc0,)) with pl.yield_
        ("init_values:True", "branch:read"),  # a carry and a branch in one body
        ("last_if:if_else",),  # an if/else that is the kernel's last statement
        ("last_if:one_armed",),  # a one-armed if that is the kernel's last statement
        ("dyn_rows:True", "dim:tensor.dim"),  # pl.tensor.dim of a pl.dynamic axis, written with pl.write
        ("dyn_rows:True", "dim:shape"),  # x.shape[0] of a pl.dynamic axis as a kernel value
        ("dim:tensor.dim", "dyn_rows:False"),  # a static dimension folds to its int
        ("transpose:tile",),
        ("transpose:tensor",),
    ],
)
def test_each_form_equals_numpy(tags):
    p = _find(*tags)
    assert p.expect == "ok"
    o = classify(p)
    assert o.cls == "equal", (o, p.source)


def test_the_forms_are_in_the_kernel_text():
    p = _find("last_if:if_else", "init_values:True")
    src = p.source
    assert "pl.read(" in src or "pl.tensor.read(" in src
    assert "pl.write(" in src or "pl.tensor.write(" in src
    assert "init_values=(acc0,)" in src and "pl.yield_(" in src
    kernel = src.split("def kernel(", 1)[1].split("\n\n\n", 1)[0]
    assert kernel.rstrip().splitlines()[-1].strip().endswith(", [2], 2)")  # the else arm ends the kernel


def test_a_broken_reference_of_the_family_is_wrong():
    p = _find("branch:read")
    broken = p.source.replace("s[0] = int(idx[", "s[0] = 1 + int(idx[", 1)
    assert broken != p.source
    assert run_source(broken, "tl_broken").cls == "wrong"
