"""The communication primitives of `pld` (PyPTO's distributed language) and their type rules.

A window parameter has type `DistributedTensorType`: a tensor in this rank's GM that peers reach
only through these primitives. Signals are INT32 windows. The side-effect-only operations (notify,
wait, remote_store, put, get) have no results; the collectives return their target (the rebind
idiom `data = pld.tensor.allreduce(data, sig)`), so later reads see the reduced value.

NZ: a distributed NZ tensor is refused (the seed's refusal table, nz-layout.md §7: remote loads
have no NZ blocking); an NZ weight stays a local, stacked argument.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..core import dtypes as dt
from ..core.primitives import primitive
from ..core.types import Layout, Mem, ScalarType, TensorType, TileType, Type
from ..errors import CompileError
from .memory import tile_load_p, tile_store_p

__all__ = ["DistributedTensorType", "NZ_REFUSAL", "ATOMIC_ADD_DTYPES", "check_not_nz"]

NZ_REFUSAL = "distributed tensor: refused — remote_load has no NZ blocking"
NZ_HELP = (
    "keep an NZ weight a local argument (pl.Tensor[..., pl.NZ], sharded with "
    "Cluster.alloc_stacked_tensor) and exchange ND data through windows"
)
# hardware atomic add (PyPTO AtomicType.Add): fp32 / bf16 / fp16 / int32 / int16 / int8 destinations
ATOMIC_ADD_DTYPES = (dt.FP32, dt.BF16, dt.FP16, dt.INT32, dt.INT16, dt.INT8)


@dataclass(frozen=True)
class DistributedTensorType(TensorType):
    """A window-bound tensor (`pld.DistributedTensor`): memory of this rank that peers reach only
    through the communication primitives."""

    def __str__(self) -> str:
        return "dist " + super().__str__()


def check_not_nz(layout: Layout, what: str) -> None:
    """Refuse an NZ window (nz-layout.md §7 table row "distributed (remote) tensor")."""
    if layout is Layout.NZ:
        raise CompileError(f"{what}: {NZ_REFUSAL}", rule="NZ §7", help=NZ_HELP)


def _dist(t: Type, what: str, role: str) -> DistributedTensorType:
    if not isinstance(t, DistributedTensorType):
        raise CompileError(
            f"{what}: the {role} must be a pld.DistributedTensor (a window buffer), got {t}; a "
            "plain tensor is memory of this rank that no peer can reach",
            help="declare the parameter as pld.DistributedTensor[[...], dtype] and pass "
            "pld.window(buf, shape, dtype=...) from the orchestration",
        )
    check_not_nz(t.layout, what)
    return t


def _signal(t: Type, what: str) -> DistributedTensorType:
    s = _dist(t, what, "signal")
    if s.dtype is not dt.INT32:
        raise CompileError(
            f"{what}: a signal is an INT32 window, got {s}",
            help="allocate it with pld.alloc_window_buffer([...], dtype=pl.INT32)",
        )
    return s


def _int_scalars(ts: Sequence[Type], what: str, role: str) -> None:
    for t in ts:
        if not (isinstance(t, ScalarType) and t.dtype.is_int):
            raise CompileError(f"{what}: {role} must be integer scalars, got {t}")


def _offsets(ts: Sequence[Type], rank: int, what: str) -> None:
    if len(ts) != rank:
        raise CompileError(f"{what} into a rank-{rank} window needs {rank} offsets, got {len(ts)}")
    _int_scalars(ts, what, "offsets")


def _groups(ins: Sequence[Type], arity: Sequence[int]) -> list[list[Type]]:
    out, i = [], 0
    for n in arity:
        out.append(list(ins[i : i + n]))
        i += n
    return out


@primitive("comm.rank", ("ctx",))
def comm_rank_p(ctx: Type, **_: Any) -> list[Type]:
    """`pld.rank(ctx)`: this rank's index (INT32); the operand is the window the context came from."""
    _dist(ctx, "pld.rank", "comm context's window")
    return [ScalarType(dt.INT32)]


@primitive("comm.nranks", ("ctx",))
def comm_nranks_p(ctx: Type, **_: Any) -> list[Type]:
    """`pld.nranks(ctx)`: the number of ranks of the comm group (INT32)."""
    _dist(ctx, "pld.nranks", "comm context's window")
    return [ScalarType(dt.INT32)]


