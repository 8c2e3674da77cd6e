"""BlockNzTensorViews: every pl.NZ tensor becomes the blocked rank-5 view `[B, C/c0, R/16, 16, c0]`
and every load, slice, reshape and accumulator store touching it is rewritten (nz-layout.md §4-§9).

Phase 1 (NZ-5, NZ-6, NZ-11, NZ-28): types. Phase 2 (NZ-12, NZ-13, NZ-30, NZ-31): consumers.
Symbolic trailing offsets are divided whole, `floordiv(offset, d)` of the offset's value, only
after proofs.py has shown them aligned and non-negative (NZ-16..18). Anything that cannot be
addressed exactly is refused with the kernel line. The pass marks the graph
`nz_tensor_views_blocked` and returns at once when it sees the mark (NZ-15).
"""

from __future__ import annotations

import math

from runtime.dtypes import FRACTAL_ROWS

from .. import prims as P
from ..core.dtypes import INDEX, c0_of
from ..core.ir import Atom, Eqn, Graph, Literal, Var
from ..core.types import Layout, Mem, ScalarType, TensorType, Type
from ..errors import CompileError, Source
from . import block_nz_store
from .nz_blocked import blocked_shape
from .nz_gap_guard import check_nz_gm_gap_fits_burst_stride
from .proofs import PROVABLE_FORMS, Prover
from .rewrite import Rewriter

MARK = "nz_tensor_views_blocked"


def _hint(x: Atom, suffix: str) -> str | None:
    """`n0_rblk` for the blocked coordinate of a named offset; unnamed values stay unnamed."""
    return f"{x.hint}{suffix}" if isinstance(x, Var) and x.hint else None


def _idx(dtype_of: Atom) -> ScalarType:
    t = dtype_of.type
    return t if isinstance(t, ScalarType) else ScalarType(INDEX)


