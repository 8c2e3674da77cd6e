"""AutoTileMatmulL0: a Mat-resident matmul becomes TEXTRACTs into L0A/L0B and cube `mad`s that fit.

- Operands that do not fit L0A / L0B (64 KiB each) run as a pipelined loop of K chunks: the first
  chunk initialises the accumulator (TMATMUL), the loop accumulates (TMATMUL_ACC).
- An accumulator that does not fit L0C (128 KiB on A2/A3) is split into an M/N grid of sub-tiles,
  each stored to its window of the output, when the matmul's only consumer is that store. An NZ
  store target is split along N only (NZ-22, see block_nz_store.split_nz_store).
- The cube fields m, k, n are at most 4095 (hardware-model.md §6).
- Decode batches: an ND window of M rows (M not a multiple of 16) read only as a matmul's Left
  operand gets a Mat tile of ceil16(M) rows with valid_shape (M, K): the ND -> NZ load writes rows
  0..M-1 and leaves the rest stale (hardware-model.md §3). TEXTRACT moves whole fractals into a Left
  tile whose valid rows stay M, the mad computes m = Left.validRow rows (m == 1 is forced to 16,
  §6) into an Acc tile of ceil16(M) rows - so the L0C pitch ceil16(m) is the tile's - and the store
  writes the M valid rows only. Any other ND window into Mat is still whole fractals or refused.
- K tails: a static valid K runs its last chunk over its valid columns; a dynamic one (a run-time
  valid_shape) is one mad whose k is the Left tile's run-time validCol (`check_dynamic_k`).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any

from runtime.dma import ceil16
from runtime.dtypes import FRACTAL_ROWS
from runtime.memory import CAPACITIES

from .. import prims as P
from ..core.dtypes import INDEX, DType, c0_of
from ..core.ir import Atom, Eqn, Graph, Literal, Var
from ..core.types import Mem, ScalarType, TensorType, TileType
from ..errors import CompileError, Source
from .block_nz_store import check_nz_store_emission, split_nz_store
from .rewrite import Rewriter
from .scan import primitives

MAX_CUBE_EXTENT = 4095


@dataclass(frozen=True)
class MatmulPlan:
    """The chosen L0 chunk sizes of a matmul: `mc` x `nc` accumulator sub-tiles, `kc` columns of K per mad."""

    mc: int
    nc: int
    kc: int


def _chunks(total: int, align: int) -> list[int]:
    """Divisors of `total` that are multiples of `align`, largest first (or total itself)."""
    out = [d for d in range(total, 0, -1) if total % d == 0 and d % align == 0]
    return out or [total]


def plan_matmul(
    m: int,
    k: int,
    n: int,
    esize: int,
    align_k: int,
    cap: dict[str, int],
    *,
    split_m: bool,
    split_n: bool,
    max_n: int | None = None,
) -> MatmulPlan | None:
    """The largest output block (then K chunk) whose Left, Right and Acc tiles fit their spaces
    (and, for a bias matmul, whose N block's bias row fits the bias table: `max_n` columns)."""
    ms = _chunks(m, 16) if split_m else [m]
    ns = _chunks(n, 16) if split_n else [n]
    if max_n is not None and split_n:
        ns = [d for d in ns if d <= max_n]
    best: MatmulPlan | None = None
    for mc in ms:
        for nc in ns:
            if mc * nc * 4 > cap["Acc"] or max(mc, nc) > MAX_CUBE_EXTENT:
                continue
            for kc in _chunks(k, align_k):
                if (
                    mc * kc * esize <= cap["Left"]
                    and kc * nc * esize <= cap["Right"]
                    and kc <= MAX_CUBE_EXTENT
                ):
                    cand = MatmulPlan(mc, nc, kc)
                    if best is None or (mc * nc, kc) > (best.mc * best.nc, best.kc):
                        best = cand
                    break
    return best


def _lit(v: int) -> Literal:
    return Literal(v, ScalarType(INDEX))


def decode_rows(t: Any) -> int | None:
    """The valid rows of a Left operand whose last 16-row fractal is partly filled (a decode batch
    of M tokens, static M not a multiple of 16), else None: TMATMUL computes m = Left.validRow rows
    (hardware-model.md §6), so these rows are carried to the Left and Acc tiles."""
    if not isinstance(t, TileType) or t.fully_valid or len(t.shape) != 2:
        return None
    rows = t.valid_shape[0]  # type: ignore[index]
    return rows if isinstance(rows, int) and rows % 16 and t.shape[0] == ceil16(rows) else None


def _valid(shape: tuple[int, int], rows: int | None) -> tuple[int, int] | None:
    """A 2-D tile's valid_shape when only `rows` of its rows are valid (None: fully valid)."""
    return None if rows is None or rows == shape[0] else (rows, shape[1])


def left_only_values(g: Graph) -> set[Var]:
    """Values read only as the Left operand of tile.matmul / tile.matmul_acc, directly or through
    loop captures (a body parameter stands for the operand that feeds it): the ND windows whose
    Mat tile may be padded to whole fractals (a transposed or Right use would pad K or N)."""
    root: dict[Var, Var] = {}
    roles: defaultdict[Var, set[str]] = defaultdict(set)

    def walk(graph: Graph) -> None:
        for e in graph.eqns:
            body = e.params.get("body")
            if isinstance(body, Graph):
                nb = e.params["arity"][0]
                for p, a in zip(body.params[1:], e.inputs[nb:]):
                    if isinstance(a, Var):
                        root[p] = root.get(a, a)
                walk(body)
                continue
            # a bias row pads like a decode batch's Left operand: one valid row of a 16-row fractal
            left = _row_paddable(e)
            for i, a in enumerate(e.inputs):
                if isinstance(a, Var):
                    roles[root.get(a, a)].add("left" if i in left else "other")
        for a in graph.outputs:  # a carried value is also read by the next trip / after the loop
            if isinstance(a, Var):
                roles[root.get(a, a)].add("other")

    walk(g)
    return {v for v, r in roles.items() if r == {"left"}}


_MATMULS = (P.tile_matmul_p, P.tile_matmul_acc_p, P.tile_matmul_bias_p)


def _row_paddable(e: Eqn) -> tuple[int, ...]:
    """The operands of a matmul whose Mat tile may have fewer rows than whole fractals: the Left
    operand (a decode batch) and a bias row."""
    if e.primitive in (P.tile_matmul_p, P.tile_matmul_acc_p):
        return (len(e.inputs) - 2,)
    if e.primitive is P.tile_matmul_bias_p:
        return (0, 2)
    return ()


def mm_operands(e: Eqn) -> tuple[Atom | None, Atom, Atom, Atom | None]:
    """(accumulator, a, b, bias) of a tile matmul equation (None where it has none)."""
    if e.primitive is P.tile_matmul_bias_p:
        return None, e.inputs[0], e.inputs[1], e.inputs[2]
    if e.primitive is P.tile_matmul_acc_p:
        return e.inputs[0], e.inputs[1], e.inputs[2], None
    return None, e.inputs[0], e.inputs[1], None


class _AutoTile(Rewriter):
    def __init__(self, target: str) -> None:
        super().__init__()
        self.cap = CAPACITIES[target]
        self.deferred: dict[Var, Eqn] = {}
        self.uses: list[Counter[Var]] = []
        self.left_only: set[Var] = set()
        #: the graph has a tile matmul (passes/scan.py): else no operand roles or use counts are
        #: needed - loads and stores are all this pass rewrites
        self.multiplies = True

    def operands(self, e: Eqn) -> tuple[Any, Any, Any, Any]:
        """The rewritten (accumulator, a, b, bias) atoms of a tile matmul (None where it has none)."""
        return tuple(None if x is None else self.atom(x) for x in mm_operands(e))  # type: ignore[return-value]

    def run(self, g: Graph) -> Graph:
        self.multiplies = not primitives(g).isdisjoint(_MATMULS)
        # without a matmul no value is a Left operand: left_only_values would find none
        self.left_only = left_only_values(g) if self.multiplies else set()
        return super().run(g)

    def body(self, g: Graph) -> list[Eqn]:
        if not self.multiplies:
            return super().body(g)
        uses: Counter[Var] = Counter(a for e in g.eqns for a in e.inputs if isinstance(a, Var))
        uses.update(a for a in g.outputs if isinstance(a, Var))
        self.uses.append(uses)
        try:
            return super().body(g)
        finally:
            self.uses.pop()

    # ------------------------------------------------------------------------------ emission
    def extract(
        self,
        src: Atom,
        r0: Atom,
        c0: Atom,
        shape: tuple[int, int],
        mem: Mem,
        source: Source | None,
        valid: tuple[int | None, int | None] | None = None,
    ) -> Var:
        """TEXTRACT of whole fractals; `valid` the part the cube reads (a decode batch's rows, a K or
        N tail; None entries: the source's run-time valid extent past the window's start)."""
        st = src.type
        assert isinstance(st, TileType)
        params: dict[str, Any] = {"shape": shape, "memory": mem}
        if valid is not None and tuple(valid) == tuple(shape):
            valid = None
        if valid is not None:
            params["valid_shape"] = tuple(valid)
        return self.emit(
            P.tile_extract_p,
            [[src], [r0, c0]],
            params,
            [TileType(shape, st.dtype, mem, None if valid is None else tuple(valid))],
            source,
        )[0]

    def block(
        self,
        a: Atom,
        b: Atom,
        acc: Atom | None,
        mi: int,
        ni: int,
        shape: tuple[int, int, int],
        plan: MatmulPlan,
        out_dtype: Any,
        source: Source | None,
        bias: Atom | None = None,
        gemv: bool = False,
    ) -> Var:
        """acc (+)= a[mi:mi+mc, :] @ b[:, ni:ni+nc], K in chunks of plan.kc over the valid K; the last
        chunk of a K tail reads only its valid columns (TMATMUL k = Left.validCol, §6). With a
        `bias` row the first chunk is TMATMUL_BIAS (the bias added once), the rest accumulate.
        `gemv` (pl.tile.gemv): the mads are TGEMV, whose k is the Right tile's valid rows."""
        m, k, n = plan.mc, shape[1], plan.nc
        kc = plan.kc
        at, bt = a.type, b.type
        assert isinstance(at, TileType) and isinstance(bt, TileType)
        total = decode_rows(at)
        rows: int | None = m if total is None else min(m, total - mi)  # this block's valid rows
        if total is None and not at.fully_valid:
            vr = at.valid_shape[-2]  # type: ignore[index]
            rows = None if vr is None else max(0, min(m, vr - mi))
        kv = k if at.fully_valid else at.valid_shape[-1]  # type: ignore[index]
        nv = bt.shape[-1] if bt.fully_valid else bt.valid_shape[-1]  # type: ignore[index]
        cols = None if nv is None else min(n, nv - ni)

        def chunk(src_a: Atom, src_b: Atom, k0: Atom, valid_k: int | None, cur: Atom | None) -> Var:
            # a bias row first: the Left / Right TEXTRACTs stay next to their mad (fused into it)
            row = self.bias_row(bias, ni, n, source) if cur is None and bias is not None else None
            left = self.extract(src_a, _lit(mi), k0, (m, kc), Mem.Left, source, (rows, valid_k))
            # the Right tile's valid rows are the K the cube reads (TGEMV takes k from them)
            right = self.extract(src_b, k0, _lit(ni), (kc, n), Mem.Right, source, (valid_k, cols))
            acc_t = TileType((m, n), out_dtype, Mem.Acc, None if (rows, cols) == (m, n) else (rows, cols))
            flag: dict[str, Any] = {"gemv": True} if gemv else {}
            if valid_k is None:  # a dynamic K: k = the Left tile's run-time validCol (check_dynamic_k)
                flag["dynamic_k"] = True
            if row is not None:
                return self.emit(
                    P.tile_mad_bias_p,
                    [[left], [right], [row]],
                    {"out_dtype": out_dtype, **flag},
                    [acc_t],
                    source,
                )[0]
            if cur is None:
                return self.emit(
                    P.tile_mad_p, [[left], [right]], {"out_dtype": out_dtype, **flag}, [acc_t], source
                )[0]
            return self.emit(P.tile_mad_acc_p, [[cur], [left], [right]], flag, [acc_t], source)[0]

        if kv is None:  # a dynamic K tail: one mad over the run-time valid K
            self.check_dynamic_k(plan, (m, k, n), source)
            return chunk(a, b, _lit(0), None, acc)
        n_chunks = -(-kv // kc)
        tail = kv - (n_chunks - 1) * kc  # valid K of the last chunk
        cur = chunk(a, b, _lit(0), kc if n_chunks > 1 else tail, acc)
        full_end = (n_chunks - 1) * kc if tail < kc else n_chunks * kc
        if full_end > kc:  # the whole chunks after the first: a pipelined loop carrying the accumulator
            acc_t = cur.type
            iv, a_in, b_in, acc_in = Var(ScalarType(INDEX), "kk"), Var(at), Var(bt), Var(acc_t, "acc")
            saved, self.out = self.out, []
            nxt = chunk(a_in, b_in, iv, kc, acc_in)
            body = Graph([iv, a_in, b_in, acc_in], self.out, [nxt], name="k_loop")
            self.out = saved
            (cur,) = self.emit(
                P.for_p,
                [[_lit(kc), _lit(full_end), _lit(kc)], [a, b], [cur]],
                {"kind": "pipeline", "stage": 2, "body": body},
                [acc_t],
                source,
            )
        if n_chunks > 1 and tail < kc:  # the K tail: one more mad over its valid columns
            cur = chunk(a, b, _lit((n_chunks - 1) * kc), tail, cur)
        return cur

    def check_dynamic_k(self, plan: MatmulPlan, shape: tuple[int, int, int], source: Source | None) -> None:
        """A dynamic K tail is one mad whose k is the Left tile's run-time validCol (TMATMUL,
        hardware-model.md §6), its Right rows' cover checked at run time (`dynamic_k`). Several K
        chunks would need a run-time count of mads (a chunk past the valid K has k = 0, which
        TMATMUL refuses), so the static K window must fit one chunk."""
        m, k, n = shape
        if plan.kc < k:
            raise CompileError(
                f"matmul [{m}x{k}] x [{k}x{n}] with a dynamic valid K: the K window of {k} does not fit "
                f"one L0 chunk ({plan.kc} columns fit L0A / L0B), and a chunk past the run-time K "
                "would be a TMATMUL with k = 0",
                source,
                rule="k-tail",
                help=f"loop over K in windows of at most {plan.kc} columns (pl.range), each with "
                f"valid_shape [.., pl.min({plan.kc}, K - k0)], or make the valid K static",
            )

    def bias_row(self, bias: Atom, ni: int, n: int, source: Source | None) -> Atom:
        """The bias table row of output columns [ni, ni + n): TMOV Mat -> Bias of that window, or
        the Bias tile itself when it already is one and covers exactly those columns."""
        t = bias.type
        assert isinstance(t, TileType)
        if t.memory is Mem.Bias:
            if ni or t.shape[-1] != n:
                raise CompileError(
                    f"tile.matmul_bias: the output is split along N ([{ni}, {ni + n}) of "
                    f"{t.shape[-1]} columns), but the bias {t} already sits in the bias table, "
                    "which TMOV cannot window",
                    source,
                    help="pass the bias as the Mat tile it was loaded into",
                )
            return bias
        vc = t.shape[-1] if t.fully_valid else t.valid_shape[-1]  # type: ignore[index]
        valid = (1, None if vc is None else max(0, min(n, vc - ni)))
        return self.extract(bias, _lit(0), _lit(ni), (1, n), Mem.Bias, source, valid)

    def plan(self, e: Eqn, split: bool, split_m: bool = True) -> MatmulPlan:
        _, a, b, bias = self.operands(e)
        at, bt = a.type, b.type
        assert isinstance(at, TileType) and isinstance(bt, TileType)
        m, k = P._squeeze2(at.shape)
        n = P._squeeze2(bt.shape)[1]
        align = max(16, c0_of(at.dtype))
        cap = self.cap
        if bias is not None:  # every N block's bias row must fit the bias table
            if not split and n * 4 > self.cap["Bias"]:
                raise CompileError(
                    f"tile.matmul_bias [{m}x{k}] x [{k}x{n}]: its bias row needs {n * 4} bytes of the bias table "
                    f"(capacity {self.cap['Bias']} B, {self.cap['Bias'] // 4} FP32 / INT32 entries)",
                    e.source,
                    rule="memory plan",
                    help="store the result directly (pl.store) so it can be split along N, or split N yourself",
                )
        p = plan_matmul(
            m,
            k,
            n,
            at.dtype.itemsize,
            align,
            cap,
            split_m=split and split_m,
            split_n=split,
            max_n=self.cap["Bias"] // 4 if bias is not None else None,
        )
        if p is None:
            acc_kib = m * n * 4 // 1024
            full_m = " with the full M" if split and not split_m else ""
            raise CompileError(
                f"matmul [{m}x{k}] x [{k}x{n}]: no tiling{full_m} fits the cube: the accumulator needs "
                f"{acc_kib} KiB of L0C (capacity {self.cap['Acc'] // 1024} KiB), operands need K chunks "
                f"fitting L0A/L0B ({self.cap['Left'] // 1024} KiB each)",
                e.source,
                rule="NZ-22",
                help="make the output tile smaller, or store the result so it can be split",
            )
        return p

    # ------------------------------------------------------------------------------ rewriting
    def rewrite(self, e: Eqn) -> None:
        p = e.primitive
        if p is P.tile_load_p and e.params.get("window_2d"):  # ND -> NZ: the Mat tile the cube reads
            self.nd2nz_load(e)
        elif p in _MATMULS:
            self.matmul(e)
        elif p is P.tile_store_p and e.inputs[0] in self.deferred:
            self.split_store(self.deferred.pop(e.inputs[0]), e)
        elif p is P.tile_store_p and e.params.get("nz_partition") is not None:
            self.nz_store(e)
        else:
            self.copy(e)

    def nd2nz_load(self, e: Eqn) -> None:
        """The Mat tile of an ND window: whole C0 lines always; a Left-only window of M rows, M not a
        multiple of 16, is padded to ceil16(M) rows with valid_shape (M, K) (module docstring)."""
        t = e.outputs[0].type
        assert isinstance(t, TileType)
        # a K tail (valid_shape narrowing only K) pads like a fully valid window: its rows are all valid
        pad = (
            e.outputs[0] in self.left_only
            and len(t.shape) == 2
            and (t.fully_valid or t.valid_shape[0] == t.shape[0])  # type: ignore[index]
        )
        check_mat_fractals("ND -> NZ load into Mat", t.shape, t.dtype, e.source, partial_rows=pad)
        rows = t.shape[0]
        if not pad or not rows % 16:
            self.copy(e)
            return
        padded = padded_mat_tile(t)
        out = self.fresh(e.outputs[0], padded)
        self.out.append(
            Eqn(e.primitive, tuple(self.atoms(e.inputs)), (out,), dict(e.params, out_type=padded), e.source)
        )

    def matmul(self, e: Eqn) -> None:
        out = e.outputs[0]
        ot = out.type
        assert isinstance(ot, TileType)
        m, n = ot.shape
        acc, a, b, bias = self.operands(e)
        assert a is not None and b is not None
        if decode_rows(a.type) is not None:
            m = ceil16(m)  # a decode batch's accumulator is whole 16-row fractals in L0C
        fits = m * n * 4 <= self.cap["Acc"] and max(m, n) <= MAX_CUBE_EXTENT
        if bias is not None:
            fits = fits and n * 4 <= self.cap["Bias"]
        fresh = e.primitive in (P.tile_matmul_p, P.tile_matmul_bias_p)
        if not fits and fresh and self.uses[-1][out] == 1 and self._stored(out):
            self.deferred[out] = e
            return
        plan = self.plan(e, split=False)
        a_t = a.type
        assert isinstance(a_t, TileType)  # a matmul operand is a tile
        res = self.block(
            a,
            b,
            acc,
            0,
            0,
            (m, P._squeeze2(a_t.shape)[1], n),
            plan,
            ot.dtype,
            e.source,
            bias,
            bool(e.params.get("gemv")),
        )
        res.hint = out.hint
        self.env[out] = res

    def _stored(self, v: Var) -> bool:
        return any(e.primitive is P.tile_store_p and e.inputs[0] is v for e in self.scope[-1].values())

    def nz_store(self, e: Eqn) -> None:
        """An NZ store whose accumulator was not split: still checked at emission (NZ-22)."""
        _, g1, g2, g3, g4 = e.params["nz_partition"]
        check_nz_store_emission(g2 * g3, g1 * g4, self.cap["Acc"], e.source)
        self.copy(e)

    def split_store(self, mm: Eqn, st: Eqn) -> None:
        dst = st.inputs[-1]
        dt_ = dst.type
        if isinstance(dt_, TensorType) and st.params.get("nz_partition") is not None:
            split_nz_store(self, mm, st)
            return
        out_t = mm.outputs[0].type
        assert isinstance(out_t, TileType)
        m, n = out_t.shape
        plan = self.plan(mm, split=True)
        _, a, b, bias = self.operands(mm)
        assert a is not None and b is not None
        a_t = a.type
        assert isinstance(a_t, TileType)  # a matmul operand is a tile
        k = P._squeeze2(a_t.shape)[1]
        offs = self.atoms(st.operands("offsets"))
        vr, vc = (m, n) if out_t.fully_valid else out_t.valid_shape  # type: ignore[misc]
        for mi in range(0, m, plan.mc):
            for ni in range(0, n, plan.nc):
                if (vr is not None and mi >= vr) or (vc is not None and ni >= vc):
                    continue  # a block past the valid region: nothing of it is stored
                blk = self.block(
                    a,
                    b,
                    None,
                    mi,
                    ni,
                    (m, k, n),
                    plan,
                    out_t.dtype,
                    mm.source,
                    bias,
                    bool(mm.params.get("gemv")),
                )
                o = list(offs)
                o[-2] = self.add(o[-2], _lit(mi), st.source)
                o[-1] = self.add(o[-1], _lit(ni), st.source)
                (alias,) = self.emit(
                    P.tile_store_p,
                    [[blk], o, [self.atom(dst)]],
                    dict(st.params),
                    [self.fresh(st.outputs[0]) if (mi, ni) == (0, 0) else Var(dst.type)],
                    st.source,
                )


def padded_mat_tile(t: TileType) -> TileType:
    """The Mat tile an ND -> NZ load of an M x K window writes when M is not a multiple of 16 (a
    decode batch): ceil16(M) rows of whole fractals, valid_shape (M, K) (hardware-model.md §3).
    The pass gives a Left-only window this type; the backend runs the earlier stages' M x K
    tile on it too, so `low.run(after=...)` of every stage computes the same rows."""
    rows, cols = t.shape
    vcols = cols if t.fully_valid else t.valid_shape[1]  # type: ignore[index]
    return TileType((ceil16(rows), cols), t.dtype, t.memory, (rows, vcols))


def auto_tile_matmul_l0(g: Graph, target: str = "A2A3") -> Graph:
    """Tile Mat-resident matmuls into L0A/L0B/L0C-sized cube instructions."""
    return _AutoTile(target).run(g)


def check_mat_fractals(
    what: str, shape: tuple[Any, ...], dtype: DType, source: Any, *, partial_rows: bool = False
) -> None:
    """An ND -> NZ Mat tile is whole 16 x c0 fractals (hardware-model.md §1.3, §3). Its columns must
    be whole C0 lines: the load zero-fills a partial line, which no tile shape describes. With
    `partial_rows` (a Left operand: a decode batch of M < 16 tokens) rows need not be whole
    fractals: the tile is padded to ceil16(rows) rows of which the load writes the first `rows`
    (`mat_tile_type`); otherwise they must be."""
    if dtype.is_sub_byte or len(shape) < 2 or not all(isinstance(d, int) for d in shape[-2:]):
        return
    rows, cols, c0 = shape[-2], shape[-1], c0_of(dtype)
    if cols % c0 or (rows % FRACTAL_ROWS and not partial_rows):
        raise CompileError(
            f"{what}: the Mat tile of an ND window {list(shape)} {dtype.name} is not whole "
            f"16 x {c0} fractals: {_needs(partial_rows)} a multiple of c0 = {c0}",
            source,
            help=_help(partial_rows, c0),
        )


def _needs(partial_rows: bool) -> str:
    return "columns must be" if partial_rows else "rows must be a multiple of 16 and columns"


def _help(partial_rows: bool, c0: int) -> str:
    if partial_rows:
        return f"pad the operand's K axis in GM to a multiple of {c0} (zeros) and slice the window to it"
    return (
        "only the Left operand (x in x @ w) may have fewer rows than whole fractals (a decode batch); "
        "pad this operand in GM to whole fractals and slice the result"
    )
