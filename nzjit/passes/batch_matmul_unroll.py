"""FlattenTileNdTo2D's batched-matmul lowering: `tile.batch_matmul` becomes one 2-D `tile.matmul`
per batch, as PyPTO's FlattenTileNdTo2D does (pto-isa has no batched TMATMUL).

A rank-3 Mat tile of several batches is not one 2-D tile the cube can window: an ND window
`[B, M, K]` is a 3-D GlobalTensor (ND -> NZ takes 2-D ones, hardware-model.md §3), and a batched
NZ load lays the batches side by side along the columns (TLoadGm2L1Nz2nz, validCol = B*K). So
each operand is re-loaded batch by batch (PyPTO's per-batch route): page `b` of a load of window
`[o0:o0+B, ...]` is the load of `[o0+b:o0+b+1, ...]`, a 2-D `[M, K]` Mat tile (an NZ page is its
batch's own NZ block, NZ-12 / NZ-28), transposed per page when the operand is a
`pl.tile.transpose_view`. A size-1 (or 2-D) operand is one page for every batch.

The product is stored batch by batch. When the store is the product's only use and its operands
exist at the matmul, each batch's load, TMATMUL and TSTORE are emitted together (PyPTO's direct
store fusion), so one batch's pages and Acc tile are live at a time; otherwise the B Acc tiles
live until the store. `tile.batch_matmul_acc` is one TMATMUL_ACC per batch into such a product's
Acc tiles. Any other use of the `[B, M, N]` Acc tile (or of a rank-3 Mat tile), a loop carry
among them, is refused, naming its line.
"""

from __future__ import annotations

from typing import Any

from .. import prims as P
from ..core.dtypes import INDEX
from ..core.ir import Atom, Eqn, Graph, Literal, Var
from ..core.types import Mem, ScalarType, TileType
from ..errors import CompileError
from ..prims.cube_batch import PER_BATCH_HELP
from .rewrite import Rewriter
from .scan import primitives

BATCHED = (P.tile_batch_matmul_p, P.tile_batch_matmul_acc_p)


def batched_mat(t: Any) -> bool:
    """A rank-3 Mat tile of several batches (a batch_matmul operand that is re-loaded per batch)."""
    return isinstance(t, TileType) and t.memory is Mem.Mat and t.rank == 3 and t.shape[0] != 1


def nested_operands(g: Graph) -> set[Var]:
    """The values of `g` that a batch_matmul inside one of its loops or branches reads (through
    the nested body's captures): they would have to be loaded per batch inside that body."""
    out: set[Var] = set()
    for e in g.eqns:
        body = e.params.get("body")
        if not isinstance(body, Graph):
            continue
        inner = _operands(body) | nested_operands(body)
        nb = e.params["arity"][0]
        out.update(a for p, a in zip(body.params[1:], e.inputs[nb:]) if p in inner and isinstance(a, Var))
    return out


def _operands(g: Graph) -> set[Var]:
    """The values read by a batch_matmul of `g` itself, through transposed views."""
    operands: set[Var] = set()
    for e in reversed(g.eqns):
        if e.primitive in BATCHED or (e.primitive is P.tile_transpose_view_p and e.outputs[0] in operands):
            operands.update(a for a in e.inputs if isinstance(a, Var))
    return operands


def has_batch_matmul(g: Graph) -> bool:
    """Does `g` (nested bodies included) run a batched matmul? Without one the unroll has nothing
    to do: no rank-3 Mat tile is pending, no product exists, so it leaves every equation to the pass."""
    return not primitives(g).isdisjoint(BATCHED)


def _lit(v: int) -> Literal:
    return Literal(v, ScalarType(INDEX))


