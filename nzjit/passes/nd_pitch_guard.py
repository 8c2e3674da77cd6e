"""The ND row-pitch guard: an ND -> NZ load (`TLoadGm2L1Nd2nz`, an ND tensor into a Mat tile)
passes the GM row pitch, in elements, in the 16-bit `srcDValue` field of `copy_gm_to_cbuf_multi_nd2nz`
(hardware-model.md §3: `s3` in [1, 65535], narrowed to uint16 in release builds). Past 65535 it
wraps, and every row of the tile is read from the wrong place; the simulator reproduces the wrong
bytes and only warns. A refusal at compile time names the field and the fix, like NZ-25.

Runs on the final graph (strides materialised): `check_nd_row_pitch(graph)` returns the graph
unchanged or raises. A stride that is not a static int (a dynamic extent) is not checked here:
the simulator reports the wrap when it happens (HardwareDefectWarning)."""

from __future__ import annotations

from .. import prims as P
from ..core.ir import Graph, Var
from ..core.types import Layout, Mem, TensorType
from ..errors import CompileError
from .guard_bypass import GuardBypass
from .scan import equations

MAX_ND_ROW_PITCH = 65535  # the 16-bit srcDValue field, in elements
RULE = "ND2NZ-pitch"

#: test-only: compile without the guard (this thread), to show what the device would read.
_bypass_for_tests = GuardBypass()


def check_nd_row_pitch(g: Graph) -> Graph:
    """Refuse every ND -> Mat load whose static GM row pitch exceeds 65535 elements."""
    if _bypass_for_tests.active:
        return g
    for e in equations(g, (P.tile_load_p,)):
        if e.params.get("memory") is not Mem.Mat or not e.inputs:
            continue
        src = e.inputs[0]
        t = src.type if isinstance(src, Var) else None
        if not isinstance(t, TensorType) or t.layout is not Layout.ND or not t.strides or len(t.strides) < 2:
            continue
        pitch = t.strides[-2]
        if not isinstance(pitch, int) or pitch <= MAX_ND_ROW_PITCH:
            continue
        name = (src.hint if isinstance(src, Var) else None) or "the tensor"
        row_len = t.shape[-1]
        raise CompileError(
            f"this load of '{name}' into a Mat (NZ) tile reads ND rows {pitch} elements apart; the "
            f"ND2NZ load passes the GM row pitch in the 16-bit srcDValue field (max {MAX_ND_ROW_PITCH} "
            "elements), which would wrap and read every row from the wrong place",
            e.source,
            rule=RULE,
            help=f"keep the row pitch <= {MAX_ND_ROW_PITCH} elements: split the {row_len}-element rows "
            "into a leading axis (e.g. pass [R, K] as [K // 32768, R, 32768] and loop over it), "
            "or give the tensor fewer columns",
        )
    return g
