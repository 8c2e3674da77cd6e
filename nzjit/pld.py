"""PyPTO's distributed language: `from nzjit import pld` (names and signatures of
`pypto.language.distributed`).

In an `@pl.orchestration` body (plain Python, run once per call):

    data_buf = pld.alloc_window_buffer([1, SIZE], dtype=pl.FP32)      # per rank, zeroed
    for r in range(pld.world_size()):                                 # an int here
        step(x[r], y[r], pld.window(data_buf, [1, SIZE], dtype=pl.FP32), device=r)

In a `@pl.kernel`, a `pld.DistributedTensor[[...], dtype]` parameter is this rank's memory of the
window; peers reach it only through `pld.system.notify` / `wait`, `pld.tile.remote_load` /
`remote_store`, `pld.tensor.put` / `get` and the collectives `pld.tensor.allreduce`, `allgather`,
`reduce_scatter`, `all_to_all`, `barrier`. The ranks run concurrently on the simulated cluster; a
hang or a race between ranks is reported (runtime/comm.py), never hung. See docs/distributed.md.
"""

from __future__ import annotations

import enum
import math
import re
import types as _types
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from . import prims as P
from .backend import comm_run as _run
from .core import dtypes as dt
from .core.types import Layout, Mem, ScalarType, TensorType, TileType, static_dim
from .driver.calls import active_program
from .errors import CompileError, user_source
from .language.annotations import Tensor as _Tensor
from .language.annotations import TensorAnnotation
from .language.ops import _check_tile_geometry, _check_window, _offsets
from .pld_enums import AtomicType, NotifyOp, ReduceOp, WaitCmp
from .prims import comm as PC
from .tracing import Tracer, bind, in_trace, literal

__all__ = [
    "DistributedTensor",
    "CommCtx",
    "NotifyOp",
    "WaitCmp",
    "ReduceOp",
    "AtomicType",
    "alloc_window_buffer",
    "window",
    "get_comm_ctx",
    "rank",
    "nranks",
    "world_size",
    "system",
    "tensor",
    "tile",
    "remote_load",
    "remote_store",
]


# ------------------------------------------------------------------------------------ types
@dataclass(frozen=True)
class DistributedAnnotation(TensorAnnotation):
    """`pld.DistributedTensor[[dims], dtype]`: a window parameter (also inside pl.InOut / pl.Out)."""

    @property
    def type(self) -> P.DistributedTensorType:
        """The parameter's IR type."""
        return P.DistributedTensorType(self.shape, self.dtype, self.layout)


class _DistributedFactory:
    def __getitem__(self, item: Any) -> DistributedAnnotation:
        if not isinstance(item, tuple) or len(item) not in (2, 3):
            raise TypeError("write pld.DistributedTensor[[d0, d1, ...], dtype]")
        layout = item[2] if len(item) == 3 else Layout.ND
        if layout is Layout.NZ:  # the seed's refusal table: remote loads have no NZ blocking
            PC.check_not_nz(layout, "pld.DistributedTensor")
        ann = _Tensor[item[0], item[1]]  # the same dimension / dtype checks as pl.Tensor
        return DistributedAnnotation(ann.shape, ann.dtype, Layout.ND, ann.direction)


DistributedTensor = _DistributedFactory()


@dataclass(frozen=True)
class CommCtx:
    """`pld.get_comm_ctx(window)`: the communication context of a window, for `rank` / `nranks`."""

    window: Tracer


def _where() -> Any:
    return user_source(2)


def _dist(x: Any, what: str, role: str = "operand") -> Tracer:
    if not (isinstance(x, Tracer) and isinstance(x.type, P.DistributedTensorType)):
        got = x.type if isinstance(x, Tracer) else type(x).__name__
        raise CompileError(
            f"{what}: the {role} must be a pld.DistributedTensor (a window), got {got}",
            _where(),
            help="declare the parameter as pld.DistributedTensor[[...], dtype]",
        )
    return x


def _in_kernel(what: str) -> None:
    if not in_trace():
        raise CompileError(
            f"{what} is a kernel operation (inside @pl.kernel); an orchestration body only "
            "allocates window buffers and passes pld.window views to kernels",
            _where(),
        )


