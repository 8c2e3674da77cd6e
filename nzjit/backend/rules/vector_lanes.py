"""One vector instruction, three forms: the reference impl, the all-lanes batch form, both from the
same `compute` (the runtime.vector instruction call), so they cannot disagree.

A `VecOp` is `compute(e, out, ins, target, scratch)` - run the instruction with result tile `out`
on the operand values `ins` (TileBufs and scalars) - with `valid(e, ins)`, the valid region the
result is allocated with, and optionally `scratch_type(e, ins, target)`, the tile type of a scratch
tile the instruction needs (TROW* on A2/A3: the compiler supplies it).

The batch form (`lanes_of`) runs the instruction once for the lanes of an SPMD body:

* a row-local instruction (every result row depends on the same row of its operands only: the
  ALU, unary math, TCVT, TROW* reductions and broadcasts, TFILLPAD, TEXPANDS) runs once on the
  lanes' images stacked along the rows - a `[U * R, C]` tile over the `(U, nbytes)` image buffer
  (a `[R, 1]` DN column stacks to `[U * R, 1]`, the same bytes) - when every tile operand's valid
  rows are its whole rows, so the stack's valid region is exactly every image's;
* a column broadcast (TCOLEXPAND*) runs once on the stacked images too, told the lane count
  (`lanes_compute`: each lane's rows take its own column operand), under the same condition;
* otherwise (TCOL* reductions, a partial valid row count) it runs once per distinct image, on
  views of it.

A stacked (or lane-told) step whose VecOp has a `prepare` runs the instruction prepared for its
stacked tiles (runtime.vector_prep: every check run once, when the step's `_Layout` is decided,
then the instruction's own kernel on the raw stacked images), not the call that rebuilds TileBufs
and re-checks per step: the same bytes by construction.

Either way the bytes are those of one instruction per lane: the same instruction code on the same
element values, and the stacked checks (valid shapes, dtypes, the scratch size) scale with U.
A wholly valid result (it writes every byte) takes over the images of an operand of its type that
dies here, when no deferred store reads them (`LaneState.adopt`): the instructions are safe in
place, and the buffer just read is still in cache. A DeviceError (a refusal) abandons the attempt (`Fallback`): the lanes then run one by one and
refuse exactly as the reference does. On-chip accounting is one lane's, as everywhere in batched.py.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

import runtime
from runtime import TileBuf
from runtime.tile import tile_geometry

from ...core.ir import Eqn
from ...core.types import TileType
from ..lane_state import Fallback, LaneState, iota, replays
from ..lane_values import LaneTile
from ..rule import Impl, Step
from ..steps import alloc, tile_dims, tile_layout

Compute = Callable[[Eqn, TileBuf, list[Any], str, "TileBuf | None"], None]
#: `prepare(e, specs, out, scratch, target, lanes)`: the instruction prepared for the stacked tiles
#: (runtime.vector_prep; `specs` per operand: a tile's Spec, a scalar's value), called as
#: ``p(out_bytes, *operand_bytes_or_scalars)``; None: not prepared (the instruction call runs)
PrepareFn = Callable[[Eqn, list[Any], Any, Any, str, int], "Callable[..., None] | None"]


@dataclass(frozen=True)
class VecOp:
    """A vector instruction (module docstring)."""

    compute: Compute
    valid: Callable[[Eqn, list[Any]], tuple[int | None, int | None]]
    row_local: bool = True
    scratch_type: Callable[[Eqn, list[Any], str], TileType | None] | None = None
    #: an instruction that is not row-local but runs on lanes stacked along the rows when told how
    #: many (TCOLEXPAND*: each lane's rows take its own column operand): `compute` with `lanes`
    lanes_compute: Callable[[Eqn, TileBuf, list[Any], str, TileBuf | None, int], None] | None = None
    #: the stacked form prepared once per operand layout (its checks run then), else None
    prepare: PrepareFn | None = None


def out_type(e: Eqn) -> TileType:
    """The tile type of `e`'s result."""
    t = e.outputs[0].type
    assert isinstance(t, TileType)
    return t


