"""Compile-time lane races: a store that every lane of a `pl.spmd(n)` (n > 1) makes to the same
window. The lanes run concurrently, so such stores race (the last to land wins); when the
store's destination and offsets do not depend on the lane index at all, every lane writes the
same bytes: provable, so a `nzjit.CompileError` at the store's line. Atomic stores are exempt.
An offset computed from the lane that the proofs module (`passes/proofs.Prover`) proves to be one
constant (e.g. `lane * 0`) counts as lane-independent too.

Lane dependence is a taint: the spmd index and `pl.get_block_idx()` are lane-dependent, and so is
everything computed from them, a loop index whose bounds are, and a loop body parameter bound to a
lane-dependent operand (body parameter i + 1 is loop operand nb + i: the index comes first), and a
tensor created inside the launch (`pl.create_tensor`: each lane has its own GM scratch).
Windows that do depend on the lane are left to the run-time check (`runtime.races`), which is
exact; so are stores under lane-dependent control (a loop whose bounds or an `if` whose predicate
vary with the lane: some lanes may not store at all, `pl.range(core, 1, ...)`). Reads of another
lane's bytes are not proven here either."""

from __future__ import annotations

from .. import prims as P
from ..core.ir import Eqn, Graph, Literal, Var
from ..core.types import ScalarType
from ..errors import CompileError
from .guard_bypass import GuardBypass
from .proofs import Prover
from .scan import has_loops

__all__ = ["check_lane_races"]

#: test-only: compile without the proof (this thread), to test the executor on racing lanes.
_bypass_for_tests = GuardBypass()


def _trips(e: Eqn) -> int | None:
    b = [x.value for x in e.inputs[:3] if isinstance(x, Literal)]
    return len(range(*(int(v) for v in b))) if len(b) == 3 else None


def _atomic(e: Eqn) -> bool:
    """An atomic store (`pl.store(..., atomic=True)`: its attrs), or an `atomic*` parameter."""
    attrs = e.params.get("attrs") or {}
    items = [*e.params.items(), *attrs.items()] if isinstance(attrs, dict) else list(e.params.items())
    return any("atomic" in k and v not in (None, False, "none", "None") for k, v in items)


def _varies(x: object, tainted: set[Var], prover: Prover) -> bool:
    """Does `x` take more than one value across the lanes? Tainted, and not proven one constant
    (e.g. `lane * 0`: the proofs module's interval is a single point)."""
    if x not in tainted:
        return False
    if not isinstance(x, Var) or not isinstance(x.type, ScalarType):
        return True  # a tensor view: taken as lane-dependent
    f = prover.fact(x)
    return f.exhausted or f.lo != f.hi


def _scan(g: Graph, tainted: set[Var], n: int, prover: Prover, guarded: bool = False) -> None:
    """`guarded`: `g` runs under lane-dependent control (a loop whose bounds, or an `if` whose
    predicate, depend on the lane), so some lanes may not store at all: nothing is provable."""
    for e in g.eqns:
        ins = e.inputs
        if (
            e.primitive is P.tensor_write_p
            and not guarded
            and not any(_varies(x, tainted, prover) for x in ins[:-1])
        ):
            raise CompileError(
                f"every lane of pl.spmd({n}) writes this element of the same tensor (its indices do not depend on "
                "the lane index): the lanes run concurrently and race, the last to land wins",
                e.source,
                rule="lane-race",
                help="compute the index from the lane index, or move the pl.write out of the pl.spmd loop",
            )
        if e.primitive is P.tile_store_p and not guarded:
            dst, offs = ins[-1], ins[1:-1]
            if not _atomic(e) and not any(_varies(x, tainted, prover) for x in (dst, *offs)):
                raise CompileError(
                    f"every lane of pl.spmd({n}) stores this window of the same tensor (its offsets do not "
                    "depend on the lane index): the lanes run concurrently and race, the last to land wins",
                    e.source,
                    rule="lane-race",
                    help="compute the window from the lane index (e.g. out[:, lane * 64:lane * 64 + 64]), "
                    "or move the store out of the pl.spmd loop",
                )
        body = e.params.get("body")
        if isinstance(body, Graph):
            nb = e.params.get("arity", (3, 0, 0))[0]
            control = any(_varies(x, tainted, prover) for x in ins[:nb])
            if any(x in tainted for x in ins[:nb]) and body.params:
                tainted.add(body.params[0])
            for p, a in zip(body.params[1:], ins[nb:]):
                if a in tainted:
                    tainted.add(p)
            _scan(body, tainted, n, prover, guarded or control)
        # a tensor created inside the launch (pl.create_tensor) is each lane's own: lane-dependent
        if e.primitive in (P.get_block_idx_p, P.tensor_create_p) or any(x in tainted for x in ins):
            tainted.update(e.outputs)


def _find_spmd(g: Graph, prover: Prover) -> None:
    for e in g.eqns:
        body = e.params.get("body")
        if not isinstance(body, Graph):
            continue
        if e.params.get("kind") == "spmd":
            n = _trips(e)
            if n is not None and n > 1 and body.params:
                _scan(body, {body.params[0]}, n, prover)
        else:
            _find_spmd(body, prover)


def check_lane_races(g: Graph) -> Graph:
    """Refuse a pl.spmd whose lanes provably store the same window; return `g` unchanged."""
    if not _bypass_for_tests.active and has_loops(g):
        _find_spmd(g, Prover(g))
    return g
