"""The vector unit's primitives and their type rules (tile level): the elementwise ALU between tiles
(`tile.add / sub / mul / maximum / exp / neg / abs`, the `ELEMENTWISE` table) and with a scalar,
unary math, conversions (`tile.cast`, and `tile.cvt` with a rounding mode), row / column
reductions and broadcasts, tile creation and fills, padding, tile windows, top-k pieces, and the
cross-core moves of a mixed cube + vector kernel.

Names follow pto-isa's instructions through PyPTO's IR (`tile.adds` is TADDS, `tile.row_sum`
TROWSUM, ...). Rules that depend on the target (bf16 arithmetic, TCVT's pairs, which moves exist)
are checked by the language layer, which knows the kernel's target.
"""

from __future__ import annotations

from typing import Any

from ..core import dtypes as dt
from ..core.primitives import Primitive, _elementwise, _tile, primitive
from ..core.types import Mem, ScalarType, TensorType, TileType, Type, static_dim
from ..errors import CompileError

_NOTE = "load with target_memory=pl.Mem.Vec, or pl.move a cube result to pl.Mem.Vec"


def vec_tile(t: Type, what: str) -> TileType:
    """`t` as a Vec tile operand of `what`, else the refusal naming the fix."""
    if not isinstance(t, TileType):
        raise CompileError(f"{what} takes Vec tiles, got {t}")
    if t.memory is not Mem.Vec:
        raise CompileError(f"{what} works on Vec tiles (the vector unit's buffer), got {t}", help=_NOTE)
    if len(t.shape) != 2:
        raise CompileError(f"{what} takes 2-D tiles, got {t}", help="pl.reshape the tile to 2-D")
    return t


def _same(what: str, a: TileType, b: TileType) -> None:
    if a.shape != b.shape or a.dtype is not b.dtype:
        raise CompileError(
            f"{what} operands differ: {a} and {b}",
            help="make both the same shape and dtype (pl.cast), or broadcast a [R, 1] / [1, C] "
            "tile with pl.row_expand_* / pl.col_expand_*",
        )
    if a.valid_shape != b.valid_shape and not (a.fully_valid and b.fully_valid):
        raise CompileError(
            f"{what} operands have different valid shapes: {a} and {b}",
            help="the vector unit computes dst's valid region from sources of that same valid "
            "shape; pl.tile.fillpad the smaller one",
        )


def _scalar_for(what: str, tile: TileType, s: Type) -> None:
    if not isinstance(s, ScalarType):
        raise CompileError(f"{what}: the scalar operand must be a number or a pl.Scalar, got {s}")
    if tile.dtype.is_float != s.dtype.is_float:
        raise CompileError(
            f"{what}: a {s.dtype!r} scalar does not combine with a {tile.dtype!r} tile",
            help="pass a float for a float tile, an int for an integer tile",
        )


# ------------------------------------------------------------------- elementwise between tiles
@primitive("tile.cast", ("src",))
def tile_cast_p(src: Type, *, dtype: dt.DType, **_: Any) -> list[Type]:
    """`pl.cast` of a tile to `dtype` (same shape and memory)."""
    s = _tile(src, "pl.cast")
    return [s.with_(dtype=dtype)]


#: The tile-tile ops with one numpy ufunc each (the backend's fast forms run them on whole images).
ELEMENTWISE = {
    n: _elementwise(n, k)
    for n, k in (("add", 2), ("sub", 2), ("mul", 2), ("maximum", 2), ("exp", 1), ("neg", 1))
}
ELEMENTWISE["abs"] = _elementwise("abs", 1, (dt.FP32, dt.FP16))  # TABS: float / half only (pto-isa)


# ---------------------------------------------------------------------------- binary / unary
def _binary(name: str) -> Primitive:
    @primitive(f"tile.{name}", ("lhs", "rhs"))
    def rule(a: Type, b: Type, **_: Any) -> list[Type]:
        ta, tb = vec_tile(a, f"pl.{name}"), vec_tile(b, f"pl.{name}")
        _same(f"pl.{name}", ta, tb)
        return [ta]

    return rule


BINARY = {"div": _binary("div"), "minimum": _binary("minimum")}


