"""Unwritten outputs: a `pl.Out` parameter that no store of the kernel writes is reported when
the kernel is lowered (`UnwrittenOutputWarning`, naming it, at the kernel's `def` line).

Such an output returns whatever its memory held: the caller's array as it was, or, for an
omitted Out, fresh device memory, which holds the poison pattern (docs/safety.md). An analysis,
not a pass: it reads the final graph and changes nothing.

A destination is followed through the views that alias it (tensor.slice / reshape / view /
reinterpret_view, the alias a store returns) and into loop bodies (body parameter i + 1 is loop
operand i + 3: the index comes first, the bounds are not passed in) and the arms of a staged `if`
(a `cond`'s body parameter i is its operand i)."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

from .. import prims as P
from ..core.ir import Graph, Var

__all__ = ["UnwrittenOutputWarning", "unwritten_outputs", "warn_unwritten_outputs"]

_VIEWS = (P.tensor_slice_p, P.tensor_reshape_p, P.tensor_view_p, P.tensor_reinterpret_view_p)
_WRITES = (P.tensor_assign_p, P.tensor_write_p)


class UnwrittenOutputWarning(UserWarning):
    """A `pl.Out` parameter that no store writes: its result bytes are whatever memory held."""


def _written_roots(g: Graph, roots: dict[Var, int], written: set[int], want: int) -> bool:
    """Follow `roots` through `g`, adding the written ones to `written`; True as soon as `want`
    roots are (every output found written: the rest of the kernel cannot change the answer)."""
    for e in g.eqns:
        ins = e.inputs
        if e.primitive in _VIEWS and ins and ins[0] in roots:
            for o in e.outputs:
                roots[o] = roots[ins[0]]
        elif e.primitive is P.tile_store_p and ins and ins[-1] in roots:
            written.add(roots[ins[-1]])
            if len(written) == want:
                return True
            for o in e.outputs:
                roots[o] = roots[ins[-1]]
        elif e.primitive in _WRITES and ins and ins[0] in roots:
            written.add(roots[ins[0]])
            if len(written) == want:
                return True
            for o in e.outputs:
                roots[o] = roots[ins[0]]
        body = e.params.get("body")
        if isinstance(body, Graph):
            # a loop's body params skip its bounds; a `cond`'s are its operands one for one
            pairs = zip(body.params, ins) if e.primitive is P.cond_p else zip(body.params[1:], ins[3:])
            for p, a in pairs:
                if a in roots:
                    roots[p] = roots[a]
            if _written_roots(body, roots, written, want):
                return True
    return False


def unwritten_outputs(g: Graph, outputs: Sequence[int]) -> list[int]:
    """The indices among `outputs` (graph parameter positions) that no store writes."""
    roots = {g.params[i]: i for i in outputs if i < len(g.params)}
    written: set[int] = set()
    _written_roots(g, roots, written, len(roots))
    return [i for i in outputs if i not in written]


def warn_unwritten_outputs(kernel: Any, g: Graph) -> None:
    """Warn once per lowering for each `pl.Out` parameter of `kernel` that `g` never writes."""
    outs = [i for i, p in enumerate(kernel.params) if getattr(p, "is_pure_output", False)]
    if not outs:
        return
    code = getattr(getattr(kernel, "fn", None), "__code__", None)
    for i in unwritten_outputs(g, outs):
        name = kernel.params[i].name
        msg = (
            f"Out parameter {name!r} of kernel {kernel.__name__} is never written by any store: it returns "
            "whatever its memory held (an omitted Out: the poison pattern of fresh device memory, NaN or "
            "-1); help: store into it, or make it an input"
        )
        if code is not None:
            warnings.warn_explicit(msg, UnwrittenOutputWarning, code.co_filename, code.co_firstlineno)
        else:
            warnings.warn(msg, UnwrittenOutputWarning, stacklevel=2)
