"""The GM row-gap guard (NZ-25..27): TEMPORARY, until pto-isa#317 is fixed.

`TLoadGm2L1Nz2nz` computes the GM gap between consecutive column blocks in 32 bits and hands it,
unchecked, to the 16-bit `gmGap` field of `copy_gm_to_cbuf`; past 65535 blocks it wraps and the
load silently reads the wrong fractal (hardware-model.md §2.3). For a blocked view the gap is
`R - TR` 32-byte blocks whatever the dtype (c0 * sizeof(T) == 32). BlockNzTensorViews is the last
layer that knows which annotation caused it, so the diagnostic lives here.

Remove this module, its one call in block_nz.py and tests/passes/test_nz_gap_guard.py (plus the
bypassed-guard device test in tests/e2e/test_nz_gap_e2e.py) once the device is fixed.
"""

from __future__ import annotations

from runtime.dtypes import FRACTAL_ROWS

from ..errors import CompileError, Source
from .guard_bypass import GuardBypass

MAX_GM_GAP_BLOCKS = 65535  # the 16-bit gmGap field

#: test-only: compile without the guard (this thread), to show what the device would read.
_bypass_for_tests = GuardBypass()


def check_nz_gm_gap_fits_burst_stride(
    name: str, rows: int, loaded_rows: int | None, col_blocks: int, source: Source | None
) -> None:
    """Refuse a multi-column-block NZ load whose GM gap `rows - loaded_rows` exceeds 65535 blocks.

    `loaded_rows` is the partition's row count (valid_shape if present, NZ-26); None means dynamic,
    checked at its worst case, zero rows, so a load that passes is safe for every runtime extent.
    A single column block (one burst) never reads the gap and is exempt (NZ-27).
    """
    if col_blocks <= 1 or _bypass_for_tests.active:
        return
    gap = rows - (loaded_rows or 0)
    if gap <= MAX_GM_GAP_BLOCKS:
        return
    loaded = "a dynamic row count (worst case 0)" if loaded_rows is None else f"{loaded_rows} rows"
    need = -(-(rows - MAX_GM_GAP_BLOCKS) // FRACTAL_ROWS) * FRACTAL_ROWS
    taller = (
        f"load a taller row tile (at least {need} valid rows) so the gap fits"
        if loaded_rows is not None
        else f"give the load a static valid row count of at least {need}, or keep the tensor's rows "
        f"<= {MAX_GM_GAP_BLOCKS} (a dynamic row count is checked at 0 rows)"
    )
    raise CompileError(
        f"NZ-25: this load of '{name}' spans {col_blocks} column blocks with a GM gap of {gap} 32-byte "
        f"blocks between them (tensor rows {rows}, loaded {loaded}); the hardware NZ load passes that "
        f"gap in a 16-bit field (max {MAX_GM_GAP_BLOCKS}) and would silently read the wrong fractal "
        "(pto-isa#317). This is NOT an expected pl.NZ limitation but a temporary guard against a "
        "device defect",
        source,
        rule="NZ-25",
        help=f"{taller}, or stack the layers "
        "as a rank-3 [LAYERS, R, C] weight so the layer stride is the batch stride (a loop, not the "
        "burst gap)",
    )