class BlockNz(Rewriter):
    """The BlockNzTensorViews rewriter: NZ tensor types become blocked (phase 1), their consumers are
    rewritten or refused (phase 2)."""

    def __init__(self, graph: Graph) -> None:
        super().__init__()
        self.prover = Prover(graph)
        self.def_source: Source | None = graph.attrs.get("_def_source")
        self.src: Source | None = None
        self.param_names: dict[Var, str] = {}
        self.target = "A2A3"  # set by block_nz_tensor_views (NZ-21)

    # ---------------------------------------------------------------- phase 1: blocked types
    def map_type(self, t: Type) -> Type:
        """An NZ tensor type becomes its blocked rank-5 `[B, C/c0, R/16, 16, c0]` view (refused when it has
        none); other types are unchanged."""
        if isinstance(t, TensorType) and t.layout is Layout.NZ:
            return TensorType(blocked_shape(t, "NZ tensor", self.src or self.def_source), t.dtype, Layout.NZ)
        return t

    def graph(self, g: Graph) -> Graph:
        """Rebuild `g`, first refusing NZ parameters without a blocked form by name, at the `def` line (or
        else their first use)."""
        for v in g.params:  # parameters are refused by name, at the `def` line or else their first use
            if isinstance(v.type, TensorType) and v.type.layout is Layout.NZ:
                blocked_shape(v.type, f"parameter '{v.hint}'", self.def_source or first_use(g, v))
        return super().graph(g)

    # ---------------------------------------------------------------- phase 2: consumers
    def rewrite(self, e: Eqn) -> None:
        """Route an equation consuming an NZ tensor to its rewrite; any other consumer is refused (NZ-12)."""
        self.src = e.source
        p = e.primitive
        # the rebuilt operands decide: a whole-tensor flatten's result is ND after this pass (NZ-31)
        nz_in = [
            a for a in self.atoms(e.inputs) if isinstance(a.type, TensorType) and a.type.layout is Layout.NZ
        ]
        if not nz_in or p is P.for_p:
            self.copy(e)
        elif p is P.tile_load_p:
            self.load(e)
        elif p is P.tensor_slice_p:
            self.slice(e)
        elif p is P.tensor_reshape_p:
            self.reshape(e)
        elif p is P.tile_store_p:
            block_nz_store.rewrite_nz_store(self, e)
        else:
            raise CompileError(
                f"'{p.name}' cannot consume an NZ tensor: its coordinates would be passed through unblocked",
                e.source,
                rule="NZ-12",
                help="read NZ tensors with pl.load(..., target_memory=pl.Mem.Mat), slice "
                "only leading axes, or flatten the whole tensor with pl.reshape(t, [N])",
            )

    # -- coordinates
    def name_of(self, x: Atom) -> str:
        """How a value is named in messages: its kernel name, constant or expression."""
        return self.prover.name(x)

    def floordiv(self, x: Atom, d: int, hint: str | None) -> Atom:
        """The blocked coordinate: floordiv of the offset's value, never re-associated (NZ-17)."""
        if isinstance(x, Literal):
            return Literal(int(x.value) // d, x.type)
        assert isinstance(x.type, ScalarType)  # an offset
        (q,) = self.emit(P.floordiv_p, [[x], [Literal(d, x.type)]], {}, [x.type], self.src)
        q.hint = hint
        return q

    def mul_add(self, acc: Atom, x: Atom, k: int) -> Atom:
        """acc + x * k (the exact batch fold of NZ-28: no division, no alignment assumption)."""
        if isinstance(x, Literal) and isinstance(acc, Literal):
            return Literal(int(acc.value) + int(x.value) * k, acc.type)
        prod = x
        if k != 1:
            if isinstance(x, Literal):
                prod = Literal(int(x.value) * k, x.type)
            else:
                assert isinstance(x.type, ScalarType)  # an offset
                (prod,) = self.emit(P.mul_p, [[x], [Literal(k, x.type)]], {}, [x.type], self.src)
        return self.add(acc, prod, self.src)

    def fold_batch(self, logical: TensorType, offs: list[Atom]) -> Atom:
        """The batch coordinate `sum(o_i * stride_i)` of the leading offsets (NZ-28). A single
        unit-stride term is used as it is; a sum is formed in INDEX, so offsets of different
        integer dtypes (an INT32 scalar and a loop variable) fold exactly and type-check."""
        lead = logical.shape[:-2]
        terms = [
            (o, math.prod([x for x in lead[i + 1 :] if isinstance(x, int)]))
            for i, o in enumerate(offs[: len(lead)])
            if not (isinstance(o, Literal) and o.value == 0)
        ]
        if not terms:
            return Literal(0, ScalarType(INDEX))
        if len(terms) == 1 and terms[0][1] == 1:
            return terms[0][0]
        batch: Atom = Literal(0, ScalarType(INDEX))
        for o, stride in terms:
            batch = self.mul_add(batch, self.as_index(o), stride)
        return batch

    def as_index(self, x: Atom) -> Atom:
        """`x` as an INDEX value (a widening conversion: the same value)."""
        if isinstance(x, Literal):
            return Literal(int(x.value), ScalarType(INDEX))
        if x.type == ScalarType(INDEX):
            return x
        (v,) = self.emit(P.convert_p, [[x]], {"dtype": INDEX}, [ScalarType(INDEX)], self.src)
        return v

    def proven_coordinate(self, x: Atom, d: int, axis: str, what: str, proofs: list[str]) -> Atom:
        """floordiv(x, d) once x is proven a non-negative multiple of d (NZ-16..18)."""
        x = self.atom(x)
        if isinstance(x, Literal):
            v = int(x.value)
            if v < 0 or v % d:
                raise CompileError(
                    f"{what}: the {axis} offset {v} must be a non-negative multiple of {d} "
                    f"({'fractal rows' if d == FRACTAL_ROWS else f'c0 = {d}'})",
                    self.src,
                    rule="NZ-12",
                    help=f"align the window to a multiple of {d}",
                )
            return Literal(v // d, x.type)
        ok, f = self.prover.multiple(x, d)
        if f.exhausted:
            raise CompileError(
                f"{what}: the {axis} offset '{self.name_of(x)}' is too large an expression to "
                f"prove aligned and non-negative ({f.nonneg_why})",
                self.src,
                rule="NZ-16",
                help="compute the offset with fewer operations, e.g. `nb * 256` or a loop variable",
            )
        desc = self.prover.describe(x)
        if not ok:
            unit = "16 (a fractal boundary)" if axis == "row" else f"c0 = {d}"
            why = "" if f.nonneg else f" ({f.nonneg_why})"
            raise CompileError(
                f"{what}: the {axis} offset '{desc}' cannot be proven a multiple of {unit}"
                f"{why}; an NZ tensor is never addressed from a guessed coordinate",
                self.src,
                rule="NZ-16",
                help=f"provable forms: {PROVABLE_FORMS}",
            )
        nonneg, fn = self.prover.nonneg(x)
        if not nonneg:
            raise CompileError(
                f"{what}: the {axis} offset '{desc}' cannot be proven non-negative "
                f"({fn.nonneg_why}); a negative NZ offset is clamped to 0 by the partition "
                "view instead of failing, so the load would silently read fractal 0",
                self.src,
                rule="NZ-18",
                help="build offsets from non-negative loop variables and block indices; a "
                "difference never proves a sign",
            )
        proofs.append(f"{d} | {self.name_of(x)} by {desc}; {self.name_of(x)} >= 0 by {fn.nonneg_why}")
        return self.floordiv(x, d, _hint(x, "_rblk" if axis == "row" else "_cblk"))

    # -- tile.load from NZ (NZ-12, NZ-13, NZ-25/26): the weight is read NZ -> NZ into Mat, no fractal
    #    conversion per load (NZ-3)
    def load(self, e: Eqn) -> None:
        """Rewrite a `pl.load` of an NZ window into Mat as a blocked load; refused unless its rows / columns
        are whole fractals and its offsets proven aligned and non-negative (NZ-12, NZ-13, NZ-16)."""
        src_v = e.inputs[0]
        logical = src_v.type
        assert isinstance(logical, TensorType)
        name = self.name_of(src_v)
        what = f"load of NZ tensor '{name}'"
        if e.params["memory"] is not Mem.Mat or not e.params.get("memory_given", True):
            got = (
                "missing" if not e.params.get("memory_given", True) else f"pl.Mem.{e.params['memory'].value}"
            )
            raise CompileError(
                f"{what}: NZ->NZ is the cube-operand path and needs target_memory=pl.Mem.Mat (got {got})",
                e.source,
                rule="NZ-12",
                help="pass target_memory=pl.Mem.Mat, or keep the tensor pl.ND",
            )
        blocked_shape(logical, what, e.source)
        c0 = c0_of(logical.dtype)
        shape = e.params["shape"]
        tr, tc = shape[-2], shape[-1]
        if tr % FRACTAL_ROWS:
            raise CompileError(
                f"{what}: the window rows {tr} must be a multiple of 16",
                e.source,
                rule="NZ-12",
                help="use a row tile that is a multiple of 16",
            )
        if tc % c0:
            raise CompileError(
                f"{what}: the window columns {tc} must be a multiple of c0 = {c0}",
                e.source,
                rule="NZ-12",
                help=f"use a column tile that is a multiple of {c0}",
            )
        if any(s != 1 for s in shape[:-2]):
            raise CompileError(
                f"{what}: the window {list(shape)} spans several batches; an NZ load "
                "reads one batch (leading extent 1)",
                e.source,
                rule="NZ-12",
                help="load one batch index per pl.load",
            )
        offs = list(e.operands("offsets"))
        self.check_in_bounds(e, logical, what)
        proofs: list[str] = []
        row = self.proven_coordinate(offs[-2], FRACTAL_ROWS, "row", what, proofs)
        col = self.proven_coordinate(offs[-1], c0, "column", what, proofs)
        batch = self.fold_batch(logical, self.atoms(offs[:-2]))
        zero = Literal(0, _idx(row))
        sizes = (1, tc // c0, tr // FRACTAL_ROWS, FRACTAL_ROWS, c0)
        valid_atoms, loaded_rows = self.blocked_valid(e, logical, c0, tr, tc, what, proofs)
        r_parent = logical.shape[-2]
        assert isinstance(r_parent, int)
        col_blocks = (tc if not valid_atoms else _static_valid_cols(e, tc)) // c0
        check_nz_gm_gap_fits_burst_stride(name, r_parent, loaded_rows, col_blocks, e.source)
        params = {k: v for k, v in e.params.items() if k != "arity"}
        params.update(shape=sizes, out_type=e.outputs[0].type, blocked=True, proofs=tuple(proofs))
        params.pop("window_2d", None)
        outs = [self.fresh(v) for v in e.outputs]
        self.emit(
            P.tile_load_p,
            [[self.atom(src_v)], [batch, col, row, zero, zero], valid_atoms],
            params,
            outs,
            e.source,
        )

    def check_in_bounds(self, e: Eqn, logical: TensorType, what: str) -> None:
        """A constant window must end inside the tensor: in NZ order the rows past R are the next
        column block's, so an overhanging load reads wrong fractals instead of failing. The extent
        measured is the partition's: the static valid_shape where given (a ragged last tile)."""
        ext = list(e.params["shape"])
        valid = self.atoms(e.operands("valid"))
        for i, v in enumerate(valid):
            if isinstance(v, Literal):
                ext[i] = int(v.value)
        for axis, (o, n, d) in enumerate(zip(self.atoms(e.operands("offsets")), ext, logical.shape)):
            if not isinstance(d, int):
                continue
            if isinstance(o, Literal):
                start, why = int(o.value), f"[{o.value}, {int(o.value) + n})"
            else:  # symbolic: refused when its proven range reaches past the end (a loop or lane bound)
                if axis < len(valid) and not isinstance(valid[axis], Literal):
                    continue  # a dynamic extent (ragged tail): checked at run time by the backend
                # the backend bounds-checks every axis of the blocked view, and the batch slot folds
                # the leading axes: an overhang of an INNER leading axis lands in the next batch, in
                # bounds of the slot, and is never seen at run time - it must be proven here (NZ-28)
                inner_leading = 0 < axis < len(logical.shape) - 2
                f = self.prover.fact(o)
                if f.exhausted or f.hi >= _unbounded(o):
                    if inner_leading:
                        self.unproven_leading(e, o, axis, n, d, what)
                    continue  # no upper bound known: the backend refuses an overhang at run time
                hi = f.hi - f.hi % f.factor if f.factor > 0 and f.hi >= 0 else f.hi  # a multiple of factor
                if hi + n > d:  # interval bounds over-approximate: refuse on the exact maximum only
                    exact = self.prover.exact_max(o)
                    if exact is None:
                        if inner_leading:
                            self.unproven_leading(e, o, axis, n, d, what)
                        continue  # not enumerable: the backend refuses an overhang at run time
                    hi = exact
                start, why = hi, f"up to [{hi}, {hi + n}) ('{self.prover.describe(o)}' reaches {hi})"
            if start + n > d:
                raise CompileError(
                    f"{what}: the window {why} on axis {axis} ends past the tensor's extent "
                    f"{d}; in NZ order the elements past the end belong to another column "
                    "block or batch, so the load would read wrong fractals",
                    e.source,
                    rule="NZ-12",
                    help="keep the window inside the tensor (bound the loop), or give the "
                    "ragged last tile a valid_shape that ends at the tensor's edge",
                )

    def unproven_leading(self, e: Eqn, o: Atom, axis: int, n: int, d: int, what: str) -> None:
        """Refuse a symbolic offset of an inner leading axis whose window cannot be proven to end
        inside the axis (see check_in_bounds)."""
        raise CompileError(
            f"{what}: the offset '{self.prover.describe(o)}' of leading axis {axis} cannot be "
            f"proven to keep the window of {n} inside the axis's extent {d}; the leading axes "
            "fold into one batch slot, so an overhang would silently read the next batch's "
            "fractals",
            e.source,
            rule="NZ-12",
            help=f"bound it: e.g. pl.min(offset, {d - n}), or index this axis with a loop or "
            "lane variable whose range fits",
        )

    def blocked_valid(
        self, e: Eqn, logical: TensorType, c0: int, tr: int, tc: int, what: str, proofs: list[str]
    ) -> tuple[list[Atom], int | None]:
        """valid_shape -> blocked partition sizes; returns (atoms, loaded rows or None if dynamic)."""
        valid = list(e.operands("valid"))
        if not valid:
            return [], tr
        vr, vc = self.atom(valid[-2]), self.atom(valid[-1])
        if not isinstance(vc, Literal):
            raise CompileError(
                f"{what}: valid_shape columns '{self.name_of(vc)}' is dynamic; NZ column "
                "blocks must be static",
                e.source,
                rule="NZ-12",
                help="keep valid columns static and a multiple of c0",
            )
        if int(vc.value) % c0:
            raise CompileError(
                f"{what}: valid_shape columns {vc.value} must be a multiple of c0 = {c0}",
                e.source,
                rule="NZ-12",
                help=f"round the valid columns to a multiple of {c0}",
            )
        one = Literal(1, vc.type)
        if isinstance(vr, Literal):
            if int(vr.value) % FRACTAL_ROWS:
                raise CompileError(
                    f"{what}: valid_shape rows {vr.value} must be a multiple of 16 (a "
                    "partial fractal has no representation)",
                    e.source,
                    rule="NZ-12",
                    help="round the valid rows to a multiple of 16 (pad the tensor's rows)",
                )
            rows_blk: Atom = Literal(int(vr.value) // FRACTAL_ROWS, vr.type)
            loaded: int | None = int(vr.value)
        else:
            ok, _ = self.prover.multiple(vr, FRACTAL_ROWS)
            if not ok:
                raise CompileError(
                    f"{what}: the dynamic valid rows '{self.prover.describe(vr)}' may end "
                    "inside a fractal: it cannot be proven a multiple of 16",
                    e.source,
                    rule="NZ-12",
                    help="make the ragged tail a multiple of 16 rows, e.g. "
                    "pl.min(R - o0, 256) with R and o0 multiples of 16",
                )
            proofs.append(f"16 | {self.name_of(vr)} by {self.prover.describe(vr)}")
            rows_blk = self.floordiv(vr, FRACTAL_ROWS, _hint(vr, "_rblk"))
            loaded = None
        return [
            one,
            Literal(int(vc.value) // c0, vc.type),
            rows_blk,
            Literal(FRACTAL_ROWS, vc.type),
            Literal(c0, vc.type),
        ], loaded

    # -- tensor.slice of NZ (NZ-30)
    def slice(self, e: Eqn) -> None:
        """Rewrite a slice of an NZ tensor's leading axes as a batch-slot slice of the blocked view; a window
        on the `[R, C]` plane is refused (NZ-28, NZ-30)."""
        src_v = e.inputs[0]
        logical = src_v.type
        assert isinstance(logical, TensorType)
        what = f"slice of NZ tensor '{self.name_of(src_v)}'"
        shape, offs = e.params["shape"], list(e.operands("offsets"))
        if e.operands("valid"):
            raise CompileError(
                f"{what}: a valid_shape on an NZ slice narrows its window, which has no blocked form",
                e.source,
                rule="NZ-30",
                help="slicing the leading axes only; give valid_shape to the pl.load",
            )
        plane_full = tuple(shape[-2:]) == tuple(logical.shape[-2:])
        plane_zero = all(isinstance(o, Literal) and o.value == 0 for o in offs[-2:])
        if not (plane_full and plane_zero):
            raise CompileError(
                f"{what}: a window on the [R, C] plane is not contiguous in NZ order; NZ "
                "supports slicing the leading axes only",
                e.source,
                rule="NZ-30",
                help="put the stacked axis first ([LAYERS, R, C]) and slice it, then pl.load "
                "the [R, C] window",
            )
        lead = logical.shape[:-2]
        ext = shape[:-2]
        partial = [i for i, (x, d) in enumerate(zip(ext, lead)) if x != d]
        first_wide = next((i for i, x in enumerate(ext) if x != 1), len(ext))
        if any(ext[i] != lead[i] for i in range(first_wide + 1, len(ext))) and partial:
            raise CompileError(
                f"{what}: window {list(ext)} of leading axes {list(lead)} is not contiguous "
                "once folded into the batch slot; take a window on one leading axis only",
                e.source,
                rule="NZ-28",
                help="index the outer axes, window the innermost",
            )
        batch = self.fold_batch(logical, self.atoms(offs[:-2]))
        out_logical = e.outputs[0].type
        assert isinstance(out_logical, TensorType)
        self.src = e.source
        out_t = self.map_type(out_logical)
        assert isinstance(out_t, TensorType)
        n_batch = math.prod([x for x in ext if isinstance(x, int)])
        sizes = (n_batch, *out_t.shape[1:])
        zero = Literal(0, _idx(batch))
        (o,) = self.emit(
            P.tensor_slice_p,
            [[self.atom(src_v)], [batch, zero, zero, zero, zero], []],
            {"shape": sizes, "drop": ()},
            [out_t],
            e.source,
        )
        o.hint = e.outputs[0].hint
        self.env[e.outputs[0]] = o

    # -- tensor.reshape of NZ (NZ-31)
    def reshape(self, e: Eqn) -> None:
        """Rewrite the whole-tensor flatten of an NZ tensor to `[N]`, an ND tensor of its bytes in NZ order;
        any other reshape is refused (NZ-31)."""
        src_v = e.inputs[0]
        logical = src_v.type
        assert isinstance(logical, TensorType)
        target = tuple(e.params["shape"])
        n = math.prod([x for x in logical.shape if isinstance(x, int)])
        if not (len(target) == 1 and logical.is_static and target[0] == n):
            raise CompileError(
                f"'tensor.reshape' of NZ tensor '{self.name_of(src_v)}' to {list(target)} "
                "reinterprets coordinates the blocked form cannot carry; only a "
                f"whole-tensor 'tensor.reshape' flatten to [{n}] is supported",
                e.source,
                rule="NZ-31",
                help="reshape only to the flat [N] (its result is ND)",
            )
        out_t = TensorType((n,), logical.dtype, Layout.ND)
        (o,) = self.emit(P.tensor_reshape_p, [[self.atom(src_v)]], {"shape": (n,)}, [out_t], e.source)
        o.hint = e.outputs[0].hint
        self.env[e.outputs[0]] = o


def first_use(g: Graph, v: Var) -> Source | None:
    """The source of the first equation reading `v`, looking through the loops that capture it."""
    for e in g.eqns:
        if not any(a is v for a in e.inputs):
            continue
        body = e.params.get("body")
        if isinstance(body, Graph):
            nb, nc, _ = e.params["arity"]
            for p, a in zip(body.params[1 : 1 + nc], e.inputs[nb : nb + nc]):
                if a is v:
                    inner = first_use(body, p)
                    if inner is not None:
                        return inner
        return e.source
    return None


def _unbounded(x: Atom) -> int:
    """The upper bound the prover reports when it knows none: the top of the dtype's range."""
    t = x.type
    bits = t.dtype.bits if isinstance(t, ScalarType) else 64
    return (1 << (bits - 1)) - 1


def _static_valid_cols(e: Eqn, tc: int) -> int:
    v = e.operands("valid")[-1]
    return int(v.value) if isinstance(v, Literal) else tc


def block_nz_tensor_views(g: Graph, target: str = "A2A3") -> Graph:
    """Phase 1 + phase 2 (module docstring); idempotent through the NZ-15 mark. `target` decides
    whether an accumulator store into NZ is supported (NZ-21: A2/A3 only)."""
    if g.attrs.get(MARK):
        return g
    blk = BlockNz(g)
    blk.target = target
    out = blk.run(g)
    out.attrs[MARK] = True
    return out
