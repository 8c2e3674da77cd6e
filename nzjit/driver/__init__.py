"""The drivers: what runs when an author's entry is called.

* `Kernel` (kernel.py) - a traced InCore kernel; its `CompileCache` (cache.py) maps an argument
  signature to a `Lowered` (lowered.py: the graph after every pass, `pto()`, `run(after=)`) and a
  direct call's signature to its cached call plan;
* `Orchestration` (orchestration.py) - a host entry that records kernel calls, then runs them as
  one program;
* calls.py - the call entries, on the calling convention of backend/call.py and convention.py.

`nzjit.language` holds the author's surface (`@pl.kernel`, `@pl.orchestration`, annotations,
ops); it builds these objects and nothing here imports it back, except for the annotations.
"""

from __future__ import annotations

from .kernel import Kernel
from .lowered import Lowered
from .orchestration import Handle, Orchestration, Program, active_program
from .params import Param, Spec, spec

__all__ = [
    "Kernel",
    "Lowered",
    "Orchestration",
    "Program",
    "Handle",
    "active_program",
    "Param",
    "Spec",
    "spec",
]
