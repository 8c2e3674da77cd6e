"""The rule tables a campaign must cover: nz-layout.md §7 (loads, slices, reshapes) and the NZ-21
table (Acc stores into NZ), one id per row, with the phrase that identifies each refusal.

A refusal is attributed to a row by its rule id (`CompileError.rule`, or `NZ-n` in the message)
and a phrase of its message; several rows share a rule id (NZ-12 covers five of them).
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Row:
    """One row of a rule table: its id, table, condition, the rule ids and message phrase that identify its
    refusal."""

    id: str
    table: str
    condition: str
    rules: tuple[str, ...]  # rule ids the refusal may carry
    phrase: str  # regex on the message; "" for rows that are accepted, not refused
    note: str = ""  # why a row cannot be reached through the public API, when it cannot


ROWS: tuple[Row, ...] = (
    Row("L1", "§7", "shape[-2] % 16 != 0", ("NZ-5",), r"rows \d+ must be a multiple of 16"),
    Row("L2", "§7", "shape[-1] % c0 != 0", ("NZ-4",), r"columns \d+ must be a multiple of c0"),
    Row("L3", "§7", "shape[-2] or shape[-1] dynamic", ("NZ-11",), r"is dynamic; divisibility"),
    Row(
        "L4",
        "§7",
        "slice offset not on a fractal boundary",
        ("NZ-12",),
        r"load of NZ tensor .*offset -?\d+ must be a non-negative multiple",
    ),
    Row(
        "L6",
        "§7",
        "symbolic trailing offset, alignment not provable",
        ("NZ-16",),
        r"load of NZ tensor .*cannot be proven a multiple",
    ),
    Row(
        "L7",
        "§7",
        "symbolic trailing offset, sign not provable",
        ("NZ-18",),
        r"load of NZ tensor .*cannot be proven non-negative",
    ),
    Row("L11", "§7", "logical rank < 2", ("NZ-6",), r"rank >= 2"),
    Row("L12", "§7", "rank > 3 with a dynamic leading axis", ("NZ-28",), r"leading axis .* is dynamic"),
    Row(
        "L13",
        "§7",
        "tile.load target_memory other than Mat, or missing",
        ("NZ-12",),
        r"target_memory=pl\.Mem\.Mat",
    ),
    Row(
        "L15",
        "§7",
        "tensor.slice windowing the trailing [R, C] plane",
        ("NZ-30",),
        r"window on the \[R, C\] plane|slicing the leading axes only",
    ),
    Row(
        "L17", "§7", "tensor.reshape to any other shape", ("NZ-31",), r"whole-tensor 'tensor.reshape' flatten"
    ),
    Row(
        "L19",
        "§7",
        "any other consumer of an NZ tensor",
        ("NZ-12",),
        r"cannot consume an NZ tensor",
        "every op that takes a tensor is a load, slice, reshape, view or store, each with its own row",
    ),
    Row(
        "L20",
        "§7",
        "explicit tensor strides, or a partial tensor valid_shape",
        ("NZ-14", "NZ-30"),
        r"explicit strides or a partial valid_shape|valid_shape on an NZ slice",
    ),
    Row(
        "L22",
        "§7",
        "tile.load dynamic valid_shape[-2] that may end inside a fractal",
        ("NZ-12",),
        r"may end inside a fractal",
    ),
    Row("L23", "§7", "distributed (remote) tensor", ("NZ §7",), r"remote_load has no NZ blocking"),
    Row(
        "L24",
        "§7",
        "tensor.view / tensor.reinterpret_view of an NZ tensor",
        ("NZ-14",),
        r"does not support an NZ source",
    ),
    Row(
        "L25",
        "§7",
        "multi-column-block load whose GM row gap exceeds 65535 blocks (NZ-25)",
        ("NZ-25",),
        r"pto-isa#317",
    ),
    Row("X1", "§9", "sub-byte dtype (NZ-33)", ("NZ-33",), r"sub-byte dtype"),
    Row("X2", "§2", "64-bit dtype", ("NZ-4",), r"64-bit dtype"),
    Row(
        "X3",
        "§4",
        "load window rows / columns not a multiple of 16 / c0",
        ("NZ-12",),
        r"the window (rows|columns) \d+ must be a multiple",
    ),
    Row("X4", "§4", "load window spanning several batches", ("NZ-12",), r"spans several batches"),
    Row(
        "X5",
        "§9",
        "leading-axis window not contiguous once folded (NZ-28)",
        ("NZ-28",),
        r"a window on one leading axis only",
    ),
    Row(
        "X6",
        "§7",
        "tile.load valid_shape columns dynamic or not a multiple of c0 (a matmul operand's "
        "dynamic valid K is refused first, by its type rule)",
        ("NZ-12", "none"),
        r"valid_shape columns|a dynamic valid K \(contraction\) extent",
    ),
    Row(
        "X7",
        "§7",
        "tile.load static valid_shape rows not a multiple of 16",
        ("NZ-12",),
        r"valid_shape rows \d+ must be a multiple of 16",
    ),
    Row(
        "X8",
        "§4",
        "load window past the tensor's extent (a static bound)",
        ("NZ-12",),
        r"ends past the tensor's extent",
    ),
    Row(
        "X9",
        "hw §3",
        "ND window into Mat not whole C0 lines, or not whole 16-row fractals outside a "
        "matmul's Left operand (ND -> NZ load)",
        ("none",),
        r"is not whole 16 x \d+ fractals",
    ),
    Row("S1", "NZ-21", "backend: A2/A3 only", ("NZ-21",), r"A2/A3 backend only"),
    Row("S1b", "NZ-21", "dtype: FP32 Acc tile into FP32 GM only", ("NZ-21",), r"FP32 Acc -> FP32 GM only"),
    Row(
        "S2",
        "NZ-21",
        "tile static, positive, 2-D, fully valid; rows and cols multiples of 16",
        ("NZ-21",),
        r"accumulator tile (rows|cols) \d+ must be a multiple of 16|must be static, positive|partially valid|"
        r"valid region",
    ),
    Row(
        "S3",
        "NZ-21",
        "per-instruction extent rows <= 65535, cols <= 4095",
        ("NZ-22",),
        r"row field holds at most",
        "AutoTileMatmulL0 only emits blocks of at most 4095 columns, and M > 2048 already fails L0C",
    ),
    Row("S4", "NZ-21", "each Acc tile must fit L0C (128 KiB)", ("NZ-22",), r"L0C"),
    Row(
        "S5",
        "NZ-21",
        "row window covers the parent's whole row axis, row offset 0",
        ("NZ-23",),
        r"full row axis|must be 0",
    ),
    Row("S6", "NZ-21", "one panel per store", ("NZ-24",), r"one panel per store"),
    Row(
        "S7",
        "NZ-21",
        "column offset non-negative and a multiple of c0 = 8",
        ("NZ-12", "NZ-16", "NZ-18", "NZ-21"),
        r"store into NZ tensor .*(column offset -?\d+ must be a non-negative multiple of 8|exceed the target)",
    ),
    Row(
        "S8",
        "NZ-21",
        "unknown alignment or sign",
        ("NZ-16", "NZ-18", "NZ-21"),
        r"store into NZ tensor .*cannot be proven",
    ),
    Row("S9", "NZ-21", "atomic, pre_quant, pre_relu, dtype conversion", ("NZ-21",), r"attribute \w+="),
    Row(
        "S10",
        "NZ-21",
        "A5 backend, Vec/Mat source, dynamic or partially valid tile",
        ("NZ-21",),
        r"Vec or Mat source|A2/A3 backend only|is dynamic; the NZ store|partially valid",
    ),
    Row(
        "R1",
        "issue 24",
        "every SPMD lane stores the same window (offsets independent of the lane)",
        ("lane-race",),
        r"every lane of pl\.spmd\(\d+\) stores this window",
    ),
    Row(
        "R2",
        "issue 24",
        "two lanes of one launch touch one byte, one writing it (lane-dependent windows "
        "the compiler cannot prove disjoint): refused at run time, runtime.races.LaneRaceError",
        ("lane-race",),
        r"lane race in pl\.spmd\(\d+\)",
    ),
)

BY_ID = {r.id: r for r in ROWS}
_RULE = re.compile(r"\bNZ-\d+\b")


def rule_of(err: BaseException) -> str:
    """The NZ rule a refusal names: `CompileError.rule`, else the first `NZ-n` of its message."""
    rule = getattr(err, "rule", None)
    if rule:
        return str(rule)
    m = _RULE.search(str(err))
    return m.group(0) if m else "none"


def rows_of(rule: str, message: str) -> tuple[str, ...]:
    """The table rows a refusal covers (its rule and its identifying phrase both match)."""
    out = []
    for r in ROWS:
        if r.phrase and rule in r.rules and re.search(r.phrase, message):
            out.append(r.id)
    return tuple(out)