def _binary_scalar(name: str) -> Primitive:
    @primitive(f"tile.{name}", ("src", "scalar"))
    def rule(a: Type, s: Type, **_: Any) -> list[Type]:
        ta = vec_tile(a, f"pl.{name}")
        _scalar_for(f"pl.{name}", ta, s)
        return [ta]

    return rule


#: tile <op> scalar, by the vector op's name (TADDS, TSUBS, TMULS, TDIVS, TMAXS, TMINS).
BINARY_SCALAR = {
    op: _binary_scalar(name)
    for op, name in (
        ("add", "adds"),
        ("sub", "subs"),
        ("mul", "muls"),
        ("div", "divs"),
        ("maximum", "maximums"),
        ("minimum", "minimums"),
    )
}


def _unary(name: str) -> Primitive:
    @primitive(f"tile.{name}", ("src",))
    def rule(a: Type, **_: Any) -> list[Type]:
        return [vec_tile(a, f"pl.{name}")]

    return rule


#: The other unary ops (`tile.neg` / `tile.abs` are in ELEMENTWISE: one definition per op).
UNARY = {n: _unary(n) for n in ("log", "sqrt", "rsqrt", "recip", "relu")}


@primitive("tile.lrelu", ("src", "slope"))
def lrelu_p(a: Type, s: Type, **_: Any) -> list[Type]:
    """`pl.tile.lrelu(tile, slope)`: max(x, slope * x) (TLRELU)."""
    t = vec_tile(a, "pl.tile.lrelu")
    _scalar_for("pl.tile.lrelu", t, s)
    if not t.dtype.is_float:
        raise CompileError(f"pl.tile.lrelu needs a float tile, got {t}")
    return [t]


@primitive("tile.cvt", ("src",))
def cvt_p(a: Type, *, dtype: dt.DType, mode: str, **_: Any) -> list[Type]:
    """`pl.cast(tile, target_type, mode=...)` (TCVT with a pto::RoundMode)."""
    t = vec_tile(a, "pl.cast")
    return [t.with_(dtype=dtype)]


# ------------------------------------------------------------------------- reductions / broadcasts
def _reduction(name: str, axis: int) -> Primitive:
    @primitive(f"tile.{name}", ("src", "tmp"))
    def rule(a: Type, *tmp: Type, **_: Any) -> list[Type]:
        t = vec_tile(a, f"pl.{name}")
        for x in tmp:
            s = vec_tile(x, f"pl.{name} tmp")
            if s.dtype is not t.dtype:
                raise CompileError(f"pl.{name}: tmp {s} must have the source's dtype {t.dtype!r}")
        r, c = t.shape
        vs = t.valid_shape
        if axis == 1:
            return [TileType((r, 1), t.dtype, Mem.Vec, None if vs is None else (vs[0], 1))]
        return [TileType((1, c), t.dtype, Mem.Vec, None if vs is None else (1, vs[1]))]

    return rule


REDUCE = {
    f"{k}_{op}": _reduction(f"{k}_{op}", 1 if k == "row" else 0)
    for k in ("row", "col")
    for op in ("sum", "max", "min")
}


def _expand(name: str, axis: int) -> Primitive:
    @primitive(f"tile.{name}", ("lhs", "vec"))
    def rule(a: Type, v: Type, **_: Any) -> list[Type]:
        t, s = vec_tile(a, f"pl.{name}"), vec_tile(v, f"pl.{name}")
        if s.dtype is not t.dtype:
            raise CompileError(f"pl.{name}: operand dtypes differ ({t} and {s})", help="pl.cast one of them")
        r, c = t.shape
        if axis == 1:
            block = 32 // t.dtype.itemsize
            if s.shape[0] != r or s.shape[1] not in (1, block):
                raise CompileError(
                    f"pl.{name}: the per-row operand must be [{r}, 1], got {s}",
                    help="reduce with pl.row_sum / row_max, or pl.reshape a [1, R] tile",
                )
        elif s.shape != (1, c):
            raise CompileError(
                f"pl.{name}: the per-column operand must be [1, {c}], got {s}",
                help="reduce with pl.col_sum / col_max, or load one row",
            )
        return [t]

    return rule


