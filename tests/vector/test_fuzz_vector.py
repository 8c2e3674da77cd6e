"""The fuzzer's vec_alu family (nzjit/fuzz/gen_vector.py): its programs are equal to their numpy
reference, every kind of step occurs, and a broken reference is caught."""

from __future__ import annotations

from nzjit.fuzz.classify import classify
from nzjit.fuzz.gen import FAMILIES, generate


def test_vec_alu_programs_are_equal_and_cover_every_step():
    assert "vec_alu" in FAMILIES
    seen: set[str] = set()
    for i in range(80):
        p = generate(20261201, i, "vec_alu")
        o = classify(p)
        assert o.cls == "equal", (o, p.source)
        seen.update(t for t in p.tags if t.startswith("alu:"))
    assert seen == {
        f"alu:{k}"
        for k in (
            *("scalar", "minmax", "row", "col", "unary", "full", "select", "cvt", "sum", "div", "rsqrt"),
            *("tiles", "expand", "lrelu", "math", "colsum", "cast", "gather", "odd"),
        )
    }


def test_vec_mix_programs_are_equal_and_cover_every_kind():
    assert "vec_mix" in FAMILIES
    seen: set[str] = set()
    for i in range(40):
        p = generate(20261202, i, "vec_mix")
        o = classify(p)
        assert o.cls == "equal", (o, p.source)
        seen.update(t for t in p.tags if t.startswith(("mix:", "target:")))
    assert seen == {
        "mix:mm",
        "mix:vec2mat",
        "mix:pad",
        "mix:win",
        "mix:topk",
        "mix:deq",
        "target:pl.A2A3",
        "target:pl.A5",
    }


def test_vec_mix_padding_takes_its_valid_columns_from_the_load_a_view_or_both():
    # the valid region of a pl.slice(valid_shape=) view bounds the loaded tile (valid_regions.py)
    seen: set[str] = set()
    for i in range(400):
        p = generate(20261203, i, "vec_mix")
        if "mix:pad" not in p.tags:
            continue
        o = classify(p)
        assert o.cls == "equal", (o, p.source)
        seen.update(t for t in p.tags if t.startswith("pad_region:"))
        if seen == {"pad_region:load", "pad_region:view", "pad_region:both"}:
            break
    assert seen == {"pad_region:load", "pad_region:view", "pad_region:both"}


def test_vec_alu_wrong_reference_is_caught():
    p = generate(20261201, 0, "vec_alu")
    broken = p.__class__(
        **{
            **p.__dict__,
            "source": p.source.replace("put(out,", "put(out, ", 1).replace(
                "    return outs", "    outs['out'] += 1\n    return outs", 1
            ),
        }
    )
    assert classify(broken).cls == "wrong"


def test_vec_mix_top_k_merges_with_both_mrgsort_formats():
    # the last merge of a row top-k as TMRGSORT format 1 (one tile) or format 2 (four lists)
    seen: set[str] = set()
    for i in range(120):
        p = generate(20261203, i, "vec_mix")
        if "mix:topk" not in p.tags:
            continue
        o = classify(p)
        assert o.cls == "equal", (o, p.source)
        seen.update(t for t in p.tags if t.startswith("mrgsort:"))
        if "mrgsort:format2" in p.tags:
            assert "pl.create_tile([1, " in p.source and "p[:, 0:" in p.source
        assert ("exhausted=True" in p.source) == ("mrgsort:exhausted=True" in p.tags)
    assert seen == {"mrgsort:format1", "mrgsort:format2", "mrgsort:exhausted=True", "mrgsort:exhausted=False"}
