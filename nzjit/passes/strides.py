"""MaterializeTensorStrides: every tensor type gets row-major strides over its shape (NZ-7).

NZ needs no stride rule of its own: plain row-major strides over the blocked shape
`[B, C/c0, R/16, 16, c0]` are `[C*R, R*c0, 16*c0, c0, 1]`, the NZ strides. An NZ view that reaches
this pass unblocked is a broken pass order, an internal error (NZ-34).
"""

from __future__ import annotations

from ..core.ir import Graph
from ..core.types import DynDim, Layout, TensorType, Type
from ..errors import InternalError
from .rewrite import Rewriter

BLOCKED_MARK = "nz_tensor_views_blocked"


def row_major_strides(shape: tuple[int | DynDim, ...]) -> tuple[int | DynDim, ...] | None:
    """Row-major strides; a dynamic dim makes the strides outside it dynamic (None: unknown)."""
    strides: list[int] = []
    acc = 1
    for d in reversed(shape):
        strides.append(acc)
        if not isinstance(d, int):
            return (None,) * (len(shape) - len(strides)) + tuple(reversed(strides))  # type: ignore[return-value]
        acc *= d
    return tuple(reversed(strides))


def check_nz_view_is_blocked(t: TensorType, blocked: bool) -> None:
    """NZ-34: MaterializeTensorStrides asserts BlockNzTensorViews ran."""
    if t.layout is Layout.NZ and (not blocked or t.rank != 5):
        raise InternalError(
            f"NZ view {t} is not blocked: BlockNzTensorViews must run before "
            "MaterializeTensorStrides (NZ-9, NZ-34)"
        )


class _Strides(Rewriter):
    def __init__(self, blocked: bool) -> None:
        super().__init__()
        self.blocked = blocked
        self.mapped: dict[int, tuple[Type, Type]] = {}  # id(type) -> (type, with strides): types repeat

    def map_type(self, t: Type) -> Type:
        hit = self.mapped.get(id(t))
        if hit is not None and hit[0] is t:
            return hit[1]
        nt = t
        if isinstance(t, TensorType):
            check_nz_view_is_blocked(t, self.blocked)
            if t.strides is None:
                nt = t.with_(strides=row_major_strides(t.shape))
        self.mapped[id(t)] = (t, nt)
        return nt


def materialize_tensor_strides(g: Graph) -> Graph:
    """Fill row-major strides on every TensorType (params, slices, aliases)."""
    out = _Strides(bool(g.attrs.get(BLOCKED_MARK))).run(g)
    return out
