"""PTO text emission: `emit_pto(graph, kernel)` turns the final lowered graph into the PTO-IR text the
assembler (PTOAS) consumes (nz-layout.md §10; api.md "Codegen text rules").

Per-primitive emission is the table `pto_rules` (one entry per primitive of `nzjit.prims`), like
the backend's `impl_rules`, written one module per primitive family: `scalar`, `loops`, `control`
(the staged `if`), `memory`, `cube`, `elementwise`, `vector` (the rest of the vector unit), `comm`
(pld's communication, issue 28); `emitter` holds the per-function state they write through. The text it
writes, and why:

- A mixed cube + vector kernel on A2/A3 (one with cross-core pipe equations) is two functions,
  `@<kernel>_aic` and `@<kernel>_aiv`, with the pipe setup (split.py); every other kernel is one:
- `func.func @<kernel>(%arg<i>: !pto.ptr<dt>, %<name>: <type>, ..., %<dim>: index)`: tensor
  parameter i is the pointer `%arg<i>`, a scalar parameter keeps its kernel name, and each dynamic
  dimension (`pl.dynamic("B")`) is a trailing `index` argument `%B`.
- One `pto.make_tensor_view` per tensor parameter, at the top. Its shape, its
  `!pto.tensor_view<?x...>` type and every `pto.partition_view` of it take their rank from the
  TensorType shape, so the three sites agree by construction (NZ-14); a blocked NZ view is rank 5
  (NZ-6). Strides are the type's materialised strides, else the same row-major rule (NZ-7).
  Slices of a tensor (`w[layer]`, blocked batch slices) emit nothing: their offsets are folded
  into the partition views of the loads and stores that read through them.
- Every partition offset that is not a constant passes through `arith.maxsi <x>, %c0`: the clamp
  the device applies (NZ-18). A constant offset is clamped at compile time (negative literal
  offsets were refused by the passes), which is why §10 shows `offsets = [%c0, ...]`.
- Tiles are destinations: `%t = pto.alloc_tile : !pto.tile_buf<...>`, then the instruction writes
  `outs(%t : ...)`. The tile layout follows its memory (pto_types.TILE_LAYOUTS); a transpose view
  is `pto.treshape` to the transposed layout, the same bytes (NZ of [N, K] is ZN of [K, N]).
- Index arithmetic is `arith.*i`; `//` is `arith.floordivsi` (floor, NZ-19). `%` is
  `arith.remsi` (truncating) plus the fix-up that makes it a floor modulo:
  `select(rem != 0 && (rem < 0) != (k < 0), rem + k, rem)` with `arith.cmpi` / `andi` / `select`.
  Integer constants are `%c<value>` (index) or `%c<value>_<type>`, hoisted to the function top.
- Loops are `scf.for` with `iter_args` for carried scalars and tiles; a carried tensor is an alias
  of the one it was stored into, so it is not an iter_arg. A pipelined loop keeps its stage count
  as `{pto.pipeline_stages = N}`.
- SPMD: when the kernel is one `pl.spmd(n)` over its whole body (nothing outside it stores), the
  lanes are the launch's blocks: `%lane = pto.get_block_idx : index` and the function carries
  `pto.block_dim = n`. Any other SPMD loop (nested, dynamic, or beside other stores) runs as an
  `scf.for` over its lanes, which is what the numpy backend does. Inside a lane
  `pl.get_block_idx()` is the lane and `pl.get_block_num()` the lane count; outside, 0 and 1.
- An Acc store into a blocked NZ target (`nz_partition` on tile.store, NZ-20) partitions the
  rank-5 view with those explicit sizes; with the view's row-major strides that is the
  assembler's `GlobalTensor<float, Shape<1,2,4,16,8>, Stride<1024,512,128,8,1>, Layout::NZ>`.
"""

from __future__ import annotations

from typing import Any

from ...core.dtypes import BOOL
from ...core.ir import Graph, Var
from ...core.types import DynDim, ScalarType, TensorType, Type
from ...errors import InternalError
from ..pto_types import pointer_type
from . import comm, control, cube, elementwise, memory, scalar, select, split, vector  # noqa: F401 - each registers its family's pto_rules
from .emitter import Emitter, Lane, Tile, View, pto_rules, rule
from .loops import launch_loop

__all__ = ["Emitter", "Lane", "Tile", "View", "emit_pto", "launch_loop", "pto_rules", "rule"]


def _signature(em: Emitter, g: Graph) -> list[str]:
    """Function arguments; tensor params get their make_tensor_view (emitted at the top)."""
    args: list[str] = []
    tensors: list[tuple[Var, str]] = []
    for i, p in enumerate(g.params):
        if isinstance(p.type, TensorType):
            ptr = em.names.exact(f"arg{i}")
            args.append(f"{ptr}: {pointer_type(p.type.dtype)}")
            tensors.append((p, ptr))
        else:
            args.append(f"{em.define(p, 's')}: {_type(p.type)}")
    for p in g.params:
        for d in p.type.shape if isinstance(p.type, TensorType) else ():
            if isinstance(d, DynDim) and d.name not in em.dims:
                em.dims[d.name] = em.names.fresh(d.name)
                args.append(f"{em.dims[d.name]}: index")
    for p, ptr in tensors:
        em.env[p] = em.make_view(ptr, p.hint or ptr[1:], p.type)  # type: ignore[arg-type]
    return args


def _type(t: Type) -> str:
    if isinstance(t, ScalarType):
        return "i1" if t.dtype is BOOL else t.dtype.short
    raise InternalError(f"codegen: parameter of type {t} has no PTO argument form")


def emit_pto(graph: Graph, kernel: Any = None) -> str:
    """The PTO text of one kernel (see the module docstring for every choice it makes); a mixed
    cube + vector kernel on A2/A3 is its AIC and AIV functions (split.py)."""
    name = getattr(kernel, "__name__", None) or graph.name
    sides = split.split(graph)
    if sides is not None:
        pipe = split.pipe_of(graph)
        assert pipe is not None
        return split.emit_split(name, sides, pipe, _function)
    return _function(graph, name)


def _function(graph: Graph, name: str, kind: str | None = None, setup: Any = None) -> str:
    """One `func.func`: a whole kernel, or one side (`kind` cube / vector, `setup` its pipe setup)."""
    em = Emitter()
    args = _signature(em, graph) + memory.scratch_arguments(em, graph)
    if kind is not None:
        args.append(f"{split.GM_PIPE_BUFFER}: !pto.ptr<f32>")
    em.launch = launch_loop(graph)
    if setup is not None:
        setup(em)
    em.eqns(graph.eqns)
    attrs = []
    if em.launch is not None:
        attrs.append(f"pto.block_dim = {int(em.launch.inputs[1].value)} : i64")  # type: ignore[union-attr]
    if kind is not None:
        attrs.append(f"pto.kernel_kind = #pto.kernel_kind<{kind}>")
    spelled = f" attributes {{{', '.join(attrs)}}}" if attrs else ""
    head = f"func.func @{name}({', '.join(args)}){spelled} {{"
    return "\n".join([head, *em.const_lines, *em.lines, "  return", "}"]) + "\n"
