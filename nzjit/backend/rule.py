"""The rule table: how the backend executes each primitive, one `Rule` per primitive.

A rule has up to three forms of the same semantics, written side by side in one module of
`rules/` (one module per family):

* ``impl(ctx, eqn, ins) -> outs`` - the reference implementation, required. It runs at every
  stage of the pipeline (`low.run(after=PASS)`) and is what ``Options(fast=False)`` runs.
* ``specialize(step) -> run | None`` - optional: the pre-bound fast step. Called once when a
  plan is built, with the plan `Step` (equation, input / output slots, dying slots, options);
  returns ``run(ctx, env)`` - reads its inputs from the slot list `env`, stores its results and
  releases the dying slots (`steps.finish` does both) - or None to keep the generic step. A run
  that meets a value it was not built for calls ``step.generic(ctx, env)``.
* ``batch(step) -> lane_step | None`` - optional: every SPMD lane (or carry-free trip) at once,
  ``lane_step(state, env)`` on lane values (`lane_values`); it raises `lane_state.Fallback` when
  this run cannot be exact. A body is planned lane-batched when every equation has one. A lane
  step marked `lane_state.replays` (it writes lane buffers only through `LaneState.do`, deciding
  nothing from their bytes) lets its body be recorded once per call signature and replayed
  (lane_replay.py); a body with an unmarked step keeps stepping.

Registering::

    from ..rule import rule

    @rule(P.tile_move_p)                              # impl only: all a new primitive needs
    def _move(ctx, e, ins): ...                       # -> the list of its results

    @rule(P.tile_load_p, specialize=_specialize_load, batch=_batch_load)   # with the optional forms

or ``register(prim, Rule(impl=..., specialize=..., batch=...))``. `impl_rules` is the table
seen as ``primitive -> impl``: ``impl_rules[p] = fn`` registers an impl-only rule (a replaced
impl drops the old fast forms, which implemented the old semantics).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, MutableMapping
from dataclasses import dataclass, field
from typing import Any

from .. import prims as P
from ..core.ir import Eqn, Var

Impl = Callable[[Any, Eqn, list[Any]], list[Any]]
Run = Callable[[Any, list[Any]], None]


@dataclass
class Step:
    """One equation of a plan, as a rule's `specialize` / `batch` sees it.

    `ins` / `outs` are slots of the environment list; `free` the slots whose value dies here
    (`free_after` their values), `consumed` the input positions whose value dies here (so an
    impl may update it in place), `window` marks a TEXTRACT whose only reader is the next mad.
    `generic` is the step through the reference impl; `plan_of(graph, n_owned)` gives a loop
    body's plan under the same options."""

    eqn: Eqn
    impl: Impl
    free_after: tuple[Var, ...]
    consumed: frozenset[int]
    ins: tuple[int, ...] = ()
    outs: tuple[int, ...] = ()
    free: tuple[int, ...] = ()
    window: bool = False
    options: Any = None
    plan_of: Callable[[Any, int], Any] | None = None
    generic: Run = field(default=None)  # type: ignore[assignment]


@dataclass(frozen=True)
class Rule:
    """The execution of one primitive: the reference `impl`, the optional pre-bound `specialize`
    and the optional all-lanes `batch` (see the module docstring)."""

    impl: Impl
    specialize: Callable[[Step], Run | None] | None = None
    batch: Callable[[Step], Any] | None = None
    #: the primitive is a cube product, whose numpy forms call BLAS: a launch of a graph holding
    #: one runs BLAS on one thread (executor.run_graph), since on some CPUs a product's bits
    #: depend on BLAS's threads
    multiplies: bool = False


RULES: dict[P.Primitive, Rule] = {}


def register(prims: P.Primitive | tuple[P.Primitive, ...], r: Rule) -> Rule:
    """Make `r` the rule of each primitive in `prims` (replacing any earlier one)."""
    for p in prims if isinstance(prims, tuple) else (prims,):
        RULES[p] = r
    return r


def rule(
    *prims: P.Primitive,
    specialize: Callable[[Step], Run | None] | None = None,
    batch: Callable[[Step], Any] | None = None,
    multiplies: bool = False,
) -> Callable[[Impl], Impl]:
    """Decorator: register the decorated impl (with the optional forms) as the rule of `prims`."""

    def deco(fn: Impl) -> Impl:
        register(tuple(prims), Rule(fn, specialize, batch, multiplies))
        return fn

    return deco


def rule_of(p: P.Primitive) -> Rule | None:
    """The registered rule of `p`, or None."""
    return RULES.get(p)


class _ImplTable(MutableMapping[P.Primitive, Impl]):
    """`RULES` as ``primitive -> impl`` (setting an entry registers an impl-only rule)."""

    def __getitem__(self, p: P.Primitive) -> Impl:
        return RULES[p].impl

    def __setitem__(self, p: P.Primitive, fn: Impl) -> None:
        old = RULES.get(p)  # a product stays a product (`multiplies` is the primitive's)
        RULES[p] = Rule(fn, multiplies=old is not None and old.multiplies)

    def __delitem__(self, p: P.Primitive) -> None:
        del RULES[p]

    def __iter__(self) -> Iterator[P.Primitive]:
        return iter(RULES)

    def __len__(self) -> int:
        return len(RULES)


impl_rules: MutableMapping[P.Primitive, Impl] = _ImplTable()


def impl(*prims: P.Primitive) -> Callable[[Impl], Impl]:
    """Decorator: an impl-only rule for `prims` (the same as `rule(*prims)`)."""
    return rule(*prims)


__all__ = ["Rule", "Step", "RULES", "register", "rule", "rule_of", "impl_rules", "impl", "Impl", "Run"]
