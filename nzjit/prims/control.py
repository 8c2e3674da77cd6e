"""Control primitives: the staged loop (`pl.range`, `pl.pipeline`, `pl.spmd`)."""

from __future__ import annotations

from typing import Any

from ..core.primitives import _fail, primitive
from ..core.types import Type


@primitive("for", ("bounds", "captured", "carries"))
def for_p(*in_types: Type, body: Any, arity: tuple[int, int, int], **_: Any) -> list[Type]:
    """A staged loop: kind range / pipeline / spmd. Outputs are the carries after the last trip."""
    nb, nc, nk = arity
    carries_in = in_types[nb + nc :]
    outs = [v.type for v in body.outputs]
    for i, (a, b) in enumerate(zip(carries_in, outs)):
        if a != b:
            name = body.params[1 + nc + i].hint or f"#{i}"
            raise _fail(f"loop-carried value '{name}' changes type from {a} before the loop to {b} "
                        "after one iteration; make both sides the same type (e.g. same tile shape "
                        "and memory, or pl.cast)")
    return list(carries_in)