EXPAND = {
    f"{k}_expand{suffix}": _expand(f"{k}_expand{suffix}", 1 if k == "row" else 0)
    for k in ("row", "col")
    for suffix in ("", "_add", "_sub", "_mul", "_div", "_max", "_min")
}


# ---------------------------------------------------------------------------- creation / padding
@primitive("tile.create", ())
def create_p(*, shape: tuple[int, int], dtype: dt.DType, memory: Mem, **_: Any) -> list[Type]:
    """`pl.create_tile(shape, dtype=, target_memory=)`: an uninitialised tile (its bytes are
    whatever the buffer held)."""
    return [TileType(tuple(shape), dtype, memory)]


@primitive("tile.full", ("value",))
def full_p(v: Type, *, shape: tuple[int, int], dtype: dt.DType, **_: Any) -> list[Type]:
    """`pl.full(shape, dtype=, value=)`: a Vec tile with every element `value` (TEXPANDS)."""
    if not isinstance(v, ScalarType):
        raise CompileError(f"pl.full: the value must be a number or a pl.Scalar, got {v}")
    return [TileType(tuple(shape), dtype, Mem.Vec)]


@primitive("tile.fillpad", ("src",))
def fillpad_p(a: Type, *, pad: str, **_: Any) -> list[Type]:
    """`pl.tile.fillpad(tile, pad_value=)`: the tile with everything outside its valid region set to
    the pad value (TFILLPAD); the result is fully valid."""
    t = vec_tile(a, "pl.tile.fillpad")
    return [t.with_(valid_shape=None)]


# ------------------------------------------------------------------------------- cross-core moves
def _fixpipe_scale(a: TileType, dtype: dt.DType, scale: tuple[Type, ...]) -> None:
    """The fixpipe's dequantisation: an INT32 Acc tile to FP16 times one FP32 scale (DEQF16) or one
    FP32 scale per column, an FP32 tensor of the tile's columns (VDEQF16)."""
    if scale and (a.dtype is not dt.INT32 or dtype is not dt.FP16):
        raise CompileError(
            f"the fixpipe's dequant scale converts an INT32 Acc tile to FP16, not {a.dtype!r} -> {dtype!r}"
        )
    for s in scale:
        per_channel = (
            isinstance(s, TensorType)
            and s.dtype is dt.FP32
            and s.shape[-1] == a.shape[-1]
            and all(d == 1 for d in s.shape[:-1])
        )
        if not (isinstance(s, ScalarType) and s.dtype.is_float) and not per_channel:
            raise CompileError(
                f"the fixpipe's dequant scale is a float scalar or an FP32 tensor of one scale per "
                f"column, got {s}"
            )


def quant_mode(scale: tuple[Type, ...]) -> str | None:
    """The fixpipe's pre-quantisation mode of an Acc -> Vec move with operands `scale`."""
    if not scale:
        return None
    return "VDEQF16" if isinstance(scale[0], TensorType) else "DEQF16"


@primitive("tile.tpush_to_aiv", ("acc", "scale"))
def tpush_to_aiv_p(a: Type, *scale: Type, dtype: dt.DType, relu: bool = False, **_: Any) -> list[Type]:
    """The cube side of an Acc -> Vec move on A2/A3: the fixpipe stores the Acc tile (converted to
    `dtype`, dequantised by the optional `scale`) into a GM slot of the cube -> vector pipe and
    records data-ready. The result stands for that slot (a GM tensor of the tile's shape)."""
    if not isinstance(a, TileType) or a.memory is not Mem.Acc:
        raise CompileError(f"tile.tpush_to_aiv pushes an Acc tile, got {a}")
    _fixpipe_scale(a, dtype, scale)
    return [TensorType(tuple(a.shape), dtype)]


@primitive("tile.tpop_from_aic", ("slot",))
def tpop_from_aic_p(s: Type, *, valid: tuple[int, int] | None = None, **_: Any) -> list[Type]:
    """The vector side: wait for data-ready, load the slot into a Vec tile, free the slot."""
    if not isinstance(s, TensorType):
        raise CompileError(f"tile.tpop_from_aic pops a pipe slot, got {s}")
    return [TileType(tuple(s.shape), s.dtype, Mem.Vec, valid)]  # type: ignore[arg-type]


