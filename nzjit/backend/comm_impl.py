"""The numpy implementations of the communication primitives (nzjit/prims/comm.py), registered
into `impl_rules`.

Each one reaches the simulated world through the endpoint of the rank running on this thread
(`runtime.comm.current_endpoint()`, set by backend/comm_run.py); a window argument arrives as
the `TensorVal` of this rank's memory of it, and is found in the world by its address. Every call
passes the kernel line (`e.source`) as the site that hang and race reports name.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import runtime
from runtime import comm_collectives as coll
from runtime.comm import CommError, Endpoint, Window, current_endpoint

from ..core.ir import Eqn
from ..core.types import TileType
from ..prims import comm as PC
from .impl import _split, alloc, clamp, impl_rules
from .values import TensorVal

__all__ = ["COMM_IMPLS"]


def _endpoint(e: Eqn) -> Endpoint:
    ep = current_endpoint()
    if ep is None:
        raise runtime.DeviceError(f"{e.source}: {e.primitive.name} runs only on the ranks of an orchestration "
                                  "that passes windows (pld.window) to its kernels")
    return ep


def _window_or_none(ep: Endpoint | None, tv: Any) -> Window | None:
    """The world's window whose memory on this rank starts at `tv` (a whole-window view), if any."""
    if ep is None or not isinstance(tv, TensorVal):
        return None
    for win in ep.world.windows:
        if win.address(ep.rank) == tv.addr:
            return win
    return None


def _window(ep: Endpoint, e: Eqn, tv: TensorVal) -> Window:
    """`_window_or_none`, refused when `tv` is not a whole window."""
    win = _window_or_none(ep, tv)
    if win is not None:
        return win
    raise CommError(f"{e.source}: {e.primitive.name}: the operand is not a window of this program (a slice of a "
                    "window cannot be passed to a communication op; pass the pld.DistributedTensor itself)")


def _site(e: Eqn) -> str:
    return str(e.source) if e.source is not None else e.primitive.name


def _ints(xs: list[Any]) -> list[int]:
    return [int(x) for x in xs]


