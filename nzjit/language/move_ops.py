"""`pl.move` between memories, lowered the way the kernel's target moves the bytes (the cross-core
pair through a GM FIFO slot on A2/A3, the direct TMOV on A5), with the fixpipe's conversions."""

from __future__ import annotations

import math
from typing import Any

from .. import prims as P
from ..core import dtypes as dt
from ..core.types import Mem, TileType
from ..errors import CompileError, user_source
from ..prims import vector as VP
from ..tracing import Tracer, bind, current_state
from .vector_ops import as_tile, is_scalar, is_tensor


def _fail(msg: str, help: str | None = None) -> CompileError:
    return CompileError(msg, user_source(), help=help)


# ----------------------------------------------------------------------------------------- moves
#: The fixpipe's non-quant conversions of an Acc tile (runtime.convert's ACC_OUT_DTYPES).
_FIXPIPE = {dt.FP32: (dt.FP32, dt.FP16, dt.BF16), dt.INT32: (dt.INT32,)}
#: A5's fixpipe buffer: a destination row of at most 4096 bytes (pto-isa TMOV, A5 checks).
_A5_FIXPIPE_ROW_BYTES = 4096


def move(
    tile: Any,
    target_memory: Mem,
    blayout: Any = None,
    slayout: Any = None,
    *,
    dtype: dt.DType | None = None,
    relu: bool = False,
    scale: Any = None,
) -> Tracer:
    """`pl.move(tile, target_memory=...)`, lowered the way the target moves the bytes:

    - Acc -> Vec (`dtype=` picks the fixpipe's conversion: fp32 -> fp32 / fp16 / bf16, int32 ->
      int32, and int32 -> fp16 times a float `scale=`, the fixpipe's DEQF16 dequantisation, or
      times one fp32 per column, `scale=` an FP32 `[C]` / `[1, C]` tensor: VDEQF16, whose scales
      keep 11 significant bits; `relu=True` its ReLU). On A2/A3 the cube and vector cores are separate: the move
      is PyPTO's cross-core pair, `tile.tpush_to_aiv` (fixpipe store into a GM FIFO slot, then the
      data-ready flag) and `tile.tpop_from_aic` (wait, load the slot into UB, free it). On A5 it is
      the direct `TMOV` (`tile.move_fixpipe`).
    - Vec -> Mat (a vector result feeding the cube): on A2/A3 `tile.tpush_to_aic` (UB -> GM slot) and
      `tile.tpop_from_aiv` (GM -> L1, ND -> NZ); on A5 the direct `TMOV`.
    - Mat -> Left / Right (TEXTRACT / TMOV, what AutoTileMatmulL0 does implicitly) and Vec -> Vec.
    """
    t = as_tile(tile, "pl.move")
    tt: TileType = t.type  # type: ignore[assignment]
    src, target = tt.memory, current_state().target
    if not isinstance(target_memory, Mem):
        raise _fail(f"pl.move: target_memory must be a pl.Mem, got {target_memory!r}")
    if (dtype is not None or scale is not None) and src is not Mem.Acc:
        raise _fail(
            "pl.move: dtype= / scale= are the fixpipe's conversion of an Acc -> Vec move",
            help="convert a Vec tile with pl.cast (and pl.mul)",
        )
    if (src, target_memory) == (Mem.Acc, Mem.Vec):
        to = dtype or (dt.FP16 if scale is not None else tt.dtype)
        quant = [] if scale is None else [scale]
        if scale is not None:
            if is_tensor(scale):  # VDEQF16: one fp32 scale per column, read by the fixpipe
                st = scale.type
                if (
                    st.dtype is not dt.FP32
                    or st.shape[-1] != tt.shape[-1]
                    or math.prod(st.shape) != st.shape[-1]
                ):
                    raise _fail(
                        f"pl.move: a per-channel scale= is a [{tt.shape[-1]}] or [1, {tt.shape[-1]}] FP32 "
                        f"tensor (one scale per column of the Acc tile), got {st}",
                        help="index the scale tensor down to the row of this tile, e.g. scales[e]",
                    )
            elif not is_scalar(scale) or isinstance(scale, Tracer) and not scale.type.dtype.is_float:
                raise _fail(
                    f"pl.move: scale= is one float (the fixpipe's scalar dequant, DEQF16) or an FP32 "
                    f"tensor of one scale per column (VDEQF16), got {scale!r}",
                    help="a per-channel scale in a Vec tile is pl.col_expand_mul on the vector unit",
                )
            if (tt.dtype, to) != (dt.INT32, dt.FP16):
                raise _fail(
                    f"pl.move: the fixpipe dequantises an INT32 Acc tile to pl.FP16, not {tt.dtype!r} -> "
                    f"{to!r}"
                )
        elif to not in _FIXPIPE.get(tt.dtype, ()):
            raise _fail(
                f"pl.move: the fixpipe converts a {tt.dtype!r} Acc tile to "
                f"{', '.join(repr(d) for d in _FIXPIPE.get(tt.dtype, ())) or 'nothing'}, not {to!r}",
                help="move it unconverted and pl.cast / pl.mul on the vector unit (a dequant scale is "
                "pl.col_expand_mul of the INT32 -> FP32 cast)",
            )
        if (tt.shape[-1] * to.itemsize) % 32:
            raise _fail(f"pl.move: the Vec tile row of {tt.shape[-1]} {to!r} is not whole 32-byte blocks")
        if target == "A5":
            if tt.shape[-1] * to.itemsize > _A5_FIXPIPE_ROW_BYTES:
                raise _fail(
                    f"pl.move: A5's Acc -> Vec TMOV takes rows of at most {_A5_FIXPIPE_ROW_BYTES} bytes, "
                    f"got {tt.shape[-1]} {to!r}",
                    help="move the accumulator in column blocks",
                )
            return bind(VP.move_fixpipe_p, [[t], quant], {"dtype": to, "relu": bool(relu)}, dtype=dt.FP32)[0]
        slot = bind(VP.tpush_to_aiv_p, [[t], quant], {"dtype": to, "relu": bool(relu)}, dtype=dt.FP32)[0]
        return bind(VP.tpop_from_aic_p, [[slot]], {"valid": tt.valid_shape})[0]
    if relu:
        raise _fail("pl.move: relu= is the fixpipe's pre-ReLU of an Acc -> Vec move")
    if (src, target_memory) == (Mem.Vec, Mem.Mat):
        c0 = dt.c0_of(tt.dtype)
        if len(tt.shape) != 2 or tt.shape[0] % 16 or tt.shape[1] % c0:
            raise _fail(
                f"pl.move: a Mat tile is whole 16 x {c0} fractals, got {tt}",
                help="pad the Vec tile to whole fractals (pl.tile.fillpad with a larger window)",
            )
        if target == "A5":
            return bind(P.tile_move_p, [[t]], {"memory": Mem.Mat})[0]
        slot = bind(VP.tpush_to_aic_p, [[t]])[0]
        return bind(VP.tpop_from_aiv_p, [[slot]])[0]
    if (src, target_memory) in ((Mem.Mat, Mem.Left), (Mem.Mat, Mem.Right), (Mem.Vec, Mem.Vec)):
        return bind(P.tile_move_p, [[t]], {"memory": target_memory})[0]
    raise _fail(
        f"pl.move: no {src.value} -> {target_memory.value} move on {target}",
        help="the moves are Acc -> Vec, Vec -> Mat, Mat -> Left / Right and Vec -> Vec; an Acc result "
        "reaches GM with pl.store",
    )
