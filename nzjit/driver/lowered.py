"""`Lowered`, the result of `kernel.lower(...)`: the traced graph after every pass of the pipeline
(passes/pipeline.py), its PTO text, and `run(*args, after=)` of any stage."""

from __future__ import annotations

from typing import Any

from ..backend.memory_plan import MemoryPlan, check_memory, memory_plan
from ..codegen.pto import emit_pto
from ..core.ir import Graph
from ..core.verifier import verify
from ..errors import api_boundary
from ..passes import pipeline as _pipeline
from ..passes.pipeline import Pass, pipeline
from ..passes.unwritten_outputs import warn_unwritten_outputs
from ..verify.translation import validate
from . import calls


class Lowered:
    """A traced kernel after every pass: `passes`, `ir(after=)`, `pto()`, `run(*args, after=)`."""

    def __init__(self, kernel: Any, traced: Graph, extra: list[tuple[str, Pass]] | None = None) -> None:
        self.kernel = kernel
        self.target = kernel.target.value
        self.graphs: dict[str, Graph] = {"trace": traced}
        passes = pipeline(self.target)
        if extra:  # test-only injection (e.g. a pass that corrupts a coordinate)
            passes = passes + extra
        g = traced
        check = _pipeline.VERIFY
        if check:
            verify(g, "trace")
        for name, fn in passes:
            g = fn(g)
            if check:
                verify(g, name)
            self.graphs[name] = g
        self.passes = [name for name, _ in passes]
        self.final = g
        warn_unwritten_outputs(kernel, g)  # issue 24 item 7: an Out no store writes is reported
        self._pto: str | None = None
        self._memory: MemoryPlan | None = None

    def memory(self) -> MemoryPlan:
        """The compile-time on-chip memory plan of the final graph: peak bytes per space and the
        buffers live there (backend/memory_plan.py); `print(low.memory())` shows it."""
        if self._memory is None:
            self._memory = memory_plan(self.final, self.target)
        return self._memory

    def check_memory(self) -> None:
        """Refuse (CompileError naming the buffers and their lines) a kernel whose memory plan
        exceeds an on-chip space. PTO emission and every run of the final graph call it first, so
        an over-capacity kernel is refused before any of it runs. Its passes' graphs and the plan
        itself can still be inspected."""
        check_memory(self.memory())

    @api_boundary
    def validate(self) -> Any:
        """Translation validation of the NZ accesses (nzjit/verify/translation.py; needs z3:
        `pip install nzjit[verify]`): a certificate per access or a counterexample."""
        return validate(self)

    @api_boundary
    def ir(self, after: str = "MaterializeTensorStrides") -> Graph:
        """The graph after pass `after` ("trace" = before any pass)."""
        try:
            return self.graphs[after]
        except KeyError:
            raise ValueError(f"unknown pass {after!r}; passes are {['trace', *self.passes]}") from None

    @api_boundary
    def pto(self) -> str:
        """The emitted PTO text (codegen/pto.py)."""
        if self._pto is None:
            self.check_memory()
            self._pto = emit_pto(self.final, self.kernel)
        return self._pto

    @api_boundary
    def run(self, *args: Any, after: str | None = None, device: int | None = None) -> Any:
        """Execute the final graph, or the graph after pass `after` (per-pass bisection).

        The backend has a rule for every primitive of every stage, so the graph after "trace"
        runs as a reference interpreter and each later graph shows what its pass changed.
        """
        g = self.final if after is None else self.ir(after)
        return calls.call_lowered(self, g, args, device=device)