@primitive("comm.notify", ("target", "peer", "offsets", "value"))
def comm_notify_p(*ins: Type, op: str, arity: tuple[int, ...], **_: Any) -> list[Type]:
    """`pld.system.notify`: deposit `value` into `peer`'s signal cell (`op`: atomic_add / set)."""
    (target,), peer, offs, value = _groups(ins, arity)
    s = _signal(target, "pld.system.notify")
    _int_scalars(peer + value, "pld.system.notify", "peer and value")
    _offsets(offs, s.rank, "pld.system.notify")
    return []


@primitive("comm.wait", ("signal", "offsets", "expected"))
def comm_wait_p(*ins: Type, cmp: str, arity: tuple[int, ...], **_: Any) -> list[Type]:
    """`pld.system.wait`: block until this rank's signal cell satisfies `cmp` (eq / ge) `expected`."""
    (signal,), offs, expected = _groups(ins, arity)
    s = _signal(signal, "pld.system.wait")
    _int_scalars(expected, "pld.system.wait", "expected")
    _offsets(offs, s.rank, "pld.system.wait")
    return []


@primitive("comm.remote_load", ("target", "peer", "offsets"))
def comm_remote_load_p(
    *ins: Type, shape: tuple[int, ...], arity: tuple[int, ...], valid: tuple[int, ...] | None = None, **_: Any
) -> list[Type]:
    """`pld.tile.remote_load`: a Vec tile of `shape` from `peer`'s window at `offsets`; with a static
    `valid` extent only that part is read (the tile keeps its physical `shape`)."""
    (target,), peer, offs = _groups(ins, arity)
    t = _dist(target, "pld.tile.remote_load", "target")
    _int_scalars(peer, "pld.tile.remote_load", "peer")
    _offsets(offs, t.rank, "pld.tile.remote_load")
    if len(shape) != 2:
        raise CompileError(
            f"pld.tile.remote_load makes a rank-2 tile, got shape {list(shape)}",
            help="view the window as 2-D ([1, SIZE] or [ROWS, COLS])",
        )
    return [TileType(tuple(shape), t.dtype, Mem.Vec, tuple(valid) if valid is not None else None)]


@primitive("comm.remote_store", ("src", "target", "peer", "offsets"))
def comm_remote_store_p(*ins: Type, atomic: bool, arity: tuple[int, ...], **_: Any) -> list[Type]:
    """`pld.tile.remote_store`: write a Vec tile into `peer`'s window (atomic: add to it)."""
    (src,), (target,), peer, offs = _groups(ins, arity)
    t = _dist(target, "pld.tile.remote_store", "target")
    if not (isinstance(src, TileType) and src.memory is Mem.Vec):
        raise CompileError(f"pld.tile.remote_store writes a Vec tile, got {src}")
    if src.dtype is not t.dtype:
        raise CompileError(
            f"pld.tile.remote_store of a {src.dtype!r} tile into a {t.dtype!r} window",
            help="pl.cast the tile to the window's dtype first",
        )
    if atomic and t.dtype not in ATOMIC_ADD_DTYPES:
        raise CompileError(
            f"pld.tile.remote_store atomic=AtomicType.Add needs a "
            f"{'/'.join(d.short for d in ATOMIC_ADD_DTYPES)} window, got {t.dtype!r}"
        )
    _int_scalars(peer, "pld.tile.remote_store", "peer")
    _offsets(offs, t.rank, "pld.tile.remote_store")
    return []


def _transfer(ins: Sequence[Type], arity: Sequence[int], what: str, window_role: str) -> None:
    (dst,), peer, (src,), dst_offs, src_offs = _groups(ins, arity)
    win, local = (dst, src) if window_role == "dst" else (src, dst)
    w = _dist(win, what, window_role)
    if not isinstance(local, TensorType):
        raise CompileError(f"{what}: the {'src' if window_role == 'dst' else 'dst'} is a tensor, got {local}")
    check_not_nz(local.layout, what)
    if local.dtype is not w.dtype:
        raise CompileError(f"{what}: dst and src differ in dtype ({dst} and {src})")
    _int_scalars(peer, what, "peer")
    _offsets(dst_offs, dst.rank, what)  # type: ignore[union-attr]
    _offsets(src_offs, src.rank, what)  # type: ignore[union-attr]


