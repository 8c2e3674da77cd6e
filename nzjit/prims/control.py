"""Control primitives: the staged loop (`pl.range`, `pl.pipeline`, `pl.spmd`) and the staged `if` arm (`cond`)."""

from __future__ import annotations

from typing import Any

from ..core import dtypes as dt
from ..core.primitives import _fail, primitive
from ..core.types import ScalarType, Type


@primitive("for", ("bounds", "captured", "carries"))
def for_p(*in_types: Type, body: Any, arity: tuple[int, int, int], **_: Any) -> list[Type]:
    """A staged loop: kind range / pipeline / spmd. Outputs are the carries after the last trip."""
    nb, nc, nk = arity
    carries_in = in_types[nb + nc :]
    outs = [v.type for v in body.outputs]
    for i, (a, b) in enumerate(zip(carries_in, outs)):
        if a != b:
            name = body.params[1 + nc + i].hint or f"#{i}"
            raise _fail(
                f"loop-carried value '{name}' changes type from {a} before the loop to {b} "
                "after one iteration; make both sides the same type (e.g. same tile shape "
                "and memory, or pl.cast)"
            )
    return list(carries_in)


@primitive("cond", ("pred", "captured", "carries"))
def cond_p(
    *in_types: Type, body: Any, arity: tuple[int, int, int], negate: bool = False, **_: Any
) -> list[Type]:
    """A staged `if` arm (language/branch.py): `if pred: carries = body(captured, carries)`.

    Operands like a loop's, so that every pass, the verifier and the printer treat its body as they
    treat a loop body: groups ("pred", "captured", "carries") with arity (1, nc, nk); the body's
    params are `[pred, *captured, *carries]`, its outputs the carries after the arm. The result is
    the body's outputs when the condition holds, else the carries unchanged (the implicit else).
    `negate=True` runs the arm when `pred` is False: the `else` arm of a two-armed `if` is the
    equation right after its `then` arm, on the same predicate, negated."""
    nb, nc, nk = arity
    pred = in_types[0]
    if nb != 1 or not (isinstance(pred, ScalarType) and pred.dtype is dt.BOOL):
        raise _fail(f"a staged `if` needs one BOOL condition, got {list(in_types[:nb])}")
    carries = in_types[nb + nc :]
    for i, (a, b) in enumerate(zip(carries, (v.type for v in body.outputs))):
        if a != b:
            name = body.params[1 + nc + i].hint or f"#{i}"
            raise _fail(
                f"'{name}' changes type inside the `if`: {a} before it, {b} after the arm; the "
                "other arm keeps the old value, so both must be the same type"
            )
    return list(carries)
