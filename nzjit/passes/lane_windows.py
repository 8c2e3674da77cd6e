"""MarkLaneWindows (issue 24 item 2): which GM accesses of a `pl.spmd` launch the simulator must log
to catch lane races at run time, and which are proven race-free at compile time and cost nothing.

Every `tile.load` / `tile.store` and every scalar access (`pl.read` / `pl.write`: `tensor.read` /
`tensor.write`, a one-element window at its indices) inside a launch gets the hidden parameter
``lane_log``: False
when no race with another lane of the launch is possible (a one-lane launch, or proven below),
else the name of the tensor it touches (the executor logs its bytes per lane, `runtime.races`).
Accesses outside every launch are left alone: the plans outside launches never log
(backend/plan.py, `in_launch`), and a kernel without `pl.spmd` is returned unchanged.
Every `pl.spmd` loop gets ``lane_log``: False when nothing inside it is logged (it opens no log),
else the positions among its captured operands of the tensors its stores write (snapshotted when
the launch opens its log, restored on a race). An equation without the parameter (a graph built after this pass)
inside a launch is logged: the safe default.

The proof. An offset `o` on axis d is split into ``f(lane) + r``: `f` a function of the lane index
alone (the spmd variable, `pl.get_block_idx()`, and constants through + - * // % min max), `r` the
rest, of which only its interval ``[lo, hi]`` (the proofs module's `Prover.fact`) is used. So lane
l touches, on axis d, at most ``[f(l) + lo, f(l) + hi + size)`` (`size` the static window extent).
Two accesses X, Y of the same tensor cannot race when for every pair of lanes l != l' some axis
separates X's interval of l from Y's of l' (a tensor's layout maps disjoint logical windows to
disjoint bytes). With a static lane count this is checked for all pairs at once (numpy, up to
`MAX_PAIRWISE` lanes); otherwise, or beyond, only the affine case ``f = a * lane`` is used:
``|a| >= max(hiX + sX, hiY + sY) - min(loX, loY)`` on one axis separates any two distinct lanes.
Two loads never race, nor two atomic stores (the device combines them). Distinct kernel
parameters never share memory (a call that aliases an output is refused, runtime.dispatch), so
only accesses of one parameter are paired. A `tensor.slice` view (`out[e]`) is a box of the
tensor it is taken of: its accesses are that parameter's, their windows shifted by the slice's
offsets (a dropped axis: the offset, extent 1). An access whose tensor is any other value is
paired with everything. A store into a `pld` window is the comm world's (issue 28).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import prims as P
from ..core.ir import Atom, Eqn, Graph, Literal, Var
from ..core.types import TileType
from .proofs import Prover, dtype_range
from .rewrite import Rewriter
from .scan import primitives

__all__ = ["mark_lane_windows", "LANE_LOG", "MAX_PAIRWISE"]

LANE_LOG = "lane_log"
#: Lane counts up to this are proven by checking every pair of lanes (compile time, numpy).
MAX_PAIRWISE = 2048
_ACCESSES = (P.tile_load_p, P.tile_store_p, P.tensor_read_p, P.tensor_write_p)
#: the accesses whose result is the tensor they write (an alias of it), by the operand it aliases
_WRITES = {P.tile_store_p: -1, P.tensor_write_p: 0}
_BOUND = 1 << 48  # offsets and their intervals proven with are within this (no int64 wrap)
_LANE_OPS: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "min": np.minimum,
    "max": np.maximum,
    "floordiv": lambda a, b: np.floor_divide(a, np.where(b == 0, 1, b)) * (b != 0),
    "mod": lambda a, b: np.mod(a, np.where(b == 0, 1, b)) * (b != 0),
}


@dataclass
class _Part:
    """An offset as `f(lane) + r`: `coef` is a when f = a * lane exactly (else None), `values` f over
    the lanes (None: the lane count is not static), r in [lo, hi]."""

    coef: int | None
    values: np.ndarray | None
    lo: int
    hi: int


@dataclass
class _Access:
    eqn: Eqn
    kind: str  # "load", "store", "atomic"
    root: Var | None  # the kernel parameter touched (None: not known)
    name: str
    axes: list[tuple[_Part, int]] | None  # per axis: the offset's parts and the window extent


class _Launch:
    """The analysis of one pl.spmd launch: its lanes and the offset splits."""

    def __init__(self, prover: Prover, lane_vars: set[Var], lanes: np.ndarray | None) -> None:
        self.prover, self.lane_vars, self.lanes = prover, lane_vars, lanes
        self.memo: dict[Atom, _Part | None] = {}

    def rest(self, x: Atom) -> _Part | None:
        f = self.prover.fact(x)
        if f.exhausted:
            return None
        zeros = None if self.lanes is None else np.zeros(len(self.lanes), np.int64)
        return _Part(0, zeros, f.lo, f.hi)

    def part(self, x: Atom, depth: int = 0) -> _Part | None:
        x = self.prover.root(x)
        if x in self.memo:
            return self.memo[x]
        p = self._split(x, depth)
        self.memo[x] = p
        return p

    def _split(self, x: Atom, depth: int) -> _Part | None:
        if isinstance(x, Literal):
            v = int(x.value)
            return _Part(0, None if self.lanes is None else np.full(len(self.lanes), 0, np.int64), v, v)
        if x in self.lane_vars:
            return _Part(1, self.lanes, 0, 0)
        e = self.prover.defs.get(x)
        if e is None or depth > 64 or x in self.prover.carries or x in self.prover.loop_vars:
            return self.rest(x)
        name = e.primitive.name
        if name == "convert":
            inner = self.part(e.inputs[0], depth + 1)
            return self._fits(x, inner) if inner is not None else self.rest(x)
        if name not in _LANE_OPS or len(e.inputs) != 2:
            return self.rest(x)
        a, b = (self.part(i, depth + 1) for i in e.inputs)
        if a is None or b is None:
            return self.rest(x)
        out = self._combine(name, a, b)
        return self._fits(x, out) if out is not None else self.rest(x)

    def _combine(self, op: str, a: _Part, b: _Part) -> _Part | None:
        vals = None if a.values is None or b.values is None else (a.values, b.values)
        if op in ("add", "sub"):
            if _peak(a) + _peak(b) >= _BOUND:
                return None  # could wrap in int64: not split
            sign = 1 if op == "add" else -1
            coef = None if a.coef is None or b.coef is None else a.coef + sign * b.coef
            lo, hi = (a.lo + b.lo, a.hi + b.hi) if op == "add" else (a.lo - b.hi, a.hi - b.lo)
            return _Part(coef, None if vals is None else _LANE_OPS[op](*vals), lo, hi)
        if op == "mul":
            for p, q in ((a, b), (b, a)):  # a lane part times a constant (no lane part, one value)
                if q.coef == 0 and q.lo == q.hi and (q.values is None or not q.values.any()):
                    c = q.lo
                    if abs(c) * (_peak(p) + 1) >= _BOUND:
                        return None  # the product could wrap in int64: not split
                    return _Part(
                        None if p.coef is None else p.coef * c,
                        None if p.values is None else p.values * c,
                        min(p.lo * c, p.hi * c),
                        max(p.lo * c, p.hi * c),
                    )
        # anything else: exact only on lane parts alone (no rest), evaluated over the lanes
        if vals is None or a.lo != a.hi or b.lo != b.hi:
            return None
        if _peak(a) * _peak(b) >= _BOUND:
            return None
        av, bv = vals[0] + a.lo, vals[1] + b.lo
        return _Part(None, _LANE_OPS[op](av, bv), 0, 0)

    def _fits(self, x: Atom, p: _Part) -> _Part | None:
        """`p` when the value never wraps at the width of `x` (else the split would be wrong)."""
        dt = getattr(x.type, "dtype", None)
        if dt is None or not (dt.is_int or dt.kind == "bool"):
            return self.rest(x)
        lo, hi = dtype_range(dt)
        if p.values is not None:
            f_lo, f_hi = (int(p.values.min()), int(p.values.max())) if len(p.values) else (0, 0)
        elif p.coef is not None:
            span = self.prover.fact(next(iter(self.lane_vars))).hi if self.lane_vars else 0
            f_lo, f_hi = min(0, p.coef * span), max(0, p.coef * span)
        else:
            return self.rest(x)
        if lo <= f_lo + p.lo and f_hi + p.hi <= hi:
            return p
        return self.rest(x)


def _peak(p: _Part) -> int:
    """The largest magnitude a part takes (lane values and rest), as a Python int."""
    v = int(np.abs(p.values).max()) if p.values is not None and len(p.values) else 0
    return v + max(abs(p.lo), abs(p.hi)) + (abs(p.coef) << 32 if p.coef else 0)


def _separated(x: _Access, y: _Access, lanes: np.ndarray | None) -> bool:
    """No lane's window of `x` meets another lane's window of `y` (see the module docstring)."""
    if x.axes is None or y.axes is None or len(x.axes) != len(y.axes):
        return False
    for p, _ in (*x.axes, *y.axes):  # beyond this, int64 sums could wrap: nothing is proven
        if not -_BOUND < p.lo <= p.hi < _BOUND or (
            p.values is not None and len(p.values) and np.abs(p.values).max() >= _BOUND
        ):
            return False
    for (px, sx), (py, sy) in zip(x.axes, y.axes):
        if px.coef is not None and px.coef == py.coef and px.coef != 0:
            if max(px.hi + sx, py.hi + sy) - min(px.lo, py.lo) <= abs(px.coef):
                return True
    if lanes is None or len(lanes) > MAX_PAIRWISE:
        return False
    n = len(lanes)
    apart = np.eye(n, dtype=bool)
    for (px, sx), (py, sy) in zip(x.axes, y.axes):
        if px.values is None or py.values is None:
            return False
        x_lo, x_hi = px.values + px.lo, px.values + px.hi + sx
        y_lo, y_hi = py.values + py.lo, py.values + py.hi + sy
        apart |= (x_hi[:, None] <= y_lo[None, :]) | (y_hi[None, :] <= x_lo[:, None])
    return bool(apart.all())


class _Collector:
    """The accesses of one launch's body (nested loops and if arms included)."""

    def __init__(self, launch: _Launch) -> None:
        self.launch = launch
        self.accesses: list[_Access] = []
        self.launches: list[Eqn] = []

    def scan(self, g: Graph) -> None:
        prover = self.launch.prover
        for e in g.eqns:
            if e.primitive is P.get_block_idx_p:
                self.launch.lane_vars.add(e.outputs[0])
            if e.primitive in _ACCESSES:
                a = self.access(e, prover)
                if a is not None:
                    self.accesses.append(a)
            body = e.params.get("body")
            if isinstance(body, Graph):
                if e.params.get("kind") == "spmd":
                    self.launches.append(e)
                self.scan(body)

    def access(self, e: Eqn, prover: Prover) -> _Access | None:
        store = e.primitive in _WRITES
        tensor = e.inputs[_WRITES.get(e.primitive, 0)]
        if isinstance(tensor.type, P.DistributedTensorType):
            return None  # a pld window: the comm world's race detector (issue 28)
        root, name, chain = _root_of_view(tensor, prover)
        atomic = store and _atomic(e)
        kind = "atomic" if atomic else "store" if store else "load"
        sizes: tuple[int, ...] | None
        if e.primitive in (P.tensor_read_p, P.tensor_write_p):  # one element at its indices
            offsets = e.operands("indices")
            sizes = (1,) * len(offsets)
        else:
            offsets = e.operands("offsets")
            sizes = _store_sizes(e, len(offsets)) if store else _load_sizes(e, prover)
        axes: list[tuple[_Part, int]] | None = None
        if sizes is not None:
            parts = [self.launch.part(o) for o in offsets]
            if all(p is not None for p in parts):
                axes = [(p, s) for p, s in zip(parts, sizes) if p is not None]
        for view in chain:  # the window in the coordinates of the tensor each slice was taken of
            axes = self.through_slice(view, axes)
        return _Access(e, kind, root, name, axes)

    def through_slice(
        self, view: Eqn, axes: list[tuple[_Part, int]] | None
    ) -> list[tuple[_Part, int]] | None:
        """An access window of the `tensor.slice` result `view`, on the sliced tensor's axes: the
        slice is a box of it (its strides are the kept axes' own), so each kept axis adds the
        slice's offset, and a dropped axis is the slice's offset with extent 1. None when the
        window is not known or the slice keeps other axes than its type says."""
        offsets, drop = view.operands("offsets"), set(view.params["drop"])
        if axes is None or len(axes) != len(offsets) - len(drop):
            return None
        kept = iter(axes)
        out: list[tuple[_Part, int]] = []
        for d, o in enumerate(offsets):
            base = self.launch.part(o)
            if base is None:
                return None
            if d in drop:
                out.append((base, 1))
                continue
            p, size = next(kept)
            total = self.launch._combine("add", base, p)
            if total is None:
                return None
            out.append((total, size))
        return out


