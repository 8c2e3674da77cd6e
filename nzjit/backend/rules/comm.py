"""Rules of the comm family (issue 28): the communication primitives of `pld` (nzjit/prims/comm.py),
impl-only, and the instrumented local window store / load (backend/comm_instrument.py swaps them in).

Each one reaches the simulated world through the endpoint of the rank running on this thread
(`runtime.comm.current_endpoint()`, set by backend/comm_run.py); a window argument arrives as
the `TensorVal` of this rank's memory of it, and is found in the world by its address. Every call
passes the kernel line (`e.source`) as the site that hang and race reports name.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

import runtime
from runtime import comm_collectives as coll
from runtime.comm import CommError, Endpoint, Window, current_endpoint

from ... import prims as P
from ...core.ir import Eqn
from ...core.types import TileType
from ..rule import RULES, rule
from ..steps import alloc, clamp, split
from ..values import TensorVal

__all__ = ["site", "window_or_none"]


def _endpoint(e: Eqn) -> Endpoint:
    ep = current_endpoint()
    if ep is None:
        raise runtime.DeviceError(
            f"{e.source}: {e.primitive.name} runs only on the ranks of an orchestration "
            "that passes windows (pld.window) to its kernels"
        )
    return ep


def window_or_none(ep: Endpoint | None, tv: Any) -> Window | None:
    """The world's window whose memory on this rank starts at `tv` (a whole-window view), if any."""
    if ep is None or not isinstance(tv, TensorVal):
        return None
    for win in ep.world.windows:
        if win.address(ep.rank) == tv.addr:
            return win
    return None


def _window(ep: Endpoint, e: Eqn, tv: TensorVal) -> Window:
    """`window_or_none`, refused when `tv` is not a whole window."""
    win = window_or_none(ep, tv)
    if win is not None:
        return win
    raise CommError(
        f"{e.source}: {e.primitive.name}: the operand is not a window of this program (a slice of a "
        "window cannot be passed to a communication op; pass the pld.DistributedTensor itself)"
    )


def site(e: Eqn) -> str:
    """The kernel line of `e`, as hang and race reports name it (the primitive when it has none)."""
    return str(e.source) if e.source is not None else e.primitive.name


def _ints(xs: Sequence[Any]) -> list[int]:
    return [int(x) for x in xs]


