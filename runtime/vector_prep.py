"""Prepared vector instructions: a runtime.vector instruction checked once for tiles of given
geometries and valid shapes, then run on raw byte images - the form a compiler that runs the same
instruction on the same shapes many times (a lane-batched step) calls, as load_plan / store_plan
are for TLOAD / TSTORE.

`prepare(name, dst, *srcs, target=..., **params)` takes each tile as a `Spec`, ``(geometry,
valid_row, valid_col)`` (TileBuf.from_geometry's arguments; None: the static extent), and runs the
instruction itself once on zero images of those geometries: every check it makes, in its order,
with its message, raises there (a DeviceError) before anything of the caller's is touched (the
kernels' own refusals too: they depend on the parameters, never on the element values). It
returns a `Prepared`: called with the destination's and the operands' uint8 byte images (``nbytes``
bytes each, C-contiguous; a scalar operand as its value), in the instruction's operand order, it
runs the instruction's own kernel (runtime/vector.py's ``_*_k``: the same ufunc, dtype path,
rounding and errstate) on the valid-region views of those bytes - the bytes of the instruction
call, by construction, without rebuilding TileBufs or re-running the dtype and shape checks.

Prepared instructions: "binary", "binary_scalar", "unary", "row_reduce", "row_expand",
"col_expand" (with ``lanes``: stacked lanes), "cvt". Their ``params`` are the instruction's own
keyword arguments (``op``, ``high_precision``, ``mode``, ``lanes``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from . import vector as V
from .errors import DeviceError
from .tile import TileBuf, TileGeometry

__all__ = ["PREPARED", "Prepared", "Spec", "prepare"]

#: A tile operand of a prepared instruction: its geometry and valid shape (None: the static extent).
Spec = tuple[TileGeometry, "int | None", "int | None"]
#: A prepared instruction: ``p(dst_bytes, *operand_bytes_or_scalars)``.
Prepared = Callable[..., None]
#: The instructions `prepare` knows.
PREPARED = ("binary", "binary_scalar", "unary", "row_reduce", "row_expand", "col_expand", "cvt")


def _probe(spec: Spec) -> TileBuf:
    """A tile of `spec` over zero bytes of its own (the instruction's checks read only its
    geometry and valid shape; the trial run writes only here)."""
    g, vr, vc = spec
    return TileBuf.from_geometry(g, vr, vc, np.zeros(g.nbytes, np.uint8))


def _view(t: TileBuf) -> Callable[[np.ndarray], np.ndarray]:
    """bytes -> the valid region of a tile like `t` over them (runtime.vector.valid_region)."""
    d, rows, cols, vr, vc = t.dtype, t.rows, t.cols, t.valid_row, t.valid_col
    return lambda b: b.view(d).reshape(rows, cols)[:vr, :vc]


def prepare(name: str, dst: Spec, *srcs: Spec | None, target: str = "A2A3", **params: Any) -> Prepared:
    """Instruction `name` checked for these tiles (module docstring); DeviceError as the
    instruction raises it. A ``None`` source is an absent optional operand (TROWEXPAND's tile,
    TROW*'s tmp)."""
    if name not in PREPARED:
        raise DeviceError(f"prepare: {name!r} is not a prepared vector instruction ({', '.join(PREPARED)})")
    d = _probe(dst)
    ts = [None if s is None else _probe(s) for s in srcs]
    vd = _view(d)
    op = params.get("op", "")
    if name == "binary":
        a, b = ts
        assert a is not None and b is not None
        V.binary(op, d, a, b, target)
        va, vb = _view(a), _view(b)
        return lambda o, x, y: V._binary_k(op, vd(o), va(x), vb(y))
    if name == "binary_scalar":
        (a,) = ts
        assert a is not None
        V.binary_scalar(op, d, a, 0, target)
        va = _view(a)
        return lambda o, x, s: V._binary_scalar_k(op, vd(o), va(x), s)
    if name == "unary":
        (a,) = ts
        assert a is not None
        hp = bool(params.get("high_precision", False))
        V.unary(op, d, a, target, hp)
        algorithm = V.HIGH_PRECISION.get(op, {}).get(target) if hp else None
        va = _view(a)
        return lambda o, x: V._unary_k(op, vd(o), va(x), algorithm)
    if name == "row_reduce":
        a = ts[0]
        assert a is not None
        V.row_reduce(op, d, a, ts[1] if len(ts) > 1 else None, target)
        va = _view(a)
        rows, cols, vr, dt = d.rows, d.cols, d.valid_row, d.dtype
        # the tmp operand's bytes: scratch the model does not write
        return lambda o, x, *tmp: V._row_reduce_k(op, o.view(dt).reshape(rows, cols)[:vr, 0], va(x))
    if name == "row_expand":
        a, r = ts
        assert r is not None
        V.row_expand(op, d, a, r, target)
        vr_, cols = _view(r), d.valid_col
        if op == "expand":
            return lambda o, x, y: V._broadcast_k(op, vd(o), None, V._per_row_k(vr_(y), cols))
        assert a is not None
        va = _view(a)
        return lambda o, x, y: V._broadcast_k(op, vd(o), va(x), V._per_row_k(vr_(y), cols))
    if name == "col_expand":
        a, c = ts
        assert c is not None
        lanes = int(params.get("lanes", 1))
        V.col_expand(op, d, a, c, target, lanes)
        return _col_expand(op, d, a, c, lanes)
    (a,) = ts  # cvt
    assert a is not None
    mode = params.get("mode", "round")
    V.cvt(d, a, mode, target)
    va = _view(a)
    return lambda o, x: V.convert_into(vd(o), va(x), mode)


def _col_expand(op: str, d: TileBuf, a: TileBuf | None, c: TileBuf, lanes: int) -> Prepared:
    """TCOLEXPAND*: runtime.vector._per_col's operand and _broadcast's region shape, on bytes."""
    vd = _view(d)
    cd, crows, ccols, cvc = c.dtype, c.rows, c.cols, c.valid_col
    if lanes > 1:  # each lane's row 0, broadcast down that lane's rows only
        shape: tuple[int, ...] = (lanes, d.valid_row // lanes, d.valid_col)
        step = crows // lanes

        def col(y: np.ndarray) -> np.ndarray:
            return y.view(cd).reshape(crows, ccols)[::step, :cvc].reshape(lanes, 1, cvc)
    else:
        shape = (d.valid_row, d.valid_col)

        def col(y: np.ndarray) -> np.ndarray:
            return y.view(cd).reshape(crows, ccols)[:1, :cvc]

    if op == "expand":
        return lambda o, x, y: V._broadcast_k(op, vd(o).reshape(shape), None, col(y))
    assert a is not None
    va = _view(a)
    return lambda o, x, y: V._broadcast_k(op, vd(o).reshape(shape), va(x), col(y))