def _rank(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    return [_endpoint(e).rank]


def _nranks(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    return [_endpoint(e).n_ranks]


def _notify(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    ep = _endpoint(e)
    tv = ins[0]
    (peer,), offs, (value,) = _split(e, ins, "peer"), _split(e, ins, "offsets"), _split(e, ins, "value")
    ep.notify(_window(ep, e, tv), int(peer), tv.shape, _ints(offs), int(value), e.params["op"], _site(e))
    return []


def _wait(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    ep = _endpoint(e)
    tv = ins[0]
    offs, (expected,) = _split(e, ins, "offsets"), _split(e, ins, "expected")
    ep.wait(_window(ep, e, tv), tv.shape, _ints(offs), int(expected), e.params["cmp"], _site(e))
    return []


def _remote_load(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    ep = _endpoint(e)
    tv = ins[0]
    (peer,), offs = _split(e, ins, "peer"), _split(e, ins, "offsets")
    shape = tuple(e.params["shape"])
    valid = tuple(e.params.get("valid") or shape)
    box = (1,) * (len(tv.shape) - 2) + valid if len(tv.shape) > 2 else valid[-len(tv.shape):]
    if len(tv.shape) == 1 and shape[0] != 1:
        raise CommError(f"{_site(e)}: remote_load of a [{shape[0]}, {shape[1]}] tile from the rank-1 window "
                        f"{list(tv.shape)}: a rank-1 window gives [1, N] tiles")
    data = ep.remote_load(_window(ep, e, tv), int(peer), tv.shape, tv.dtype, _ints(clamp(ctx, e, offs)), box,
                          _site(e))
    out_t = e.outputs[0].type
    assert isinstance(out_t, TileType)
    tile = alloc(ctx, out_t, valid)  # type: ignore[arg-type]
    full = np.zeros(shape, data.dtype)  # past the valid extent: don't-care (zero here)
    full[: valid[0], : valid[1]] = data.reshape(valid)
    tile.set_logical(full)
    return [tile]


def _remote_store(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    ep = _endpoint(e)
    tile, tv = ins[0], ins[1]
    (peer,), offs = _split(e, ins, "peer"), _split(e, ins, "offsets")
    data = tile.logical()[: tile.valid_row, : tile.valid_col]
    data = data.reshape((1,) * (len(tv.shape) - 2) + data.shape) if len(tv.shape) >= 2 else data.reshape(-1)
    ep.remote_store(_window(ep, e, tv), int(peer), tv.shape, _ints(clamp(ctx, e, offs)), data,
                    bool(e.params["atomic"]), _site(e))
    return []


def _put(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    ep = _endpoint(e)
    dst, src = ins[0], _split(e, ins, "src")[0]
    (peer,) = _split(e, ins, "peer")
    shape = tuple(e.params["shape"])
    src_offs = tuple(_ints(clamp(ctx, e, _split(e, ins, "src_offsets"))))
    data = src.read(ctx.gm, src_offs, shape)
    ep.remote_store(_window(ep, e, dst), int(peer), dst.shape, _ints(clamp(ctx, e, _split(e, ins, "dst_offsets"))),
                    data, bool(e.params["atomic"]), _site(e))
    return []


def _get(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    ep = _endpoint(e)
    dst, src = ins[0], _split(e, ins, "src")[0]
    (peer,) = _split(e, ins, "peer")
    shape = tuple(e.params["shape"])
    data = ep.remote_load(_window(ep, e, src), int(peer), src.shape, src.dtype,
                          _ints(clamp(ctx, e, _split(e, ins, "src_offsets"))), shape, _site(e))
    dst_offs = tuple(_ints(clamp(ctx, e, _split(e, ins, "dst_offsets"))))
    for axis, (o, n, d) in enumerate(zip(dst_offs, shape, dst.shape)):
        if o + n > d:
            raise CommError(f"{_site(e)}: pld.tensor.get: the region [{o}, {o + n}) on axis {axis} is outside the "
                            f"destination {list(dst.shape)}")
    dst.write(ctx.gm, dst_offs, data)
    return []


def _allreduce(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    ep = _endpoint(e)
    tv = ins[0]
    coll.allreduce(ep, _window(ep, e, tv), tv.shape, tv.dtype, e.params["op"], _site(e))
    return [tv]


def _reduce_scatter(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    ep = _endpoint(e)
    tv = ins[0]
    coll.reduce_scatter(ep, _window(ep, e, tv), tv.shape, tv.dtype, e.params["op"], _site(e))
    return [tv]


def _broadcast(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    ep = _endpoint(e)
    tv = ins[0]
    coll.broadcast(ep, _window(ep, e, tv), tv.shape, tv.dtype, int(e.params["root"]), _site(e))
    return [tv]


def _local(ctx: Any, v: Any) -> np.ndarray:
    return v.read(ctx.gm) if isinstance(v, TensorVal) else np.asarray(v.logical())


def _allgather(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    ep = _endpoint(e)
    local, tv = ins[0], ins[1]
    coll.allgather(ep, _local(ctx, local), _window(ep, e, tv), tv.shape, tv.dtype, _site(e))
    return [tv]


def _all_to_all(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    ep = _endpoint(e)
    local, tv = ins[0], ins[1]
    coll.all_to_all(ep, _local(ctx, local), _window(ep, e, tv), tv.shape, tv.dtype, _site(e))
    return [tv]


def _barrier(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    coll.barrier(_endpoint(e), _site(e))
    return [ins[0]]


COMM_IMPLS = {
    PC.comm_rank_p: _rank, PC.comm_nranks_p: _nranks, PC.comm_notify_p: _notify, PC.comm_wait_p: _wait,
    PC.comm_remote_load_p: _remote_load, PC.comm_remote_store_p: _remote_store, PC.comm_put_p: _put,
    PC.comm_get_p: _get, PC.comm_allreduce_p: _allreduce, PC.comm_reduce_scatter_p: _reduce_scatter,
    PC.comm_allgather_p: _allgather, PC.comm_all_to_all_p: _all_to_all, PC.comm_barrier_p: _barrier,
    PC.comm_broadcast_p: _broadcast,
}
impl_rules.update(COMM_IMPLS)
