"""The pass pipeline (nz-layout.md §3): the order of the passes, each a pure Graph -> Graph
function. `Lowered` (nzjit/driver/lowered.py) runs them on a traced kernel."""

from __future__ import annotations

import os
from collections.abc import Callable

from ..core.ir import Graph
from .auto_tile_matmul import auto_tile_matmul_l0
from .block_nz import block_nz_tensor_views
from .flatten_2d import flatten_tile_nd_to_2d
from .lane_races import check_lane_races
from .lane_windows import mark_lane_windows
from .lower_composite import lower_composite_ops
from .nd_pitch_guard import check_nd_row_pitch
from .strides import materialize_tensor_strides
from .tensor_to_tile import convert_tensor_to_tile_ops

Pass = Callable[[Graph], Graph]


def legalize_tile_cast(g: Graph) -> Graph:
    """LegalizeTileCast: the cube takes no mixed dtypes and tile casts are element conversions
    the backend performs directly, so nothing needs legalising on A2/A3 (kept for the order)."""
    return g


def pipeline(target: str) -> list[tuple[str, Pass]]:
    """The pass order of NZ-9, each a pure Graph -> Graph function."""
    return [
        ("ConvertTensorToTileOps", convert_tensor_to_tile_ops),
        ("LowerCompositeOps", lower_composite_ops),
        ("FlattenTileNdTo2D", flatten_tile_nd_to_2d),
        ("BlockNzTensorViews", lambda g: block_nz_tensor_views(g, target)),
        ("LegalizeTileCast", legalize_tile_cast),
        ("AutoTileMatmulL0", lambda g: auto_tile_matmul_l0(g, target)),
        # issue 24: the ND row-pitch guard and the lane-race proof check the final graph (strides
        # known); then the GM accesses that lanes could race on are marked for the run-time log
        (
            "MaterializeTensorStrides",
            lambda g: mark_lane_windows(check_lane_races(check_nd_row_pitch(materialize_tensor_strides(g)))),
        ),
    ]


VERIFY = os.environ.get("NZJIT_VERIFY", "") not in ("", "0")
