"""The pass pipeline (nz-layout.md §3) and `Lowered`, the result of `kernel.lower(...)`."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from ..core.ir import Graph
from ..core.verifier import verify
from .auto_tile_matmul import auto_tile_matmul_l0
from .block_nz import block_nz_tensor_views
from .flatten_2d import flatten_tile_nd_to_2d
from .lane_races import check_lane_races
from .lower_composite import lower_composite_ops
from .nd_pitch_guard import check_nd_row_pitch
from .strides import materialize_tensor_strides
from .tensor_to_tile import convert_tensor_to_tile_ops
from .unwritten_outputs import warn_unwritten_outputs

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
        # issue-24 hook: the ND row-pitch guard and the lane-race proof check the final graph
        ("MaterializeTensorStrides", lambda g: check_lane_races(check_nd_row_pitch(materialize_tensor_strides(g)))),
    ]


VERIFY = os.environ.get("NZJIT_VERIFY", "") not in ("", "0")


class Lowered:
    """A traced kernel after every pass: `passes`, `ir(after=)`, `pto()`, `run(*args, after=)`."""

    def __init__(self, kernel: Any, traced: Graph, extra: list[tuple[str, Pass]] | None = None) -> None:
        self.kernel = kernel
        self.target = kernel.target.value
        self.graphs: dict[str, Graph] = {"trace": traced}
        passes = pipeline(self.target)
        if extra:  # test-only injection (e.g. a pass that corrupts a coordinate)
            passes = passes + extra
        g = traced
        if VERIFY:
            verify(g, "trace")
        for name, fn in passes:
            g = fn(g)
            if VERIFY:
                verify(g, name)
            self.graphs[name] = g
        self.passes = [name for name, _ in passes]
        self.final = g
        warn_unwritten_outputs(kernel, g)  # issue-24 hook: an Out no store writes is reported
        self._pto: str | None = None
        self._plans: dict[str, Any] = {}

    def ir(self, after: str = "MaterializeTensorStrides") -> Graph:
        """The graph after pass `after` ("trace" = before any pass)."""
        try:
            return self.graphs[after]
        except KeyError:
            raise ValueError(f"unknown pass {after!r}; passes are {['trace', *self.passes]}") from None

    def pto(self) -> str:
        """The emitted PTO text (codegen/pto.py)."""
        if self._pto is None:
            from ..codegen.pto import emit_pto

            self._pto = emit_pto(self.final, self.kernel)
        return self._pto

    def run(self, *args: Any, after: str | None = None, device: int | None = None) -> Any:
        """Execute the final graph, or the graph after pass `after` (per-pass bisection).

        The backend has an implementation for every primitive of every stage, so the graph after
        "trace" runs as a reference interpreter and each later graph shows what its pass changed.
        """
        from ..backend.call import call_lowered

        g = self.final if after is None else self.ir(after)
        return call_lowered(self, g, args, device=device)

