"""How PTO text spells types and SSA names: tile buffers per memory space, tensor and partition
views, pointers, constants, and the unique `%names` that keep the kernel's variable names."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..core.dtypes import DType
from ..core.types import Mem, TileType


@dataclass(frozen=True)
class TileLayout:
    """The (blayout, slayout, fractal) triple of a tile buffer (hardware-model.md §2)."""

    blayout: str
    slayout: str
    fractal: int

    def transposed(self) -> TileLayout:
        """The same bytes read as the transposed tile: NZ of [N, K] is ZN of [K, N], ND is DN."""
        flip = {"row_major": "col_major", "col_major": "row_major", "none_box": "none_box"}
        return TileLayout(flip[self.blayout], flip[self.slayout], self.fractal)


#: The on-chip layout of each memory space on A2/A3 (GetTileLayoutCustom, hardware-model.md §2, §6).
TILE_LAYOUTS: dict[Mem, TileLayout] = {
    Mem.Mat: TileLayout("col_major", "row_major", 512),  # NZ: 16 x c0 fractals, column blocks outside (NZ-5)
    Mem.Vec: TileLayout("row_major", "none_box", 512),  # ND
    Mem.Left: TileLayout("row_major", "row_major", 512),  # Zz, L0A
    Mem.Right: TileLayout("row_major", "col_major", 512),  # Zn, L0B
    Mem.Acc: TileLayout("col_major", "row_major", 1024),  # Nz with 16 x 16 fractals, L0C
    Mem.Bias: TileLayout("row_major", "none_box", 512),  # one ND row, the bias table
}

Dim = int | str  # a static extent, or the SSA name of a dynamic one


def _dim(d: Dim | None) -> str:
    return str(d) if isinstance(d, int) else "?"


def tile_rows_cols(t: TileType) -> tuple[int, int]:
    """A tile as the device holds it: 2-D, leading extents folded into rows (like the backend)."""
    if len(t.shape) == 2:
        return t.shape[0], t.shape[1]
    rows = 1
    for d in t.shape[:-1]:
        rows *= d
    return rows, t.shape[-1]


def tile_buf_type(t: TileType, layout: TileLayout, valid: tuple[Dim, Dim] | None = None) -> str:
    """`!pto.tile_buf<loc=mat, dtype=i8, rows=256, cols=512, blayout=..., ..., v_row=256, v_col=512>`."""
    rows, cols = tile_rows_cols(t)
    vr, vc = valid if valid is not None else (rows, cols)
    return (
        f"!pto.tile_buf<loc={t.memory.value.lower()}, dtype={t.dtype.short}, rows={rows}, cols={cols}, "
        f"blayout={layout.blayout}, slayout={layout.slayout}, fractal={layout.fractal}, "
        f"v_row={_dim(vr)}, v_col={_dim(vc)}>"
    )


def tensor_view_type(rank: int, dtype: DType) -> str:
    """`!pto.tensor_view<?x?x...xi8>`: one `?` per axis of the tensor type's shape (NZ-14)."""
    return f"!pto.tensor_view<{'?x' * rank}{dtype.short}>"


def partition_type(sizes: list[Dim], dtype: DType) -> str:
    """`!pto.partition_tensor_view<1x16x16x16x32xi8>`; a dynamic size prints `?`."""
    return f"!pto.partition_tensor_view<{''.join(_dim(s) + 'x' for s in sizes)}{dtype.short}>"


def pointer_type(dtype: DType) -> str:
    """`!pto.ptr<i8>`: the GM pointer type of a kernel argument of `dtype`."""
    return f"!pto.ptr<{dtype.short}>"


# Names the emitter itself produces; a kernel variable called `c0` or `arg1` must not shadow them.
_RESERVED = re.compile(r"^(c-?\d+(_[a-z]\w*)?|cst(_\d+)?|true|false|arg\d+)$")
_UNSAFE = re.compile(r"[^A-Za-z0-9_$.]")


class Namer:
    """Unique SSA names from kernel hints: `n0`, then `n0_1`, `n0_2`... (like the IR printer)."""

    def __init__(self) -> None:
        self.used: set[str] = set()

    def fresh(self, base: str | None, default: str = "v") -> str:
        """A new unique SSA name (`%base`, `%base_1`...) from a sanitised hint, never a reserved one."""
        base = _UNSAFE.sub("_", base) if base else default
        name, i = base, 1
        while name in self.used or _RESERVED.match(name):
            name, i = f"{base}_{i}", i + 1
        self.used.add(name)
        return "%" + name

    def exact(self, name: str) -> str:
        """A name the emitter owns (`%arg0`, `%c16`): taken as is."""
        self.used.add(name)
        return "%" + name


def constant_name(value: int | float | bool, dtype: DType) -> str | None:
    """`%c<v>` for index, `%c<v>_i32` for other integers, `%true`/`%false`; None for floats."""
    if dtype.kind == "bool":
        return "true" if value else "false"
    if dtype.kind == "index":
        return f"c{int(value)}"
    if dtype.is_int:
        return f"c{int(value)}_{dtype.short}"
    return None


def constant_literal(value: int | float | bool, dtype: DType) -> str:
    """The right-hand side of `arith.constant`."""
    if dtype.kind == "bool":
        return "true" if value else "false"
    if dtype.is_int:
        return f"{int(value)} : {dtype.short}"
    return f"{float(value)!r} : {dtype.short}"
