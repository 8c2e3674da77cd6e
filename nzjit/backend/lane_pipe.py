"""The cube <-> vector pipe of a mixed kernel, lane-batched (see batched.py): TPUSH / TPOP of every
lane of an SPMD body at once (the A2/A3 lowering of `pl.move` Acc -> Vec and Vec -> Mat).

Per lane the move is a fixpipe (or UB) store into a GM FIFO slot, then a load of that slot into
the destination tile. Batched, the slot carries the lanes' converted values themselves
(`LaneSlot`): the bytes a lane's TPOP loads are exactly its slot's, which are exactly the
converted values its TPUSH stored (an ND row-major window of the source's valid shape). The FIFO
is charged as one lane's (`CrossCorePipe.reserve` / `release`), as on-chip accounting is
everywhere in batched.py, so a full FIFO or a pop without a push is refused the same way; the
slot takes no GM bytes (nothing reads them, and GM refuses no allocation). What is not plainly that - a lane-dependent dequant scale tensor, a partial Mat slot -
falls back to the lanes one by one.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from runtime.convert import fixpipe_convert
from runtime.crosscore import dequant_fp16, pipe_of, vector_quant_scale

from ..core.types import TileType
from .lane_state import Fallback, LaneState, iota, replays
from .lane_values import LaneAcc, LaneTile
from .rule import Step
from .steps import result_geometry
from .values import TensorVal


class LaneSlot:
    """A pipe slot over lanes: the values each lane's TPUSH stored, ``(n, rows, cols)`` of the slot's
    dtype with the lane -> image map `row`, and the one lane's runtime slot that accounts for it."""

    __slots__ = ("values", "row", "slot")

    def __init__(self, values: np.ndarray, row: np.ndarray, slot: Any) -> None:
        self.values, self.row, self.slot = values, row, slot


def _uniform_scale(s: LaneState, e: Any, x: Any) -> float | TensorVal:
    """The dequant scale: one lane-uniform float (DEQF16), or the tensor of VDEQF16's one scale
    row for every lane, which the conversion reads itself (`_convert_into`: a replay reads this
    call's GM bytes)."""
    if isinstance(x, TensorVal):
        return x
    if isinstance(x, np.ndarray):
        v = x.flat[0]
        if not (x == v).all():
            raise Fallback("a lane-dependent dequant scale")
        x = v.item()
    if isinstance(x, (int, float, np.floating, np.integer)):
        return float(np.asarray(x).astype(e.inputs[1].type.dtype.np_dtype))
    raise Fallback("a dequant scale of another kind")


def batch_push_acc(st: Step) -> Any:
    """TPUSH of an Acc tile (cube -> vector): every lane's accumulator converted by the fixpipe."""
    e = st.eqn
    out = np.dtype(e.params["dtype"].np_dtype)
    relu = bool(e.params.get("relu"))
    ins, (o,) = st.ins, st.outs

    def run(s: LaneState, env: list[Any]) -> None:
        vals, scale = _fixpipe(s, e, env, ins, valid_cols=False)
        # the slot holds the pushed bytes: a buffer of its own (a later mad_acc may update the
        # accumulators in place)
        conv = s.empty(vals.shape, out)
        s.do(_convert_into, conv, vals, scale, out, relu, s.ctx.gm)
        slot = pipe_of(s.ctx.gm).reserve("c2v", conv.shape[1:], out)
        env[o] = LaneSlot(conv, iota(len(conv)), slot)

    return replays(run)


def _fixpipe(
    s: LaneState, e: Any, env: list[Any], ins: Any, valid_cols: bool
) -> tuple[np.ndarray, float | TensorVal | None]:
    """Every lane's accumulator (its valid rows; all columns, or the valid ones) and the
    dequantisation scale (None: a plain dtype conversion), for `_convert_into`."""
    acc = env[ins[0]]
    if type(acc) is not LaneAcc or acc.freed:
        raise Fallback("fixpipe operand")
    vals = acc.data[:, : acc.valid_row, : acc.valid_col if valid_cols else acc.data.shape[2]]
    return vals, _uniform_scale(s, e, env[ins[1]]) if len(ins) > 1 else None


