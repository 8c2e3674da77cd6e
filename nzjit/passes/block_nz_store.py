"""Accumulator write-back into an NZ tensor (NZ-20..24): the store half of BlockNzTensorViews and
AutoTileMatmulL0's N-only split of a matmul stored that way.

Why the rules are narrow (hardware-model.md §4): the A2/A3 store `TStoreAccNz2nz` ignores every
gStride. Consecutive GM column blocks are written `dstStride = partition rows * 32 B` apart and a
batch extent is folded into the column count. The store is therefore exact only into a dense,
whole-height NZ view: the tile covers the parent's full row axis at row 0 (NZ-23) and writes one
panel per store (NZ-24). BlockNzTensorViews checks shape, attributes and that geometry; the
per-instruction limits (rows <= 65535, cols <= 4095, L0C capacity) are checked when AutoTileMatmulL0
emits each store (NZ-22), because the logical source may legitimately exceed them.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from runtime.dtypes import FRACTAL_ROWS

from .. import prims as P
from ..core.dtypes import FP32, INDEX
from ..core.ir import Atom, Eqn, Literal, Var
from ..core.types import DynDim, Mem, ScalarType, TensorType, TileType
from ..errors import CompileError, Source
from .nz_blocked import blocked_shape

ACC_C0 = 8  # FP32 c0 (NZ-4): the GM column-block width of an FP32 NZ target
ACC_COL_ALIGN = 16  # pto-isa static-asserts Acc NZ store Cols % 16 == 0 (NZ-23: no 8-column exception)
MAX_STORE_ROWS = 65535  # mSize, 16-bit field
MAX_STORE_COLS = 4095  # nSize, 12-bit field
SUPPORTED_TARGET = "A2A3"

#: Attributes the NZ Acc store refuses (NZ-21): in-place accumulation and the fixpipe's quant /
#: relu / dtype conversion stages are not part of the supported FP32 -> FP32 write-back.
_REFUSED_ATTRS = {
    "atomic": "atomic accumulation",
    "pre_quant": "fixpipe quantisation",
    "pre_relu": "fixpipe relu",
    "quant": "fixpipe quantisation",
    "relu": "fixpipe relu",
    "dtype": "a dtype conversion",
    "out_dtype": "a dtype conversion",
    "cast": "a dtype conversion",
    "convert": "a dtype conversion",
}
_OFF = (None, False, 0, "none", "None", "NONE", "off")

#: Test-only: let a row sub-window through BlockNzTensorViews so a test can show the hardware
#: mis-write of NZ-23 (hardware-model.md §4.4). Never set outside tests.
_UNSAFE_SKIP_FULL_ROW_CHECK_FOR_TESTS = False


@contextmanager
def unsafe_skip_full_row_check_for_tests() -> Iterator[None]:
    """Within the block, row sub-windows are blocked like loads instead of refused (tests only)."""
    global _UNSAFE_SKIP_FULL_ROW_CHECK_FOR_TESTS
    saved = _UNSAFE_SKIP_FULL_ROW_CHECK_FOR_TESTS
    _UNSAFE_SKIP_FULL_ROW_CHECK_FOR_TESTS = True
    try:
        yield
    finally:
        _UNSAFE_SKIP_FULL_ROW_CHECK_FOR_TESTS = saved


def nz_partition(rows: int, cols: int) -> tuple[int, int, int, int, int]:
    """The explicit rank-5 partition of an FP32 Acc store of `rows x cols` (NZ-20)."""
    return (1, cols // ACC_C0, rows // FRACTAL_ROWS, FRACTAL_ROWS, ACC_C0)


def _lit(v: int, like: Atom | None = None) -> Literal:
    t = like.type if like is not None and isinstance(like.type, ScalarType) else ScalarType(INDEX)
    return Literal(v, t)


# ------------------------------------------------------------------------- BlockNzTensorViews
def rewrite_nz_store(blk: Any, e: Eqn) -> None:
    """Rewrite `pl.store(acc, offsets, out)` into an FP32 NZ target, or refuse it (NZ-20, NZ-21).

    Offsets `[.., 0, col]` become `[batch, col/8, 0, 0, 0]` with the explicit partition
    `nz_partition = (1, n/8, M/16, 16, 8)`; the tile keeps its type, the attrs are kept, the result
    is an alias of the blocked target.
    """
    src = e.source
    tile_v, dst_v = e.inputs[0], e.inputs[-1]
    logical = dst_v.type
    assert isinstance(logical, TensorType)
    what = f"store into NZ tensor '{blk.name_of(dst_v)}'"
    target = getattr(blk, "target", SUPPORTED_TARGET)
    if target != SUPPORTED_TARGET:
        raise CompileError(
            f"{what}: an accumulator store into an NZ tensor is supported on the A2/A3 "
            f"backend only (the kernel targets {target})",
            src,
            rule="NZ-21",
            help="use @pl.kernel(target=pl.A2A3), or store into an ND tensor on A5",
        )
    blocked_shape(logical, what, src)
    tt = blk.atom(tile_v).type
    if not isinstance(tt, TileType) or tt.memory is not Mem.Acc:
        got = f"a pl.Mem.{tt.memory.value} tile" if isinstance(tt, TileType) else str(tt)
        raise CompileError(
            f"{what}: only an accumulator (pl.Mem.Acc) tile can be written into NZ order "
            f"by the store, got {got}; a Vec or Mat source is not supported",
            src,
            rule="NZ-21",
            help="store the pl.matmul result directly, or use an ND target",
        )
    if tt.dtype is not FP32 or logical.dtype is not FP32:
        raise CompileError(
            f"{what}: the NZ accumulator store supports FP32 Acc -> FP32 GM only, got "
            f"{tt.dtype.name} Acc -> {logical.dtype.name} GM (no dtype conversion)",
            src,
            rule="NZ-21",
            help="accumulate in FP32 (FP16/BF16/FP32 operands) and declare the NZ output pl.FP32",
        )
    _check_attrs(e, what)
    rows, cols = _static_tile_shape(tt, what, src)
    r_parent, c_parent = logical.shape[-2], logical.shape[-1]
    assert isinstance(r_parent, int) and isinstance(c_parent, int)  # blocked_shape refused dynamic
    offs = list(e.operands("offsets"))
    proofs: list[str] = []
    row = _row_coordinate(blk, offs[-2], rows, r_parent, logical, what, src, proofs)
    try:
        col = blk.proven_coordinate(offs[-1], ACC_C0, "column", what, proofs)
    except CompileError as err:  # the literal case is phrased for loads (NZ-12); a store cites NZ-21
        if err.rule != "NZ-12":
            raise
        raise CompileError(err.raw_message, err.source, rule="NZ-21", help=err.help) from None
    _check_col_bounds(blk.atom(offs[-1]), cols, c_parent, what, src)
    batch = blk.fold_batch(logical, blk.atoms(offs[:-2]))
    zero = _lit(0, row)
    params = {k: v for k, v in e.params.items() if k != "arity"}
    params.update(nz_partition=nz_partition(rows, cols), proofs=tuple(proofs))
    vs = tt.valid_shape
    if vs is not None and vs[0] == rows and not isinstance(vs[1], int):
        # dynamic valid columns: the partition above is the tile's whole width; each run stores
        # its valid columns only, refused at run time when they are not whole blocks (NZ-21)
        params["nz_dynamic_cols"] = True
    outs = [blk.fresh(v) for v in e.outputs]
    blk.emit(
        P.tile_store_p,
        [[blk.atom(tile_v)], [batch, col, row, zero, zero], [blk.atom(dst_v)]],
        params,
        outs,
        src,
    )


def _check_attrs(e: Eqn, what: str) -> None:
    attrs = e.params.get("attrs") or {}
    for key, why in _REFUSED_ATTRS.items():
        if key in attrs and attrs[key] not in _OFF:
            raise CompileError(
                f"{what}: attribute {key}={attrs[key]!r} ({why}) is not supported by the NZ "
                "accumulator store (FP32 Acc -> FP32 GM, plain write)",
                e.source,
                rule="NZ-21",
                help=f"drop {key}=..., or store into an ND tensor",
            )


def _static_tile_shape(tt: TileType, what: str, src: Source | None) -> tuple[int, int]:
    if len(tt.shape) != 2 or any(not isinstance(d, int) or d <= 0 for d in tt.shape):
        raise CompileError(
            f"{what}: the accumulator tile {list(tt.shape)} must be static, positive and 2-D",
            src,
            rule="NZ-21",
        )
    rows, cols = tt.shape
    # a ragged N tile (all rows valid, static valid columns from its rhs): the store's partition is
    # its valid columns, whole 16-column blocks (TStoreAccNz2nz: validCol % 16 == 0 and validCol ==
    # the partition's columns); the columns past the valid part hold no product and are not written.
    # Dynamic valid columns: the partition is the whole tile, narrowed to the valid columns at run
    # time (`nz_dynamic_cols`, backend/nz_partition.py), which refuses a part that is not whole blocks.
    vc = tt.valid_shape[1] if tt.valid_shape is not None and tt.valid_shape[0] == rows else cols
    if isinstance(vc, int) and vc != cols:
        if vc % ACC_COL_ALIGN:
            raise CompileError(
                f"{what}: the accumulator tile {rows}x{cols} has {_show((vc,))} valid columns; the NZ "
                "store writes whole 16-column blocks of valid columns (pto-isa TStoreAccNz2nz: "
                "validCol % 16 == 0), so the valid columns must be a multiple of 16",
                src,
                rule="NZ-21",
                help="pad the N tail to a multiple of 16 columns, or store into an ND output",
            )
        cols = vc
    if tt.valid_shape is not None and tt.valid_shape[0] != rows:
        vs = tuple(tt.valid_shape)
        if any(v is None or isinstance(v, DynDim) for v in vs):
            raise CompileError(
                f"{what}: the accumulator tile's valid region {_show(vs)} is dynamic; the NZ "
                "store needs a static, fully valid tile",
                src,
                rule="NZ-21",
                help="store a tile whose valid_shape equals its shape",
            )
        if vs != (rows, cols):
            raise CompileError(
                f"{what}: the accumulator tile {rows}x{cols} is only partially valid "
                f"({_show(vs)}); the NZ store writes whole fractals and needs a fully "
                "valid tile",
                src,
                rule="NZ-21",
                help="store a fully valid tile",
            )
    for axis, n in (("rows", rows), ("cols", cols)):
        if n % ACC_COL_ALIGN:
            raise CompileError(
                f"{what}: the accumulator tile {axis} {n} must be a multiple of 16 (pto-isa "
                "Acc NZ store: whole 16x16 L0C fractals; there is no single-column-block "
                "exception)",
                src,
                rule="NZ-21",
                help=f"pad the tile {axis} to a multiple of 16",
            )
    return rows, cols


def _show(vs: tuple[Any, ...]) -> str:
    return "[" + ", ".join("?" if v is None else str(v) for v in vs) + "]"


def _row_coordinate(
    blk: Any,
    off: Atom,
    rows: int,
    r_parent: int,
    logical: TensorType,
    what: str,
    src: Source | None,
    proofs: list[str],
) -> Atom:
    """The row axis: the whole parent row axis at row 0 (NZ-23), one panel per store (NZ-24)."""
    if _UNSAFE_SKIP_FULL_ROW_CHECK_FOR_TESTS:  # tests only: block the row window like a load
        return blk.proven_coordinate(off, FRACTAL_ROWS, "row", what, proofs)
    lead = logical.shape[:-2]
    if rows > r_parent and rows % r_parent == 0 and lead:
        raise CompileError(
            f"{what}: the tile's {rows} rows span {rows // r_parent} panels of "
            f"{r_parent} rows; an NZ accumulator store writes one panel per store "
            "(batch extent 1): the A2/A3 store folds a larger batch extent into the "
            "column count instead of stepping by the batch stride",
            src,
            rule="NZ-24",
            help="store each panel with its own pl.store at its batch offset",
        )
    if rows != r_parent:
        raise CompileError(
            f"{what}: the tile's {rows} rows must cover the full row axis of the target ({r_parent} rows); "
            f"the A2/A3 Acc store (TStoreAccNz2nz) ignores the parent's strides and places column blocks "
            f"dstStride = {rows} rows x 32 B apart instead of {r_parent} rows, so every column block after "
            "the first would be mis-written (dstStride defect)",
            src,
            rule="NZ-23",
            help=f"make the accumulator {r_parent} rows tall, or stack independent panels on a leading "
            f"batch axis ([PANELS, {rows}, C]) and store one panel per store",
        )
    a = blk.atom(off)
    if not (isinstance(a, Literal) and int(a.value) == 0):
        desc = a.value if isinstance(a, Literal) else blk.prover.describe(a)
        raise CompileError(
            f"{what}: the row offset '{desc}' must be 0: the store covers the full row "
            "axis of the target, starting at row 0",
            src,
            rule="NZ-23",
            help="store at row offset 0",
        )
    return _lit(0, a)


def _check_col_bounds(off: Atom, cols: int, c_parent: int, what: str, src: Source | None) -> None:
    end = (int(off.value) if isinstance(off, Literal) else 0) + cols
    if end > c_parent:
        raise CompileError(
            f"{what}: columns [{end - cols}, {end}) exceed the target's {c_parent} columns",
            src,
            rule="NZ-21",
            help="keep the store window inside the tensor",
        )


# ------------------------------------------------------------------------------ AutoTileMatmulL0
def check_nz_store_emission(rows: int, cols: int, cap: int, source: Source | None) -> None:
    """The per-instruction limits of one emitted FP32 Acc -> NZ store (NZ-21, NZ-22); `cap` is the
    L0C capacity in bytes."""
    acc_bytes = rows * cols * 4
    if rows > MAX_STORE_ROWS or cols > MAX_STORE_COLS:
        raise CompileError(
            f"NZ accumulator store of {rows}x{cols}: the store's row field holds at most "
            f"{MAX_STORE_ROWS} rows and its column field at most {MAX_STORE_COLS} columns "
            "(65520 / 4080 aligned)",
            source,
            rule="NZ-22",
            help="split the output along N (a single matmul stored directly is split automatically)",
        )
    if acc_bytes > cap:
        raise CompileError(
            f"NZ accumulator store of {rows}x{cols}: the Acc tile needs {acc_bytes // 1024} "
            f"KiB of L0C, capacity {cap // 1024} KiB",
            source,
            rule="NZ-22",
            help="split the output along N",
        )


def split_nz_store(tiler: Any, mm: Eqn, st: Eqn) -> None:
    """AutoTileMatmulL0's N-only split of a matmul whose only consumer is an NZ store (NZ-22).

    Every block keeps m == M (the full row axis of NZ-23); K may still be chunked. The block at
    column `ni` stores at blocked column offset + ni/8 with partition `[1, n/8, M/16, 16, 8]`.
    """
    out_t = mm.outputs[0].type
    assert isinstance(out_t, TileType)
    m, n = out_t.shape
    cap = tiler.cap["Acc"]
    min_bytes = m * ACC_COL_ALIGN * 4
    if m > MAX_STORE_ROWS or min_bytes > cap:
        raise _no_full_m_tile(
            m,
            n,
            cap,
            st.source,
            f"even a 16-column block of {m} rows needs {min_bytes // 1024} KiB"
            if min_bytes > cap
            else f"{m} rows exceed the store's {MAX_STORE_ROWS}-row field",
        )
    try:
        plan = tiler.plan(mm, split=True, split_m=False)
    except CompileError:
        left, right = tiler.cap["Left"] // 1024, tiler.cap["Right"] // 1024
        raise _no_full_m_tile(
            m,
            n,
            cap,
            st.source,
            f"no K chunk of the {m}-row Left operand and its Right block fits L0A/L0B ({left}/{right} KiB)",
        ) from None
    _, a, b, bias = tiler.operands(mm)
    k = P._squeeze2(a.type.shape)[1]
    offs = tiler.atoms(st.operands("offsets"))
    dst = tiler.atom(st.inputs[-1])
    for ni in range(0, n, plan.nc):
        check_nz_store_emission(plan.mc, plan.nc, cap, st.source)
        acc = tiler.block(
            a, b, None, 0, ni, (m, k, n), plan, out_t.dtype, mm.source, bias, bool(mm.params.get("gemv"))
        )
        o = list(offs)
        o[1] = tiler.add(o[1], _lit(ni // ACC_C0, o[1]), st.source)
        params = {key: v for key, v in st.params.items() if key != "arity"}
        params["nz_partition"] = nz_partition(plan.mc, plan.nc)
        alias = tiler.fresh(st.outputs[0]) if ni == 0 else Var(dst.type)
        tiler.emit(P.tile_store_p, [[acc], o, [dst]], params, [alias], st.source)


def _no_full_m_tile(m: int, n: int, cap: int, source: Source | None, why: str) -> CompileError:
    return CompileError(
        f"the {m}x{n} FP32 accumulator stored into an NZ tensor can only be split along N (every store "
        f"must cover the full row axis, NZ-23), and no N/K tile with the full M = {m} rows fits: {why} "
        f"(L0C capacity {cap // 1024} KiB, store fields <= {MAX_STORE_ROWS} rows x {MAX_STORE_COLS} cols)",
        source,
        rule="NZ-22",
        help=f"use fewer rows per NZ panel (M * 16 * 4 B must fit L0C: M <= {cap // 64}), e.g. stack "
        "panels on a leading batch axis and store each with its own pl.store",
    )