@rule(P.comm_rank_p)
def _rank(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    return [_endpoint(e).rank]


@rule(P.comm_nranks_p)
def _nranks(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    return [_endpoint(e).n_ranks]


@rule(P.comm_notify_p)
def _notify(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    ep = _endpoint(e)
    tv = ins[0]
    (peer,), offs, (value,) = split(e, ins, "peer"), split(e, ins, "offsets"), split(e, ins, "value")
    ep.notify(_window(ep, e, tv), int(peer), tv.shape, _ints(offs), int(value), e.params["op"], site(e))
    return []


@rule(P.comm_wait_p)
def _wait(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    ep = _endpoint(e)
    tv = ins[0]
    offs, (expected,) = split(e, ins, "offsets"), split(e, ins, "expected")
    ep.wait(_window(ep, e, tv), tv.shape, _ints(offs), int(expected), e.params["cmp"], site(e))
    return []


@rule(P.comm_remote_load_p)
def _remote_load(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    ep = _endpoint(e)
    tv = ins[0]
    (peer,), offs = split(e, ins, "peer"), split(e, ins, "offsets")
    shape = tuple(e.params["shape"])
    valid = tuple(e.params.get("valid") or shape)
    box = (1,) * (len(tv.shape) - 2) + valid if len(tv.shape) > 2 else valid[-len(tv.shape) :]
    if len(tv.shape) == 1 and shape[0] != 1:
        raise CommError(
            f"{site(e)}: remote_load of a [{shape[0]}, {shape[1]}] tile from the rank-1 window "
            f"{list(tv.shape)}: a rank-1 window gives [1, N] tiles"
        )
    data = ep.remote_load(
        _window(ep, e, tv), int(peer), tv.shape, tv.dtype, _ints(clamp(ctx, e, offs)), box, site(e)
    )
    out_t = e.outputs[0].type
    assert isinstance(out_t, TileType)
    tile = alloc(ctx, out_t, valid)
    full = np.zeros(shape, data.dtype)  # past the valid extent: don't-care (zero here)
    full[: valid[0], : valid[1]] = data.reshape(valid)
    tile.set_logical(full)
    return [tile]


@rule(P.comm_remote_store_p)
def _remote_store(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    ep = _endpoint(e)
    tile, tv = ins[0], ins[1]
    (peer,), offs = split(e, ins, "peer"), split(e, ins, "offsets")
    data = tile.logical()[: tile.valid_row, : tile.valid_col]
    data = data.reshape((1,) * (len(tv.shape) - 2) + data.shape) if len(tv.shape) >= 2 else data.reshape(-1)
    ep.remote_store(
        _window(ep, e, tv),
        int(peer),
        tv.shape,
        _ints(clamp(ctx, e, offs)),
        data,
        bool(e.params["atomic"]),
        site(e),
    )
    return []


@rule(P.comm_put_p)
def _put(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    ep = _endpoint(e)
    dst, src = ins[0], split(e, ins, "src")[0]
    (peer,) = split(e, ins, "peer")
    shape = tuple(e.params["shape"])
    src_offs = tuple(_ints(clamp(ctx, e, split(e, ins, "src_offsets"))))
    data = src.read(ctx.gm, src_offs, shape)
    ep.remote_store(
        _window(ep, e, dst),
        int(peer),
        dst.shape,
        _ints(clamp(ctx, e, split(e, ins, "dst_offsets"))),
        data,
        bool(e.params["atomic"]),
        site(e),
    )
    return []


@rule(P.comm_get_p)
def _get(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    ep = _endpoint(e)
    dst, src = ins[0], split(e, ins, "src")[0]
    (peer,) = split(e, ins, "peer")
    shape = tuple(e.params["shape"])
    data = ep.remote_load(
        _window(ep, e, src),
        int(peer),
        src.shape,
        src.dtype,
        _ints(clamp(ctx, e, split(e, ins, "src_offsets"))),
        shape,
        site(e),
    )
    dst_offs = tuple(_ints(clamp(ctx, e, split(e, ins, "dst_offsets"))))
    for axis, (o, n, d) in enumerate(zip(dst_offs, shape, dst.shape)):
        if o + n > d:
            raise CommError(
                f"{site(e)}: pld.tensor.get: the region [{o}, {o + n}) on axis {axis} is outside the "
                f"destination {list(dst.shape)}"
            )
    dst.write(ctx.gm, dst_offs, data)
    return []


def _in_place_collective(prim: Any, run: Any, param: Any) -> None:
    """The rule of a collective that works on its window in place and returns it: `run(endpoint,
    window, shape, dtype, param(e), site)` (runtime/comm_collectives.py)."""

    @rule(prim)
    def _collective(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
        ep = _endpoint(e)
        tv = ins[0]
        run(ep, _window(ep, e, tv), tv.shape, tv.dtype, param(e), site(e))
        return [tv]


_in_place_collective(P.comm_allreduce_p, coll.allreduce, lambda e: e.params["op"])
_in_place_collective(P.comm_reduce_scatter_p, coll.reduce_scatter, lambda e: e.params["op"])
_in_place_collective(P.comm_broadcast_p, coll.broadcast, lambda e: int(e.params["root"]))


def _local(ctx: Any, v: Any) -> np.ndarray:
    return v.read(ctx.gm) if isinstance(v, TensorVal) else np.asarray(v.logical())


@rule(P.comm_allgather_p)
def _allgather(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    ep = _endpoint(e)
    local, tv = ins[0], ins[1]
    coll.allgather(ep, _local(ctx, local), _window(ep, e, tv), tv.shape, tv.dtype, site(e))
    return [tv]


@rule(P.comm_all_to_all_p)
def _all_to_all(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    ep = _endpoint(e)
    local, tv = ins[0], ins[1]
    coll.all_to_all(ep, _local(ctx, local), _window(ep, e, tv), tv.shape, tv.dtype, site(e))
    return [tv]


@rule(P.comm_barrier_p)
def _barrier(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    coll.barrier(_endpoint(e), site(e))
    return [ins[0]]


# ------------------------------------------------------------ local accesses of this rank's windows
def _box(tv: TensorVal, rows: int, cols: int) -> tuple[int, ...]:
    if len(tv.shape) == 1:
        return (cols,)
    return (1,) * (len(tv.shape) - 2) + (rows, cols)


@rule(P.comm_window_store_p)
def _window_store(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    """tile.store's impl, then the exact bytes reported to the world as a local store."""
    out = RULES[P.tile_store_p].impl(ctx, e, ins)
    ep, tv = current_endpoint(), ins[-1]
    win = window_or_none(ep, tv)
    tile = ins[0]
    if ep is not None and win is not None and hasattr(tile, "valid_row"):
        offs = [int(o) for o in clamp(ctx, e, split(e, ins, "offsets"))]
        ep.local_store(
            win, tv.shape, tv.dtype.itemsize, offs, _box(tv, tile.valid_row, tile.valid_col), site(e)
        )
    return out  # a slice of a window, or a host value: the world's byte comparison dates it instead


@rule(P.comm_window_load_p)
def _window_load(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    """tile.load's impl, then the bytes read reported to the world as a local load."""
    out = RULES[P.tile_load_p].impl(ctx, e, ins)
    ep, tv = current_endpoint(), ins[0]
    win = window_or_none(ep, tv)
    if ep is not None and win is not None:
        offs = [int(o) for o in clamp(ctx, e, split(e, ins, "offsets"))]
        valid = [int(v) for v in split(e, ins, "valid")]
        sizes = tuple(valid) if valid else tuple(e.params["shape"])
        ep.local_load(
            win,
            tv.shape,
            tv.dtype.itemsize,
            offs,
            sizes[-len(tv.shape) :]
            if len(sizes) >= len(tv.shape)
            else (1,) * (len(tv.shape) - len(sizes)) + sizes,
            site(e),
        )
    return out
