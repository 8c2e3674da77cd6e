"""The compile-time on-chip memory plan (issue 23 item 8): the peak bytes of every on-chip space
(UB, L1, L0A, L0B, L0C, bias table) that a kernel's final graph holds, and which buffers are live
at each peak.

The plan replays the executor's allocation discipline on the graph, with no data: a tile result
takes its bytes (rounded up to 32 B, as `runtime.OnChip.reserve` charges) in its memory space when
its equation runs. A transposed view shares its source's bytes. A `matmul_acc` / `mad_acc` whose
accumulator dies there updates it in place; otherwise it works on a copy. Every value is released
after its last use (`plan.liveness`, the same table the executor frees by). A loop's carries are
copied when they are read after the loop. Every trip of a body starts with the same live bytes, so
one trip's peak is the loop's, plus a pipeline's extra stage buffers of the tiles its body loads
(double_buffers.py: S - 1 more copies each for `stage=S`, held for the loop). The bias table is a
space like the others (TMOV Mat -> Bias of a bias matmul). A mixed kernel's cross-core pipe slot
buffers (passes/pipe_buffers.py: UB for cube -> vector, L1 for vector -> cube) are held for the
whole kernel. An `if` arm counts as taken. With those rules the plan equals the
simulator's run-time peak of a call that takes every arm, and bounds it otherwise.
`tests/backend/test_memory_plan.py` checks this on every example.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from runtime.memory import CAPACITIES, HW_NAMES

from .. import prims as P
from ..core.dtypes import UINT8
from ..core.ir import Eqn, Graph, Var
from ..core.types import TileType
from ..errors import CompileError, Source
from ..passes.pipe_buffers import pipe_buffers
from .double_buffers import charge, prefetch_buffers, trips_at_least_two
from .plan import liveness
from .rules.vector_alu import reduce_scratch
from .rules.vector_select import sel_scratch

_IN_PLACE = (P.tile_matmul_acc_p, P.tile_mad_acc_p)  # update the accumulator (input 0) when it dies
_VIEWS = (P.tile_transpose_view_p,)


@dataclass(frozen=True)
class Buffer:
    """One on-chip buffer live at a peak: its name, type, bytes and the kernel line that made it."""

    name: str
    type: TileType
    nbytes: int
    source: Source | None

    def __str__(self) -> str:
        where = f"  ({self.source.file}:{self.source.line})" if self.source is not None else ""
        return f"{self.name}: {self.type}  {self.nbytes} B{where}"


@dataclass
class MemoryPlan:
    """Peak bytes per space (runtime names: Vec, Mat, Left, Right, Acc, Bias), the buffers live at
    each peak, and the target's capacities."""

    target: str
    peak: dict[str, int] = field(default_factory=dict)
    at_peak: dict[str, list[Buffer]] = field(default_factory=dict)

    @property
    def capacity(self) -> dict[str, int]:
        """Bytes of each on-chip space on the target."""
        return dict(CAPACITIES[self.target])

    def over(self) -> list[str]:
        """The spaces whose peak exceeds their capacity."""
        return [s for s, n in self.peak.items() if n > self.capacity.get(s, 0)]

    def __str__(self) -> str:
        lines = [f"on-chip memory plan ({self.target}): peak bytes per space"]
        for space, cap in self.capacity.items():
            n = self.peak.get(space, 0)
            if n == 0 and space not in ("Vec", "Mat", "Left", "Right", "Acc", "Bias"):
                continue
            lines.append(f"  {space:5} ({HW_NAMES[space]:3}) {n:8d} / {cap:8d} B  {100 * n / cap:5.1f}%")
            for b in self.at_peak.get(space, []):
                lines.append(f"      {b}")
        return "\n".join(lines)