@primitive("tile.tpush_to_aic", ("vec",))
def tpush_to_aic_p(a: Type, **_: Any) -> list[Type]:
    """The vector side of a Vec -> Mat move on A2/A3: store the Vec tile into a GM slot of the
    vector -> cube pipe and record data-ready."""
    t = vec_tile(a, "tile.tpush_to_aic")
    return [TensorType(tuple(t.shape), t.dtype)]


@primitive("tile.tpop_from_aiv", ("slot",))
def tpop_from_aiv_p(s: Type, **_: Any) -> list[Type]:
    """The cube side: wait for data-ready, load the slot into a Mat tile (ND -> NZ), free it."""
    if not isinstance(s, TensorType):
        raise CompileError(f"tile.tpop_from_aiv pops a pipe slot, got {s}")
    return [TileType(tuple(static_dim(d) for d in s.shape), s.dtype, Mem.Mat)]  # a slot has its tile's shape


@primitive("tile.move_fixpipe", ("acc", "scale"))
def move_fixpipe_p(a: Type, *scale: Type, dtype: dt.DType, relu: bool = False, **_: Any) -> list[Type]:
    """A5's direct Acc -> Vec TMOV through the fixpipe (its dtype conversion, optional scalar dequant)."""
    if not isinstance(a, TileType) or a.memory is not Mem.Acc:
        raise CompileError(f"an Acc -> Vec move takes an Acc tile, got {a}")
    _fixpipe_scale(a, dtype, scale)
    return [TileType(tuple(a.shape), dtype, Mem.Vec, a.valid_shape)]


# ------------------------------------------------------------------------------ tiles as values
@primitive("tile.slice", ("src",))
def tile_slice_p(a: Type, *, shape: tuple[int, int], offsets: tuple[int, int], **_: Any) -> list[Type]:
    """`t[r0:r1, c0:c1]` of a Vec tile: the window as a tile of its own (a copy, TEXTRACT)."""
    t = vec_tile(a, "tile slicing")
    r0, c0 = offsets
    if r0 + shape[0] > t.shape[0] or c0 + shape[1] > t.shape[1]:
        raise CompileError(f"tile window [{r0}:{r0 + shape[0]}, {c0}:{c0 + shape[1]}] is outside {t}")
    if (c0 * t.dtype.itemsize) % 32 or (shape[1] * t.dtype.itemsize) % 32 and shape[1] != 1:
        raise CompileError(
            f"tile window [{r0}:{r0 + shape[0]}, {c0}:{c0 + shape[1]}] of {t}: a Vec window starts "
            "and ends on 32-byte blocks",
            help=f"use column bounds that are multiples of {32 // t.dtype.itemsize}",
        )
    vs = None
    if t.valid_shape is not None and not t.fully_valid:
        vs = tuple(
            None if v is None else max(0, min(n, v - o)) for v, n, o in zip(t.valid_shape, shape, offsets)
        )
    return [TileType(tuple(shape), t.dtype, Mem.Vec, vs)]


@primitive("tile.assemble", ("dst", "src"))
def tile_assemble_p(d: Type, s: Type, *, offsets: tuple[int, int], **_: Any) -> list[Type]:
    """`t[r0:r1, c0:c1] = v` on a Vec tile: `dst` with `src` written at `offsets` (TINSERT)."""
    td, ts = vec_tile(d, "tile assignment"), vec_tile(s, "tile assignment")
    if td.dtype is not ts.dtype:
        raise CompileError(f"tile assignment of {ts} into {td}: dtypes differ", help="pl.cast the value")
    r0, c0 = offsets
    if r0 + ts.shape[0] > td.shape[0] or c0 + ts.shape[1] > td.shape[1]:
        raise CompileError(f"tile assignment of {ts} at ({r0}, {c0}) is outside {td}")
    if (c0 * td.dtype.itemsize) % 32:
        raise CompileError(f"tile assignment at column {c0} of {td}: a Vec window starts on a 32-byte block")
    return [td]


