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
from ..lane_state import Fallback, LaneState
from ..lane_values import LaneTile
from ..rule import Impl, Step
from ..steps import alloc, tile_dims, tile_layout

Compute = Callable[[Eqn, TileBuf, list[Any], str, "TileBuf | None"], None]


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


def _stack(g: Any, n: int, vr: int, vc: int, data: np.ndarray) -> TileBuf:
    """`n` images of geometry `g` (rows stacked) as one tile over their buffer."""
    sg = _STACKED.get((g, n))
    if sg is None:
        sg = tile_geometry(g.space, g.dtype, n * g.rows, g.cols, g.layout)
        if len(_STACKED) > 4096:
            _STACKED.clear()
        _STACKED[(g, n)] = sg
    return TileBuf.from_geometry(sg, n * vr, vc, data.reshape(-1))


#: The stacked geometry of `n` images of a geometry (tile_geometry's own cache takes a longer key:
#: a step stacks the same few geometries on every call), bounded
_STACKED: dict[tuple[Any, int], Any] = {}


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
        scratches: dict[tuple[Any, ...], Any] = {}  # the scratch geometry per (target, operand shapes)

        def scratch_of(views: list[Any], target: str) -> Any:
            """The geometry of the scratch tile `op` needs, else None (Fallback when the type has
            none): a function of the target and the operands' static and valid shapes only."""
            key = (
                target,
                *((v.rows, v.cols, v.valid_row, v.valid_col) if type(v) is _View else None for v in views),
            )
            if key in scratches:
                sg = scratches[key]
            else:
                assert op.scratch_type is not None
                stype = op.scratch_type(e, views, target)
                sg = _geometry(stype) if stype is not None else None
                if stype is not None and sg is None:
                    sg = False  # no such scratch tile: every call falls back
                scratches[key] = sg
            if sg is False:
                raise Fallback("scratch geometry")
            return sg

        def run(s: LaneState, env: list[Any]) -> None:
            xs = [env[i] for i in ins]
            for j in tiles:
                x = xs[j]
                if type(x) is not LaneTile or x.freed:
                    raise Fallback("vector operand")
            vals: list[Any] = [x if j in tiles else _scalar(x) for j, x in enumerate(xs)]
            if tiles:
                rows = [xs[j].row for j in tiles]
                r0 = rows[0]
                shared = all(r is r0 or np.array_equal(r, r0) for r in rows)
                if shared:  # the same images per lane
                    datas = {j: xs[j].data for j in tiles}
                    row = r0
                else:
                    datas = {j: xs[j].data[xs[j].row] for j in tiles}
                    row = np.arange(s.L)
                n = len(next(iter(datas.values())))
            else:  # TEXPANDS of a uniform scalar: one image for every lane
                datas, row, n, shared = {}, np.zeros(s.L, np.int64), 1, False
            views = [_View(x) if j in tiles else x for j, x in enumerate(vals)]
            target = s.ctx.onchip.target
            vr, vc = op.valid(e, views)
            vr = g.rows if vr is None else vr
            vc = g.cols if vc is None else vc
            sg = scratch_of(views, target) if op.scratch_type is not None else None
            s.reserve(g)
            whole = (vr, vc) == (g.rows, g.cols)
            # a wholly valid result writes every byte: in place over a dying operand's images (its
            # views above are taken), else fresh bytes, alloc_tile's zeros outside the valid region
            data = next((d for j in donors if shared and whole and (d := s.adopt(xs[j])) is not None), None)
            if data is None:
                data = s.zeros(n, g.nbytes, zero=not whole)
            whole_rows = vr == g.rows and all(xs[j].valid_row == xs[j].g.rows for j in tiles)
            stacked = op.row_local and whole_rows
            by_lane = not stacked and whole_rows and op.lanes_compute is not None and n > 1
            try:
                if sg is not None:  # the scratch tile's allocation and free, as the impl's
                    s.ctx.onchip.reserve(sg.space, sg.nbytes)
                    s.ctx.onchip.release(sg.space, sg.nbytes)
                scratch = s.scratch((n, sg.nbytes), np.uint8, "vector scratch") if sg is not None else None
                if stacked or by_lane:
                    args = [
                        _stack(xs[j].g, n, xs[j].valid_row, xs[j].valid_col, datas[j]) if j in tiles else v
                        for j, v in enumerate(vals)
                    ]
                    out = _stack(g, n, vr, vc, data)
                    st = None if sg is None or scratch is None else _stack(sg, n, sg.rows, sg.cols, scratch)
                    if stacked:
                        op.compute(e, out, args, target, st)
                    else:
                        assert op.lanes_compute is not None
                        op.lanes_compute(e, out, args, target, st, n)
                    out_vr, out_vc = out.valid_row // n, out.valid_col
                else:
                    for u in range(n):
                        args = [
                            TileBuf.from_geometry(xs[j].g, xs[j].valid_row, xs[j].valid_col, datas[j][u])
                            if j in tiles
                            else v
                            for j, v in enumerate(vals)
                        ]
                        out = TileBuf.from_geometry(g, vr, vc, data[u])
                        op.compute(
                            e,
                            out,
                            args,
                            target,
                            None
                            if sg is None or scratch is None
                            else TileBuf.from_geometry(sg, None, None, scratch[u]),
                        )
                    out_vr, out_vc = out.valid_row, out.valid_col
            except runtime.DeviceError as err:
                raise Fallback(f"the vector instruction refuses: {err}") from err
            env[o] = LaneTile(g, out_vr, out_vc, data, row)

        return run

    return batch
