"""The cross-core pipe of an A2/A3 mixed kernel and the on-chip buffers it reserves (an analysis,
not a pass: it reads a graph and changes nothing).

A kernel whose body pushes across the cores (`tile.tpush_to_aiv` / `tile.tpush_to_aic`, the A2/A3
lowering of `pl.move` between Acc / Vec / Mat) uses one pipe: `dir_mask` (C2V = 1, V2C = 2, both
= 3) and one slot size, the largest pushed tile's bytes. The consumer of each direction reserves a
slot buffer of `slot_size * SLOT_NUM` bytes for the whole kernel: in the vector core's UB for cube
-> vector, in the cube core's L1 for vector -> cube (codegen/pto/split.py emits it as
`pto.reserve_buffer`). The compile-time memory plan (backend/memory_plan.py) and the simulator's
run-time accounting (backend/executor.py) both charge these buffers from `pipe_buffers`.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..core.ir import Graph
from ..core.types import Mem, TensorType, static_dim
from ..prims import vector as VP

#: The FIFO depth of the simulator's pipe (runtime.crosscore.SLOT_NUM; a test keeps them equal).
SLOT_NUM = 8
#: The cross-core directions' bits in `dir_mask` (PyPTO's automatic pipe setup).
C2V, V2C = 1, 2


@dataclass(frozen=True)
class Pipe:
    """The cross-core pipe a split kernel uses: its directions and its slot size in bytes."""

    dir_mask: int
    slot_size: int


def pipe_of(g: Graph) -> Pipe | None:
    """The pipe of a kernel whose body pushes across the cores (an A2/A3 mixed kernel), else None."""
    mask, size = 0, 0
    for e in g.walk():
        if e.primitive in (VP.tpush_to_aiv_p, VP.tpush_to_aic_p):
            mask |= C2V if e.primitive is VP.tpush_to_aiv_p else V2C
            t = e.outputs[0].type
            assert isinstance(t, TensorType)
            n = t.dtype.itemsize
            for d in t.shape:
                n *= static_dim(d)
            size = max(size, n)
    return Pipe(mask, size) if mask else None


@dataclass(frozen=True)
class PipeBuffer:
    """A consumer's slot buffer: its name, on-chip space (runtime names: Vec, Mat) and bytes."""

    name: str
    memory: Mem
    nbytes: int


def pipe_buffers(g: Graph) -> list[PipeBuffer]:
    """The slot buffers the pipe of `g` reserves for the whole kernel (none without a pipe)."""
    pipe = pipe_of(g)
    if pipe is None:
        return []
    n = pipe.slot_size * SLOT_NUM
    out = []
    if pipe.dir_mask & C2V:
        out.append(PipeBuffer("c2v slot buffer", Mem.Vec, n))
    if pipe.dir_mask & V2C:
        out.append(PipeBuffer("v2c slot buffer", Mem.Mat, n))
    return out


__all__ = ["C2V", "SLOT_NUM", "V2C", "Pipe", "PipeBuffer", "pipe_buffers", "pipe_of"]