def _enum(x: Any, cls: type[enum.Enum], what: str, kw: str) -> str:
    if not isinstance(x, cls):
        names = ", ".join(f"pld.{cls.__name__}.{m.name}" for m in cls)
        raise CompileError(f"{what}: {kw}= takes {names}, got {x!r}", _where())
    return str(x.value)


# ----------------------------------------------------------------------- orchestration side
def alloc_window_buffer(size: Any, *, dtype: dt.DType | None = None, name: str = "") -> _run.WindowBuffer:
    """A window buffer of `size` bytes per rank (or `alloc_window_buffer(shape, dtype=)`: prod(shape) x
    the dtype's bytes), zeroed when the program runs. Only in an `@pl.orchestration` body."""
    if active_program() is None:
        raise CompileError(
            "pld.alloc_window_buffer is called in an @pl.orchestration body (window buffers "
            "belong to one run of the program)",
            _where(),
        )
    if isinstance(size, Sequence) and not isinstance(size, str):
        if dtype is None:
            raise CompileError(
                "pld.alloc_window_buffer(shape, dtype=...) needs the dtype for a shape", _where()
            )
        shape = [int(d) for d in size]
        if not shape or any(d <= 0 for d in shape):
            raise CompileError(
                f"pld.alloc_window_buffer shape {shape} must be non-empty with positive dims", _where()
            )
        nbytes, grain = math.prod(shape) * dtype.itemsize, dtype.itemsize
    else:
        if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
            raise CompileError(
                f"pld.alloc_window_buffer size is a positive number of BYTES, got {size!r}",
                _where(),
                help="use the shape form alloc_window_buffer([NR, SIZE], dtype=pl.FP32)",
            )
        nbytes, grain = int(size), 1
    return _run.WindowBuffer(nbytes, name or _assigned_name() or f"window_{nbytes}b", grain)


def _assigned_name() -> str | None:
    """The name a buffer is assigned to on its line (`data_buf = pld.alloc_window_buffer(...)`), as
    PyPTO's parser injects it: messages then name the window as the program does."""
    src = user_source(2)
    m = re.match(r"\s*([A-Za-z_]\w*)\s*=[^=]", src.text) if src is not None else None
    return m.group(1) if m else None


def window(buf: _run.WindowBuffer, shape: Sequence[int], *, dtype: dt.DType) -> _run.WindowView:
    """`buf` seen as a dense `shape` / `dtype` tensor: pass it to a pld.DistributedTensor parameter."""
    if not isinstance(buf, _run.WindowBuffer):
        raise CompileError(
            f"pld.window takes a buffer of pld.alloc_window_buffer, got {type(buf).__name__}", _where()
        )
    shp = tuple(int(d) for d in shape)
    need = math.prod(shp) * dtype.itemsize
    if need > buf.nbytes:
        raise CompileError(
            f"pld.window({buf.name}, {list(shp)}, dtype={dtype!r}) needs {need} bytes; the buffer "
            f"has {buf.nbytes} bytes per rank",
            _where(),
            help="alloc_window_buffer's size is in bytes: use its shape form",
        )
    if buf.grain == 1:
        buf.grain = dtype.itemsize  # a byte buffer's element size: its first view's
    return _run.WindowView(buf, shp, dtype)


def world_size() -> int:
    """The number of ranks (an int in an orchestration body; host-only, as in PyPTO)."""
    if in_trace():
        raise CompileError(
            "pld.world_size() is host-only; in a kernel use pld.nranks(pld.get_comm_ctx(window))", _where()
        )
    n = _run.world_size_hint()
    if n is None:
        raise CompileError(
            "pld.world_size() needs the cluster: call the orchestration with cluster=runtime.Cluster(n) "
            "(or StackedDeviceTensor arguments)",
            _where(),
        )
    return n


# ------------------------------------------------------------------------------ kernel side
def get_comm_ctx(dist_tensor: Any) -> CommCtx:
    """The communication context of a window (a plain tensor is refused)."""
    _in_kernel("pld.get_comm_ctx")
    return CommCtx(_dist(dist_tensor, "pld.get_comm_ctx"))


