"""passes/scan.py: the cheap scans the passes ask before doing work (a batched matmul, a
tensor.create, a loop, a pl.spmd launch) agree with `Graph.walk` on every stage of kernels with
loops, staged `if`s, launches, scratch tensors and batched matmuls - a pass skipped on a wrong
answer would compile a kernel silently differently."""

from __future__ import annotations

import importlib
from typing import Any

from nzjit import prims as P
from nzjit.core.ir import Graph
from nzjit.driver.kernel import Kernel
from nzjit.passes.scan import BODIES, equations, has_loops, primitives

MODULES = [
    "examples.batch_matmul",
    "examples.matmul_bias",
    "examples.row_softmax",
    "tests.passes.test_kernel_create_tensor",
    "tests.passes.test_kernel_scratch",
    "tests.passes.test_lane_windows_slices",
]


def _kernels() -> list[Any]:
    out = []
    for name in MODULES:
        mod = importlib.import_module(name)
        out += [v for v in vars(mod).values() if isinstance(v, Kernel)]
    return out


def _graphs(g: Graph) -> list[Graph]:
    """`g` and every nested body (through any Graph-valued parameter)."""
    out = [g]
    for e in g.eqns:
        for v in e.params.values():
            if isinstance(v, Graph):
                out += _graphs(v)
    return out


def _stages() -> list[Graph]:
    stages = []
    for k in _kernels():
        try:
            low = k.lower()
        except Exception:  # a kernel its own test expects refused
            continue
        for g in low.graphs.values():
            stages += _graphs(g)
    return stages


STAGES = _stages()  # a few hundred graphs


def test_the_kernels_cover_what_the_scans_look_for():
    seen = set().union(*(primitives(g) for g in STAGES))
    assert {P.for_p, P.cond_p, P.tensor_create_p, P.tile_batch_matmul_p} <= seen
    assert any(e.params.get("kind") == "spmd" for g in STAGES for e in g.eqns)


def test_the_scans_agree_with_walk():
    for g in STAGES:
        walked = list(g.walk())
        assert primitives(g) == {e.primitive for e in walked}
        assert has_loops(g) == any(isinstance(e.params.get("body"), Graph) for e in g.eqns)
        for of in [(P.tile_load_p,), (P.tile_store_p, P.tile_load_p), (P.for_p,)]:
            assert equations(g, of) == [e for e in walked if e.primitive in of]  # program order
        for e in walked:  # only the BODIES carry a nested graph
            if any(isinstance(v, Graph) for v in e.params.values()):
                assert e.primitive in BODIES, e.primitive.name