def _atomic(e: Eqn) -> bool:
    attrs = e.params.get("attrs") or {}
    return bool(attrs.get("atomic"))


def _root(x: Atom, prover: Prover) -> tuple[Var | None, str]:
    """The kernel parameter a tensor value is (through captures and the results of stores and
    pl.writes into it), and its name; (None, name) for a view or anything else."""
    root, name, chain = _root_of_view(x, prover)
    return (root, name) if not chain else (None, name)


def _root_of_view(x: Atom, prover: Prover) -> tuple[Var | None, str, list[Eqn]]:
    """`_root`, also through `tensor.slice` views: the kernel parameter whose bytes a tensor value
    lies in (a slice is a box of its source: its bytes are the source's), its name, and the
    slices taken on the way, the one nearest to `x` first; (None, name, []) for anything else."""
    chain: list[Eqn] = []
    for _ in range(1024):
        x = prover.root(x)
        e = prover.defs.get(x) if isinstance(x, Var) else None
        if e is not None and e.primitive in _WRITES:
            x = e.inputs[_WRITES[e.primitive]]
            continue
        if e is not None and e.primitive is P.tensor_slice_p:
            chain.append(e)
            x = e.inputs[0]
            continue
        if isinstance(x, Var) and e is None and x not in prover.carries and x not in prover.loop_vars:
            return x, x.hint or "a tensor", chain
        if e is not None and e.inputs:
            _, name = _root(e.inputs[0], prover)
            return None, name, []
        break
    return None, getattr(x, "hint", None) or "a tensor", []