def _ctx(ctx: Any, what: str) -> Tracer:
    if not isinstance(ctx, CommCtx):
        raise CompileError(
            f"{what} takes the context of pld.get_comm_ctx(window), got {type(ctx).__name__}", _where()
        )
    return ctx.window


def rank(ctx: CommCtx) -> Tracer:
    """This rank's index (INT32)."""
    _in_kernel("pld.rank")
    return bind(P.comm_rank_p, [[_ctx(ctx, "pld.rank")]])[0]


def nranks(ctx: CommCtx) -> Tracer:
    """The number of ranks (INT32)."""
    _in_kernel("pld.nranks")
    return bind(P.comm_nranks_p, [[_ctx(ctx, "pld.nranks")]])[0]


def _scalar(x: Any, what: str, role: str) -> Any:
    if isinstance(x, Tracer):
        if not (isinstance(x.type, ScalarType) and x.type.dtype.is_int):
            raise CompileError(f"{what}: {role} must be an integer scalar, got {x.type}", _where())
        return x
    if isinstance(x, bool) or not isinstance(x, int):
        raise CompileError(f"{what}: {role} must be an int or a traced integer, got {x!r}", _where())
    return x


def _i32(x: Any, what: str, role: str) -> Any:
    """A signal value as INT32 (the signal cells' type): a constant as an INT32 literal, another integer
    scalar converted."""
    x = _scalar(x, what, role)
    if isinstance(x, Tracer):
        return x if x.type.dtype is dt.INT32 else bind(P.convert_p, [[x]], {"dtype": dt.INT32})[0]
    if not -(1 << 31) <= x < (1 << 31):
        raise CompileError(f"{what}: {role} {x} does not fit the INT32 signal cell", _where())
    return literal(x, dt.INT32)


def notify(target: Any, peer: Any, offsets: Sequence[Any], value: Any, *, op: NotifyOp) -> None:
    """Deposit `value` into `peer`'s signal cell `target[offsets]` (op: NotifyOp.AtomicAdd / Set)."""
    _in_kernel("pld.system.notify")
    o = _enum(op, NotifyOp, "pld.system.notify", "op")
    bind(
        P.comm_notify_p,
        [
            [_dist(target, "pld.system.notify", "target")],
            [_scalar(peer, "notify", "peer")],
            _offsets(offsets, "pld.system.notify"),
            [_i32(value, "pld.system.notify", "value")],
        ],
        {"op": o},
    )


def wait(signal: Any, offsets: Sequence[Any], expected: Any, *, cmp: WaitCmp) -> None:
    """Block this rank until its signal cell `signal[offsets]` satisfies cmp (WaitCmp.Eq / Ge) `expected`."""
    _in_kernel("pld.system.wait")
    c = _enum(cmp, WaitCmp, "pld.system.wait", "cmp")
    bind(
        P.comm_wait_p,
        [
            [_dist(signal, "pld.system.wait", "signal")],
            _offsets(offsets, "pld.system.wait"),
            [_i32(expected, "pld.system.wait", "expected")],
        ],
        {"cmp": c},
    )


def remote_load(
    target: Any,
    peer: Any,
    offsets: Sequence[Any],
    shape: Sequence[int],
    valid_shape: Sequence[Any] | None = None,
) -> Tracer:
    """A Vec tile of `shape` loaded from `peer`'s window `target` at `offsets`."""
    _in_kernel("pld.tile.remote_load")
    t = _dist(target, "pld.tile.remote_load", "target")
    offs = _offsets(offsets, "pld.tile.remote_load")
    shp = tuple(int(s) for s in shape)
    valid = None
    if valid_shape is not None:
        if len(valid_shape) != len(shp) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in valid_shape
        ):
            raise CompileError(
                "pld.tile.remote_load valid_shape takes one static int per tile axis (a dynamic "
                "extent is not supported yet)",
                _where(),
            )
        valid = tuple(int(v) for v in valid_shape)
        if any(not 0 < v <= s for v, s in zip(valid, shp)):
            raise CompileError(
                f"pld.tile.remote_load valid_shape {list(valid)} must lie within shape {list(shp)}", _where()
            )
    ttype: TensorType = t.type  # type: ignore[assignment]
    ext = [1] * (ttype.rank - 2) + list(valid or shp) if ttype.rank >= 2 else list((valid or shp)[-1:])
    if len(offs) == ttype.rank:
        _check_window("pld.tile.remote_load", offs, ext, ttype.shape)
    _check_tile_geometry("pld.tile.remote_load", shp, ttype.dtype, Mem.Vec)
    params: dict[str, Any] = {"shape": shp} if valid is None else {"shape": shp, "valid": valid}
    return bind(P.comm_remote_load_p, [[t], [_scalar(peer, "remote_load", "peer")], offs], params)[0]


