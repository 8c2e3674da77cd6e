"""Generator entry of the staged `if`/`else` on a traced value (issue 23 item 3). The vec_ew family of
gen.py draws it through the small hook `branch_lines(...)`: inside its `pl.range` trips, a tile
already bound is rebound in both arms of an `if` on the trip index (two `cond` equations, two
`scf.if`). Nothing here imports gen.py."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

#: arm ops, exact on the vec_ew data (no product: the family's budget of one multiply stays its own)
ARM_OPS = {"add": "np.add", "sub": "np.subtract", "maximum": "np.maximum"}


def branch_lines(
    choice: Callable[[Sequence[Any]], Any], it: str, trips: int, out: str, names: Sequence[str], rnd: str
) -> list[tuple[int, str, str]]:
    """(relative indent, kernel line, reference line) of
    `if it < k: out = pl.<op1>(x, y) else: out = pl.<op2>(x, y)` with k in 1..trips-1, so both arms
    run on some trip; the numpy reference is the same Python `if` on its own trip index."""
    k = int(choice(range(1, trips)))
    lines = [(0, f"if {it} < {k}:", f"if {it} < {k}:")]
    for head in (None, "else:"):
        if head is not None:
            lines.append((0, head, head))
        op, x, y = str(choice(list(ARM_OPS))), str(choice(names)), str(choice(names))
        lines.append((1, f"{out} = pl.{op}({x}, {y})", f"{out} = {ARM_OPS[op]}({x}, {y}){rnd}"))
    return lines
