"""PyPTO's explicit loop carries (issue 23 item 6): `pl.range(..., init_values=...)` and `pl.yield_`.

    for i, (acc, m) in pl.range(n, init_values=(acc0, m0)):
        acc2 = pl.add(acc, ...)
        m2 = pl.maximum(m, ...)
        acc_out, m_out = pl.yield_(acc2, m2)    # the next trip's carries; after the loop, its results

The body's carries are its parameters (`acc`, `m`: fresh each trip, never the names before the
loop), and `pl.yield_` must end the body with one value per init value, of the same type. Inside
an `if` arm, `pl.yield_(v)` returns `v` as PyPTO's phi does: the staged `if` joins the names its two
arms bind (language/branch.py). Outside a trace (a host-side helper) it returns its arguments.
The loop itself is tracing/loops.py's (`staged_loop(..., init_values)`).
"""

from __future__ import annotations

from typing import Any

from ..errors import user_source
from ..tracing import in_trace, yield_values


def yield_(*values: Any) -> Any:
    """`pl.yield_(v)` / `pl.yield_(v1, v2, ...)`: a scope's results (one value, or a tuple)."""
    if not in_trace():
        return values[0] if len(values) == 1 else values
    return yield_values(values, user_source())
