"""Explain the NZ layout of a logical shape: blocked shape, strides, where an element lands, pictures.

The facts come from the device package (`runtime.nz_blocked_shape`, `runtime.c0_of`), so the
explanation can never drift from what `runtime.pack_nz` produces. Vocabulary (nz-layout.md §2):

- c0 = elements of one 32-byte C0 line (NZ-4); a fractal is 16 lines = 16 x c0 elements = 512 B.
- logical `[B, R, C]` blocks to `[B, C/c0, R/16, 16, c0]` with row-major strides (NZ-5, NZ-7):
  column blocks outside, row fractals inside.
- element `(b, r, c)` lives at `b*C*R + (c//c0)*R*c0 + (r//16)*16*c0 + (r%16)*c0 + c%c0` (NZ-8).

Fractal `i` of the memory order is the i-th 512-byte block of the packed tensor: it holds the
16 x c0 logical tile at column block `(i // (R/16)) % (C/c0)`, row fractal `i % (R/16)` of batch
`i // ((C/c0) * (R/16))`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from xml.sax.saxutils import escape

import numpy as np

import runtime
from runtime.dtypes import FRACTAL_ROWS

from .core.dtypes import ALL_DTYPES, DType

__all__ = [
    "NzLayout",
    "Location",
    "TooManyFractals",
    "parse_shape",
    "parse_dtype",
    "parse_index",
    "describe",
    "describe_location",
    "ascii_picture",
    "svg_picture",
    "MAX_SVG_FRACTALS",
]

#: The SVG draws one rect per fractal; beyond this the picture is unreadable and huge.
MAX_SVG_FRACTALS = 4096

_ALIASES = {
    "int8": "INT8",
    "i8": "INT8",
    "uint8": "UINT8",
    "u8": "UINT8",
    "ui8": "UINT8",
    "int16": "INT16",
    "i16": "INT16",
    "uint16": "UINT16",
    "u16": "UINT16",
    "int32": "INT32",
    "i32": "INT32",
    "uint32": "UINT32",
    "u32": "UINT32",
    "int64": "INT64",
    "i64": "INT64",
    "int4": "INT4",
    "i4": "INT4",
    "uint4": "UINT4",
    "fp16": "FP16",
    "f16": "FP16",
    "float16": "FP16",
    "half": "FP16",
    "bf16": "BF16",
    "bfloat16": "BF16",
    "fp32": "FP32",
    "f32": "FP32",
    "float32": "FP32",
    "float": "FP32",
    "fp8": "FP8E4M3",
    "fp8e4m3": "FP8E4M3",
    "float8_e4m3fn": "FP8E4M3",
    "f8e4m3fn": "FP8E4M3",
    "fp8e5m2": "FP8E5M2",
    "float8_e5m2": "FP8E5M2",
    "f8e5m2": "FP8E5M2",
    "fp4": "FP4",
    "bool": "BOOL",
}


class TooManyFractals(ValueError):
    """The layout has more fractals than a picture may draw (see MAX_SVG_FRACTALS)."""


def parse_shape(text: str) -> tuple[int, ...]:
    """`256x512`, `4,256,512`, `4x256x512` or `[4, 256, 512]` -> (4, 256, 512)."""
    parts = [p for p in re.split(r"[x,×*\s]+", text.strip().strip("[]()").lower()) if p]
    if not parts or not all(p.isdigit() for p in parts):
        raise ValueError(f"cannot read shape {text!r}: write it like 256x512 or 4,256,512")
    shape = tuple(int(p) for p in parts)
    if any(d <= 0 for d in shape):
        raise ValueError(f"shape {list(shape)} has an empty axis; every extent must be positive")
    return shape


def parse_dtype(text: str) -> DType:
    """A kernel-language dtype from `int8`, `INT8`, `pl.INT8`, `fp16`, `bf16`, `float32`, `i8`..."""
    key = text.strip().removeprefix("pl.")
    by_name = {d.name: d for d in ALL_DTYPES}
    name = key.upper() if key.upper() in by_name else _ALIASES.get(key.lower())
    if name is None or name not in by_name:
        known = ", ".join(d.name.lower() for d in ALL_DTYPES if d.name != "INDEX")
        raise ValueError(
            f"unknown dtype {text!r}; known: {known} (any case; also fp16/bf16/fp32 "
            "aliases such as float16, bfloat16, float32)"
        )
    return by_name[name]


def parse_index(text: str) -> tuple[int, ...]:
    """`40,70` (or `40x70`, `2,40,70`) -> a logical element index."""
    parts = [p for p in re.split(r"[x,\s]+", text.strip().strip("[]()")) if p]
    try:
        return tuple(int(p) for p in parts)
    except ValueError:
        raise ValueError(f"cannot read element index {text!r}: write it like 40,70 (row, column)") from None


@dataclass(frozen=True)
class Location:
    """Where one logical element lives in NZ order (NZ-8)."""

    index: tuple[int, ...]  # logical index as given (full rank)
    batch: int  # folded batch b (NZ-28)
    row: int
    col: int
    blocked: tuple[int, int, int, int, int]  # [b, c//c0, r//16, r%16, c%c0]
    offset: int  # flat element offset
    byte_offset: int
    fractal: int  # memory-order number of its fractal


@dataclass(frozen=True)
class NzLayout:
    """The NZ description of a logical shape and dtype (NZ-4..NZ-8, NZ-28 batch folding)."""

    shape: tuple[int, ...]
    dtype: DType

    def __post_init__(self) -> None:
        if self.dtype.name == "INDEX":
            raise ValueError("pl.INDEX is a scalar type; NZ tensors hold element dtypes")
        runtime.nz_blocked_shape(self.shape, self.dtype.np_dtype)  # validates: NZ-4/8/33 messages

    @property
    def np_dtype(self) -> np.dtype:
        """The numpy / ml_dtypes dtype of the elements."""
        return self.dtype.np_dtype

    @property
    def c0(self) -> int:
        """Elements per 32-byte C0 line (NZ-4)."""
        return runtime.c0_of(self.np_dtype)

    @property
    def itemsize(self) -> int:
        """Bytes per element."""
        return runtime.itemsize_bits(self.np_dtype) // 8

    @property
    def blocked_shape(self) -> tuple[int, int, int, int, int]:
        """`[B, C/c0, R/16, 16, c0]` (NZ-5, NZ-6: always rank 5)."""
        return runtime.nz_blocked_shape(self.shape, self.np_dtype)

    @property
    def strides(self) -> tuple[int, ...]:
        """Element strides of the blocked shape: row-major over it (NZ-7)."""
        out, acc = [], 1
        for d in reversed(self.blocked_shape):
            out.append(acc)
            acc *= d
        return tuple(reversed(out))

    @property
    def batch(self) -> int:
        """B: the product of the leading axes (1 for rank 2)."""
        return self.blocked_shape[0]

    @property
    def rows(self) -> int:
        """R: the logical row count."""
        return self.shape[-2]

    @property
    def cols(self) -> int:
        """C: the logical column count."""
        return self.shape[-1]

    @property
    def col_blocks(self) -> int:
        """C / c0: column blocks, the outer axis of a batch."""
        return self.blocked_shape[1]

    @property
    def row_fractals(self) -> int:
        """R / 16: row fractals inside each column block."""
        return self.blocked_shape[2]

    @property
    def fractals_per_batch(self) -> int:
        """(C / c0) * (R / 16)."""
        return self.col_blocks * self.row_fractals

    @property
    def n_fractals(self) -> int:
        """Every fractal of the tensor."""
        return self.batch * self.fractals_per_batch

    @property
    def fractal_bytes(self) -> int:
        """16 lines of 32 bytes: always 512."""
        return FRACTAL_ROWS * self.c0 * self.itemsize

    def fractal_number(self, b: int, col_block: int, row_fractal: int) -> int:
        """Memory-order number of a fractal: batch, then column block, then row fractal (NZ-5)."""
        return (b * self.col_blocks + col_block) * self.row_fractals + row_fractal

    def locate(self, index: Sequence[int]) -> Location:
        """Where logical element `index` lands (NZ-8). Two coordinates on a batched shape mean batch 0."""
        index = tuple(int(i) for i in index)
        if len(index) == 2 and len(self.shape) > 2:
            index = (0,) * (len(self.shape) - 2) + index
        if len(index) != len(self.shape):
            raise ValueError(
                f"element index {list(index)} has {len(index)} coordinates; shape "
                f"{list(self.shape)} needs {len(self.shape)} (or 2: row, column of batch 0)"
            )
        for axis, (i, d) in enumerate(zip(index, self.shape)):
            if not 0 <= i < d:
                raise ValueError(
                    f"element index {list(index)} is outside shape {list(self.shape)} "
                    f"(axis {axis}: {i} not in [0, {d}))"
                )
        lead = self.shape[:-2]
        b = int(np.ravel_multi_index(index[:-2], lead)) if lead else 0
        r, c = index[-2], index[-1]
        c0 = self.c0
        blocked = (b, c // c0, r // FRACTAL_ROWS, r % FRACTAL_ROWS, c % c0)
        offset = sum(i * s for i, s in zip(blocked, self.strides))
        return Location(
            index,
            b,
            r,
            c,
            blocked,
            offset,
            offset * self.itemsize,
            self.fractal_number(b, blocked[1], blocked[2]),
        )


def _fmt(xs: Sequence[int]) -> str:
    return "[" + ", ".join(str(x) for x in xs) + "]"


def describe(layout: NzLayout) -> str:
    """The text facts: c0, blocked shape, element and byte strides, fractal counts."""
    L = layout
    dn = L.dtype.name.lower()
    lead = L.shape[:-2]
    batch = (
        f"B = {L.batch} (leading axes {_fmt(lead)} folded into the batch slot, NZ-28)"
        if len(lead) > 1
        else f"B = {L.batch}" + (" (materialised batch slot, NZ-6)" if not lead else "")
    )
    lines = [
        f"NZ layout of {dn}{_fmt(L.shape)}: {batch}, R = {L.rows}, C = {L.cols}",
        f"  c0            = {L.c0} elements = 32 bytes / {L.itemsize * 8}-bit {dn}   (NZ-4)",
        f"  blocked shape = {_fmt(L.blocked_shape)}   = [B, C/c0, R/16, 16, c0]   (NZ-5, always rank 5: NZ-6)",
        f"  strides       = {_fmt(L.strides)} elements   (row-major over the blocked shape, NZ-7)",
        f"                = {_fmt([s * L.itemsize for s in L.strides])} bytes",
        f"  fractal       = 16 rows x {L.c0} columns = {L.fractal_bytes} bytes; per batch "
        f"{L.col_blocks} column block(s) x {L.row_fractals} row fractal(s) = {L.fractals_per_batch} fractal(s)",
        f"  total         = {L.n_fractals} fractals = {math.prod(L.shape)} elements = "
        f"{math.prod(L.shape) * L.itemsize} bytes",
        "  order         = column blocks outside, row fractals inside: memory runs down the "
        f"{L.row_fractals} row fractal(s) of column block 0"
        + (", then column block 1, ..." if L.col_blocks > 1 else ""),
    ]
    return "\n".join(lines)


def describe_location(layout: NzLayout, index: Sequence[int]) -> str:
    """Where element `index` lands: blocked coordinates, NZ-8 flat offset (with the sum), bytes."""
    L, loc = layout, layout.locate(index)
    terms = " + ".join(f"{i}*{s}" for i, s in zip(loc.blocked, L.strides))
    line, elem = loc.blocked[3], loc.blocked[4]
    return "\n".join(
        [
            f"element {_fmt(loc.index)} (b={loc.batch}, r={loc.row}, c={loc.col}):",
            f"  blocked coordinates [b, c//c0, r//16, r%16, c%c0] = {_fmt(loc.blocked)}",
            f"  flat element offset = {terms} = {loc.offset}   (NZ-8)",
            f"  byte offset         = {loc.offset} * {L.itemsize} = {loc.byte_offset}",
            f"  = fractal #{loc.fractal} (column block {loc.blocked[1]}, row fractal {loc.blocked[2]}), "
            f"line {line} of 16, element {elem} of {L.c0}: "
            f"{loc.fractal}*{16 * L.c0} + {line}*{L.c0} + {elem} = {loc.offset}",
        ]
    )


def _pick(n: int, limit: int, head: int) -> list[int | None]:
    """Indices to draw on an axis of n cells: all, or the first `head`, a gap (None) and the last."""
    if n <= limit:
        return list(range(n))
    return [*range(head), None, n - 1]


def ascii_picture(
    layout: NzLayout, at: Sequence[int] | None = None, max_cols: int = 12, max_rows: int = 24
) -> str:
    """Fractals of batch 0 drawn where they sit logically, each numbered by its memory order.

    Columns are column blocks (c0 wide), rows are row fractals (16 high). Up to `max_cols` x
    `max_rows` every fractal is a cell; bigger shapes are summarised (first ones, `...`, last).
    With `at`, the fractal holding that element is marked `*`.
    """
    L = layout
    loc = L.locate(at) if at is not None else None
    b = loc.batch if loc else 0
    cols, rows = _pick(L.col_blocks, max_cols, 6), _pick(L.row_fractals, max_rows, 8)
    c0 = L.c0
    w = max(6, len(str(L.n_fractals - 1)) + 3, len(f"c {L.cols - c0}-{L.cols - 1}") + 2)
    rlabels = [f"r {i * 16}-{i * 16 + 15}" if i is not None else "..." for i in rows]
    lw = max(len(s) for s in rlabels) + 1

    def cell(i: int | None, j: int | None) -> str:
        if i is None or j is None:
            return "...".center(w)
        n = L.fractal_number(b, j, i)
        mark = "*" if loc and (loc.blocked[1], loc.blocked[2]) == (j, i) else " "
        return f"{mark}{n}".center(w)

    def hdr(f) -> str:
        return " " * (lw + 1) + " ".join(f(j).center(w) if j is not None else "...".center(w) for j in cols)

    rule = " " * lw + "+" + "+".join("-" * w for _ in cols) + "+"
    out = [
        f"fractal memory order of batch {b} (each cell is one 16 x {c0} fractal = {L.fractal_bytes} bytes; "
        "the number is its position in memory):",
        "column blocks outside, row fractals inside: numbers run down a column block (v), then "
        "continue at the top of the next one (->)",
        "",
        hdr(lambda j: f"cb {j}"),
        hdr(lambda j: f"c {j * c0}-{j * c0 + c0 - 1}"),
        rule,
    ]
    for i, lab in zip(rows, rlabels):
        out.append(lab.ljust(lw) + "|" + "|".join(cell(i, j) for j in cols) + "|")
    out.append(rule)
    arrows = " " * lw + " " + " ".join(("v" if j is not None else " ").center(w) for j in cols)
    out.append(arrows)
    if L.col_blocks > 1:
        last = L.row_fractals - 1
        out.append(
            f"{L.fractal_number(b, 0, 0)} .. {L.fractal_number(b, 0, last)} fill column block 0, "
            f"then -> {L.fractal_number(b, 1, 0)} .. {L.fractal_number(b, 1, last)} column block 1"
            + (", ..." if L.col_blocks > 2 else "")
        )
    if L.batch > 1:
        out.append(
            f"batch b starts at fractal b*{L.fractals_per_batch} (element offset b*{L.strides[0]}); "
            f"{L.batch} batches in all"
        )
    if len(cols) < L.col_blocks or len(rows) < L.row_fractals:
        out.append(
            f"(summarised: {L.col_blocks} column blocks x {L.row_fractals} row fractals; "
            "... hides the middle ones)"
        )
    if loc:
        out.append(f"* = fractal #{loc.fractal}, which holds element {_fmt(loc.index)}")
    return "\n".join(out)


_PALETTE = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#9c755f"]


LINE_PITCH = 18  #: px between header baselines
MONOSPACE_ADVANCE = 0.6  #: a monospace glyph's advance in ems (DejaVu Sans Mono, Courier: 0.6)


def text_width(text: str, font_size: float) -> float:
    """The width in px of `text` in a monospace font of `font_size` px."""
    return len(text) * MONOSPACE_ADVANCE * font_size


def svg_picture(
    layout: NzLayout, at: Sequence[int] | None = None, max_fractals: int = MAX_SVG_FRACTALS
) -> str:
    """An SVG with exactly one `<rect class="fractal">` per fractal and no other rect.

    Each fractal sits at its logical place (column block across, row fractal down; batches stacked
    as panels), is coloured by column block, labelled with its memory-order number, and carries
    `data-order`, `data-batch`, `data-col-block`, `data-row-fractal` attributes. One arrowed
    `<path class="order">` per column block runs down its row fractals, and a dashed
    `<path class="jump">` leads from the bottom of a column block to the top of the next: column
    blocks outside, row fractals inside. With `at`, a `<circle class="element">` marks the element.
    Raises TooManyFractals beyond `max_fractals`.
    """
    L = layout
    if L.n_fractals > max_fractals:
        raise TooManyFractals(
            f"{L.dtype.name.lower()}{_fmt(L.shape)} has {L.n_fractals} fractals; the SVG draws at most "
            f"{max_fractals} (one rect each). Draw a smaller shape with the same c0, e.g. "
            f"{min(L.rows, 256)}x{min(L.cols, 16 * L.c0)}, or use the text picture"
        )
    loc = L.locate(at) if at is not None else None
    cw, ch, mx, gap = 64, 32, 90, 40
    c0 = L.c0
    # the header in short lines, and a picture at least as wide as its longest line: a small shape
    # (64x64: two column blocks, 238 px of grid) would otherwise cut its title off
    header = [
        (13, f"NZ {L.dtype.name.lower()}{_fmt(L.shape)} -> {_fmt(L.blocked_shape)}"),
        (11, f"= [B, C/c0, R/16, 16, c0]; cell = 16 x {c0} fractal ({L.fractal_bytes} B)"),
        (11, "number = memory order: down each column block, then on to the next"),
    ]
    top = 12 + LINE_PITCH * len(header) + 12
    panel_h = L.row_fractals * ch + gap + 20
    width = max(mx + L.col_blocks * cw + 20, math.ceil(16 + max(text_width(t, size) for size, t in header)))
    height = top + L.batch * panel_h
    parts = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="monospace" font-size="11">',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="6" '
        'markerHeight="6" orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="#222"/>'
        "</marker></defs>",
        f"<title>NZ layout of {L.dtype.name.lower()}{_fmt(L.shape)}: blocked {_fmt(L.blocked_shape)}, "
        f"c0 = {c0}</title>",
    ]
    for k, (size, text) in enumerate(header):
        parts.append(
            f'<text class="header" x="8" y="{12 + LINE_PITCH * (k + 1) - 4}" font-size="{size}">'
            f"{escape(text)}</text>"
        )
    for b in range(L.batch):
        y0 = top + b * panel_h + 20
        parts.append(f'<g class="batch" data-batch="{b}">')
        parts.append(f'<text x="8" y="{y0 - 6}">batch {b}</text>')
        for j in range(L.col_blocks):
            parts.append(
                f'<text x="{mx + j * cw + cw / 2}" y="{y0 - 6}" text-anchor="middle">c{j * c0}</text>'
            )
        for i in range(L.row_fractals):
            parts.append(
                f'<text x="{mx - 6}" y="{y0 + i * ch + ch / 2 + 4}" text-anchor="end">r{i * 16}</text>'
            )
        for j in range(L.col_blocks):
            colour = _PALETTE[j % len(_PALETTE)]
            for i in range(L.row_fractals):
                n = L.fractal_number(b, j, i)
                x, y = mx + j * cw, y0 + i * ch
                parts.append(
                    f'<rect class="fractal" x="{x}" y="{y}" width="{cw}" height="{ch}" fill="{colour}" '
                    f'fill-opacity="0.35" stroke="#333" data-order="{n}" data-batch="{b}" '
                    f'data-col-block="{j}" data-row-fractal="{i}"><title>fractal {n}: rows '
                    f"{i * 16}-{i * 16 + 15}, cols {j * c0}-{j * c0 + c0 - 1}, bytes "
                    f"{n * L.fractal_bytes}-{(n + 1) * L.fractal_bytes - 1}</title></rect>"
                )
                parts.append(f'<text x="{x + 6}" y="{y + 14}">{n}</text>')
            xc = mx + j * cw + cw - 12
            if L.row_fractals > 1:
                parts.append(
                    f'<path class="order" d="M {xc} {y0 + ch / 2} L {xc} '
                    f'{y0 + (L.row_fractals - 1) * ch + ch / 2}" stroke="#222" fill="none" '
                    'marker-end="url(#arrow)"/>'
                )
            if j + 1 < L.col_blocks:
                parts.append(
                    f'<path class="jump" d="M {xc} {y0 + (L.row_fractals - 1) * ch + ch / 2} '
                    f'L {xc + cw} {y0 + ch / 2}" stroke="#222" stroke-dasharray="4 3" '
                    'fill="none" marker-end="url(#arrow)"/>'
                )
        parts.append("</g>")
    if loc is not None:
        y0 = top + loc.batch * panel_h + 20
        ex = mx + loc.col * cw / c0 + cw / (2 * c0)
        ey = y0 + loc.row * ch / 16 + ch / 32
        parts.append(
            f'<circle class="element" cx="{ex:.2f}" cy="{ey:.2f}" r="3" fill="#d00">'
            f"<title>{escape(f'element {_fmt(loc.index)}: offset {loc.offset}, fractal {loc.fractal}')}"
            "</title></circle>"
        )
    parts.append("</svg>")
    return "\n".join(parts) + "\n"