def impl_of(op: VecOp) -> Impl:
    """The reference impl: allocate the result (and any scratch) on chip, run the instruction."""

    def impl(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
        target = ctx.onchip.target
        out = alloc(ctx, out_type(e), op.valid(e, ins))
        st = op.scratch_type(e, ins, target) if op.scratch_type is not None else None
        scratch = alloc(ctx, st) if st is not None else None
        try:
            op.compute(e, out, ins, target, scratch)
        finally:
            if scratch is not None:
                ctx.onchip.free_tile(scratch)
        return [out]

    return impl


class _View:
    """The valid shape of a lane tile, as `valid` / `scratch_type` read an operand."""

    __slots__ = ("valid_row", "valid_col", "rows", "cols", "dtype")

    def __init__(self, x: LaneTile) -> None:
        self.valid_row, self.valid_col = x.valid_row, x.valid_col
        self.rows, self.cols, self.dtype = x.g.rows, x.g.cols, x.g.dtype


def _scalar(x: Any) -> Any:
    """A lane-uniform scalar operand (an int array over lanes must agree), else Fallback."""
    if isinstance(x, np.ndarray):
        v = x.flat[0]
        if not (x == v).all():
            raise Fallback("a lane-dependent vector scalar")
        return v.item()
    return x


def _geometry(t: TileType) -> Any:
    space, rows, cols, dt = tile_dims(t)
    try:
        return tile_geometry(space, dt, rows, cols, tile_layout(space, rows, cols))
    except runtime.DeviceError:
        return None


def _stacked(g: Any, n: int, vr: int, vc: int) -> tuple[Any, int, int]:
    """The geometry and valid shape of `n` images of geometry `g` stacked along the rows (a tile
    over their buffer: `TileBuf.from_geometry(*_stacked(...), data.reshape(-1))`)."""
    return tile_geometry(g.space, g.dtype, n * g.rows, g.cols, g.layout), n * vr, vc


@dataclass(slots=True)
class _Layout:
    """What a vector step decides from its operands' geometries and valid shapes (`lanes_of`):
    the result's valid shape, the scratch geometry, whether the result may take over a dying
    operand's images (`in_place`) or needs zeros outside its valid region (`zero`), and how the
    instruction runs - on the stacked images (`stacked`), stacked and told the lane count
    (`by_lane`), else image by image - with the stacked tiles' ``(geometry, valid rows, valid
    cols)`` per operand index (`stacks`), of the result (`out`) and of the scratch."""

    vr: int
    vc: int
    sg: Any
    in_place: bool
    stacked: bool
    by_lane: bool
    stacks: dict[int, tuple[Any, int, int]]
    out: tuple[Any, int, int] | None
    scratch: tuple[Any, int, int] | None
    zero: bool = False
    #: the instruction prepared for `stacks` (VecOp.prepare), else None
    prep: Callable[..., None] | None = None


def _same_bytes(a: Any, b: TileType) -> bool:
    return isinstance(a, TileType) and (a.shape, a.dtype, a.memory) == (b.shape, b.dtype, b.memory)


def lanes_of(op: VecOp) -> Callable[[Step], Any]:
    """The `batch` form of `op` (module docstring)."""

    def batch(st: Step) -> Any:
        e = st.eqn
        t = e.outputs[0].type
        if not isinstance(t, TileType) or len(t.shape) != 2:
            return None
        g = _geometry(t)
        if g is None:
            return None
        ins = st.ins
        tiles = tuple(j for j, a in enumerate(e.inputs) if isinstance(a.type, TileType))
        # operands dying here whose images the result may take over (same geometry: the type but
        # for the valid shape, which the result's own replaces)
        donors = tuple(j for j in sorted(st.consumed) if j in tiles and _same_bytes(e.inputs[j].type, t))
        (o,) = st.outs

        scalars = tuple(j for j in range(len(e.inputs)) if j not in tiles)
        # what depends only on the operands' geometries, valid shapes and scalar values (the
        # result's valid shape, the scratch, the stacked tiles' geometries), decided once per
        # such key: a step then runs the instruction and the value bookkeeping only
        memo: dict[tuple[Any, ...], _Layout] = {}

        def layout(xs: list[Any], vals: list[Any], n: int, shared: bool, target: str) -> _Layout:
            views = [_View(x) if j in tiles else x for j, x in enumerate(vals)]
            vr, vc = op.valid(e, views)
            vr = g.rows if vr is None else vr
            vc = g.cols if vc is None else vc
            stype = op.scratch_type(e, views, target) if op.scratch_type is not None else None
            sg = _geometry(stype) if stype is not None else None
            if stype is not None and sg is None:
                raise Fallback("scratch geometry")
            whole = (vr, vc) == (g.rows, g.cols)
            whole_rows = vr == g.rows and all(xs[j].valid_row == xs[j].g.rows for j in tiles)
            stacked = op.row_local and whole_rows
            by_lane = not stacked and whole_rows and op.lanes_compute is not None and n > 1
            if stacked or by_lane:
                try:
                    stacks = {j: _stacked(xs[j].g, n, xs[j].valid_row, xs[j].valid_col) for j in tiles}
                    out = _stacked(g, n, vr, vc)
                    scr = None if sg is None else _stacked(sg, n, sg.rows, sg.cols)
                except runtime.DeviceError as err:  # a stack the hardware model cannot hold
                    raise Fallback(f"the vector instruction refuses: {err}") from err
                lay = _Layout(vr, vc, sg, whole and shared, stacked, by_lane, stacks, out, scr)
                if op.prepare is not None:  # every check of the instruction, once, for these tiles
                    specs = [stacks[j] if j in stacks else v for j, v in enumerate(vals)]
                    try:
                        lay.prep = op.prepare(e, specs, out, scr, target, n if by_lane else 1)
                    except runtime.DeviceError as err:
                        raise Fallback(f"the vector instruction refuses: {err}") from err
            else:
                lay = _Layout(vr, vc, sg, whole and shared, False, False, {}, None, None)
            lay.zero = not whole
            return lay

        def run(s: LaneState, env: list[Any]) -> None:
            xs = [env[i] for i in ins]
            for j in tiles:
                x = xs[j]
                if type(x) is not LaneTile or x.freed:
                    raise Fallback("vector operand")
            vals: list[Any] = [x if j in tiles else _scalar(x) for j, x in enumerate(xs)]
            if tiles:
                r0 = xs[tiles[0]].row
                shared = all(xs[j].row is r0 or np.array_equal(xs[j].row, r0) for j in tiles)
                if shared:  # the same images per lane
                    datas = {j: xs[j].data for j in tiles}
                    row = r0
                else:
                    datas = {j: gathered(s, xs[j], j) for j in tiles}
                    row = iota(s.L)
                n = len(datas[tiles[0]])
            else:  # TEXPANDS of a uniform scalar: one image for every lane
                datas, row, n, shared = {}, np.zeros(s.L, np.int64), 1, False
            target = s.ctx.onchip.target
            key: tuple[Any, ...] | None = (
                n,
                shared,
                target,
                *((xs[j].g, xs[j].valid_row, xs[j].valid_col) for j in tiles),
                *(vals[j] for j in scalars),
            )
            try:
                lay = memo.get(key)  # type: ignore[arg-type]
            except TypeError:  # an unhashable scalar: decided every time
                key, lay = None, None
            if lay is None:
                lay = layout(xs, vals, n, shared, target)
                if key is not None and len(memo) < 64:
                    memo[key] = lay
            vr, vc, sg = lay.vr, lay.vc, lay.sg
            s.reserve(g)
            # a wholly valid result writes every byte: in place over a dying operand's images (its
            # views above are taken), else fresh bytes, alloc_tile's zeros outside the valid region
            data = None
            if lay.in_place:
                for j in donors:
                    data = s.adopt(xs[j])
                    if data is not None:
                        break
            if data is None:
                data = s.zeros(n, g.nbytes, zero=lay.zero)
            try:
                if sg is not None:  # the scratch tile's allocation and free, as the impl's
                    s.ctx.onchip.reserve(sg.space, sg.nbytes)
                    s.ctx.onchip.release(sg.space, sg.nbytes)
                scratch = s.scratch((n, sg.nbytes), np.uint8, "vector scratch") if sg is not None else None
                if lay.prep is not None and s.ctx.options.prepared:  # the checked kernel on the stacked bytes
                    stacks = lay.stacks
                    s.do(
                        lay.prep,
                        data.reshape(-1),
                        *(datas[j].reshape(-1) if j in stacks else v for j, v in enumerate(vals)),
                    )
                    out_vr, out_vc = vr, vc  # the prepared kernel writes the valid region it was given
                elif lay.stacked or lay.by_lane:
                    out_vr, out_vc = s.do(_stacked_call, op, e, lay, datas, vals, data, scratch, target, n)
                else:
                    geoms = [
                        (xs[j].g, xs[j].valid_row, xs[j].valid_col) if j in tiles else None
                        for j in range(len(xs))
                    ]
                    for u in range(n):
                        out_vr, out_vc = s.do(
                            _image_call, op, e, geoms, datas, vals, (g, vr, vc), data, scratch, sg, target, u
                        )
            except runtime.DeviceError as err:
                raise Fallback(f"the vector instruction refuses: {err}") from err
            env[o] = LaneTile(g, out_vr, out_vc, data, row)

        return replays(run)

    return batch


def gathered(s: LaneState, x: LaneTile, j: int) -> np.ndarray:
    """Lane `i`'s image of `x` in row `i` of a scratch buffer (operands whose lane maps differ),
    gathered by a recorded call (`LaneState.do`): a replay gathers this call's bytes again."""
    d = x.data
    buf = s.scratch((s.L, d.shape[1]), d.dtype, f"gathered operand {j}")
    s.do(np.take, d, x.row, 0, buf)
    return buf


# The instruction calls of a lane step, as `LaneState.do` runs (and a replay repeats) them: each
# builds its TileBufs anew, since an instruction sets its result's valid region on the TileBuf.
def _stacked_call(
    op: VecOp,
    e: Eqn,
    lay: _Layout,
    datas: dict[int, np.ndarray],
    vals: list[Any],
    data: np.ndarray,
    scratch: np.ndarray | None,
    target: str,
    n: int,
) -> tuple[int, int]:
    """The instruction once on the lanes' stacked images; the result's valid shape per image."""
    stacks = lay.stacks
    args = [
        TileBuf.from_geometry(*stacks[j], datas[j].reshape(-1)) if j in stacks else v
        for j, v in enumerate(vals)
    ]
    assert lay.out is not None
    out = TileBuf.from_geometry(*lay.out, data.reshape(-1))
    st = (
        None
        if lay.scratch is None or scratch is None
        else TileBuf.from_geometry(*lay.scratch, scratch.reshape(-1))
    )
    if lay.stacked:
        op.compute(e, out, args, target, st)
    else:
        assert op.lanes_compute is not None
        op.lanes_compute(e, out, args, target, st, n)
    return out.valid_row // n, out.valid_col


def _image_call(
    op: VecOp,
    e: Eqn,
    geoms: list[Any],
    datas: dict[int, np.ndarray],
    vals: list[Any],
    result: tuple[Any, int, int],
    data: np.ndarray,
    scratch: np.ndarray | None,
    sg: Any,
    target: str,
    u: int,
) -> tuple[int, int]:
    """The instruction on image `u` of every operand; the result's valid shape."""
    args = [
        TileBuf.from_geometry(geo[0], geo[1], geo[2], datas[j][u]) if geo is not None else v
        for j, (geo, v) in enumerate(zip(geoms, vals))
    ]
    g, vr, vc = result
    out = TileBuf.from_geometry(g, vr, vc, data[u])
    st = None if sg is None or scratch is None else TileBuf.from_geometry(sg, None, None, scratch[u])
    op.compute(e, out, args, target, st)
    return out.valid_row, out.valid_col
