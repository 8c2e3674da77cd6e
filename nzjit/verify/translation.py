"""Translation validation of BlockNzTensorViews for one lowered kernel (`Lowered.validate()`).

The graph before the pass (logical `[.., R, C]` NZ windows) and the lowered graph (rank-5 blocked
partitions, after AutoTileMatmulL0 and MaterializeTensorStrides) are both translated to z3
integer terms over the same symbols: the kernel's scalar arguments, one variable per loop (by
position in program order) and per lane. For every NZ load, slice, reshape and store, z3 proves,
for every value of the loop variables and lanes in their ranges and every element of the window:

- the blocked partition addresses the element's NZ position in the logical tensor:
  `sum((P_i + j_i) * S_i) == b*R*C + (c // c0)*R*c0 + r*c0 + c % c0` (a load or slice; j the
  element's partition index `(0, tc // c0, tr // 16, tr % 16, tc % c0)`); a store is modelled as
  the A2/A3 device writes it, densely from its base offset (TStoreAccNz2nz ignores the strides,
  NZ-23), so a store that only the strides would place right is a counterexample;
- the partition index lies inside the blocked tensor (in bounds), and the blocked valid region
  holds exactly the elements of the logical valid region (ragged tails).

The premise is the source program's: each logical window lies inside its tensor (where the
compiler did not prove it, the backend checks it at run time; the certificate says which).
Arithmetic wraps at each value's declared width unless a simple interval shows it cannot.
The answer is a certificate per access (the facts used) or a counterexample: the loop and lane
values, the element, the expected and the addressed element.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ..core.dtypes import c0_of
from ..core.ir import Eqn, Graph
from ..core.types import DynDim, Layout, TensorType, TileType, static_dim
from . import require_z3
from .symbolic import SymbolicGraph

PASS = "BlockNzTensorViews"


@dataclass
class Access:
    """One NZ access and its outcome: `status` is "proven", "counterexample" or "unknown"."""

    kind: str  # load, slice, reshape, store
    tensor: str
    where: str  # the kernel line
    status: str
    facts: list[str] = field(default_factory=list)
    counterexample: dict[str, Any] | None = None

    def __str__(self) -> str:
        head = f"{self.where}: {self.kind} of NZ tensor '{self.tensor}': {self.status}"
        lines = [head] + [f"    - {f}" for f in self.facts]
        if self.counterexample:
            lines.append(
                "    counterexample: " + ", ".join(f"{k} = {v}" for k, v in self.counterexample.items())
            )
        return "\n".join(lines)


@dataclass
class Validation:
    """The outcome for one kernel: every access, `ok` when each is proven."""

    kernel: str
    accesses: list[Access]
    errors: list[str] = field(default_factory=list)  # structure the two graphs do not share

    @property
    def ok(self) -> bool:
        """True when every access is proven and the two graphs share their structure."""
        return not self.errors and all(a.status == "proven" for a in self.accesses)

    def __str__(self) -> str:
        n = sum(a.status == "proven" for a in self.accesses)
        head = (
            f"translation validation of {self.kernel} ({PASS}): {n}/{len(self.accesses)} NZ accesses "
            f"proven" + ("" if self.ok else " -- FAILED")
        )
        return "\n".join([head, *self.errors, *(str(a) for a in self.accesses)])


# ------------------------------------------------------------------------------ NZ addressing
def _dim(z3: Any, d: Any) -> Any:
    return z3.Int(f"dim:{d.name}") if isinstance(d, DynDim) else z3.IntVal(int(d))


def _fold(coords: list[Any], dims: tuple[Any, ...]) -> Any:
    """The batch index of leading coordinates (row-major over the leading dims, NZ-28)."""
    b: Any = 0
    for c, d in zip(coords, dims):
        b = b * (d if not isinstance(d, int) else d) + c
    return b


def _nz_offset(t: TensorType, lead: list[Any], r: Any, c: Any, z3: Any) -> Any:
    """The element offset of logical (lead, r, c) in the NZ bytes of `t` (nz-layout.md §2)."""
    R, C = static_dim(t.shape[-2]), static_dim(t.shape[-1])
    c0 = c0_of(t.dtype)
    dims = tuple(_dim(z3, d) for d in t.shape[:-2])
    return _fold(lead, dims) * (R * C) + (c / c0) * (R * c0) + r * c0 + c % c0


def _decode(t: TensorType, off: int) -> str:
    R, C = static_dim(t.shape[-2]), static_dim(t.shape[-1])
    c0 = c0_of(t.dtype)
    b, rem = divmod(off, R * C)
    cb, rem = divmod(rem, R * c0)
    r, cc = divmod(rem, c0)
    return f"[{b}, {r}, {cb * c0 + cc}] (NZ element {off})"


def _strides(t: TensorType) -> list[int]:
    if t.strides is not None and all(isinstance(s, int) for s in t.strides):
        return [int(s) for s in t.strides]
    out, acc = [], 1
    for d in reversed(t.shape[1:]):
        out.append(acc)
        acc *= static_dim(d)
    return [acc, *reversed(out)]


# ------------------------------------------------------------------------------ the checker
class _Checker:
    def __init__(self, z3: Any, pre: SymbolicGraph, post: SymbolicGraph) -> None:
        self.z3, self.pre, self.post = z3, pre, post

    def facts(self, e: Eqn) -> list[str]:
        """The ranges of the loops and lanes around `e`: the premises of its proof."""
        return [self.pre.loops[k][-1] for k in self.pre.context.get(id(e), ())]

    def prove(
        self,
        kind: str,
        name: str,
        where: str,
        extra: list[Any],
        goal: Any,
        show: dict[str, Any],
        facts: list[str],
        decode: tuple[TensorType, Any, Any] | None,
    ) -> Access:
        z3 = self.z3
        s = z3.Solver()
        s.set("timeout", 30000)
        s.add(*self.pre.premises, *self.post.premises, *extra)
        s.add(z3.Not(goal))
        r = s.check()
        if r == z3.unsat:
            return Access(kind, name, where, "proven", facts)
        if r != z3.sat:
            return Access(kind, name, where, "unknown", facts + [f"z3: {s.reason_unknown()}"])
        m = s.model()
        cex: dict[str, Any] = {}
        for nm, x in {**self.pre.symbols, **show}.items():
            if "#" in nm and ("loop" in nm or "arg" in nm) or nm in show:
                v = m.eval(x, model_completion=True)
                cex[nm.split("#")[0] if nm not in show else nm] = (
                    v.as_long() if z3.is_int_value(v) else str(v)
                )
        if decode is not None:
            t, exp, got = decode
            e_v = m.eval(exp, model_completion=True).as_long()
            g_v = m.eval(got, model_completion=True).as_long()
            cex["expected"] = _decode(t, e_v)
            cex["addressed"] = _decode(t, g_v) if 0 <= g_v else f"NZ element {g_v} (before the tensor)"
        return Access(kind, name, where, "counterexample", facts, cex)

    def window_premise(self, t: TensorType, offs: list[Any], ext: list[Any]) -> tuple[list[Any], list[Any]]:
        """The source's precondition: the logical window lies in its tensor."""
        z3 = self.z3
        c = []
        for o, n, d in zip(offs, ext, t.shape):
            c += [o >= 0, o + n <= _dim(z3, d)]
        dyn = [_dim(z3, d) >= 1 for d in t.shape if isinstance(d, DynDim)]
        return c, dyn

    def in_bounds_proven(self, prem: list[Any], dyn: list[Any]) -> bool:
        z3 = self.z3
        s = z3.Solver()
        s.set("timeout", 10000)
        s.add(*self.pre.premises, *dyn, z3.Not(z3.And(*prem)) if prem else z3.BoolVal(False))
        return s.check() == z3.unsat

    # -- accesses
    def load(self, a: Eqn, b: Eqn) -> Access:
        z3, pre, post = self.z3, self.pre, self.post
        t, tb = a.inputs[0].type, b.inputs[0].type
        assert isinstance(t, TensorType) and isinstance(tb, TensorType)
        name, where = pre.tensor_names.get(a.inputs[0], "?"), str(a.source)
        c0 = c0_of(t.dtype)
        offs = [pre.get(o) for o in a.operands("offsets")]
        shape = list(a.params["shape"])
        tr_n, tc_n = int(shape[-2]), int(shape[-1])
        valid = [pre.get(v) for v in a.operands("valid")]
        tr, tc = z3.Ints("tr tc")
        vr, vc = (valid[-2], valid[-1]) if valid else (z3.IntVal(tr_n), z3.IntVal(tc_n))
        ext = [z3.IntVal(int(n)) for n in shape[:-2]] + [vr, vc]
        prem, dyn = self.window_premise(t, offs, ext)
        facts = self.facts(a)
        facts.append(
            f"window [{', '.join(map(str, shape))}] in the tensor {list(t.shape)}: "
            + (
                "proven at compile time"
                if self.in_bounds_proven(prem, dyn)
                else "assumed (the backend checks it at run time)"
            )
        )
        sizes = tuple(int(x) for x in b.params["shape"])
        want = (1, tc_n // c0, tr_n // 16, 16, c0)
        if sizes != want:
            return Access(
                "load",
                name,
                where,
                "counterexample",
                facts,
                {"partition": list(sizes), "window needs": list(want)},
            )
        p = [post.get(o) for o in b.operands("offsets")]
        pv = [post.get(v) for v in b.operands("valid")]
        j = [z3.IntVal(0), tc / c0, tr / 16, tr % 16, tc % c0]
        dims = [_dim(z3, d) for d in tb.shape]
        addr = sum((pi + ji) * si for pi, ji, si in zip(p, j, _strides(tb)))
        exp = _nz_offset(t, offs[:-2], offs[-2] + tr, offs[-1] + tc, z3)
        in_logical = z3.And(tr < vr, tc < vc)
        in_blocked = z3.And(*(ji < vi for ji, vi in zip(j, pv))) if pv else z3.BoolVal(True)
        inb = z3.And(*(z3.And(pi + ji >= 0, pi + ji < di) for pi, ji, di in zip(p, j, dims)))
        goal = z3.And(in_logical == in_blocked, z3.Implies(in_logical, z3.And(addr == exp, inb)))
        facts.append(
            f"for every element (tr, tc) < ({tr_n}, {tc_n}){' inside valid_shape' if valid else ''}: the "
            f"partition [1, {tc_n // c0}, {tr_n // 16}, 16, {c0}] at its offsets addresses the element's NZ "
            "position, in bounds" + ("; the blocked valid region is exactly the logical one" if valid else "")
        )
        extra = [*prem, *dyn, tr >= 0, tr < tr_n, tc >= 0, tc < tc_n]
        return self.prove("load", name, where, extra, goal, {"tr": tr, "tc": tc}, facts, (t, exp, addr))

    def slice(self, a: Eqn, b: Eqn) -> Access:
        z3, pre, post = self.z3, self.pre, self.post
        t, tb = a.inputs[0].type, b.inputs[0].type
        assert isinstance(t, TensorType) and isinstance(tb, TensorType)
        name, where = pre.tensor_names.get(a.inputs[0], "?"), str(a.source)
        c0 = c0_of(t.dtype)
        offs = [pre.get(o) for o in a.operands("offsets")]
        ext = list(a.params["shape"])
        R, C = static_dim(t.shape[-2]), static_dim(t.shape[-1])
        lead_ext = [_dim(z3, d) for d in ext[:-2]]
        ls = [z3.Int(f"l{i}") for i in range(len(lead_ext))]
        r, c = z3.Ints("r c")
        prem, dyn = self.window_premise(t, offs, [_dim(z3, d) for d in ext])
        facts = self.facts(a)
        facts.append(
            "window in the tensor: "
            + (
                "proven at compile time"
                if self.in_bounds_proven(prem, dyn)
                else "assumed (the backend checks it at run time)"
            )
        )
        p = [post.get(o) for o in b.operands("offsets")]
        j = [_fold(ls, tuple(lead_ext)), c / c0, r / 16, r % 16, c % c0]
        dims = [_dim(z3, d) for d in tb.shape]
        addr = sum((pi + ji) * si for pi, ji, si in zip(p, j, _strides(tb)))
        exp = _nz_offset(t, [o + li for o, li in zip(offs, ls)], r, c, z3)
        inb = z3.And(*(z3.And(pi + ji >= 0, pi + ji < di) for pi, ji, di in zip(p, j, dims)))
        sizes = [_dim(z3, d) for d in b.params["shape"]]
        in_part = z3.And(*(ji < zi for ji, zi in zip(j, sizes)))
        extra = [
            *prem,
            *dyn,
            r >= 0,
            r < R,
            c >= 0,
            c < C,
            *(z3.And(li >= 0, li < n) for li, n in zip(ls, lead_ext)),
        ]
        facts.append(
            f"for every element of the {list(ext)} view: the batch-slot slice addresses its NZ position "
            "in the parent, in bounds"
        )
        return self.prove(
            "slice",
            name,
            where,
            extra,
            z3.And(addr == exp, inb, in_part),
            {"r": r, "c": c, **{f"l{i}": x for i, x in enumerate(ls)}},
            facts,
            (t, exp, addr),
        )

    def reshape(self, a: Eqn, b: Eqn) -> Access:
        t, tb = a.inputs[0].type, b.inputs[0].type
        assert isinstance(t, TensorType) and isinstance(tb, TensorType)
        name, where = self.pre.tensor_names.get(a.inputs[0], "?"), str(a.source)
        n = _prod(t.shape)
        got = tuple(b.params["shape"])
        facts = [
            f"flatten of the whole tensor: [{n}] elements, element i is the NZ element i "
            f"(blocked {list(tb.shape)} holds {_prod(tb.shape)})"
        ]
        ok = got == (n,) and _prod(tb.shape) == n and tuple(a.params["shape"]) == (n,)
        return Access(
            "reshape",
            name,
            where,
            "proven" if ok else "counterexample",
            facts,
            None if ok else {"expected": [n], "addressed": list(got)},
        )

    def store(self, a: Eqn, bs: list[Eqn]) -> list[Access]:
        z3, pre, post = self.z3, self.pre, self.post
        t = a.inputs[-1].type
        tile = a.inputs[0].type
        assert isinstance(t, TensorType) and isinstance(tile, TileType)
        name, where = pre.tensor_names.get(a.inputs[-1], "?"), str(a.source)
        rows, cols = (int(x) for x in tile.shape)
        offs = [pre.get(o) for o in a.operands("offsets")]
        lead = [z3.IntVal(1)] * (len(t.shape) - 2)
        prem, dyn = self.window_premise(t, offs, [*lead, z3.IntVal(rows), z3.IntVal(cols)])
        base_facts = self.facts(a)
        base_facts.append(
            "window in the tensor: "
            + (
                "proven at compile time"
                if self.in_bounds_proven(prem, dyn)
                else "assumed (the backend checks it at run time)"
            )
        )
        out: list[Access] = []
        ni = 0
        widths = [b.params["nz_partition"][1] * b.params["nz_partition"][4] for b in bs]
        for b, n_k in zip(bs, widths):
            tb = b.inputs[-1].type
            assert isinstance(tb, TensorType)
            part = tuple(int(x) for x in b.params["nz_partition"])
            m_k = part[2] * part[3]
            facts = base_facts + [
                f"store {len(out) + 1}/{len(bs)}: accumulator columns [{ni}, {ni + n_k}) of "
                f"{cols}, written densely from its base as the A2/A3 store does (NZ-23)"
            ]
            if m_k != rows or sum(widths) != cols:
                out.append(
                    Access(
                        "store",
                        name,
                        where,
                        "counterexample",
                        facts,
                        {
                            "partition rows": m_k,
                            "tile rows": rows,
                            "columns stored": sum(widths),
                            "tile columns": cols,
                        },
                    )
                )
                ni += n_k
                continue
            tr, tc = z3.Ints("tr tc")
            p = [post.get(o) for o in b.operands("offsets")]
            dense = [
                part[1] * part[2] * part[3] * part[4],
                part[2] * part[3] * part[4],
                part[3] * part[4],
                part[4],
                1,
            ]
            j = [0, tc / part[4], tr / 16, tr % 16, tc % part[4]]
            addr = sum(pi * si for pi, si in zip(p, _strides(tb))) + sum(ji * di for ji, di in zip(j, dense))
            exp = _nz_offset(t, offs[:-2], offs[-2] + tr, offs[-1] + ni + tc, z3)
            total = _prod(tb.shape) if all(isinstance(d, int) for d in tb.shape) else None
            inb = z3.And(addr >= 0, addr < total) if total is not None else addr >= 0
            extra = [*prem, *dyn, tr >= 0, tr < m_k, tc >= 0, tc < n_k]
            out.append(
                self.prove(
                    "store",
                    name,
                    where,
                    extra,
                    z3.And(addr == exp, inb),
                    {"tr": tr, "tc": tc},
                    facts,
                    (t, exp, addr),
                )
            )
            ni += n_k
        return out


def _prod(shape: tuple[Any, ...]) -> int:
    n = 1
    for d in shape:
        n *= int(d) if isinstance(d, int) else 1
    return n


def _nz_accesses(sym: SymbolicGraph, blocked: bool) -> Iterator[tuple[str, Eqn]]:
    """The NZ loads, slices, reshapes and stores of a graph, in program order."""
    for e in sym.accesses:
        p = e.primitive.name
        t = (e.inputs[-1] if p == "tile.store" else e.inputs[0]).type
        if not (isinstance(t, TensorType) and t.layout is Layout.NZ):
            continue
        if blocked and p == "tile.load" and not e.params.get("blocked"):
            continue
        yield p.split(".")[1], e


def validate_graphs(pre_g: Graph, post_g: Graph, kernel: str = "kernel") -> Validation:
    """Validate `post_g` (after the pass and the later ones) against `pre_g` (the pass's input)."""
    z3 = require_z3()
    pre, post = SymbolicGraph(z3, pre_g, "pre"), SymbolicGraph(z3, post_g, "post")
    chk = _Checker(z3, pre, post)
    errors = []
    for key, (_, _, s0, e0, t0, text) in pre.loops.items():
        if key not in post.loops:
            errors.append(f"{key[1]}: the loop ({text}) is missing from the lowered graph")
            continue
        _, _, s1, e1, t1, _ = post.loops[key]
        s = z3.Solver()
        s.add(*pre.premises, *post.premises, z3.Not(z3.And(s0 == s1, e0 == e1, t0 == t1)))
        if s.check() != z3.unsat:
            errors.append(f"{key[1]}: the loop ({text}) has other bounds in the lowered graph")
    a_list, b_list = list(_nz_accesses(pre, False)), list(_nz_accesses(post, True))
    accesses: list[Access] = []
    bi = 0
    for kind, a in a_list:
        if bi >= len(b_list) or b_list[bi][0] != kind:
            errors.append(
                f"{a.source}: the {kind} of an NZ tensor has no blocked counterpart in the lowered graph"
            )
            continue
        if kind == "store":
            group, width = [], 0  # AutoTileMatmulL0 splits one store along N: its blocks follow in order
            tile_t = a.inputs[0].type
            assert isinstance(tile_t, TileType)  # a store's first operand is its tile
            cols = int(tile_t.shape[-1])
            while (
                bi < len(b_list)
                and b_list[bi][0] == "store"
                and b_list[bi][1].source == a.source
                and width < cols
            ):
                part = b_list[bi][1].params["nz_partition"]
                group.append(b_list[bi][1])
                width += part[1] * part[4]
                bi += 1
            accesses += chk.store(a, group)
            continue
        b = b_list[bi][1]
        bi += 1
        accesses.append(getattr(chk, kind)(a, b))
    if bi != len(b_list):
        errors.append(f"the lowered graph has {len(b_list) - bi} NZ access(es) the kernel did not write")
    return Validation(kernel, accesses, errors)


def validate(low: Any) -> Validation:
    """Translation validation of a `Lowered` kernel (module docstring)."""
    passes = ["trace", *low.passes]
    i = passes.index(PASS)
    name = getattr(getattr(low.kernel, "__wrapped__", None), "__name__", None) or getattr(
        low.kernel, "name", "kernel"
    )
    return validate_graphs(low.graphs[passes[i - 1]], low.final, str(name))
