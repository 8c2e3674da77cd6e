"""Tiles as values: a window of a Vec tile (`s[:, 0:64]`), assignment into one (`t[0:1, :] = v`)
and `pl.reshape` of a tile where the bytes allow it (`[N, 1]` <-> `[1, N]`).

A window and an assignment copy bytes inside the unified buffer (TEXTRACT / TINSERT on Vec
tiles); offsets are static and a window's columns start on a 32-byte block, as a Vec tile's
rows must. An assignment updates the tile the name refers to: the traced value is rebound in
place, as `t[...] = v` updates a numpy array.
"""

from __future__ import annotations

import builtins
import numbers
from collections.abc import Sequence
from typing import Any

from ..core.types import TileType
from ..errors import CompileError, user_source
from ..prims import vector as VP
from ..tracing import Tracer, bind, current_state
from . import ops


def _window(t: Tracer, key: Any) -> tuple[tuple[int, int], tuple[int, int]]:
    tt: TileType = t.type  # type: ignore[assignment]
    items = list(key) if isinstance(key, tuple) else [key]
    if len(tt.shape) != 2 or len(items) > 2:
        raise CompileError(f"tile indexing takes two axes of a 2-D tile, got {tt}", user_source())
    items += [builtins.slice(None)] * (2 - len(items))
    offs, sizes = [], []
    for axis, (k, dim) in enumerate(zip(items, tt.shape)):
        if isinstance(k, numbers.Integral) and not isinstance(k, bool):
            k = builtins.slice(int(k), int(k) + 1)  # a tile keeps its rank: t[0] is the [1, C] row
        if not isinstance(k, builtins.slice) or k.step not in (None, 1):
            raise CompileError(
                f"tile indexing takes static slices, got {k!r} on axis {axis}",
                user_source(),
                help="slice with Python ints: t[0:16, 64:128]",
            )
        lo = 0 if k.start is None else k.start
        hi = dim if k.stop is None else k.stop
        if not all(isinstance(x, numbers.Integral) for x in (lo, hi)) or not 0 <= lo < hi <= dim:
            raise CompileError(
                f"tile window [{lo}:{hi}] on axis {axis} must be static and inside the tile's {dim}",
                user_source(),
            )
        offs.append(int(lo))
        sizes.append(int(hi) - int(lo))
    return (offs[0], offs[1]), (sizes[0], sizes[1])


def tile_getitem(t: Tracer, key: Any) -> Tracer:
    """`t[r0:r1, c0:c1]`: the window as a tile of its own."""
    offs, shape = _window(t, key)
    if offs == (0, 0) and shape == tuple(t.type.shape):  # type: ignore[union-attr]
        return t
    return bind(VP.tile_slice_p, [[t]], {"shape": shape, "offsets": offs})[0]


def tile_setitem(t: Tracer, key: Any, value: Any) -> None:
    """`t[r0:r1, c0:c1] = value`: the tile with the window replaced; `t` now names it."""
    offs, shape = _window(t, key)
    if not (isinstance(value, Tracer) and isinstance(value.type, TileType)):
        raise CompileError(
            f"only a tile can be assigned into a tile window, got {value!r}",
            user_source(),
            help="build it with pl.full(...) for a constant",
        )
    if tuple(value.type.shape) != shape:
        raise CompileError(
            f"cannot assign a tile of shape {list(value.type.shape)} to a window of shape {list(shape)}",
            user_source(),
        )
    if t.frame is not current_state().top:  # a staged loop carries names, not this tracer object
        raise CompileError(
            "assignment into a tile made outside this staged loop would not be carried by it",
            user_source(),
            help=f"write t = pl.tile.assemble(t, value, [{offs[0]}, {offs[1]}]) inside the loop",
        )
    out = bind(VP.tile_assemble_p, [[t], [value]], {"offsets": offs})[0]
    t.var, t.frame = out.var, out.frame  # rebind the caller's name to the updated tile


def assemble(target: Any, source: Any, offset: Sequence[int]) -> Tracer:
    """`pl.tile.assemble(target, source, offset)`: `target` with `source` written at `offset` (TINSERT);
    the functional form of `t[r0:r1, c0:c1] = source`, usable as a loop carry."""
    for x in (target, source):
        if not (isinstance(x, Tracer) and isinstance(x.type, TileType)):
            raise CompileError(f"pl.tile.assemble takes tiles, got {x!r}", user_source())
    offs = tuple(int(o) for o in offset)
    if len(offs) != 2 or min(offs) < 0:
        raise CompileError(
            f"pl.tile.assemble: offset is two non-negative ints, got {list(offset)}", user_source()
        )
    return bind(VP.tile_assemble_p, [[target], [source]], {"offsets": offs})[0]


def reshape(t: Any, shape: Sequence[int]) -> Tracer:
    """`pl.reshape(x, shape)`: a tile's bytes with another shape, or a tensor reshaped (ops.reshape)."""
    if isinstance(t, Tracer) and isinstance(t.type, TileType):
        return bind(VP.tile_reshape_p, [[t]], {"shape": tuple(int(s) for s in shape)})[0]
    return ops.reshape(t, shape)


ops.tile_indexing.update(get=tile_getitem, set=tile_setitem)


def store(tile: Any, offsets: Sequence[Any], out: Any, **attrs: Any) -> Tracer:
    """`pl.store(tile, offsets, out, **attrs)` (ops.store), refusing up front what TSTORE refuses of a
    row reduction's `[R, 1]` DN tile: its R values are one column, which TSTORE cannot write into an
    ND tensor."""
    if isinstance(tile, Tracer) and isinstance(tile.type, TileType):
        shape = tile.type.shape
        if len(shape) == 2 and shape[1] == 1 and shape[0] > 1 and tile.type.memory.value == "Vec":
            raise CompileError(
                f"pl.store of the [{shape[0]}, 1] column tile {tile.type}: TSTORE writes no Vec DN "
                "tile into an ND tensor",
                user_source(),
                help=f"pl.reshape(t, [1, {shape[0]}]) and store it into a [1, {shape[0]}] window",
            )
    return ops.store(tile, offsets, out, **attrs)