@primitive("comm.put", ("dst", "peer", "src", "dst_offsets", "src_offsets"))
def comm_put_p(
    *ins: Type, shape: tuple[int, ...], atomic: bool, arity: tuple[int, ...], **_: Any
) -> list[Type]:
    """`pld.tensor.put`: copy the `shape` region of local `src` into `peer`'s window `dst`."""
    _transfer(ins, arity, "pld.tensor.put", "dst")
    if atomic and ins[0].dtype not in ATOMIC_ADD_DTYPES:
        raise CompileError(f"pld.tensor.put atomic=AtomicType.Add is not supported for {ins[0].dtype!r}")
    return []


@primitive("comm.get", ("dst", "peer", "src", "dst_offsets", "src_offsets"))
def comm_get_p(*ins: Type, shape: tuple[int, ...], arity: tuple[int, ...], **_: Any) -> list[Type]:
    """`pld.tensor.get`: copy the `shape` region of `peer`'s window `src` into local `dst`."""
    _transfer(ins, arity, "pld.tensor.get", "src")
    return []


@primitive("comm.allreduce", ("target", "signal"))
def comm_allreduce_p(*ins: Type, op: str, arity: tuple[int, ...], **_: Any) -> list[Type]:
    """`pld.tensor.allreduce`: every rank's target becomes the `op` reduction over the ranks."""
    (target,), signal = _groups(ins, arity)
    t = _dist(target, "pld.tensor.allreduce", "target")
    for s in signal:
        _signal(s, "pld.tensor.allreduce")
    return [t]


@primitive("comm.broadcast", ("target", "signal"))
def comm_broadcast_p(target: Type, signal: Type, *, root: int, **_: Any) -> list[Type]:
    """`pld.tensor.broadcast`: every rank's target becomes rank `root`'s."""
    t = _dist(target, "pld.tensor.broadcast", "target")
    _signal(signal, "pld.tensor.broadcast")
    return [t]


@primitive("comm.reduce_scatter", ("target", "signal"))
def comm_reduce_scatter_p(target: Type, signal: Type, *, op: str, **_: Any) -> list[Type]:
    """`pld.tensor.reduce_scatter`: row r of rank r's [NR, ...] target becomes the sum of row r."""
    t = _dist(target, "pld.tensor.reduce_scatter", "target")
    _signal(signal, "pld.tensor.reduce_scatter")
    if op != "sum":
        raise CompileError(
            f"pld.tensor.reduce_scatter supports only ReduceOp.Sum, got ReduceOp.{op.capitalize()}"
        )
    return [t]


def _exchange(local: Type, target: Type, signal: Type, what: str) -> list[Type]:
    t = _dist(target, what, "target")
    _signal(signal, what)
    if not isinstance(local, TensorType):
        raise CompileError(f"{what}: the input is a tensor, got {local}")
    check_not_nz(local.layout, what)
    if local.dtype is not t.dtype:
        raise CompileError(f"{what}: input {local} and target {t} differ in dtype")
    return [t]


@primitive("comm.allgather", ("local", "target", "signal"))
def comm_allgather_p(local: Type, target: Type, signal: Type, **_: Any) -> list[Type]:
    """`pld.tensor.allgather`: row src of every rank's [NR, ...] target becomes rank src's chunk."""
    return _exchange(local, target, signal, "pld.tensor.allgather")


@primitive("comm.all_to_all", ("input", "target", "signal"))
def comm_all_to_all_p(local: Type, target: Type, signal: Type, **_: Any) -> list[Type]:
    """`pld.tensor.all_to_all`: row src of rank d's target becomes row d of rank src's input."""
    return _exchange(local, target, signal, "pld.tensor.all_to_all")


@primitive("comm.barrier", ("signal",))
def comm_barrier_p(signal: Type, **_: Any) -> list[Type]:
    """`pld.tensor.barrier`: every rank waits for all; returns the signal (rebind idiom)."""
    return [_signal(signal, "pld.tensor.barrier")]


# The backend's instrumented forms of a local store into / load from this rank's own window
# (backend/comm_instrument.py): the same operands and type rules as tile.store / tile.load, so the
# race detector sees exactly which bytes a kernel writes or reads. Never in a compiled graph.
def _instrumented(name: str, of: Any) -> Any:
    return primitive(name, of.groups)(of.type_rule)


comm_window_store_p = _instrumented("comm.window_store", tile_store_p)
comm_window_load_p = _instrumented("comm.window_load", tile_load_p)