def tile_remote_store(
    src_tile: Any, target: Any, peer: Any, offsets: Sequence[Any], *, atomic: AtomicType = AtomicType.None_
) -> None:
    """Write a Vec tile into `peer`'s window `target` at `offsets` (atomic=AtomicType.Add: add to it)."""
    _in_kernel("pld.tile.remote_store")
    a = _enum(atomic, AtomicType, "pld.tile.remote_store", "atomic") == "add"
    t = _dist(target, "pld.tile.remote_store", "target")
    ttype = t.type
    assert isinstance(ttype, P.DistributedTensorType)  # _dist checked it
    offs = _offsets(offsets, "pld.tile.remote_store")
    if isinstance(src_tile, Tracer) and isinstance(src_tile.type, TileType) and len(offs) == ttype.rank:
        tt: TileType = src_tile.type
        ext = ([1] * (ttype.rank - 2) + list(tt.shape)) if ttype.rank >= 2 else list(tt.shape[-1:])
        _check_window("pld.tile.remote_store", offs, ext, ttype.shape)
    bind(
        P.comm_remote_store_p, [[src_tile], [t], [_scalar(peer, "remote_store", "peer")], offs], {"atomic": a}
    )


def _region(t: Tracer, offsets: Sequence[Any] | None, what: str) -> list[Any]:
    return _offsets(offsets, what) if offsets is not None else [0] * t.type.rank  # type: ignore[union-attr]


def put(
    dst: Any,
    peer: Any,
    src: Any,
    dst_offsets: Sequence[Any] | None = None,
    src_offsets: Sequence[Any] | None = None,
    shape: Sequence[int] | None = None,
    *,
    atomic: AtomicType = AtomicType.None_,
    chunk_rows: int = 0,
    chunk_cols: int = 0,
    pipeline: bool = False,
) -> None:
    """Copy local `src` (its `shape` region, default all) into `peer`'s window `dst`."""
    _in_kernel("pld.tensor.put")
    _check_chunks(chunk_rows, chunk_cols, pipeline, "pld.tensor.put")
    a = _enum(atomic, AtomicType, "pld.tensor.put", "atomic") == "add"
    d = _dist(dst, "pld.tensor.put", "dst")
    shp = tuple(int(s) for s in (shape if shape is not None else src.type.shape))
    bind(
        P.comm_put_p,
        [
            [d],
            [_scalar(peer, "put", "peer")],
            [src],
            _region(d, dst_offsets, "pld.tensor.put"),
            _region(src, src_offsets, "pld.tensor.put"),
        ],
        {"shape": shp, "atomic": a},
    )


def get(
    dst: Any,
    peer: Any,
    src: Any,
    dst_offsets: Sequence[Any] | None = None,
    src_offsets: Sequence[Any] | None = None,
    shape: Sequence[int] | None = None,
    *,
    chunk_rows: int = 0,
    chunk_cols: int = 0,
    pipeline: bool = False,
) -> None:
    """Copy the `shape` region (default all) of `peer`'s window `src` into local `dst`."""
    _in_kernel("pld.tensor.get")
    _check_chunks(chunk_rows, chunk_cols, pipeline, "pld.tensor.get")
    s = _dist(src, "pld.tensor.get", "src")
    s_type = s.type
    assert isinstance(s_type, P.DistributedTensorType)  # _dist checked it
    shp = tuple(int(x) for x in (shape if shape is not None else map(static_dim, s_type.shape)))
    bind(
        P.comm_get_p,
        [
            [dst],
            [_scalar(peer, "get", "peer")],
            [s],
            _region(dst, dst_offsets, "pld.tensor.get"),
            _region(s, src_offsets, "pld.tensor.get"),
        ],
        {"shape": shp},
    )


