"""The graph rebuilder every pass is written on: equations are immutable, passes build new graphs.

A pass subclasses `Rewriter` and overrides `rewrite(eqn)` for the primitives it changes; everything
else is copied with its inputs renamed. Loop bodies are rebuilt recursively, and a body input takes
the (possibly new) type of the operand that feeds it, so a carry whose type a pass changes (tensor
-> Acc tile) stays consistent on both sides.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..core.ir import Atom, Eqn, Graph, Literal, Var
from ..core.primitives import Primitive
from ..core.types import ScalarType, Type
from ..errors import Source
from ..prims import add_p
from .dce import prune


class Rewriter:
    """Base class of every pass: rebuilds a graph equation by equation, renaming values through `env`."""

    def __init__(self) -> None:
        self.env: dict[Var, Atom] = {}
        self.out: list[Eqn] = []  # equations of the graph being rebuilt
        self.scope: list[dict[Var, Eqn]] = []  # definitions in the original graph, innermost last
        # a pass that keeps every type need not ask about each output (most passes, most equations)
        self._maps_types = type(self).map_type is not Rewriter.map_type

    # -- helpers for passes
    def atom(self, a: Atom) -> Atom:
        """The rebuilt value of `a` (literals and unchanged values are themselves)."""
        return self.env.get(a, a) if isinstance(a, Var) else a

    def atoms(self, xs: Sequence[Atom]) -> list[Atom]:
        """`atom` of each of `xs`."""
        return [self.atom(a) for a in xs]

    def definition(self, v: Atom) -> Eqn | None:
        """The original equation defining `v` in the graph being rebuilt (not across loop bodies)."""
        return self.scope[-1].get(v) if isinstance(v, Var) and self.scope else None

    def emit(
        self,
        prim: Primitive,
        groups: Sequence[Sequence[Atom]],
        params: dict[str, Any],
        out: Sequence[Var | Type],
        source: Source | None,
    ) -> list[Var]:
        """Append an equation of `prim` on the operand `groups` (arity set from them); returns its outputs."""
        params = dict(params)
        params["arity"] = tuple(len(g) for g in groups)
        outs = [o if isinstance(o, Var) else Var(o) for o in out]
        self.out.append(Eqn(prim, tuple(a for g in groups for a in g), tuple(outs), params, source))
        return outs

    def add(self, a: Atom, b: Atom, source: Source | None) -> Atom:
        """a + b as an atom, folding literals (index arithmetic the proofs can walk)."""
        if isinstance(a, Literal) and isinstance(b, Literal):
            return Literal(a.type.dtype.wrap(int(a.value) + int(b.value)), a.type)
        if isinstance(b, Literal) and b.value == 0:
            return a
        if isinstance(a, Literal) and a.value == 0:
            return b
        t = a.type if isinstance(a, Var) else b.type
        assert isinstance(t, ScalarType)
        return self.emit(add_p, [[a], [b]], {}, [t], source)[0]

    # -- the walk
    def map_type(self, t: Type) -> Type:
        """The type a value of type `t` has after the pass; the default keeps it."""
        return t

    def graph(self, g: Graph) -> Graph:
        """The rebuilt graph: params mapped, every equation rewritten, outputs renamed."""
        params = [self.fresh(v) for v in g.params]
        eqns = self.body(g)
        return Graph(params, eqns, self.atoms(g.outputs), dict(g.attrs), g.name)

    def body(self, g: Graph) -> list[Eqn]:
        """The rebuilt equations of `g` (a graph or loop body), in their own scope."""
        saved = self.out
        self.out = []
        self.scope.append({v: e for e in g.eqns for v in e.outputs})
        try:
            for e in g.eqns:
                self.rewrite(e)
            return self.out
        finally:
            self.scope.pop()
            self.out = saved

    def fresh(self, v: Var, t: Type | None = None) -> Var:
        """The rebuilt Var for `v` (the same object when its type does not change)."""
        nt = self.map_type(v.type) if t is None else t
        if t is None and (nt is v.type or nt == v.type):
            return v
        nv = Var(nt, v.hint)
        self.env[v] = nv
        return nv

    def rewrite(self, e: Eqn) -> None:
        """Default: copy the equation with renamed inputs (loops rebuilt recursively)."""
        self.copy(e)

    def copy(self, e: Eqn, **params: Any) -> list[Var]:
        """Copy `e` with renamed inputs and `params` overridden (a loop's body rebuilt); an unchanged equation
        is shared. Returns its outputs."""
        env = self.env
        if not params and "body" not in e.params and self._keeps_types(e.outputs):
            for a in e.inputs:  # a plain loop: this runs for every equation of every pass
                if type(a) is Var and a in env:
                    break
            else:
                self.out.append(e)  # unchanged: equations are immutable, so the pass shares it
                return list(e.outputs)
        ins = tuple(self.atoms(e.inputs))
        p = dict(e.params, **params)
        body = p.get("body")
        if isinstance(body, Graph):
            nb, nc, _ = p["arity"]
            new_params = [self.fresh(body.params[0])]
            for v, a in zip(body.params[1:], ins[nb:]):
                new_params.append(self.fresh(v, a.type) if a.type != v.type else self.fresh(v))
            eqns = self.body(body)
            p["body"] = Graph(new_params, eqns, self.atoms(body.outputs), dict(body.attrs), body.name)
            outs = [
                self.fresh(v, a.type) if a.type != v.type else self.fresh(v)
                for v, a in zip(e.outputs, ins[nb + nc :])
            ]
        else:
            outs = [self.fresh(v) for v in e.outputs]
        self.out.append(Eqn(e.primitive, ins, tuple(outs), p, e.source))
        return outs

    def _keeps_types(self, outs: Sequence[Var]) -> bool:
        """Does the pass keep the type of every one of `outs`?"""
        if not self._maps_types:
            return True
        for v in outs:
            t = v.type
            nt = self.map_type(t)
            if nt is not t and nt != t:
                return False
        return True

    def run(self, g: Graph) -> Graph:
        """Rebuild `g` and remove the dead code the rewrite left."""
        return dce(self.graph(g))


def dce(g: Graph) -> Graph:
    """Drop what nobody reads (dce.py), bodies included."""
    return Graph(g.params, prune(g.eqns, g.outputs), g.outputs, g.attrs, g.name)
