"""What a primitive is: the `Primitive` class, the registry every primitive enters when it is
defined (`primitive`, `all_primitives`), and the helpers type rules are written with.

The primitives themselves (the `*_p` objects and their type rules) are defined in `nzjit.prims`,
one module per family. Other rules live in per-concern tables keyed by primitive (backend
`impl_rules`, codegen `pto_rules`), JAX-style: one table per rule kind, one entry per primitive."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..errors import CompileError
from . import dtypes as dt
from .types import Layout, Mem, ScalarType, TensorType, TileType, Type


class Primitive:
    """A named operation. `groups` names the operand groups of its inputs (sizes in params['arity'])."""

    def __init__(self, name: str, groups: Sequence[str], type_rule: Callable[..., list[Type]]) -> None:
        self.name = name
        self.groups = tuple(groups)
        self.type_rule = type_rule

    def __repr__(self) -> str:
        return self.name

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        # pickled by name (a lowered graph is shipped to a Ray actor, nzjit.distributed): the
        # receiving process has the same registered primitive, identity preserved
        return _registered, (self.name,)


def _registered(name: str) -> Primitive:
    return _ALL[name]


_ALL: dict[str, Primitive] = {}


def primitive(name: str, groups: Sequence[str]) -> Callable[[Callable[..., list[Type]]], Primitive]:
    """Decorator: make a type rule into the `Primitive` `name` with operand `groups`, registered in the table
    of all primitives."""

    def deco(rule: Callable[..., list[Type]]) -> Primitive:
        p = Primitive(name, groups, rule)
        _ALL[name] = p
        return p

    return deco


def all_primitives() -> dict[str, Primitive]:
    """Every registered primitive by name (a copy). A primitive registers when its family module
    is imported: `import nzjit.prims` (which `import nzjit` does) registers all of them."""
    return dict(_ALL)


# -------------------------------------------------------------------------------- type-rule helpers
#
# What the family modules of nzjit.prims write their rules with; the factories (`_binary_scalar`,
# `_compare`, `_elementwise`) define and register one primitive per call.
def _fail(msg: str, **kw: Any) -> CompileError:
    return CompileError(msg, **kw)


# ------------------------------------------------------------------------------------------ scalars
def _scalar_dtype(*ts: Type) -> dt.DType:
    for t in ts:
        if not isinstance(t, ScalarType):
            raise _fail(f"scalar arithmetic needs scalar operands, got {t}")
    d = ts[0].dtype
    for t in ts[1:]:
        if t.dtype is not d:
            raise _fail(f"scalar operands have different dtypes {ts[0]} and {t}; use pl.cast to convert")
    return d


def _binary_scalar(name: str) -> Primitive:
    @primitive(name, ("lhs", "rhs"))
    def rule(a: Type, b: Type, **_: Any) -> list[Type]:
        return [ScalarType(_scalar_dtype(a, b))]

    return rule


def _compare(name: str) -> Primitive:
    @primitive(name, ("lhs", "rhs"))
    def rule(a: Type, b: Type, **_: Any) -> list[Type]:
        _scalar_dtype(a, b)
        return [ScalarType(dt.BOOL)]

    return rule


# -------------------------------------------------------------------------------- tensors and tiles
def _tensor(t: Type, what: str) -> TensorType:
    if not isinstance(t, TensorType):
        raise _fail(f"{what} needs a tensor operand, got {t}")
    return t


def _tile(t: Type, what: str) -> TileType:
    if not isinstance(t, TileType):
        raise _fail(f"{what} needs a tile operand, got {t}")
    return t


def _check_index_operands(ts: Sequence[Type], what: str) -> None:
    for t in ts:
        if not (isinstance(t, ScalarType) and t.dtype.is_int):
            raise _fail(f"{what} offsets must be integer scalars, got {t}")


def _static_bits(shape: Sequence[Any], dtype: dt.DType) -> int | None:
    if not all(isinstance(d, int) for d in shape):
        return None
    return _prod(shape) * dtype.bits


# ------------------------------------------------------------------------------------------ matmuls
def _matmul_shape(a: tuple[Any, ...], b: tuple[Any, ...], b_trans: bool, what: str) -> tuple[Any, Any]:
    if len(a) != 2 or len(b) != 2:
        raise _fail(f"{what} needs 2-D operands, got {list(a)} and {list(b)}")
    m, k = a
    n, kb = (b[0], b[1]) if b_trans else (b[1], b[0])
    if k != kb:
        raise _fail(
            f"{what}: contraction sizes differ, lhs {list(a)} and rhs {list(b)}"
            f"{' (b_trans=True)' if b_trans else ''}"
        )
    return m, n


_MATMUL_OUT = {dt.INT8: dt.INT32, dt.FP16: dt.FP32, dt.BF16: dt.FP32, dt.FP32: dt.FP32}


def _matmul_out_dtype(a: dt.DType, b: dt.DType, out: dt.DType | None, what: str) -> dt.DType:
    if a is not b or a not in _MATMUL_OUT:
        raise _fail(
            f"{what}: unsupported operand dtypes {a} x {b}; the cube takes INT8 x INT8, "
            "FP16 x FP16, BF16 x BF16 or FP32 x FP32"
        )
    want = _MATMUL_OUT[a]
    if out is not None and out is not want:
        raise _fail(f"{what}: {a} operands accumulate in {want}, not {out}")
    return want


def _squeeze2(shape: tuple[Any, ...]) -> tuple[Any, ...]:
    """Tensor-level matmul operands may carry leading unit axes (w[e:e+1, ...])."""
    while len(shape) > 2 and shape[0] == 1:
        shape = shape[1:]
    return shape


def _mm_operands(a: Type, b: Type, what: str) -> tuple[TileType, TileType]:
    ta, tb = _tile(a, what), _tile(b, what)
    for t in (ta, tb):
        if t.memory not in (Mem.Mat, Mem.Left, Mem.Right):
            raise _fail(
                f"{what} operands must be Mat (or Left/Right) tiles, got {t}; load them with "
                "target_memory=pl.Mem.Mat"
            )
    return ta, tb


# ----------------------------------------------------------------------------- elementwise tile ops
def _elementwise(name: str, nargs: int, dtypes: tuple[dt.DType, ...] | None = None) -> Primitive:
    @primitive(f"tile.{name}", tuple(f"x{i}" for i in range(nargs)))
    def rule(*ts: Type, **_: Any) -> list[Type]:
        tiles = [_tile(t, f"pl.{name}") for t in ts]
        t0 = tiles[0]
        for t in tiles:
            if t.memory is not Mem.Vec:
                raise _fail(f"pl.{name} works on Vec tiles, got {t}; load with target_memory=pl.Mem.Vec")
            if dtypes is not None and t.dtype not in dtypes:  # the instruction's dtypes on the device
                names = " / ".join(d.name for d in dtypes)
                raise _fail(
                    f"pl.{name} works on {names} tiles (T{name.upper()} on the device), got {t}",
                    help=f"pl.cast the tile to {dtypes[0].name} first",
                )
            if t.shape != t0.shape or t.dtype is not t0.dtype:
                raise _fail(f"pl.{name} operands differ: {t0} and {t}")
            if t.valid_shape != t0.valid_shape and not (t.fully_valid and t0.fully_valid):
                raise _fail(
                    f"pl.{name} operands have different valid shapes: {t0} and {t}",
                    help="the vector unit computes dst's valid region from sources of that same "
                    "valid shape; pl.tile.fillpad the smaller one",
                )
        return [t0]

    return rule


def _prod(xs: Sequence[int]) -> int:
    n = 1
    for x in xs:
        n *= x
    return n


__all__ = ["Primitive", "Layout", "all_primitives"]
