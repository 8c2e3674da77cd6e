"""The IR verifier (type checker) rejects hand-broken graphs with an InternalError, and runs after
every pass in this suite (tests/conftest.py sets NZJIT_VERIFY=1)."""

from __future__ import annotations

import pytest

import nzjit
from nzjit import pl
from nzjit.core import dtypes as D
from nzjit.core.ir import Eqn, Graph, Literal, Var
from nzjit.core.types import Layout, Mem, ScalarType, TensorType, TileType
from nzjit.core.verifier import verify
from nzjit.driver import Lowered
from nzjit.passes import pipeline
from nzjit.prims import add_p, for_p, tile_load_p

IDX = ScalarType(D.INDEX)


def one(v: int) -> Literal:
    return Literal(v, IDX)


def add(a, b, out) -> Eqn:
    return Eqn(add_p, (a, b), (out,), {"arity": (1, 1)})


def test_the_suite_verifies_after_every_pass():
    assert pipeline.VERIFY


def test_a_well_formed_graph_passes():
    a, b = Var(IDX, "a"), Var(IDX, "b")
    verify(Graph([a], [add(a, one(1), b)], [b]), "hand")


def test_use_before_definition():
    a, b, c = Var(IDX, "a"), Var(IDX, "b"), Var(IDX, "c")
    g = Graph([a], [add(b, one(1), c), add(a, one(1), b)], [c])
    with pytest.raises(nzjit.InternalError, match="before it is defined"):
        verify(g, "hand")


def test_an_output_type_the_type_rule_does_not_give():
    a, b = Var(IDX, "a"), Var(ScalarType(D.INT32), "b")
    with pytest.raises(nzjit.InternalError, match="type rule says") as ei:
        verify(Graph([a], [add(a, one(1), b)], [b]), "MyPass")
    assert "after MyPass" in str(ei.value) and "in add" in str(ei.value)


def test_a_type_rule_refusal_is_internal_after_tracing():
    a, b = Var(IDX, "a"), Var(IDX, "b")
    f32 = Literal(1.0, ScalarType(D.FP32))
    with pytest.raises(nzjit.InternalError, match="type rule refused"):
        verify(Graph([a], [add(a, f32, b)], [b]), "hand")


def test_a_value_defined_twice():
    a, b = Var(IDX, "a"), Var(IDX, "b")
    with pytest.raises(nzjit.InternalError, match="defined once"):
        verify(Graph([a], [add(a, one(1), b), add(a, one(2), b)], [b]), "hand")


def test_an_undefined_graph_output():
    a, b = Var(IDX, "a"), Var(IDX, "b")
    with pytest.raises(nzjit.InternalError, match="never defines"):
        verify(Graph([a], [], [b]), "hand")


def _loop(body: Graph, inputs, outputs, arity) -> Eqn:
    return Eqn(for_p, tuple(inputs), tuple(outputs), {"kind": "range", "body": body, "arity": arity})


def test_a_loop_body_must_be_closed():
    outer, iv, out = Var(IDX, "outer"), Var(IDX, "i"), Var(IDX, "t")
    body = Graph([iv], [add(iv, outer, out)], [])  # reads `outer` without capturing it
    with pytest.raises(nzjit.InternalError, match="before it is defined"):
        verify(Graph([outer], [_loop(body, [one(0), one(4), one(1)], [], (3, 0, 0))], []), "hand")


def test_a_loop_body_arity_mismatch():
    s, iv, p, nxt, res = Var(IDX, "s"), Var(IDX, "i"), Var(IDX, "s_1"), Var(IDX, "s_2"), Var(IDX, "s_3")
    body = Graph([iv, p], [add(p, iv, nxt)], [nxt])
    bad = _loop(body, [one(0), one(4), one(1), s], [res], (3, 0, 1))
    verify(Graph([s], [bad], []), "hand")  # well formed
    wrong = _loop(body, [one(0), one(4), one(1), s, s], [res, Var(IDX)], (3, 0, 2))
    with pytest.raises(nzjit.InternalError, match="arity"):
        verify(Graph([s], [wrong], []), "hand")


def test_a_carry_whose_body_changes_its_type():
    s, iv, p, nxt, res = Var(IDX, "s"), Var(IDX, "i"), Var(IDX, "s_1"), Var(ScalarType(D.INT32)), Var(IDX)
    body = Graph(
        [iv, p],
        [
            Eqn(
                add_p,
                (Literal(1, ScalarType(D.INT32)), Literal(2, ScalarType(D.INT32))),
                (nxt,),
                {"arity": (1, 1)},
            )
        ],
        [nxt],
    )
    with pytest.raises(nzjit.InternalError, match="changes type"):
        verify(Graph([s], [_loop(body, [one(0), one(4), one(1), s], [res], (3, 0, 1))], []), "hand")


def test_an_unblocked_nz_view_after_blocking():  # NZ-34
    w = Var(TensorType((64, 64), D.INT8, Layout.NZ), "w")
    g = Graph([w], [], [], attrs={"nz_tensor_views_blocked": True})
    with pytest.raises(nzjit.InternalError, match="not blocked"):
        verify(g, "BlockNzTensorViews")


def test_a_pass_that_breaks_the_graph_is_caught_after_that_pass():
    @pl.kernel
    def k(x: pl.Tensor[[16, 64], pl.FP32], out: pl.Out[pl.Tensor[[16, 64], pl.FP32]]):
        pl.store(pl.load(x, [0, 0], [16, 64]), [0, 0], out)

    def corrupt(g: Graph) -> Graph:
        e = next(e for e in g.eqns if e.primitive is tile_load_p)
        wrong = e.replace(outputs=(Var(TileType((16, 64), D.FP16, Mem.Vec)),))
        return Graph(g.params, [wrong if x is e else x for x in g.eqns], g.outputs, g.attrs, g.name)

    traced = k.lower().ir("trace")
    with pytest.raises(nzjit.InternalError, match="after Corrupt in tile.load"):
        Lowered(k, traced, extra=[("Corrupt", corrupt)])
