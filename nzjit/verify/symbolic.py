"""The scalars of a kernel graph as z3 integer terms, for translation validation
(nzjit/verify/translation.py): the kernel's scalar arguments, one symbol per loop (keyed by its
kind, kernel line and occurrence, so the graphs before and after the NZ pass share them) and per
SPMD lane, and every integer value computed from them, with its range and the premises (declared
widths, loop bounds) that hold."""

from __future__ import annotations

from typing import Any

from ..core.dtypes import DType
from ..core.ir import Atom, Eqn, Graph, Literal, Var
from ..core.types import ScalarType, TensorType

__all__ = ["SymbolicGraph", "MAX_LANES"]

MAX_LANES = (1 << 32) - 1  # a launch's block dim is a uint32
_ARITH = {"add", "sub", "mul", "floordiv", "mod", "min", "max"}


class SymbolicGraph:
    """z3 terms for the scalars of one graph; `tag` separates symbols the two graphs cannot share."""

    def __init__(self, z3: Any, g: Graph, tag: str) -> None:
        self.z3, self.tag = z3, tag
        self.val: dict[Var, Any] = {}
        self.rng: dict[Var, tuple[int, int]] = {}
        self.premises: list[Any] = []
        # key (kind, kernel line, occurrence) -> kind, iv, start, stop, step, text: a loop a later pass
        # adds (AutoTileMatmulL0's K chunks) has a key of its own, so it shares no symbol
        self.loops: dict[tuple[str, str, int], tuple[str, Any, Any, Any, Any, str]] = {}
        self.accesses: list[Eqn] = []
        self.context: dict[int, tuple[tuple[str, str, int], ...]] = {}  # id(access) -> enclosing loops
        self._stack: list[tuple[str, str, int]] = []
        self.tensor_names: dict[Atom, str] = {}
        self.symbols: dict[str, Any] = {}
        self._opaque = 0
        self._arms = 0  # staged `if` arms walked so far
        self._shared: set[Atom] = set()  # values that depend on the kernel's arguments and literals only
        self._queries: dict[
            tuple[str, str], int
        ] = {}  # (primitive, source) -> occurrences of an input-free query
        for i, p in enumerate(g.params):
            if isinstance(p.type, TensorType):
                self.tensor_names[p] = p.hint or f"arg{i}"
            else:
                self._leaf(p, f"{p.hint or 'arg'}#arg{i}")
        self._graph(g, None)

    def _leaf(self, v: Var, name: str, lo: int | None = None, hi: int | None = None) -> Any:
        x = self.z3.Int(name)
        dlo, dhi = _range(v)
        lo, hi = dlo if lo is None else lo, dhi if hi is None else hi
        self.premises += [x >= lo, x <= hi]
        self.val[v], self.rng[v] = x, (lo, hi)
        self.symbols[name] = x
        return x

    def get(self, a: Atom) -> Any:
        """The z3 term of `a`: a literal's value, or the term its defining equation gave it."""
        if isinstance(a, Literal):
            return self.z3.IntVal(int(a.value))
        return self.val[a]

    def range_of(self, a: Atom) -> tuple[int, int]:
        """The interval `a` lies in: a literal's value, the range computed for it, else its dtype's."""
        if isinstance(a, Literal):
            return int(a.value), int(a.value)
        return self.rng.get(a, _range(a))

    def _graph(self, g: Graph, lanes: tuple[Any, Any] | None) -> None:
        for e in g.eqns:
            body = e.params.get("body")
            if isinstance(body, Graph):
                self._loop(e, body, lanes)
                continue
            p = e.primitive.name
            if p in ("tile.load", "tile.store", "tensor.slice", "tensor.reshape"):
                self.accesses.append(e)
                self.context[id(e)] = tuple(self._stack)
            for o in e.outputs:
                if isinstance(o.type, TensorType):
                    src = e.inputs[-1] if p == "tile.store" else e.inputs[0] if e.inputs else None
                    if isinstance(src, Var) and src in self.tensor_names:
                        self.tensor_names[o] = self.tensor_names[src]
            if all(isinstance(a, Literal) or a in self._shared or a in self.tensor_names for a in e.inputs):
                self._shared.update(e.outputs)  # computed from the kernel's own arguments only
            if len(e.outputs) != 1 or not _is_int(e.outputs[0]):
                continue
            out = e.outputs[0]
            if p == "get_block_idx":
                self.val[out], self.rng[out] = (
                    (lanes[0], (0, MAX_LANES - 1)) if lanes else (self.z3.IntVal(0), (0, 0))
                )
            elif p == "get_block_num":
                self.val[out], self.rng[out] = (
                    (lanes[1], (1, MAX_LANES)) if lanes else (self.z3.IntVal(1), (1, 1))
                )
            elif (
                p in _ARITH
                and len(e.inputs) == 2
                and all(isinstance(a, Literal) or a in self.val for a in e.inputs)
            ):
                self._arith(p, out, *e.inputs)
            elif p == "convert" and (isinstance(e.inputs[0], Literal) or e.inputs[0] in self.val):
                x, (lo, hi) = self.get(e.inputs[0]), self.range_of(e.inputs[0])
                self._set(out, x, lo, hi)
            elif out in self._shared:  # a query of the device on the kernel's arguments only (pld.rank,
                # pld.nranks of a window): the same value in both graphs, named by its place and occurrence
                self._queries[(p, str(e.source))] = n = self._queries.get((p, str(e.source)), 0) + 1
                self._leaf(out, f"{p}@{e.source}#{n}")
            else:  # a value the validator does not model: unknown, and never shared between graphs
                self._opaque += 1
                self._leaf(out, f"{p}#{self.tag}{self._opaque}")

    def _set(self, out: Var, x: Any, lo: int, hi: int) -> None:
        dlo, dhi = _range(out)
        if dlo <= lo and hi <= dhi:
            self.val[out], self.rng[out] = x, (lo, hi)
        else:  # may wrap at the declared width: two's complement (or unsigned) truncation
            self.val[out], self.rng[out] = (x - dlo) % (dhi - dlo + 1) + dlo, (dlo, dhi)

    def _arith(self, p: str, out: Var, a: Atom, b: Atom) -> None:
        z3 = self.z3
        x, y = self.get(a), self.get(b)
        (al, ah), (bl, bh) = self.range_of(a), self.range_of(b)
        if p == "add":
            return self._set(out, x + y, al + bl, ah + bh)
        if p == "sub":
            return self._set(out, x - y, al - bh, ah - bl)
        if p == "mul":
            ends = [al * bl, al * bh, ah * bl, ah * bh]
            return self._set(out, x * y, min(ends), max(ends))
        if p == "min":
            return self._set(out, z3.If(x < y, x, y), min(al, bl), min(ah, bh))
        if p == "max":
            return self._set(out, z3.If(x > y, x, y), max(al, bl), max(ah, bh))
        if bl == bh and bl > 0:  # by a positive constant: z3's division is floor here (NZ-19)
            k = bl
            if p == "floordiv":
                return self._set(out, x / k, al // k, ah // k)
            return self._set(out, x % k, 0, k - 1)
        q = z3.If(y == 0, 0, z3.If(z3.And(y < 0, x % y != 0), x / y - 1, x / y))  # floor, 0 for y == 0
        r = z3.If(y == 0, 0, x - q * y)
        dlo, dhi = _range(out)
        return self._set(out, q if p == "floordiv" else r, dlo, dhi)

    def _loop(self, e: Eqn, body: Graph, lanes: tuple[Any, Any] | None) -> None:
        z3 = self.z3
        kind = e.params.get("kind")  # None: a staged `if` arm (cond), whose body runs at most once
        if kind is None:
            self._arms += 1
            k = f"cond@{e.source}.{self._arms}"
            self._body(e, body, lanes, ("cond", str(e.source), self._arms), k)
            return
        key = (kind, str(e.source), sum(1 for k in self.loops if k[:2] == (kind, str(e.source))))
        k = f"{kind}@{e.source}.{key[2]}"
        start, stop, step = (self.get(a) for a in e.inputs[:3])
        iv_v = body.params[0]
        name = f"{iv_v.hint or 'iv'}#loop{k}"
        (sl, sh), (el, eh), (tl, _) = (self.range_of(a) for a in e.inputs[:3])
        if kind == "spmd":
            iv = self._leaf(iv_v, name, 0, max(0, min(eh, MAX_LANES) - 1))
            self.premises += [iv < stop, stop >= 1, stop <= MAX_LANES]
            text = f"{iv_v.hint or 'lane'} in [0, {_show(e.inputs[1])}) (a lane of pl.spmd)"
            lanes = (iv, stop)
        else:
            lo, hi = (sl, eh - 1) if tl >= 1 else (min(sl, el + 1), max(sh, eh - 1))
            iv = self._leaf(iv_v, name, lo, max(lo, hi))
            trip = z3.Int(f"trip#loop{k}")
            self.premises += [
                trip >= 0,
                iv == start + step * trip,
                z3.If(step > 0, iv < stop, z3.If(step < 0, iv > stop, z3.And(trip == 0, iv < stop))),
            ]
            text = (
                f"{iv_v.hint or 'iv'} = {_show(e.inputs[0])} + i * {_show(e.inputs[2])}, i >= 0, short of "
                f"{_show(e.inputs[1])} (pl.{kind})"
            )
        self.loops[key] = (kind, iv, start, stop, step, text)
        self._body(e, body, lanes, key, k)

    def _body(self, e: Eqn, body: Graph, lanes: tuple[Any, Any] | None, key: tuple[Any, ...], k: str) -> None:
        """Walk the body of loop or `if` arm `e`: its captured values are the outer ones, its carries
        and results unknown values (carried values are never resolved, NZ-16)."""
        nb, nc, _ = e.params["arity"]
        for p, a in zip(body.params[1 : 1 + nc], e.inputs[nb : nb + nc]):
            if isinstance(a, Var) and a in self.val:
                self.val[p], self.rng[p] = self.val[a], self.rng[a]
            elif isinstance(a, Literal) and _is_int(p):
                self.val[p], self.rng[p] = self.get(a), self.range_of(a)
            if isinstance(a, Var) and a in self.tensor_names:
                self.tensor_names[p] = self.tensor_names[a]
        for j, p in enumerate(body.params[1 + nc :]):
            if _is_int(p):
                self._leaf(p, f"{p.hint or 'carry'}#loop{k}.carry{j}")
        self._stack.append(key)
        self._graph(body, lanes)
        self._stack.pop()
        for j, o in enumerate(e.outputs):
            if _is_int(o):
                self._leaf(o, f"{o.hint or 'result'}#loop{k}.result{j}")


def _is_int(v: Atom) -> bool:
    t = v.type
    return isinstance(t, ScalarType) and (t.dtype.is_int or t.dtype.kind == "bool")


def _range(v: Atom) -> tuple[int, int]:
    d = v.type.dtype if isinstance(v.type, ScalarType) else None
    if not isinstance(d, DType) or not (d.is_int or d.kind == "bool"):
        return -(1 << 63), (1 << 63) - 1
    if d.kind == "bool":
        return 0, 1
    if d.kind == "uint":
        return 0, (1 << d.bits) - 1
    return -(1 << (d.bits - 1)), (1 << (d.bits - 1)) - 1


def _show(a: Atom) -> str:
    return str(a.value) if isinstance(a, Literal) else (a.hint or "%v")