class _Walk:
    """The replay: live bytes per space and the live buffers, the peak snapshot per space."""

    def __init__(self, plan: MemoryPlan) -> None:
        self.plan = plan
        self.live: dict[str, int] = {}
        self.buffers: dict[Var, Buffer] = {}
        self.owner: dict[Var, Var] = {}  # a value -> the buffer it is (views, in-place results, carries)

    def alloc(self, v: Var, e: Eqn | None) -> None:
        t = v.type
        assert isinstance(t, TileType)
        space = t.memory.value
        b = Buffer(v.hint or "_", t, charge(t), e.source if e is not None else None)
        self.buffers[v] = b
        self.owner[v] = v
        self.live[space] = self.live.get(space, 0) + b.nbytes
        if self.live[space] > self.plan.peak.get(space, 0):
            self.plan.peak[space] = self.live[space]
            self.plan.at_peak[space] = [x for x in self.buffers.values() if x.type.memory.value == space]

    def release(self, v: Var) -> None:
        o = self.owner.pop(v, None)
        if o is None or o is not v and any(x is o for x in self.owner.values()):
            return  # not a buffer, or another value still is this buffer
        for k in [k for k, x in self.owner.items() if x is o]:
            del self.owner[k]
        b = self.buffers.pop(o, None)
        if b is not None:
            space = b.type.memory.value
            self.live[space] -= b.nbytes

    def alias(self, v: Var, of: Var) -> None:
        if of in self.owner:
            self.owner[v] = self.owner[of]

    def graph(self, g: Graph, n_owned: int) -> None:
        free = liveness(g, n_owned)
        # an owned carry the body never reads dies on entry (as the executor's plan releases it)
        read = {a for e in g.eqns for a in e.inputs if isinstance(a, Var)} | set(g.outputs)
        for p in g.params[len(g.params) - n_owned :]:
            if p not in read:
                self.release(p)
        for i, e in enumerate(g.eqns):
            dying = free.get(i, [])
            # consumed (updatable in place): dies here and is read once by this equation
            self.eqn(e, consumed={v for v in dying if sum(1 for b in e.inputs if b is v) == 1})
            for v in dying:
                self.release(v)

    def eqn(self, e: Eqn, consumed: set[Var]) -> None:
        body = e.params.get("body")
        if isinstance(body, Graph):
            self.body(e, body, consumed)
            return
        if e.primitive in _VIEWS and isinstance(e.inputs[0], Var):
            self.alias(e.outputs[0], e.inputs[0])
            return
        acc = e.inputs[0] if e.primitive in _IN_PLACE else None
        for v in e.outputs:
            if isinstance(v.type, TileType):
                if isinstance(acc, Var) and acc in consumed and acc in self.owner:
                    self.alias(v, acc)  # in place: the result is the accumulator's buffer
                else:
                    self.alloc(v, e)
        src = e.inputs[0].type if e.inputs else None
        scratch = reduce_scratch(e, src.shape[1], self.plan.target) if isinstance(src, TileType) else None
        scratch = scratch or sel_scratch(e, self.plan.target)
        if scratch is not None:  # live only while the instruction runs, after its result is allocated
            tmp = Var(scratch, "scratch")
            self.alloc(tmp, e)
            self.release(tmp)

    def body(self, e: Eqn, body: Graph, consumed: set[Var]) -> None:
        # a pipeline's extra stage buffers of the tiles its body loads, held for the whole loop
        stages = []
        if trips_at_least_two(e):
            for v, copies, load in prefetch_buffers(e):
                for i in range(copies):
                    stages.append(Var(v.type, f"{v.hint or '_'} (stage {i + 2} buffer)"))
                    self.alloc(stages[-1], load)
        self.loop(e, body, consumed)
        for v in stages:
            self.release(v)

    def loop(self, e: Eqn, body: Graph, consumed: set[Var]) -> None:
        nb, nc, nk = e.params["arity"]
        for p, a in zip(body.params[1 : 1 + nc], e.inputs[nb : nb + nc]):
            if isinstance(a, Var):
                self.alias(p, a)
        spmd = e.params.get("kind") == "spmd"
        for p, a in zip(body.params[1 + nc :], e.inputs[nb + nc :]):
            if not isinstance(a, Var) or a not in self.owner:
                continue
            if a in consumed:
                self.alias(p, a)
                self.owner.pop(a, None)  # the body owns it now
            else:  # read after the loop: the loop works on a copy
                self.alloc(p, e)
        self.graph(body, 0 if spmd else nk)
        for out, res in zip(body.outputs, e.outputs):
            if isinstance(out, Var) and out in self.owner:
                self.alias(res, out)
                self.owner.pop(out, None)
        for p in body.params[1 : 1 + nc]:
            self.owner.pop(p, None)


def memory_plan(g: Graph, target: str) -> MemoryPlan:
    """The on-chip memory plan of the final graph `g` on `target` (module docstring)."""
    plan = MemoryPlan(target)
    walk = _Walk(plan)
    for b in pipe_buffers(g):  # held for the whole kernel (the split kernel's pto.reserve_buffer)
        walk.alloc(Var(TileType((b.nbytes,), UINT8, b.memory), b.name), None)
    walk.graph(g, 0)
    return plan


def check_memory(plan: MemoryPlan) -> None:
    """Refuse a kernel whose plan exceeds a space: name the buffers live at the peak and their lines."""
    over = plan.over()
    if not over:
        return
    space = over[0]
    cap = plan.capacity[space]
    bufs = sorted(plan.at_peak.get(space, []), key=lambda b: -b.nbytes)
    listing = "; ".join(
        f"'{b.name}' {b.type} ({b.nbytes} B" + (f", line {b.source.line})" if b.source else ")") for b in bufs
    )
    src = bufs[0].source if bufs else None
    raise CompileError(
        f"on-chip memory plan: {space} ({HW_NAMES[space]}) needs {plan.peak[space]} bytes at its "
        f"peak but holds {cap} on {plan.target}; live there: {listing}",
        src,
        rule="memory plan",
        help="load smaller tiles, loop over the rest, or let a tile die before the next is loaded",
    )


__all__ = ["Buffer", "MemoryPlan", "check_memory", "memory_plan"]