def _store_sizes(e: Eqn, rank: int) -> tuple[int, ...] | None:
    part = e.params.get("nz_partition")
    if part is not None:
        return tuple(int(v) for v in part) if len(part) == rank else None
    t = e.inputs[0].type
    if not isinstance(t, TileType) or len(t.shape) != 2 or not all(isinstance(d, int) for d in t.shape):
        return None
    return ((1,) * (rank - 2) + tuple(int(d) for d in t.shape))[-rank:]


def _load_sizes(e: Eqn, prover: Prover) -> tuple[int, ...] | None:
    shape = tuple(int(d) for d in e.params["shape"])
    for v, d in zip(e.operands("valid"), shape):  # a dynamic valid extent must stay within the shape
        f = prover.fact(v)
        if f.exhausted or f.hi > d:
            return None
    return shape


def _lanes(e: Eqn) -> np.ndarray | None:
    b = e.inputs[:3]
    if all(isinstance(x, Literal) for x in b):
        return np.arange(*(int(x.value) for x in b), dtype=np.int64)  # type: ignore[union-attr]
    return None


def _verdicts(e: Eqn, prover: Prover, marks: dict[Eqn, Any]) -> None:
    """Mark the accesses of the launch `e` (a pl.spmd loop) and the launch itself."""
    body = e.params["body"]
    lanes = _lanes(e)
    launch = _Launch(prover, {body.params[0]} if body.params else set(), lanes)
    col = _Collector(launch)
    col.scan(body)
    for inner in col.launches:  # a launch inside a lane: its accesses are the outer lane's
        marks[inner] = False
    one_lane = lanes is not None and len(lanes) <= 1
    logged = False
    for x in col.accesses:
        need = False
        if not one_lane:
            for y in col.accesses:
                if x.kind == y.kind == "load" or x.kind == y.kind == "atomic":
                    continue
                if x.root is not None and y.root is not None and x.root is not y.root:
                    continue
                if x.root is None or y.root is None or not _separated(x, y, lanes):
                    need = True
                    break
        marks[x.eqn] = x.name if need else False
        logged = logged or need
    marks[e] = _written(e, col.accesses, prover) if logged else False