class BatchMatmulUnroll(Rewriter):
    """The part of _Flatten (flatten_2d.py) that unrolls batched matmuls; `load(e)` is the pass's
    own rewrite of a tile.load (its outputs)."""

    def __init__(self) -> None:
        super().__init__()
        self.pending: dict[Var, tuple[Eqn, bool]] = {}  # rank-3 Mat tile -> (its load, transposed?)
        self.products: dict[Var, list[Var]] = {}  # a [B, M, N] product not stored yet -> its batches
        self.fused: dict[Eqn, Var] = {}  # a store already emitted per batch -> its first alias
        self.uses: list[dict[Var, list[Eqn]]] = []
        self.position: list[dict[Eqn, int]] = []
        self.operands: list[set[Var]] = []
        self.nested: list[set[Var]] = []
        self.expanding: set[int] = set()  # ids of the loop bodies whose product carries are expanded
        #: the graph has a batched matmul (`has_batch_matmul`); else `body` and `batched` are the
        #: plain rebuild (the bookkeeping of uses and operands per body costs as much as the pass)
        self.unrolls = True

    def load(self, e: Eqn) -> list[Var]:
        """The pass's rewrite of a tile.load (flatten_2d.py); its outputs."""
        raise NotImplementedError

    def body(self, g: Graph) -> list[Eqn]:
        """The rebuilt body, with its uses, positions and batch_matmul operands known to the unroll;
        a rank-3 tile may not leave it."""
        if not self.unrolls:
            return super().body(g)
        uses: dict[Var, list[Eqn]] = {}
        for e in g.eqns:
            for a in e.inputs:
                if isinstance(a, Var):
                    uses.setdefault(a, []).append(e)
        operands = _operands(g)
        self.nested.append(nested_operands(g) - operands)
        self.uses.append(uses)
        self.position.append({e: i for i, e in enumerate(g.eqns)})
        self.operands.append(operands)
        try:
            eqns = super().body(g)
        finally:
            self.uses.pop()
            self.position.pop()
            self.operands.pop()
            self.nested.pop()
        for a in g.outputs:
            if id(g) in self.expanding and a in self.products:
                continue  # a loop carry of a product: its batches are the loop's carries (carry_products)
            if isinstance(a, Var) and (a in self.pending or a in self.products):
                raise CompileError(
                    f"a rank-3 tile {a.type} of pl.batch_matmul cannot leave its block (a loop carry "
                    "or a result)",
                    self._definition_source(a),
                    help="load, multiply and store the batches inside one block, " + PER_BATCH_HELP,
                )
        return eqns

    def _definition_source(self, v: Var) -> Any:
        d = self.definition(v)
        if d is not None:
            return d.source
        return self.pending[v][0].source if v in self.pending else None

    # ------------------------------------------------------------------------------ dispatch
    def batched(self, e: Eqn) -> bool:
        """Handle `e` if it is part of a batched matmul (True), else leave it to the pass."""
        if not self.unrolls:
            return False
        p = e.primitive
        if p is P.tile_load_p and batched_mat(e.outputs[0].type) and e.outputs[0] in self.nested[-1]:
            raise CompileError(
                f"the rank-3 Mat tile {e.outputs[0].type} loaded here is read by a pl.batch_matmul inside "
                "a staged loop or branch; its batches are loaded where the batch_matmul is",
                e.source,
                help="load it in the same block as its pl.batch_matmul (inside the loop or arm)",
            )
        if p is P.tile_load_p and batched_mat(e.outputs[0].type) and e.outputs[0] in self.operands[-1]:
            self.pending[e.outputs[0]] = (e, False)  # loaded per batch at its matmul
            return True
        if p is P.tile_transpose_view_p and e.inputs[0] in self.pending:
            load, transposed = self.pending[e.inputs[0]]
            self.pending[e.outputs[0]] = (load, not transposed)
            return True
        if p is P.tile_batch_matmul_p or p is P.tile_batch_matmul_acc_p:
            self.unroll(e)
            return True
        if e in self.fused:  # its batches were stored with their matmuls
            self.env[e.outputs[0]] = self.fused.pop(e)
            return True
        if p is P.tile_store_p and e.inputs[0] in self.products:
            accs = self.products[e.inputs[0]]  # still a product: stored again, or accumulated into
            self.store(e, accs, range(len(accs)))
            return True
        if self.carry_products(e):
            return True
        for a in e.inputs:
            if a in self.products and "body" in e.params:
                raise CompileError(
                    f"the {a.type} product of pl.batch_matmul cannot be carried into a staged loop or "
                    "branch: its batches are unrolled at compile time",
                    e.source,
                    help="split K with Python's range (unrolled when traced) and "
                    "pl.tile.batch_matmul_acc, " + PER_BATCH_HELP,
                )
            if a in self.products:
                raise CompileError(
                    f"the {a.type} product of pl.batch_matmul can only be stored (pl.store into a "
                    "[B, M, N] tensor window); this line reads it otherwise",
                    e.source,
                    help="pl.store it, " + PER_BATCH_HELP,
                )
            if a in self.pending:  # any other use: the load as the pass makes it (which refuses it)
                self.load(self.pending[a][0])
        return False

    def carry_products(self, e: Eqn) -> bool:
        """A staged loop (`pl.range`) that captures or carries batched products: each product's B
        Acc tiles become B captures / carries of the loop, and its body sees them as the product
        again (a K loop of pl.tile.batch_matmul_acc). True when `e` was rebuilt so."""
        if e.primitive is not P.for_p or not any(isinstance(a, Var) and a in self.products for a in e.inputs):
            return False
        nb, nc, nk = e.params["arity"]
        body = e.params["body"]
        groups: list[list[Atom]] = [list(self.atoms(e.inputs[:nb])), [], []]
        params = [self.fresh(body.params[0])]
        for gi, lo, hi in ((1, nb, nb + nc), (2, nb + nc, nb + nc + nk)):
            for a, p in zip(e.inputs[lo:hi], body.params[1 + lo - nb : 1 + hi - nb]):
                if isinstance(a, Var) and a in self.products:
                    accs = self.products[a]
                    self.products[p] = [Var(x.type, p.hint) for x in accs]
                    groups[gi] += accs
                    params += self.products[p]
                else:
                    x = self.atom(a)
                    groups[gi].append(x)
                    params.append(self.fresh(p, x.type) if x.type != p.type else self.fresh(p))
        self.expanding.add(id(body))
        try:
            eqns = self.body(body)
        finally:
            self.expanding.discard(id(body))
        outputs: list[Atom] = []
        for o in body.outputs:
            outputs += self.products[o] if isinstance(o, Var) and o in self.products else [self.atom(o)]
        outs: list[Var] = []
        for v, a in zip(e.outputs, e.inputs[nb + nc :]):
            if isinstance(a, Var) and a in self.products:
                self.products[v] = [Var(x.type, v.hint) for x in self.products[a]]
                outs += self.products[v]
            else:
                outs.append(self.fresh(v, self.atom(a).type))
        if len(outputs) != len(outs):  # the body's carry is not the product it was given
            raise CompileError(
                "a staged loop carries a pl.batch_matmul product but its body does not yield one "
                "of the same batches",
                e.source,
                help="accumulate into it with pl.tile.batch_matmul_acc in the loop's body",
            )
        par = dict(e.params, arity=(nb, len(groups[1]), len(groups[2])))
        par["body"] = Graph(params, eqns, outputs, dict(body.attrs), body.name)
        self.out.append(Eqn(e.primitive, tuple(x for grp in groups for x in grp), tuple(outs), par, e.source))
        return True

    # ------------------------------------------------------------------------------ unrolling
    def page(self, x: Atom, b: int, source: Any) -> Atom:
        """Batch `b`'s 2-D page of a batch_matmul operand (a size-1 operand is its only page)."""
        if not isinstance(x, Var) or x not in self.pending:
            return self.atom(x)
        load, transposed = self.pending[x]
        offs = list(load.operands("offsets"))
        offs[0] = self.add(self.atom(offs[0]), _lit(b), source)
        valid = list(load.operands("valid"))
        if valid:  # a fully valid window (the type rule): the page's batch extent is 1
            valid[0] = _lit(1)
        src = load.operands("src")
        t = load.outputs[0].type
        assert isinstance(t, TileType)
        one = TileType((1, *t.shape[1:]), t.dtype, t.memory)
        params = dict(load.params, shape=(1, *load.params["shape"][1:]))
        if params.get("valid_static") is not None:
            params["valid_static"] = (1, *params["valid_static"][1:])
        (pg,) = self.load(
            Eqn(load.primitive, (*src, *offs, *valid), (Var(one, load.outputs[0].hint),), params, load.source)
        )
        if not transposed:
            return pg
        pt = pg.type
        assert isinstance(pt, TileType)
        (vt,) = P.tile_transpose_view_p.type_rule(pt)
        return self.emit(P.tile_transpose_view_p, [[pg]], {}, [vt], source)[0]

    def fusable_store(self, e: Eqn) -> Eqn | None:
        """The store that is the product's only use, when its operands exist at the matmul."""
        users = self.uses[-1].get(e.outputs[0], [])
        if (
            len(users) != 1
            or users[0].primitive is not P.tile_store_p
            or users[0].inputs[0] is not e.outputs[0]
        ):
            return None
        st, here = users[0], self.position[-1][e]
        for a in st.inputs[1:]:
            d = self.definition(a)
            if d is not None and self.position[-1][d] > here:
                return None
        return st

    def unroll(self, e: Eqn) -> None:
        """One tile.matmul per batch on its pages, each stored at once when the store is fusable."""
        out_t = e.outputs[0].type
        assert isinstance(out_t, TileType)
        *prev, a, b = e.inputs  # tile.batch_matmul_acc: its accumulator first
        olds = self.accumulators(e, prev[0]) if prev else None
        st = self.fusable_store(e)
        accs: list[Var] = []
        aliases: list[Var] = []
        for i in range(out_t.shape[0]):
            pa, pb = self.page(a, i, e.source), self.page(b, i, e.source)
            ta, tb = pa.type, pb.type
            assert isinstance(ta, TileType) and isinstance(tb, TileType)
            out = Var(P.tile_matmul_p.type_rule(ta, tb, b_trans=False)[0], e.outputs[0].hint)
            if olds is None:
                (acc,) = self.emit(
                    P.tile_matmul_p, [[pa], [pb]], {"b_trans": False, "out_dtype": None}, [out], e.source
                )
            else:  # TMATMUL_ACC into batch i's accumulator
                (acc,) = self.emit(
                    P.tile_matmul_acc_p, [[olds[i]], [pa], [pb]], {"b_trans": False}, [out], e.source
                )
            accs.append(acc)
            if st is not None:
                aliases += self.store(st, [acc], [i], first=i == 0)
        if st is not None:
            self.fused[st] = aliases[0]
        else:
            self.products[e.outputs[0]] = accs

    def accumulators(self, e: Eqn, acc: Atom) -> list[Var]:
        """The per-batch Acc tiles a batch_matmul_acc accumulates into: an earlier product of this
        block that is not stored yet."""
        if not isinstance(acc, Var) or acc not in self.products:
            raise CompileError(
                f"pl.tile.batch_matmul_acc accumulates into the [B, M, N] product of a pl.batch_matmul "
                f"of the same block; {acc.type} here is not one",
                e.source,
                help="split K with Python's range (unrolled when traced) in one block, " + PER_BATCH_HELP,
            )
        return self.products[acc]

    def store(self, st: Eqn, accs: list[Var], batches: Any, *, first: bool = True) -> list[Var]:
        """TSTORE of each batch's Acc tile into its `[1, M, N]` window of the store's target."""
        offs = list(self.atoms(st.operands("offsets")))
        dst = self.atom(st.inputs[-1])
        if len(offs) < 3:
            raise CompileError(
                f"the [B, M, N] product of pl.batch_matmul is stored into a rank-{len(offs)} tensor "
                f"{dst.type}; it needs a [B, M, N] window",
                st.source,
                help="store into a rank-3 tensor, " + PER_BATCH_HELP,
            )
        outs = []
        for acc, i in zip(accs, batches):
            o = list(offs)
            o[-3] = self.add(o[-3], _lit(i), st.source)
            alias = self.fresh(st.outputs[0]) if first and i == 0 else Var(dst.type)
            outs += self.emit(P.tile_store_p, [[acc], o, [dst]], dict(st.params), [alias], st.source)
        return outs
