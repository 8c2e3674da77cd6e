"""What a graph holds, found by one cheap scan: the primitives of its equations (nested bodies
included) and the equations of some primitives, in program order.

A pass or check whose precondition is absent from a graph (no batched matmul, no tensor.create,
no loop, no pl.spmd launch) is skipped by asking here first: a set of the top level's primitives
is a few bytecodes per equation, where a `Graph.walk` generator over the same equations costs
several times that - and the compile time of a straight-line kernel of a thousand equations is
such walks.

Only `for` and `cond` equations carry a nested body (`params["body"]`, BODIES);
tests/passes/test_scan.py checks both functions against `Graph.walk`.
"""

from __future__ import annotations

from collections.abc import Collection

from .. import prims as P
from ..core.ir import Eqn, Graph
from ..core.primitives import Primitive

BODIES = frozenset((P.for_p, P.cond_p))  # the primitives whose equations carry a nested body


def primitives(g: Graph) -> set[Primitive]:
    """The primitives of `g`'s equations, nested bodies included."""
    found = {e.primitive for e in g.eqns}
    if not found.isdisjoint(BODIES):
        for e in g.eqns:
            body = e.params.get("body")
            if isinstance(body, Graph):
                found |= primitives(body)
    return found


def has_loops(g: Graph) -> bool:
    """Does `g` itself have a loop or branch (an equation with a nested body)?"""
    return not {e.primitive for e in g.eqns}.isdisjoint(BODIES)


def equations(g: Graph, of: Collection[Primitive]) -> list[Eqn]:
    """The equations of `g` (nested bodies included) whose primitive is in `of`, in program order
    (the order of `Graph.walk`)."""
    if has_loops(g):
        return [e for e in g.walk() if e.primitive in of]
    return [e for e in g.eqns if e.primitive in of]


__all__ = ["BODIES", "primitives", "has_loops", "equations"]