def _convert_into(
    dst: np.ndarray, vals: np.ndarray, scale: float | TensorVal | None, out: np.dtype, relu: bool, gm: Any
) -> None:
    """`dst` = the accumulators `vals` as the fixpipe converts them: the dtype conversion and
    ReLU, or the DEQF16 / VDEQF16 dequantisation (a scale row read from GM now)."""
    if scale is None:
        # the conversion straight into `dst` (numpy's cast either way: `fixpipe_convert`'s astype)
        np.copyto(dst, fixpipe_convert(vals, vals.dtype, relu) if relu else vals, casting="unsafe")
        return
    if isinstance(scale, TensorVal):
        row = scale.read(gm).reshape(-1).astype(np.float32)
        np.copyto(dst, dequant_fp16(vals, vector_quant_scale(row[: vals.shape[-1]]), relu))
        return
    np.copyto(dst, dequant_fp16(vals, scale, relu))


def batch_move_fixpipe(st: Step) -> Any:
    """A5's direct Acc -> Vec TMOV: every lane's accumulator converted by the fixpipe straight into
    its Vec image (the valid region; alloc_tile's zeros outside it)."""
    e = st.eqn
    out = np.dtype(e.params["dtype"].np_dtype)
    relu = bool(e.params.get("relu"))
    t = e.outputs[0].type
    assert isinstance(t, TileType)
    g = result_geometry(t)
    ins, (o,) = st.ins, st.outs

    def run(s: LaneState, env: list[Any]) -> None:
        if g is None:
            raise Fallback("fixpipe result")
        vals, scale = _fixpipe(s, e, env, ins, valid_cols=True)
        n, vr, vc = vals.shape
        s.reserve(g)
        data = s.zeros(n, g.nbytes, zero=(vr, vc) != (g.rows, g.cols))
        s.do(
            _convert_into,
            data.view(g.dtype).reshape(n, g.rows, g.cols)[:, :vr, :vc],
            vals,
            scale,
            out,
            relu,
            s.ctx.gm,
        )
        env[o] = LaneTile(g, vr, vc, data, iota(n))

    return replays(run)


def batch_push_vec(st: Step) -> Any:
    """TPUSH of a Vec tile (vector -> cube): every image's valid region, as the UB store writes it."""
    (a,), (o,) = st.ins, st.outs

    def run(s: LaneState, env: list[Any]) -> None:
        x = env[a]
        if type(x) is not LaneTile or x.freed or x.g.layout != "ND":
            raise Fallback("pipe operand")
        g = x.g
        d = x.data
        src = d.view(g.dtype).reshape(len(d), g.rows, g.cols)[:, : x.valid_row, : x.valid_col]
        vals = s.empty(src.shape, g.dtype)
        s.do(np.copyto, vals, src)
        slot = pipe_of(s.ctx.gm).reserve("v2c", vals.shape[1:], g.dtype)
        env[o] = LaneSlot(vals, x.row, slot)

    return replays(run)


def batch_pop(st: Step) -> Any:
    """TPOP into Vec (ND) or Mat (NZ): each image the load of its slot's values into a fresh tile."""
    t = st.eqn.outputs[0].type
    assert isinstance(t, TileType)
    g = result_geometry(t)  # as alloc builds the per-lane result
    (a,), (o,) = st.ins, st.outs

    def run(s: LaneState, env: list[Any]) -> None:
        sl = env[a]
        if type(sl) is not LaneSlot or g is None:
            raise Fallback("pipe slot")
        n, vr, vc = sl.values.shape
        if g.layout != "ND" and (vr, vc) != (g.rows, g.cols):
            raise Fallback("a partial Mat slot")
        pipe_of(s.ctx.gm).release(sl.slot)
        s.reserve(g)
        v = sl.values
        if g.layout == "ND" and (vr, vc) == (g.rows, g.cols) and v.dtype == g.dtype and v.flags.c_contiguous:
            # the slot's values are the tile's images already (a whole ND tile of their dtype) and
            # nothing reads the slot after its pop (the push made them its own): the tile takes
            # them, without the copy into fresh bytes
            env[o] = LaneTile(g, vr, vc, v.view(np.uint8).reshape(n, g.nbytes), sl.row)
            return
        data = s.zeros(n, g.nbytes, zero=(vr, vc) != (g.rows, g.cols))
        if g.layout == "ND":
            s.do(np.copyto, data.view(g.dtype).reshape(n, g.rows, g.cols)[:, :vr, :vc], sl.values)
        else:  # the ND -> NZ load: the logical matrix in the tile's fractal order
            b = g.blk
            images = data.view(g.dtype).reshape(n, *g.phys).transpose(0, *(i + 1 for i in g.inv))
            s.do(np.copyto, images, sl.values.reshape(n, vr // b.ir, b.ir, vc // b.ic, b.ic))
        env[o] = LaneTile(g, vr, vc, data, sl.row)

    return replays(run)