@primitive("tile.reshape", ("src",))
def tile_reshape_p(a: Type, *, shape: tuple[int, int], **_: Any) -> list[Type]:
    """`pl.reshape(tile, shape)`: the same bytes with another 2-D shape (`[N, 1]` <-> `[1, N]`)."""
    t = vec_tile(a, "pl.reshape of a tile")
    if len(shape) != 2 or shape[0] * shape[1] != t.shape[0] * t.shape[1]:
        raise CompileError(f"pl.reshape of {t} to {list(shape)} changes the element count")
    if not t.fully_valid:
        raise CompileError(
            f"pl.reshape of {t}: its bytes outside the valid region are not data",
            help="pl.tile.fillpad it first",
        )
    r, c = shape
    if (c == 1 and (r * t.dtype.itemsize) % 32) or (c != 1 and (c * t.dtype.itemsize) % 32):
        raise CompileError(
            f"pl.reshape of {t} to {list(shape)}: a Vec tile row (a [N, 1] column) is whole 32-byte blocks"
        )
    return [TileType(tuple(shape), t.dtype, Mem.Vec)]


# ---------------------------------------------------------------------------------- top-k pieces
def _pair_elems(d: dt.DType) -> int:
    return 8 // d.itemsize


@primitive("tile.ci", ("start",))
def ci_p(
    s: Type, *, shape: tuple[int, int], dtype: dt.DType, descending: bool = False, **_: Any
) -> list[Type]:
    """`pl.arange(start, shape, dtype=)` (TCI): `start + k` along a `[1, N]` tile."""
    if dtype not in (dt.INT32, dt.INT16):
        raise CompileError(f"pl.arange makes INT32 or INT16 tiles, got {dtype!r}")
    if len(shape) != 2 or shape[0] != 1:
        raise CompileError(f"pl.arange fills one row (TCI): the shape is [1, N], got {list(shape)}")
    return [TileType(tuple(shape), dtype, Mem.Vec)]


@primitive("tile.sort32", ("src", "idx"))
def sort32_p(a: Type, i: Type, **_: Any) -> list[Type]:
    """`pl.sort32(src, idx)` (TSORT32): each row's 32-element blocks sorted descending with their
    indices, as value-index pairs (last dim x2 for fp32, x4 for fp16)."""
    src, idx = vec_tile(a, "pl.sort32"), vec_tile(i, "pl.sort32")
    if src.dtype not in (dt.FP32, dt.FP16):
        raise CompileError(f"pl.sort32 sorts FP32 or FP16 values, got {src}")
    if idx.dtype not in (dt.INT32, dt.UINT32) or idx.shape != src.shape:
        raise CompileError(
            f"pl.sort32: idx must be an INT32 / UINT32 tile of the source's shape, got {idx}",
            help="make it with pl.arange(0, [1, N], dtype=pl.INT32)",
        )
    if src.shape[1] % 32:
        raise CompileError(
            f"pl.sort32 sorts whole 32-element blocks; {src.shape[1]} columns are not",
            help="pad the row to a multiple of 32 (pl.tile.fillpad with pl.PadValue.min)",
        )
    r, c = src.shape
    return [TileType((r, c * _pair_elems(src.dtype)), src.dtype, Mem.Vec)]


@primitive("tile.mrgsort", ("src",))
def mrgsort_p(a: Type, *, block_len: int, **_: Any) -> list[Type]:
    """`pl.mrgsort(src, block_len=)` (TMRGSORT format 1): runs of 4 sorted blocks merged."""
    src = vec_tile(a, "pl.mrgsort")
    if src.dtype not in (dt.FP32, dt.FP16) or src.shape[0] != 1:
        raise CompileError(f"pl.mrgsort merges one row of FP32 / FP16 value-index pairs, got {src}")
    c = src.shape[1]
    if block_len % 64 or block_len <= 0 or c % (4 * block_len) or not 1 <= c // (4 * block_len) <= 255:
        raise CompileError(
            f"pl.mrgsort: block_len {block_len} must be a multiple of 64 with the row ({c} elements) "
            "1..255 runs of 4 blocks",
            help="merge sort32's 64-element blocks with block_len=64, then "
            "256, 1024, ... until one run remains",
        )
    return [src]


