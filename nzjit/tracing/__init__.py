"""Tracing: tracer objects stage a Python kernel into a Graph, once (never parsing its source; an
if/else that ends the kernel has its `else` arm traced by a second call that starts there,
language/branch.py).

A `Tracer` is a mutable handle on a Var of a trace frame. Every staged loop opens a child frame;
values of enclosing frames used in a body are captured as explicit body inputs (closure
conversion), so a loop-carried value is only a change of one operand list. Which names a loop
rebinds is read, read-only, from the kernel frame's locals when the loop opens and closes; the
`for` statement's bytecode (read, never rewritten) names the body line of a refusal and tells
whether a carry that starts as a Python number was read, in which case the body is traced a second
time with the name standing for the carry (see "loops" below). After tracing, carries and captures
a loop neither reads nor returns to a reader are dropped (`prune`).
"""

from .bind import bind, defining_eqn, lift, literal, to_atom
from .frames import TraceFrame, TraceState, current_state, in_trace
from .loops import Carry, staged_loop, yield_values
from .run import trace
from .tracer import Operators, Tracer

__all__ = [
    "Carry",
    "Operators",
    "TraceFrame",
    "TraceState",
    "Tracer",
    "bind",
    "current_state",
    "defining_eqn",
    "in_trace",
    "lift",
    "literal",
    "staged_loop",
    "to_atom",
    "trace",
    "yield_values",
]