def _check_chunks(rows: int, cols: int, pipeline: bool, what: str) -> None:
    """PyPTO's staging-tile knobs: static non-negative ints; pipeline needs both chunk dims. The
    simulator moves the whole region at once, so they change no result."""
    for name, v in (("chunk_rows", rows), ("chunk_cols", cols)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise CompileError(f"{what} {name} must be a non-negative int (0 = full), got {v!r}", _where())
    if pipeline and not (rows > 0 and cols > 0):
        raise CompileError(f"{what} pipeline=True requires both chunk_rows > 0 and chunk_cols > 0", _where())


def allreduce(
    target: Any, signal: Any = None, *, op: ReduceOp = ReduceOp.Sum, mode: str = "mesh", core_num: int = 1
) -> Tracer:
    """Every rank's window `target` becomes the reduction (op) over the ranks; returns `target`."""
    _in_kernel("pld.tensor.allreduce")
    o = _enum(op, ReduceOp, "pld.tensor.allreduce", "op")
    if mode not in ("mesh", "ring"):
        raise CompileError(f"pld.tensor.allreduce mode is 'mesh' or 'ring', got {mode!r}", _where())
    if core_num != 1:
        raise CompileError(
            "pld.tensor.allreduce core_num > 1 is not simulated; in a kernel use core_num=1", _where()
        )
    t = _dist(target, "pld.tensor.allreduce", "target")
    sig = [] if signal is None else [_dist(signal, "pld.tensor.allreduce", "signal")]
    return bind(P.comm_allreduce_p, [[t], sig], {"op": o, "mode": mode})[0]


def reduce_scatter(target: Any, signal: Any, *, op: ReduceOp = ReduceOp.Sum) -> Tracer:
    """Row r of rank r's [NR, ...] window becomes the sum of row r over the ranks; returns `target`."""
    _in_kernel("pld.tensor.reduce_scatter")
    o = _enum(op, ReduceOp, "pld.tensor.reduce_scatter", "op")
    return bind(
        P.comm_reduce_scatter_p,
        [
            [_dist(target, "pld.tensor.reduce_scatter", "target")],
            [_dist(signal, "pld.tensor.reduce_scatter", "signal")],
        ],
        {"op": o},
    )[0]


def allgather(local_data: Any, target: Any, signal: Any) -> Tracer:
    """Row src of every rank's [NR, ...] window becomes rank src's `local_data`; returns `target`."""
    _in_kernel("pld.tensor.allgather")
    t = _dist(target, "pld.tensor.allgather", "target")
    if local_data is target:
        raise CompileError("pld.tensor.allgather: local_data and target must be different windows", _where())
    return bind(P.comm_allgather_p, [[local_data], [t], [_dist(signal, "pld.tensor.allgather", "signal")]])[0]


def all_to_all(input: Any, target: Any, signal: Any) -> Tracer:  # noqa: A002 - PyPTO's name
    """Row src of rank d's [NR, ...] window becomes row d of rank src's `input`; returns `target`."""
    _in_kernel("pld.tensor.all_to_all")
    t = _dist(target, "pld.tensor.all_to_all", "target")
    if input is target:
        raise CompileError("pld.tensor.all_to_all: input and target must be separate windows", _where())
    return bind(P.comm_all_to_all_p, [[input], [t], [_dist(signal, "pld.tensor.all_to_all", "signal")]])[0]


def broadcast(target: Any, signal: Any, *, root: int) -> Tracer:
    """Every rank's window `target` becomes rank `root`'s (a static rank); returns `target`."""
    _in_kernel("pld.tensor.broadcast")
    if isinstance(root, bool) or not isinstance(root, int) or root < 0:
        raise CompileError(f"pld.tensor.broadcast root is a static non-negative rank, got {root!r}", _where())
    return bind(
        P.comm_broadcast_p,
        [
            [_dist(target, "pld.tensor.broadcast", "target")],
            [_dist(signal, "pld.tensor.broadcast", "signal")],
        ],
        {"root": root},
    )[0]


def barrier(signal: Any) -> Tracer:
    """Block until every rank arrives; returns `signal` (rebind: `sig = pld.tensor.barrier(sig)`)."""
    _in_kernel("pld.tensor.barrier")
    return bind(P.comm_barrier_p, [[_dist(signal, "pld.tensor.barrier", "signal")]])[0]


def tensor_remote_store(
    src: Any, target: Any, peer: Any, offsets: Sequence[Any], *, atomic: AtomicType = AtomicType.None_
) -> None:
    """`pld.tensor.remote_store`: push local tensor `src` into `peer`'s window `target` at `offsets`
    (PyPTO's tensor-level twin of the tile form: one remote write of the whole of `src`)."""
    _in_kernel("pld.tensor.remote_store")
    if not (isinstance(src, Tracer) and isinstance(src.type, TensorType)):
        raise CompileError(
            "pld.tensor.remote_store pushes a tensor; for a tile use pld.tile.remote_store", _where()
        )
    put(target, peer, src, dst_offsets=offsets, atomic=atomic)


def remote_store(
    src: Any, target: Any, peer: Any, offsets: Sequence[Any], *, atomic: AtomicType = AtomicType.None_
) -> None:
    """`pld.remote_store`: the tile form for a tile `src`, the tensor form for a tensor (as PyPTO dispatches)."""
    if isinstance(src, Tracer) and isinstance(src.type, TensorType):
        tensor_remote_store(src, target, peer, offsets, atomic=atomic)
    else:
        tile_remote_store(src, target, peer, offsets, atomic=atomic)


def _stage(stage: Any, stage2: Any, win: Any, what: str) -> None:
    """The tile forms' VEC staging tiles: checked (a Vec tile of the window's dtype); the simulator
    moves the region at once, so they change no result."""
    for s in (stage, stage2):
        if s is None:
            continue
        if not (isinstance(s, Tracer) and isinstance(s.type, TileType) and s.type.memory.value == "Vec"):
            raise CompileError(
                f"{what}: a staging tile is a Vec tile, got {getattr(s, 'type', s)!r}", _where()
            )
        if isinstance(win, Tracer) and s.type.dtype is not win.type.dtype:
            raise CompileError(
                f"{what}: the staging tile's dtype {s.type.dtype!r} is not the window's {win.type.dtype!r}",
                _where(),
            )


def tile_put(
    dst: Any,
    peer: Any,
    src: Any,
    stage: Any,
    stage2: Any = None,
    dst_offsets: Sequence[Any] | None = None,
    src_offsets: Sequence[Any] | None = None,
    shape: Sequence[int] | None = None,
    *,
    atomic: AtomicType = AtomicType.None_,
) -> None:
    """`pld.tile.put`: `pld.tensor.put` through explicit VEC staging tile(s) `stage` (and `stage2`)."""
    _in_kernel("pld.tile.put")
    _stage(stage, stage2, dst, "pld.tile.put")
    put(dst, peer, src, dst_offsets, src_offsets, shape, atomic=atomic)


def tile_get(
    dst: Any,
    peer: Any,
    src: Any,
    stage: Any,
    stage2: Any = None,
    dst_offsets: Sequence[Any] | None = None,
    src_offsets: Sequence[Any] | None = None,
    shape: Sequence[int] | None = None,
) -> None:
    """`pld.tile.get`: `pld.tensor.get` through explicit VEC staging tile(s) `stage` (and `stage2`)."""
    _in_kernel("pld.tile.get")
    _stage(stage, stage2, src, "pld.tile.get")
    get(dst, peer, src, dst_offsets, src_offsets, shape)


system = _types.SimpleNamespace(
    notify=notify, wait=wait, world_size=world_size, get_comm_ctx=get_comm_ctx, rank=rank, nranks=nranks
)
tensor = _types.SimpleNamespace(
    alloc_window_buffer=alloc_window_buffer,
    window=window,
    put=put,
    get=get,
    remote_store=tensor_remote_store,
    allreduce=allreduce,
    allgather=allgather,
    reduce_scatter=reduce_scatter,
    all_to_all=all_to_all,
    barrier=barrier,
    broadcast=broadcast,
)
tile = _types.SimpleNamespace(
    remote_load=remote_load, remote_store=tile_remote_store, put=tile_put, get=tile_get
)