@primitive("tile.mrgsort_format2", ("srcs", "tmp"))
def mrgsort2_p(*ts: Type, exhausted: bool = False, **_: Any) -> list[Type]:
    """`pl.mrgsort(src0, src1[, src2[, src3]], tmp=, exhausted=False)` (TMRGSORT format 2): 2-4 sorted
    one-row lists of value-index pairs merged into one row of their total length (`tmp`'s); with
    `exhausted` the merge stops once a list is used up and the rest of the row is tmp's bytes."""
    *srcs, tmp = [vec_tile(t, "pl.mrgsort") for t in ts]
    if not 2 <= len(srcs) <= 4:
        raise CompileError(f"pl.mrgsort merges 2 to 4 lists (format 2), got {len(srcs)}")
    d = srcs[0].dtype
    for t in (*srcs, tmp):
        if t.dtype is not d or d not in (dt.FP32, dt.FP16) or t.shape[0] != 1:
            raise CompileError(
                f"pl.mrgsort merges one-row FP32 / FP16 value-index pair tiles of one dtype, got {t}"
            )
    total = sum(t.shape[1] for t in srcs)
    if tmp.shape[1] != total:
        raise CompileError(
            f"pl.mrgsort: tmp has {tmp.shape[1]} columns, the lists {total}",
            help=f"pass a [1, {total}] tmp tile (GETMRGSORTTMPSIZE: the lists' columns)",
        )
    return [TileType((1, total), d, Mem.Vec)]


@primitive("tile.gather_mask", ("src",))
def gather_mask_p(a: Type, *, pattern: int, dtype: dt.DType, **_: Any) -> list[Type]:
    """`pl.gather(src, mask_pattern=, output_dtype=)` (TGATHER mask form)."""
    src = vec_tile(a, "pl.gather")
    if pattern not in (1, 2, 3, 4, 5, 6, 7):
        raise CompileError(f"pl.gather: mask_pattern {pattern} is not a pl.tile.MaskPattern (1..7)")
    if dtype.itemsize != src.dtype.itemsize:
        raise CompileError(
            f"pl.gather: output_dtype {dtype!r} is not the size of {src.dtype!r} (bits are reinterpreted)"
        )
    stride = 1 if pattern == 7 else 2 if pattern in (1, 2) else 4
    r, c = src.shape
    if c % stride or ((c // stride) * dtype.itemsize) % 32:
        raise CompileError(
            f"pl.gather: {c} columns with a stride-{stride} pattern leave a row that is not whole "
            "32-byte blocks"
        )
    return [TileType((r, c // stride), dtype, Mem.Vec)]


@primitive("tile.gather", ("src", "index"))
def gather_p(a: Type, i: Type, *, rowwise: bool = True, **_: Any) -> list[Type]:
    """`pl.gather(src, -1, index)` (row-wise) / `pl.tile.gather(src, indices, tmp)` (flat)."""
    src, idx = vec_tile(a, "pl.gather"), vec_tile(i, "pl.gather")
    if idx.dtype not in (dt.INT32, dt.UINT32, dt.INT16):
        raise CompileError(f"pl.gather: indices are INT32 (or INT16), got {idx}")
    if rowwise and idx.shape[0] != src.shape[0]:
        raise CompileError(f"pl.gather: index rows {idx.shape[0]} != source rows {src.shape[0]}")
    return [TileType(idx.shape, src.dtype, Mem.Vec)]


#: Every primitive of this module (the backend, codegen and fuzzer tables cover each).
ALL: tuple[Primitive, ...] = (
    *ELEMENTWISE.values(),
    tile_cast_p,
    *BINARY.values(),
    *BINARY_SCALAR.values(),
    *UNARY.values(),
    lrelu_p,
    cvt_p,
    *REDUCE.values(),
    *EXPAND.values(),
    create_p,
    full_p,
    fillpad_p,
    tpush_to_aiv_p,
    tpop_from_aic_p,
    tpush_to_aic_p,
    tpop_from_aiv_p,
    move_fixpipe_p,
    tile_slice_p,
    tile_assemble_p,
    tile_reshape_p,
    ci_p,
    sort32_p,
    mrgsort_p,
    mrgsort2_p,
    gather_mask_p,
    gather_p,
)