def _written(e: Eqn, accesses: list[_Access], prover: Prover) -> tuple[int, ...]:
    """The captured operands (positions among them) of the launch `e` that its stores write: the
    executor snapshots them when the launch opens a log, to restore them on a race (an input
    written in place is not an output the calling convention restores)."""
    nb, nc, _ = e.params["arity"]
    captured = e.inputs[nb : nb + nc]
    # a captured slice of a parameter holds the bytes the stores through it write
    roots = [_root_of_view(a, prover)[0] if isinstance(a, Var) else None for a in captured]
    out: set[int] = set()
    for x in accesses:
        if x.kind == "load":
            continue
        for j, r in enumerate(roots):
            if x.root is None or r is x.root:  # a store into a view: any captured tensor
                out.add(j)
    return tuple(sorted(out))


def _collect(g: Graph, prover: Prover, marks: dict[Eqn, Any]) -> None:
    for e in g.eqns:
        body = e.params.get("body")
        if not isinstance(body, Graph):
            continue
        if e.params.get("kind") == "spmd":
            _verdicts(e, prover, marks)
        else:
            _collect(body, prover, marks)


class _Marker(Rewriter):
    def __init__(self, marks: dict[Eqn, Any]) -> None:
        super().__init__()
        self.marks = marks

    def rewrite(self, e: Eqn) -> None:
        if e in self.marks:
            self.copy(e, **{LANE_LOG: self.marks[e]})
        else:
            self.copy(e)


def mark_lane_windows(g: Graph) -> Graph:
    """`g` with every GM access and every pl.spmd loop marked `lane_log` (see the module docstring)."""
    if P.for_p not in primitives(g) or not any(e.params.get("kind") == "spmd" for e in g.walk()):
        return g  # no launch: nothing to mark (the executor logs only inside launches)
    marks: dict[Eqn, Any] = {}
    _collect(g, Prover(g), marks)
    return _Marker(marks).graph(g)
