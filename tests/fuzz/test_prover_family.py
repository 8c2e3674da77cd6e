"""The fuzzer's prover family (issue 29): it generates unaligned and negative loop starts, odd
divisors, symbolic (and negative) steps, wrapped INT32 products and lane-count bounds, and each
is classified as the spec predicts: refused by its rule, or equal to numpy; never wrong.
"""

from __future__ import annotations

import pytest

from nzjit.fuzz.classify import classify
from nzjit.fuzz.gen import generate

SEED = 29


def _find(*tags, expect=None, limit=600):
    for i in range(limit):
        p = generate(SEED, i, "prover")
        if all(t in p.tags for t in tags) and (expect is None or p.expect == expect):
            return p
    raise AssertionError(f"no prover program with {tags}")


@pytest.mark.parametrize(
    "tags, rule",
    [
        (("prover:loop_start", "start:unaligned"), "NZ-16"),  # gcd(start, step) is no multiple of 16
        (("prover:loop_start", "start:negative"), "NZ-18"),  # a negative start: sign unknown
        (("prover:odd_div", "divform:div"), "NZ-16"),  # (i * F) // D keeps F / D only when D | F
        (("prover:sym_step", "symstep:raw"), "NZ-18"),  # step s * 16: the scalar's sign is unknown
        (("prover:wrap",), "NZ-16"),  # s * 48 wraps: only 16 survives, // 3 keeps nothing
        (("prover:lanes", "lanes:num"), "NZ-12"),  # get_block_num() * 16 reaches the end of the rows
        (("prover:lanes", "lanes:num_minus"), "NZ-18"),  # a difference never proves a sign
        (("prover:lanes", "lanes:cast_big", "lane_count:16"), "NZ-18"),  # 15 * 2^28 wraps at 32 bits
        (("prover:lanes", "lanes:cast_big", "lane_count:8"), "NZ-12"),  # no wrap: the bound refuses
    ],
)
def test_each_form_is_refused_by_its_rule(tags, rule):  # NZ-12, NZ-16, NZ-17, NZ-18
    p = _find(*tags, expect="refuse")
    o = classify(p)
    assert o.cls == "refused" and o.rule == rule, (o, p.source)


@pytest.mark.parametrize(
    "tags",
    [
        ("prover:loop_start", "start:aligned"),
        ("prover:odd_div", "divform:mod"),  # ((i * F) % D) * 16: always a multiple of 16
        ("prover:sym_step", "symstep:max"),  # pl.min(pl.max(s, 1), 4) * 16: proven positive
        ("prover:lanes", "lanes:num_fits"),
    ],
)
def test_the_accepted_neighbours_equal_numpy(tags):  # NZ-16 rows, end to end
    p = _find(*tags, expect="ok")
    o = classify(p)
    assert o.cls == "equal", (o, p.source)


def test_a_wrapped_product_that_stays_aligned_equals_numpy():  # NZ-17: 256 | s * 256 after the wrap
    for i in range(600):
        p = generate(SEED, i, "prover")
        if "wrap:256/4" in p.tags and "16777217" in p.source:  # s * 256 wraps to 256: n0 = 64
            break
    else:
        raise AssertionError("no wrapped aligned program")
    o = classify(p)
    assert o.cls == "equal", (o, p.source)
