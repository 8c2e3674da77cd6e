"""Random NZ programs as Python source text, each with its numpy reference.

`generate(seed, index)` is a pure function of its arguments: the campaign, the tests and a
reproducer all rebuild the same program from (seed, index). A program is one module text: the
`@pl.kernel`, the inputs (a fixed data seed), the reference (plain numpy on the logical data,
mirroring the kernel's loops with Python loops) and the harness (harness.py).

Families (weights in FAMILIES):

- tensor_mm: tensor-level windows `w[e, n0:n0 + TN, k0:k0 + TK]` consumed by pl.matmul /
  pl.matmul_acc, out[...] = acc into an ND or an FP32 NZ output (an Acc store, NZ-20..24).
- tile_mm: pl.load(..., target_memory=pl.Mem.Mat) of NZ windows, of `w[layer]` / `w[g, e]` /
  `w[a:b]` leading-axis slices, with static or dynamic valid_shape; pl.store of the Acc tile.
- acc_store: the NZ-21 table: Acc stores into FP32 NZ targets, panels, splits, and every refusal.
- flatten: whole-tensor `pl.reshape(w, [N])` (NZ-31) read back element for element in NZ order.
- vec_ew: SPMD lanes combining Vec windows with elementwise ops (own, shared, reversed and common
  windows, lanes reading bytes other lanes store): the lane-batched path against lane order.
- probe: one refusal of the §7 table each (or its accepted neighbour): ranks, dynamic axes,
  sub-byte and 64-bit dtypes, views, plane slices, target memory, the NZ-25 gap guard.

Offsets come from expr.py: spmd lanes, get_block_idx/num, pl.range/pl.pipeline variables with
literal or symbolic starts, products, sums, differences, `%`, `//`, pl.min/pl.max, kernel scalars,
loop-carried values. The spec's prediction (accepted or refused, and by which rule) is recorded
on the program; the classifier reports where the compiler disagrees.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from .expr import Expr, add, floordiv, lit, mod, mul, named, pmax, pmin, pyvar, sub, var
from .gen_branch import branch_lines
from .gen_unary import unary_ops, unary_step
from .gen_vector import fam_vec_alu, fam_vec_mix
from .harness import HARNESS
from .orch_slices import fam_orch_slices  # HOOK (issue 25)

# name -> (numpy dtype text, bits, data low, data high (exclusive))
DTYPES: dict[str, tuple[str, int, int, int]] = {
    "INT8": ("np.int8", 8, -128, 128),
    "UINT8": ("np.uint8", 8, 0, 256),
    "INT16": ("np.int16", 16, -3000, 3000),
    "FP16": ("np.float16", 16, -4, 5),
    "BF16": ("ml_dtypes.bfloat16", 16, -4, 5),
    "FP32": ("np.float32", 32, -4, 5),
    "INT32": ("np.int32", 32, -3000, 3000),
    "FP8E4M3": ("ml_dtypes.float8_e4m3fn", 8, -4, 5),
    "INT4": ("ml_dtypes.int4", 4, -8, 8),
    "UINT4": ("ml_dtypes.uint4", 4, 0, 16),
    "FP4": ("ml_dtypes.float4_e2m1fn", 4, -2, 3),
    "BOOL": ("np.bool_", 1, 0, 2),
    "INT64": ("np.int64", 64, -3000, 3000),
}
MATMUL = ("INT8", "FP16", "BF16", "FP32")
ACC = {"INT8": "INT32", "FP16": "FP32", "BF16": "FP32", "FP32": "FP32"}
SUB_BYTE = ("INT4", "UINT4", "FP4", "BOOL")


def c0_of(dt: str) -> int:
    """Elements per 32-byte C0 line of the dtype `dt`."""
    return 256 // DTYPES[dt][1]


def nbytes(shape: Sequence[int], dt: str) -> int:
    """Bytes of a tensor of `shape` and `dt` (a sub-byte element counts as one byte)."""
    return math.prod(shape) * max(1, DTYPES[dt][1] // 8)


@dataclass(frozen=True)
class Program:
    """One generated program: its module source and what the spec predicts for it."""

    seed: int
    index: int
    family: str
    tags: tuple[str, ...]
    expect: str  # "ok" (spec: accepted and exact), "refuse" (spec: refused), "any" (not predicted)
    expect_rows: frozenset[str]  # when "refuse": the rule-table rows (rules.py) that may fire
    source: str
    partial: bool = False  # part of the program was not predicted (expect_rows may be incomplete)

    @property
    def name(self) -> str:
        """`seed_index`, the name of the program's reproducer."""
        return f"{self.seed}_{self.index}"


@dataclass
class G:
    """Program under construction: kernel lines, reference lines, parameters, predictions."""

    rnd: random.Random
    tags: list[str] = field(default_factory=list)
    kl: list[str] = field(default_factory=list)
    rl: list[str] = field(default_factory=list)
    params: list[tuple[str, str, str, bool]] = field(default_factory=list)  # name, annotation, kind, nz
    outs: dict[str, tuple[tuple[int, ...], str, bool]] = field(default_factory=dict)
    inputs: dict[str, str] = field(default_factory=dict)
    refuse: set[str] = field(default_factory=set)  # rows the spec says must refuse this program
    unknown: bool = False  # the generator cannot predict the outcome
    target: str = "pl.A2A3"
    total_bytes: int = 0
    dyn: dict[str, int] = field(default_factory=dict)  # dynamic dim name -> the argument's extent

    # -- randomness
    def p(self, prob: float) -> bool:
        """True with probability `prob`."""
        return self.rnd.random() < prob

    def choice(self, xs: Sequence[object]) -> object:
        """A uniformly random element of `xs`."""
        return self.rnd.choice(list(xs))

    def wchoice(self, pairs: Sequence[tuple[float, object]]) -> object:
        """A random value of `(weight, value)` pairs, by weight."""
        ws, vs = zip(*pairs)
        return self.rnd.choices(list(vs), weights=list(ws))[0]

    def tag(self, *ts: str) -> None:
        """Record generator tags on the program (used by `--exclude` and the report)."""
        self.tags.extend(ts)

    # -- text
    def emit(self, ind: int, k: str | None, r: str | None = "") -> None:
        """A kernel line and its reference line (r="" : same text; None: kernel only)."""
        if k is not None:
            self.kl.append("    " * ind + k)
        if r is not None:
            self.rl.append("    " * ind + (k if r == "" and k is not None else r))

    # -- parameters
    def tensor(self, name: str, shape: Sequence[object], dt: str, nz: bool = False, kind: str = "in") -> None:
        """Declare a tensor parameter `name` (dims given by name are dynamic): its annotation, its random
        input data or, for `kind="out"`, an Out / InOut output."""
        dims = ", ".join(f'pl.dynamic("{d}")' if isinstance(d, str) else str(d) for d in shape)
        ann = f"pl.Tensor[[{dims}], pl.{dt}{', pl.NZ' if nz else ''}]"
        concrete = tuple(self.dyn[d] if isinstance(d, str) else int(d) for d in shape)  # type: ignore[call-overload]
        if kind == "out":
            inout = self.p(0.15)
            ann = f"pl.InOut[{ann}]" if inout else f"pl.Out[{ann}]"
            if inout:
                self.tag("inout")
            self.outs[name] = (concrete, DTYPES[dt][0], nz)
        else:
            npt, _, lo, hi = DTYPES[dt]
            self.inputs[name] = f"rng.integers({lo}, {hi}, {concrete}).astype({npt})"
            self.rl.insert(0, f"    {name} = d[{name!r}].astype(np.float64)")
        self.total_bytes += nbytes(concrete, dt)
        self.params.append((name, ann, kind, nz))

    def scalar(self, name: str, value: int, dt: str = "INDEX") -> None:
        """Declare a scalar parameter `name` of `dt` passed `value`."""
        self.params.append((name, f"pl.Scalar[pl.{dt}]", "scalar", False))
        self.inputs[name] = str(value)
        self.rl.insert(0, f"    {name} = d[{name!r}]")

    # -- predictions
    def offset(self, e: Expr, d: int, store: bool = False) -> None:
        """Predict the refusal of one trailing offset of an NZ access (NZ-12, NZ-16, NZ-18)."""
        facts = e.proves(d)
        if facts is None:
            self.unknown = True
            return
        mult, nonneg = facts
        pre = "S" if store else ""
        if e.const is not None:
            if not (mult and nonneg):
                self.refuse.add(pre + "L4" if not store else "S7")
            return
        if not mult:
            self.refuse.add("S8" if store else "L6")
        elif not nonneg:
            self.refuse.add("S8" if store else "L7")


# ----------------------------------------------------------------------------------- helpers
def data_dtype(g: G) -> str:
    """A random matmul data dtype (INT8, FP16, BF16 or FP32)."""
    return g.wchoice([(3, "INT8"), (3, "FP16"), (2, "BF16"), (2, "FP32")])  # type: ignore[return-value]


def nz_shape_ok(shape: Sequence[int], dt: str) -> bool:
    """True when the last two axes of `shape` are whole 16 x c0 fractals, as an NZ tensor needs."""
    return shape[-2] % 16 == 0 and shape[-1] % c0_of(dt) == 0


def mat_window(g: G, rows: int, cols: int, dt: str, left: bool) -> None:
    """An ND window loaded into Mat must be whole C0 lines, and whole 16-row fractals unless it is
    the Left operand: a decode batch of M rows gets a ceil16(M)-row tile with valid rows M
    (hardware-model.md §3, §6; passes/auto_tile_matmul.py). Anything else must be refused."""
    if rows % 16 and left and not cols % c0_of(dt):
        g.tag("decode_rows")
    if cols % c0_of(dt) or (rows % 16 and not left):
        g.tag("nd_mat_partial")
        g.refuse.add("X9")  # refused by AutoTileMatmulL0 (passes/auto_tile_matmul.check_mat_fractals)


def check_nz_param(g: G, shape: Sequence[object], dt: str) -> None:
    """The parameter-level NZ refusals the spec predicts (§7 rows, NZ-33)."""
    bits = DTYPES[dt][1]
    if bits < 8 or dt == "BOOL":
        g.refuse.add("X1")
        return
    if bits > 32:
        g.refuse.add("X2")
        return
    if len(shape) < 2:
        g.refuse.add("L11")
        return
    r, c = shape[-2], shape[-1]
    if isinstance(r, str) or isinstance(c, str):
        g.refuse.add("L3")
        return
    if len(shape) > 3 and any(isinstance(x, str) for x in shape[:-2]):
        g.refuse.add("L12")
    if r % 16:  # type: ignore[operator]
        g.refuse.add("L1")
    if c % c0_of(dt):  # type: ignore[operator]
        g.refuse.add("L2")


def offset_form(g: G, t: Expr, T: int, length: int, align: int, name: str) -> tuple[Expr, int]:
    """An offset worth `t * T` (usually) in one of the NZ-16 binding forms; returns the named
    expression and the padding the axis needs so that shifted windows stay in bounds."""
    forms: list[tuple[float, str]] = [
        (6, "mul"), (2, "rmul"), (2, "split"), (2, "min"), (1, "max"), (1, "max_diff"), (1, "fdiv"),
        (1, "reassoc"), (1, "diff"), (1, "misalign"), (0.5, "scalar_add"), (0.5, "scalar_mul"),
        (0.15, "neg"),
    ]
    f = g.wchoice([(w, s) for w, s in forms])
    pad = 0
    if f == "mul":
        e = mul(t, lit(T))
    elif f == "rmul":
        e = mul(lit(T), t)
    elif f == "split":
        e = add(mul(floordiv(t, 2), lit(2 * T)), mul(mod(t, 2), lit(T)))
    elif f == "min":
        e = pmin(mul(t, lit(T)), lit(max(length - T, 0)))
    elif f == "max":
        e = pmax(mul(t, lit(T)), lit(0))
    elif f == "max_diff":
        e = pmax(sub(mul(t, lit(T)), lit(T)), lit(0))
    elif f == "fdiv":
        e = floordiv(mul(t, lit(2 * T)), 2)
    elif f == "reassoc":
        q = g.choice([x for x in (1, 2, 4, 8, 16) if T % x == 0])
        e = mul(mul(t, lit(T // q)), lit(q))  # type: ignore[operator]
    elif f == "diff":
        e = sub(mul(add(t, lit(1)), lit(T)), lit(T))
    elif f == "misalign":
        delta = g.choice([1, 4, 8, 16, 32])
        e = add(mul(t, lit(T)), lit(delta))  # type: ignore[arg-type]
        pad = int(delta)  # type: ignore[arg-type]
    elif f == "scalar_add":
        e = add(mul(t, lit(T)), var("base", 1, False))
        g.tag("scalar_offset")
    elif f == "scalar_mul":
        e = add(mul(var("base", 1, False), lit(align)), mul(t, lit(T)))
        g.tag("scalar_offset")
    else:  # neg: negative for t > 0; the reference refuses
        e = mul(t, lit(-T))
    g.tag(f"off:{f}")
    return e, pad


def _assign(g: G, ind: int, name: str, e: Expr) -> Expr:
    if e.const is not None:
        return e
    g.emit(ind, f"{name} = {e.k}", f"{name} = {e.r}")
    return named(name, e)


@dataclass
class Iter:
    """Where the per-(batch, tile) body goes and its index expressions."""

    ind: int
    batch: list[Expr]  # one index per leading axis iterated
    t: Expr | None  # tile index (None: `direct`, the offset is the loop variable itself)
    direct: Expr | None = None


def iterate(g: G, lead: Sequence[int], nt: int, tile: int, length: int) -> Iter:
    """Loops over every (batch index, N tile): spmd lanes, cores, ranges, unrolled, direct."""
    bi = math.prod(lead)
    total = bi * nt
    s = g.wchoice([(4, "lane"), (1, "block_idx"), (2, "cores"), (2, "range"), (2, "nested"),
                   (1, "python"), (1, "direct")])
    g.tag(f"loop:{s}")
    ind = 2
    if s == "lane":
        g.emit(1, f"for lane in pl.spmd({total}):", f"for lane in range({total}):")
        lane = var("lane")
    elif s == "block_idx":
        g.emit(1, f"for _lane in pl.spmd({total}):", f"for _lane in range({total}):")
        g.emit(2, "lane = pl.get_block_idx()", "lane = _lane")
        lane = var("lane")
    elif s == "cores":
        cores = int(g.choice([1, 2, 3, 4]))  # type: ignore[call-overload]
        step = "pl.get_block_num()" if g.p(0.4) else str(cores)
        g.emit(1, f"for core in pl.spmd({cores}):", f"for core in range({cores}):")
        g.emit(2, f"for lane in pl.range(core, {total}, {step}):", f"for lane in range(core, {total}, {cores}):")
        lane = var("lane")
        ind = 3
    elif s == "range":
        g.emit(1, f"for lane in pl.range({total}):", f"for lane in range({total}):")
        lane = var("lane")
    elif s == "python":
        g.emit(1, f"for lane in range({total}):")
        lane = pyvar("lane")
    elif s == "direct":
        batch, ind = _nested_batch(g, lead)
        start = tile * int(g.choice([0, 0, 1])) if nt > 1 else 0  # type: ignore[call-overload]
        g.emit(ind, f"for n0 in pl.range({start}, {nt * tile}, {tile}):", f"for n0 in range({start}, {nt * tile}, {tile}):")
        return Iter(ind + 1, batch, None, var("n0", math.gcd(start, tile), True))
    else:  # nested: one loop per leading axis, then the tiles
        batch, ind = _nested_batch(g, lead)
        kind = g.choice(["pl.range", "range"])
        g.emit(ind, f"for nb in {kind}({nt}):", f"for nb in range({nt}):")
        t = var("nb") if kind == "pl.range" else pyvar("nb")
        return Iter(ind + 1, batch, t)
    # decompose the lane into (batch..., tile)
    if not lead:
        return Iter(ind, [], lane)
    t = _assign(g, ind, "nb", mod(lane, nt)) if nt > 1 else lit(0)
    b = _assign(g, ind, "bi", floordiv(lane, nt)) if nt > 1 else lane
    batch = []
    rest = b
    for i, _d in enumerate(lead):
        inner = math.prod(lead[i + 1 :])
        batch.append(_assign(g, ind, f"b{i}", floordiv(rest, inner) if inner > 1 else rest))
        rest = _assign(g, ind, f"r{i}", mod(rest, inner)) if inner > 1 else lit(0)
    return Iter(ind, batch, t)


def _nested_batch(g: G, lead: Sequence[int]) -> tuple[list[Expr], int]:
    ind, batch = 1, []
    for i, d in enumerate(lead):
        kind = "pl.spmd" if ind == 1 and g.p(0.3) else g.choice(["pl.range", "range"])
        g.emit(ind, f"for b{i} in {kind}({d}):", f"for b{i} in range({d}):")
        batch.append(var(f"b{i}") if kind != "range" else pyvar(f"b{i}"))
        ind += 1
    return batch, ind


Axis = tuple  # ("i", Expr) index | ("w", Expr, size) window | ("all", extent)


def window(name: str, axes: Sequence[Axis]) -> tuple[str, str]:
    """Kernel text `w[e, n0:n0 + 64, :]` and reference text `win(w, (e, n0, 0), (None, 64, K))`."""
    ks, starts, sizes = [], [], []
    for a in axes:
        if a[0] == "i":
            ks.append(a[1].k)
            starts.append(a[1].r)
            sizes.append("None")
        elif a[0] == "all":
            ks.append(":")
            starts.append("0")
            sizes.append(str(a[1]))
        else:
            e, n = a[1], a[2]
            assert e.atom, e
            ks.append(f"{e.const}:{e.const + n}" if e.const is not None else f"{e.k}:{e.k} + {n}")
            starts.append(e.r)
            sizes.append(str(n))
    return f"{name}[{', '.join(ks)}]", f"win({name}, ({', '.join(starts)},), ({', '.join(sizes)},))"


def load_text(src: str, offs: Sequence[Expr], shape: Sequence[int], mem: str | None = "pl.Mem.Mat",
              valid: Sequence[Expr] | None = None) -> str:
    """The kernel text of `pl.load(src, offsets, shape, ...)` with optional target memory and valid shape."""
    parts = [src, "[" + ", ".join(o.k for o in offs) + "]", "[" + ", ".join(map(str, shape)) + "]"]
    if mem is not None:
        parts.append(f"target_memory={mem}")
    if valid is not None:
        parts.append("valid_shape=[" + ", ".join(v.k for v in valid) + "]")
    return "pl.load(" + ", ".join(parts) + ")"


def load_ref(src: str, offs: Sequence[Expr], shape: Sequence[int]) -> str:
    """The reference text of the same load: `win(src, offsets, shape)` on the logical data."""
    return f"win({src}, ({', '.join(o.r for o in offs)},), ({', '.join(map(str, shape))},))"


def pick(g: G, xs: Sequence[int], ok: Callable[[int], bool]) -> int:
    """A random element of `xs` that satisfies `ok`."""
    good = [x for x in xs if ok(x)]
    return int(g.choice(good))  # type: ignore[call-overload]


def out_target(g: G, acc: str, lead: Sequence[int], m: int, n: int, nz_prob: float) -> tuple[bool, str]:
    """The output: ND in the accumulator dtype, or an FP32 NZ target (an Acc store, NZ-20)."""
    nz = g.p(nz_prob)
    dt = "FP32" if nz else acc
    if nz and acc != "FP32":
        dt = g.choice(["INT32", "FP32"]) if acc == "INT32" else "FP32"  # type: ignore[assignment]
        if dt == "FP32":  # an INT32 accumulator stored into FP32 GM: a dtype conversion
            g.refuse.add("S1b")
        else:
            g.refuse.add("S1b")
    if nz:
        g.tag("acc_store_nz")
        check_nz_param(g, (*lead, m, n), dt)
    g.tensor("out", (*lead, m, n), dt, nz, "out")
    return nz, dt


def store_checks(g: G, rows: int, cols: int, col_off: Expr) -> None:
    """NZ-21 predictions for an Acc tile `rows x cols` stored at column `col_off`."""
    if rows % 16 or cols % 16:
        g.refuse.add("S2")
    g.offset(col_off, 8, store=True)


# ------------------------------------------------------------------------------- tensor_mm
def fam_tensor_mm(g: G) -> None:
    """Family tensor_mm: tensor-level windows consumed by pl.matmul / pl.matmul_acc, stored into an ND or FP32
    NZ output (NZ-20..24)."""
    dt = data_dtype(g)
    c0, acc = c0_of(dt), ACC[dt]
    g.tag(f"dtype:{dt}")
    b_trans = g.p(0.7)
    g.tag("b_trans" if b_trans else "b_plain")
    # M < 16 and 17: decode batches (a Left operand padded to whole 16-row fractals, hw §3, §6)
    m = int(g.wchoice([(0.3, 1), (0.5, 8), (0.3, 4), (0.2, 15), (0.2, 17), (4, 16), (4, 32), (3, 64), (1, 48),  # type: ignore[call-overload]
                       (1, 128)]))
    n_align, k_align = (16, c0) if b_trans else (c0, 16)
    tn = pick(g, (16, 32, 48, 64, 96, 128, 256), lambda v: v % n_align == 0 and m * v * 4 <= 128 << 10)
    tk = pick(g, (8, 16, 32, 64, 128, 256), lambda v: v % k_align == 0 and v % 8 == 0)
    lead: tuple[int, ...] = g.choice([(), (), (int(g.choice([1, 2, 3])),),  # type: ignore[assignment]
                                      (int(g.choice([1, 2])), int(g.choice([1, 2, 3])))])
    nt, kt = int(g.choice([1, 2, 3, 4])), int(g.choice([1, 1, 2, 3]))  # type: ignore[call-overload]
    x_per_batch = bool(lead) and g.p(0.5)
    esize = max(1, DTYPES[dt][1] // 8)
    while math.prod(lead) * nt * tn * kt * tk * esize > (1 << 20) and (nt > 1 or kt > 1):
        nt, kt = max(1, nt - 1), max(1, kt - 1)
    g.tag(f"rank:{len(lead) + 2}")

    # the loops over (batch, N tile) and the N offset
    n_len = nt * tn
    it = iterate(g, lead, nt, tn, n_len)
    ind = it.ind
    pad_n = 0
    if it.t is None:
        n0 = it.direct
        assert n0 is not None
    else:
        e, pad_n = offset_form(g, it.t, tn, n_len, n_align, "n0")
        n0 = _assign(g, ind, "n0", e)
    # K loop (its offset expression is chosen now: a shifted window widens the K axis)
    kstyle = "single" if kt == 1 else g.wchoice([(4, "pipe"), (2, "range"), (1, "python"), (1, "carried")])
    g.tag(f"kloop:{kstyle}")
    pad_k, k_expr = 0, None
    if kstyle in ("range", "python"):
        kb = pyvar("kb") if kstyle == "python" else var("kb")
        k_expr, pad_k = offset_form(g, kb, tk, kt * tk, k_align, "k0")
    big_n, big_k = n_len + pad_n, kt * tk + pad_k
    # mutations of the weight shape: partial fractals / C0 lines
    w_rows_extra = 8 if g.p(0.04) else 0
    w_cols_extra = (c0 // 2) if g.p(0.04) else 0
    if b_trans:
        w_shape = (*lead, big_n + w_rows_extra, big_k + w_cols_extra)
    else:
        w_shape = (*lead, big_k + w_rows_extra, big_n + w_cols_extra)
    x_nz = g.p(0.15)
    x_shape = (*(lead if x_per_batch else ()), m, big_k)
    if not x_nz:
        mat_window(g, m, tk, dt, left=True)
    g.tensor("x", x_shape, dt, x_nz)
    if x_nz:
        g.tag("x_nz")
        check_nz_param(g, x_shape, dt)
        if tk % c0:
            g.refuse.add("X3")
    g.tensor("w", w_shape, dt, True)
    check_nz_param(g, w_shape, dt)
    out_nz, _ = out_target(g, acc, lead, m, big_n, 0.25)
    if "scalar_offset" in g.tags:
        g.scalar("base", 0)

    def operands(k0: Expr) -> tuple[str, str]:
        bidx = [("i", b) for b in it.batch]
        xw = window("x", [*(bidx if x_per_batch else []), ("all", m), ("w", k0, tk)])
        if b_trans:
            ww = window("w", [*bidx, ("w", n0, tn), ("w", k0, tk)])
        else:
            ww = window("w", [*bidx, ("w", k0, tk), ("w", n0, tn)])
        if x_nz:
            g.offset(k0, c0)
        if b_trans:
            g.offset(n0, 16)
            g.offset(k0, c0)
        else:
            g.offset(k0, 16)
            g.offset(n0, c0)
        bt = ", b_trans=True" if b_trans else (", b_trans=False" if g.p(0.3) else "")
        return f"{xw[0]}, {ww[0]}{bt}", f"{xw[1]}, {ww[1]}, {b_trans}"

    k_first = lit(0)
    if kstyle == "carried":
        g.emit(ind, f"kc = pl.cast({tk}, pl.INDEX)", f"kc = {tk}")
    ka, ra = operands(k_first)
    g.emit(ind, f"acc = pl.matmul({ka})", f"acc = mm({ra})")
    if kstyle == "pipe":
        stage = g.choice([1, 2, 2, 3])
        g.emit(ind, f"for k0 in pl.pipeline({tk}, {big_k}, {tk}, stage={stage}):", f"for k0 in range({tk}, {big_k}, {tk}):")
        k0 = var("k0", tk, True)
    elif kstyle in ("range", "python", "carried"):
        kind = "range" if kstyle == "python" else "pl.range"
        g.emit(ind, f"for kb in {kind}(1, {kt}):", f"for kb in range(1, {kt}):")
        if kstyle == "carried":
            k0 = var("kc", 1, False)
        else:
            assert k_expr is not None
            k0 = _assign(g, ind + 1, "k0", k_expr)
    if kstyle != "single":
        ka, ra = operands(k0)  # type: ignore[possibly-undefined]
        g.emit(ind + 1, f"acc = pl.matmul_acc(acc, {ka})", f"acc = acc + mm({ra})")
        if kstyle == "carried":
            g.emit(ind + 1, f"kc = kc + {tk}", f"kc = kc + {tk}")
    # the store
    oaxes = [*[("i", b) for b in it.batch], ("all", m), ("w", n0, tn)]
    ok, orf = window("out", oaxes)
    g.emit(ind, f"{ok} = acc", f"put(out, {orf[len('win(out, '):-1]}, acc)")
    if out_nz:
        store_checks(g, m, tn, n0)


# ---------------------------------------------------------------------------------- tile_mm
def fam_tile_mm(g: G) -> None:
    """Family tile_mm: pl.load of NZ windows into Mat (leading-axis slices, static or dynamic valid_shape),
    pl.store of the Acc tile."""
    dt = data_dtype(g)
    c0, acc = c0_of(dt), ACC[dt]
    g.tag(f"dtype:{dt}")
    m = int(g.wchoice([(4, 16), (4, 32), (3, 64), (1, 48), (1, 128)]))  # type: ignore[call-overload]
    tn = pick(g, (16, 32, 48, 64, 128, 256), lambda v: m * v * 4 <= 128 << 10)
    tk = pick(g, (16, 32, 64, 128, 256), lambda v: v % c0 == 0)
    lead: tuple[int, ...] = g.choice([(), (int(g.choice([1, 2, 3, 4])),), (int(g.choice([1, 2])), int(g.choice([1, 2, 3])))])  # type: ignore[assignment]
    nt, kt = int(g.choice([1, 2, 3, 4])), int(g.choice([1, 1, 2]))  # type: ignore[call-overload]
    g.tag(f"rank:{len(lead) + 2}")
    valid = "none" if kt > 1 else g.wchoice([(6, "none"), (1, "static"), (2, "dynamic"), (0.3, "static_bad"),
                                              (0.3, "dynamic_bad"), (0.3, "cols_dynamic")])
    g.tag(f"valid:{valid}")
    rag = 16 * int(g.choice(range(0, tn // 16))) if valid == "dynamic" and nt > 1 else 0  # type: ignore[call-overload]
    n_real = nt * tn - rag  # the weight's rows; the output is padded to whole tiles
    big_k = kt * tk
    # how the batch index reaches the load
    mode = "direct"
    if lead:
        mode = g.wchoice([(2, "direct"), (3, "index"), (1, "chain"), (1, "scalar") if len(lead) == 1 else (0, "x"),
                          (1, "partial") if len(lead) == 2 else (0, "x")])  # type: ignore[assignment]
    g.tag(f"lead:{mode}")
    layer_val = None
    if mode == "scalar":
        layer_val = int(g.choice(range(lead[0])))  # type: ignore[call-overload]
        if g.p(0.06):  # a runtime index out of range: the reference refuses
            layer_val = int(g.choice([-1, lead[0], lead[0] + 1]))  # type: ignore[call-overload]
            g.tag("runtime_oob_layer")
            g.unknown = True
        it = Iter(1, [var("layer", 1, False)], None)
        g.emit(1, "wl = w[layer]", "wl = win(w, (layer, 0, 0), (None, w.shape[1], w.shape[2]))")
        loop = g.choice(["pl.range", "pl.spmd", "range"])
        g.emit(1, f"for nb in {loop}({nt}):", f"for nb in range({nt}):")
        it = Iter(2, it.batch, pyvar("nb") if loop == "range" else var("nb"))
    else:
        it = iterate(g, lead, nt, tn, nt * tn)
    ind = it.ind
    pad = 0
    if it.t is None:
        n0 = it.direct
        assert n0 is not None
    else:
        e, pad = offset_form(g, it.t, tn, nt * tn, 16, "n0")
        n0 = _assign(g, ind, "n0", e)
    n_real += pad  # a shifted window stays inside the weight and the output
    n_out = nt * tn + pad
    x_nz = g.p(0.15)
    g.tensor("x", (m, big_k), dt, x_nz)
    if x_nz:
        check_nz_param(g, (m, big_k), dt)
        g.tag("x_nz")
    w_shape = (*lead, n_real, big_k)
    g.tensor("w", w_shape, dt, True)
    check_nz_param(g, w_shape, dt)
    out_nz, _ = out_target(g, acc, lead if mode != "scalar" else (), m, n_out, 0.25)
    if "scalar_offset" in g.tags:
        g.scalar("base", 0)
    if mode == "scalar":
        g.scalar("layer", layer_val)  # type: ignore[arg-type]
    # the source the load reads and the leading offsets it still needs
    b = it.batch
    if mode == "index" and len(lead) == 1:
        g.emit(ind, f"wl = w[{b[0].k}]", f"wl = win(w, ({b[0].r}, 0, 0), (None, w.shape[1], w.shape[2]))")
        src, lead_offs = "wl", []
    elif mode == "index":
        g.emit(ind, f"wl = w[{b[0].k}, {b[1].k}]",
               f"wl = win(w, ({b[0].r}, {b[1].r}, 0, 0), (None, None, w.shape[2], w.shape[3]))")
        src, lead_offs = "wl", []
    elif mode == "chain":
        g.emit(ind, f"wl = w{''.join(f'[{x.k}]' for x in b)}",
               f"wl = win(w, ({', '.join(x.r for x in b)}, 0, 0), ({', '.join('None' for _ in b)}, w.shape[-2], w.shape[-1]))")
        src, lead_offs = "wl", []
    elif mode == "partial":
        g.emit(ind, f"wl = w[{b[0].k}]", f"wl = win(w, ({b[0].r}, 0, 0, 0), (None, {lead[1]}, w.shape[2], w.shape[3]))")
        src, lead_offs = "wl", [b[1]]
    elif mode == "scalar":
        src, lead_offs = "wl", []
    else:
        src, lead_offs = "w", list(b)

    def loads(k0: Expr, first: bool) -> tuple[str, str]:
        rows: Expr = lit(tn)
        vexprs = None
        if valid in ("static", "static_bad"):
            v = 16 * int(g.choice(range(1, tn // 16 + 1)))  # type: ignore[call-overload]
            if valid == "static_bad":
                v = max(8, v - 8)
                g.refuse.add("X7")
            rows = lit(v)
            vexprs = [*(lit(1) for _ in lead_offs), rows, lit(tk)]
        elif valid in ("dynamic", "dynamic_bad", "cols_dynamic"):
            cap = tn - 8 if valid == "dynamic_bad" else tn
            # keep the row count a traced value even when n0 is a Python int (unrolled loops)
            traced = "" if n0.const is None and not n0.unk else " + pl.get_block_num() * 0"
            if first:
                g.emit(ind, f"vr = pl.min({n_real} - {n0.k}{traced}, {cap})", f"vr = min({n_real} - {n0.r}, {cap})")
            rows = var("vr")
            cols = lit(tk)
            if valid == "dynamic_bad":
                g.refuse.add("L22")
            if valid == "cols_dynamic":
                if first:
                    g.emit(ind, f"vc = pl.min(pl.get_block_num() * {tk}, {tk})", f"vc = {tk}")
                cols = var("vc")
                g.refuse.add("X6")
            vexprs = [*(lit(1) for _ in lead_offs), rows, cols]
        xt = load_text("x", [lit(0), k0], [m, tk])
        wt = load_text(src, [*lead_offs, n0, k0], [*(1 for _ in lead_offs), tn, tk], valid=vexprs)
        g.offset(n0, 16)
        g.offset(k0, c0)
        if x_nz:
            g.offset(k0, c0)
        xr = load_ref("x", [lit(0), k0], [m, tk])
        if vexprs is None:
            wr = load_ref(src, [*lead_offs, n0, k0], [*(1 for _ in lead_offs), tn, tk])
        else:
            wr = load_ref(src, [*lead_offs, n0, k0], [*(1 for _ in lead_offs), rows.r, tk])  # type: ignore[list-item]
        return f"{xt}, {wt}, b_trans=True", f"{xr}, {wr}, True"

    k, r = loads(lit(0), True)
    g.emit(ind, f"acc = pl.matmul({k})", f"acc = mm({r})")
    olead = [] if mode == "scalar" else list(b)
    offs = [*olead, lit(0), n0]
    sizes = [*("None" for _ in olead), str(m)]
    if kt > 1 and valid == "none" and g.p(0.15):  # the first K step's sums stored, then accumulated further
        g.tag("partial_store")
        g.tensor("part", (*(lead if mode != "scalar" else ()), m, n_out), acc, False, "out")
        g.emit(ind, f"pl.store(acc, [{', '.join(o.k for o in offs)}], part)", None)
        g.emit(ind, None, f"put(part, ({', '.join(o.r for o in offs)},), ({', '.join(sizes)}, {tn}), acc)")
    if kt > 1:
        loop = g.choice(["pl.pipeline", "pl.range"])
        g.emit(ind, f"for k0 in {loop}({tk}, {big_k}, {tk}):", f"for k0 in range({tk}, {big_k}, {tk}):")
        k, r = loads(var("k0", tk, True), False)
        g.emit(ind + 1, f"acc = pl.matmul_acc(acc, {k})", f"acc = acc + mm({r})")
    attrs = ""
    if out_nz and g.p(0.2):
        attrs = ", " + str(g.choice(['st_phase="Final"', "atomic=False", "atomic=True", "pre_relu=True",
                                     'pre_quant="int8"']))
        g.tag(f"attr:{attrs[2:].split('=')[0]}")
        if attrs.endswith(("atomic=True", "pre_relu=True", '"int8"')):
            g.refuse.add("S9")
    g.emit(ind, f"pl.store(acc, [{', '.join(o.k for o in offs)}]{', out' }{attrs})", None)
    if valid == "none":
        g.emit(ind, None, f"put(out, ({', '.join(o.r for o in offs)},), ({', '.join(sizes)}, {tn}), acc)")
    else:  # columns computed from rows past the valid region are left as the hardware leaves them
        g.emit(ind, None, f"put(out, ({', '.join(o.r for o in offs)},), ({', '.join(sizes)}, acc.shape[1]), acc)")
        g.emit(ind, None, f"if acc.shape[1] < {tn}:")
        tail = [*(o.r for o in olead), "0", f"{n0.r} + acc.shape[1]"]
        g.emit(ind + 1, None, f"put(out, ({', '.join(tail)},), ({', '.join(sizes)}, {tn} - acc.shape[1]), np.nan)")
    if out_nz:
        store_checks(g, m, tn, n0)


# -------------------------------------------------------------------------------- acc_store
def fam_acc_store(g: G) -> None:
    """Acc tile -> FP32 NZ GM (NZ-20..24) and each row of the NZ-21 table."""
    dt = g.wchoice([(4, "FP16"), (3, "BF16"), (3, "FP32"), (0.7, "INT8")])
    acc = ACC[dt]  # type: ignore[index]
    g.tag(f"dtype:{dt}")
    big = g.wchoice([(12, "no"), (1, "split"), (0.4, "huge_m")])
    m = int(g.wchoice([(3, 16), (3, 32), (3, 64), (1, 48), (1, 128), (0.3, 8)]))  # type: ignore[call-overload]
    tn = int(g.wchoice([(3, 16), (3, 32), (2, 64), (1, 128), (1, 48), (0.3, 8), (0.3, 24)]))  # type: ignore[call-overload]
    k = int(g.choice([16, 32, 64]))  # type: ignore[call-overload]
    if big == "split":
        m, tn = int(g.choice([64, 128])), int(g.choice([512, 1024]))  # type: ignore[call-overload]
        k = 32
    elif big == "huge_m":
        m, tn, k = 2064, 16, 16
        g.refuse.add("S4")
    g.tag(f"big:{big}")
    nt = int(g.choice([1, 2, 3])) if big == "no" else 1  # type: ignore[call-overload]
    panels = int(g.choice([0, 0, 1, 2, 3]))  # type: ignore[call-overload]
    mut = g.wchoice([(10, "none"), (1, "sub_rows"), (1, "row_off"), (1, "panel_rows"), (1, "vec_src"),
                     (1, "mat_src"), (1, "a5"), (1, "col_shift"), (1, "col_shift4"), (1, "col_diff"),
                     (0.7, "col_const4"), (1, "attr"),
                     (0.5, "fp16_out")])
    if mut in ("vec_src", "mat_src") and m * tn * 4 > 64 << 10:  # keep the source tile within UB / L1
        m, tn, big = 32, 64, "no"
    g.tag(f"mut:{mut}")
    if mut == "panel_rows" and not panels:
        panels = 2
    r_parent = m
    x_rows = m
    if mut == "sub_rows":
        r_parent = 2 * m
        g.refuse.add("S5")
    elif mut == "panel_rows":
        x_rows = 2 * m
        g.refuse.add("S6")
    elif mut == "row_off":
        r_parent = m + 16
        g.refuse.add("S5")
    shift = {"col_shift": 8, "col_shift4": 4, "col_const4": 4}.get(mut, 0)  # type: ignore[call-overload]
    if mut == "col_const4":
        nt = 1
    n_len = nt * tn + (8 if shift else 0)  # a shifted window stays inside; C stays a multiple of 8
    out_dt = "FP16" if mut == "fp16_out" else "FP32"
    if out_dt != "FP32" or acc != "FP32":
        g.refuse.add("S1b")
    if mut in ("vec_src", "mat_src"):
        g.refuse.add("S10")
    if mut == "a5":
        g.target = "pl.A5"
        g.refuse.add("S1")
    lead = (panels,) if panels else ()
    oshape = (*lead, r_parent, n_len)
    g.tensor("x", (x_rows, k), dt)  # type: ignore[arg-type]
    mat_window(g, x_rows, k, dt, left=True)  # type: ignore[arg-type]
    w_nz = g.p(0.5)
    kn = dt == "FP32" and g.p(0.4)  # w [K, N], no b_trans: N is the column axis (c0 = 8 for FP32)
    wshape = (k, n_len) if kn else (n_len, k)
    g.tensor("w", wshape, dt, w_nz)  # type: ignore[arg-type]
    if w_nz:
        check_nz_param(g, wshape, dt)  # type: ignore[arg-type]
        if tn % (8 if kn else 16):
            g.refuse.add("X3")
    else:
        mat_window(g, *((k, tn) if kn else (tn, k)), dt, left=False)  # type: ignore[arg-type]
    g.tensor("out", oshape, out_dt, True, "out")
    check_nz_param(g, oshape, out_dt)
    if mut in ("vec_src", "mat_src"):
        g.tensor("xf", (x_rows, n_len), "FP32")
    # iterate panels x tiles
    ind = 1
    pidx: list[Expr] = []
    if panels:
        kind = g.choice(["pl.range", "range", "pl.spmd"])
        g.emit(1, f"for p in {kind}({panels}):", f"for p in range({panels}):")
        pidx = [var("p") if kind != "range" else pyvar("p")]
        ind = 2
    kind = g.choice(["pl.range", "range"] if panels else ["pl.spmd", "pl.range", "range"])
    g.emit(ind, f"for nb in {kind}({nt}):", f"for nb in range({nt}):")
    t = var("nb") if kind != "range" else pyvar("nb")
    ind += 1
    if mut == "col_const4":  # a literal column offset that is not a multiple of c0 = 8
        t = lit(0)
    e = add(mul(t, lit(tn)), lit(shift)) if shift else mul(t, lit(tn))
    if mut == "col_diff":  # the same value as a difference: divisible, sign never proven (NZ-16)
        e = sub(mul(add(t, lit(1)), lit(tn)), lit(tn))
    n0 = _assign(g, ind, "n0", e)
    g.emit(ind, "xt = " + load_text("x", [lit(0), lit(0)], [x_rows, k]), f"xt = x[0:{x_rows}, 0:{k}]")
    if kn:
        g.tag("w_kn")
        g.emit(ind, "wt = " + load_text("w", [lit(0), n0], [k, tn]), f"wt = {load_ref('w', [lit(0), n0], [k, tn])}")
        g.emit(ind, "acc = pl.matmul(xt, wt)", "acc = mm(xt, wt, False)")
    else:
        g.emit(ind, "wt = " + load_text("w", [n0, lit(0)], [tn, k]), f"wt = {load_ref('w', [n0, lit(0)], [tn, k])}")
        g.emit(ind, "acc = pl.matmul(xt, wt, b_trans=True)", "acc = mm(xt, wt, True)")
    if w_nz:
        g.offset(n0, 8 if kn else 16)
    src = "acc"
    if mut in ("vec_src", "mat_src"):
        mem = "pl.Mem.Vec" if mut == "vec_src" else "pl.Mem.Mat"
        g.emit(ind, "src = " + load_text("xf", [lit(0), n0], [x_rows, tn], mem), f"src = {load_ref('xf', [lit(0), n0], [x_rows, tn])}")
        src = "src"
    row0 = lit(16) if mut == "row_off" else lit(0)
    offs = [*pidx, row0, n0]
    attrs = ""
    if mut == "attr":
        attrs = ", " + str(g.choice(["atomic=True", "pre_relu=True", 'pre_quant="int8"', "relu=True"]))
        g.refuse.add("S9")
    elif g.p(0.2):
        attrs = ", " + str(g.choice(['st_phase="Final"', "atomic=False", "pre_relu=False"]))
    form = "assign" if (not attrs and src == "acc" and mut != "panel_rows" and g.p(0.3)) else "store"
    g.tag(f"store:{form}")
    if form == "assign":
        ok, _ = window("out", [*(("i", p) for p in pidx), ("w", row0, x_rows), ("w", n0, tn)])
        g.emit(ind, f"{ok} = {src}", None)
    else:
        g.emit(ind, f"pl.store({src}, [{', '.join(o.k for o in offs)}], out{attrs})", None)
    g.emit(ind, None, f"put(out, ({', '.join(o.r for o in offs)},), ({'None, ' if pidx else ''}{x_rows}, {tn}), {src})")
    store_checks(g, x_rows, tn, n0)


# ---------------------------------------------------------------------------------- flatten
def fam_flatten(g: G) -> None:
    """`pl.reshape(w, [N])` of a whole NZ tensor is kept and its result is ND (NZ-31): read back
    in NZ byte order. Other reshape targets are refused."""
    dt = g.wchoice([(3, "INT8"), (2, "FP16"), (1, "BF16"), (2, "FP32"), (1, "UINT8"), (1, "INT16"),
                    (1, "INT32"), (0.5, "FP8E4M3")])
    g.tag(f"dtype:{dt}")
    c0 = c0_of(dt)  # type: ignore[arg-type]
    lead: tuple[int, ...] = g.choice([(), (2,), (2, 2)])  # type: ignore[assignment]
    rows, cols = 16 * int(g.choice([1, 2, 4])), c0 * int(g.choice([1, 2, 4]))  # type: ignore[call-overload]
    shape = (*lead, rows, cols)
    n = math.prod(shape)
    g.tensor("w", shape, dt, True)  # type: ignore[arg-type]
    check_nz_param(g, shape, dt)  # type: ignore[arg-type]
    target = g.wchoice([(8, "flat"), (1, "other"), (1, "flat_then_2d")])
    g.tag(f"reshape:{target}")
    length = int(g.choice([x for x in (n, n // 2, n // 4, 256, 512) if 0 < x <= n]))  # type: ignore[call-overload]
    o = 32 * int(g.choice(range(0, (n - length) // 32 + 1)))  # type: ignore[call-overload]
    rank1_out = g.p(0.1)  # a rank-1 output: the store of a [1, L] tile into a rank-1 tensor
    g.tensor("out", (length,) if rank1_out else (1, length), dt, False, "out")  # type: ignore[arg-type]
    if rank1_out:
        g.tag("rank1_store")
    g.rl.append("    flat = nz_pack(d['w']).reshape(-1).astype(np.float64)")
    ooffs = "[0]" if rank1_out else "[0, 0]"
    if target == "flat":
        g.emit(1, f"f = pl.reshape(w, [{n}])", None)
        g.emit(1, f"t = pl.load(f, [{o}], [{length}], target_memory=pl.Mem.Vec)", None)
        g.emit(1, f"pl.store(t, {ooffs}, out)", f"out.reshape(-1)[:] = win(flat, ({o},), ({length},))")
    elif target == "other":
        g.refuse.add("L17")
        g.emit(1, f"f = pl.reshape(w, [{n // 32}, 32])", None)
        g.emit(1, f"t = pl.load(f, [0, 0], [{length // 32}, 32], target_memory=pl.Mem.Vec)", None)
        g.emit(1, f"pl.store(t, [0, 0], pl.reshape(out, [{length // 32}, 32]))", f"out.reshape(-1)[:] = flat[:{length}]")
        g.unknown = True
    else:  # the flattened tensor is ND (NZ-31): reshaping it again is an ordinary ND reshape
        two = 32
        g.emit(1, f"f = pl.reshape(w, [{n}])", None)
        g.emit(1, f"f2 = pl.reshape(f, [{n // two}, {two}])", None)
        g.emit(1, f"t = pl.load(f2, [{o // two}, 0], [{length // two}, {two}], target_memory=pl.Mem.Vec)", None)
        g.emit(1, f"pl.store(t, [0, 0], pl.reshape(out, [{length // two}, {two}]))",
               f"out.reshape(-1)[:] = win(flat, ({o // two * two},), ({length},))")
        g.unknown = True


# ----------------------------------------------------------------------------------- vec_ew
#: How a lane picks its row block: its own, its own with a gap after every 4 lanes (several runs
#: of addresses), shared by two lanes, in reverse lane order, or one block for every lane (for an
#: output: later lanes overwrite earlier ones).
_BLOCKS = {"own": "{l} * {t} + {i}", "gapped": "({l} + {l} // 4) * {t} + {i}", "shared": "({l} // 2) * {t} + {i}",
           "reversed": "({n} - 1 - {l}) * {t} + {i}", "same": "{i}"}
_EW = {"add": "np.add", "sub": "np.subtract", "maximum": "np.maximum", "mul": "np.multiply"}


def fam_vec_ew(g: G) -> None:
    """Family vec_ew: SPMD lanes, with range trips inside, load Vec windows, combine them with
    elementwise ops and store the result, or sum it over the trips in a loop-carried tile. Windows
    are a lane's own (contiguous or in runs), shared, in reverse lane order or the same for every
    lane; some lanes read bytes other lanes store (an InOut output). The lane-batched path must
    give what the lanes give one by one (the reference's loop order)."""
    dt = str(g.wchoice([(3, "FP32"), (2, "FP16"), (2, "INT32"), (1, "INT16")]))
    g.tag(f"dtype:{dt}")
    c0 = c0_of(dt)
    lanes = int(g.choice([2, 3, 4, 8, 17]))  # type: ignore[call-overload]
    tr = int(g.choice([1, 2, 4, 16]))  # type: ignore[call-overload]
    tc = c0 * int(g.choice([1, 2, 4]))  # type: ignore[call-overload]
    cols = tc * int(g.choice([1, 2]))  # type: ignore[call-overload]
    trips = int(g.choice([1, 1, 2, 3]))  # type: ignore[call-overload]
    src_pat = str(g.choice(list(_BLOCKS)))
    dst_pat = str(g.wchoice([(2, "own"), (2, "gapped"), (1, "same"), (1, "reversed")]))
    self_read = g.p(0.15)
    g.tag(f"ew:{src_pat}", f"ew_out:{dst_pat}", *(["ew:self_read"] if self_read else []))
    rows = 2 * lanes * trips * tr  # room for every pattern's blocks
    g.tensor("a", (rows, cols), dt)
    g.tensor("b", (rows, cols), dt)
    g.tensor("out", (rows, cols), dt, False, "out")
    if self_read and "inout" not in g.tags:  # reading the output needs its bytes: an InOut
        name, ann, kind, nz = g.params[-1]
        g.params[-1] = (name, ann.replace("pl.Out[", "pl.InOut[", 1), kind, nz)
        g.tag("inout")
    c_off = tc * int(g.choice(range(cols // tc)))  # type: ignore[call-overload]
    carry = trips > 1 and not self_read and dt != "INT16" and g.p(0.3)  # a Vec tile summed over the trips (int16 could wrap)
    outer = str(g.wchoice([(3, "pl.spmd"), (1, "pl.range")]))  # range trips without carries run batched too
    g.tag(f"ew_loop:{outer}")
    g.emit(1, f"for lane in {outer}({lanes}):", f"for lane in range({lanes}):")
    ind, it = 2, "0"

    def block(pat: str) -> str:
        return "(" + _BLOCKS[pat].format(l="lane", t=trips, i=it, n=lanes) + f") * {tr}"

    if carry:
        g.tag("ew:carry")
        g.emit(2, f"acc = pl.load(b, [{block(dst_pat)}, {c_off}], [{tr}, {tc}], target_memory=pl.Mem.Vec)",
               f"acc = win(b, ({block(dst_pat)}, {c_off}), ({tr}, {tc})).copy()")
        store_at = block(dst_pat)
    if trips > 1:
        g.emit(2, f"for i in pl.range({trips}):", f"for i in range({trips}):")
        ind, it = 3, "i"

    names = ["ta", "tb"]
    for nm, src, pat in (("ta", "a", src_pat), ("tb", "b", str(g.choice(list(_BLOCKS))))):
        g.emit(ind, f"{nm} = pl.load({src}, [{block(pat)}, {c_off}], [{tr}, {tc}], target_memory=pl.Mem.Vec)",
               f"{nm} = win({src}, ({block(pat)}, {c_off}), ({tr}, {tc})).copy()")
    muls = 0 if dt == "INT16" else 1  # products stay exact: one at most, never of int16 data
    # a round trip through another dtype that holds every value (integers up to 9e6 fit float32);
    # its tile must still be whole 32-byte lines
    mids = [m for m in (("FP32",) if dt.startswith("INT") else ("FP32", "FP16", "INT32", "INT16"))
            if m != dt and tc * DTYPES[m][1] // 8 % 32 == 0]
    npt = DTYPES[dt][0]
    # float32 results round like the tile's arithmetic: the float64 result of one op on float32
    # values is exact here, so rounding it once to float32 is the device's rounding
    rnd = f".astype({npt}).astype(np.float64)" if dt == "FP32" else ""
    for step in range(int(g.choice([1, 2, 3]))):  # type: ignore[call-overload]
        exps = ["exp"] if dt == "FP32" and step == 0 else []  # of loaded data only: e**5 keeps all finite
        unary = unary_ops(dt)  # gen_unary.py: pl.neg / pl.abs
        op = str(g.choice([*(o for o in _EW if o != "mul" or muls), *(["cast"] if mids else []), *exps, *unary]))
        muls -= op == "mul"
        x, y = str(g.choice(names)), str(g.choice(names))
        if op == "cast":
            # after an exp, sums can pass int16's range (a float -> int16 overflow is undefined)
            mid = str(g.choice([m for m in mids if m != "INT16" or "ew:exp" not in g.tags] or ["FP32"]))
            g.tag("ew:cast")
            g.emit(ind, f"t{step} = pl.cast(pl.cast({x}, pl.{mid}), pl.{dt})",
                   f"t{step} = {x}.astype({DTYPES[mid][0]}).astype(np.float64)")
        elif op in unary:
            g.tag(f"ew:{op}")
            g.emit(ind, *unary_step(op, f"t{step}", x))
        elif op == "exp":  # the simulator's exp is numpy's on the tile dtype
            g.tag("ew:exp")
            g.emit(ind, f"t{step} = pl.exp({x})", f"t{step} = np.exp({x}.astype({npt})).astype(np.float64)")
        else:
            g.emit(ind, f"t{step} = pl.{op}({x}, {y})", f"t{step} = {_EW[op]}({x}, {y}){rnd}")
        if trips > 1 and g.choice([False, False, True]):  # gen_branch.py: an if/else on the trip index
            g.tag("ew:branch")
            for rel, kline, rline in branch_lines(g.choice, it, trips, f"t{step}", names, rnd):
                g.emit(ind + rel, kline, rline)
        names.append(f"t{step}")
    if self_read:  # `to` enters once, linearly, so values grow at most by one lane's term per lane
        pat = str(g.choice(list(_BLOCKS)))
        g.emit(ind, f"to = pl.load(out, [{block(pat)}, {c_off}], [{tr}, {tc}], target_memory=pl.Mem.Vec)",
               f"to = win(out, ({block(pat)}, {c_off}), ({tr}, {tc})).copy()")
        op = str(g.choice(["maximum"] if dt == "INT16" else ["add", "sub", "maximum"]))
        g.emit(ind, f"ts = pl.{op}(to, {names[-1]})", f"ts = {_EW[op]}(to, {names[-1]}){rnd}")
        names.append("ts")
    if carry:  # the loop-carried sum, stored once after the trips
        g.emit(ind, f"acc = pl.add(acc, {names[-1]})", f"acc = np.add(acc, {names[-1]}){rnd}")
        g.emit(2, f"pl.store(acc, [{store_at}, {c_off}], out)", f"put(out, ({store_at}, {c_off}), ({tr}, {tc}), acc)")
        return
    g.emit(ind, f"pl.store({names[-1]}, [{block(dst_pat)}, {c_off}], out)",
           f"put(out, ({block(dst_pat)}, {c_off}), ({tr}, {tc}), {names[-1]})")


# ------------------------------------------------------------------------------------ probe
def _mm_into_out(g: G, ind: int, tile_k: str, tile_r: str, x_cols: int, rows: int, dt: str) -> None:
    """x[16, x_cols] @ tile^T stored into out[16, rows] (ND)."""
    acc = ACC.get(dt, "FP32")
    g.tensor("x", (16, x_cols), dt)
    g.tensor("out", (16, rows), acc, False, "out")
    g.emit(ind, "xt = " + load_text("x", [lit(0), lit(0)], [16, x_cols]), "xt = x")
    g.emit(ind, f"wt = {tile_k}", f"wt = {tile_r}")
    g.emit(ind, "pl.store(pl.matmul(xt, wt, b_trans=True), [0, 0], out)", f"put(out, (0, 0), (16, {rows}), mm(xt, wt, True))")


def fam_probe(g: G) -> None:
    """One row of the §7 table each (a refusal, or its accepted neighbour)."""
    probe = g.wchoice([(1, "rank1"), (1, "dyn_trailing"), (1, "dyn_lead4"), (2, "dyn_batch3"), (1, "subbyte"),
                       (0.5, "int64"), (1, "view"), (2, "plane_slice"), (2, "lead_window"), (1, "vec_load"),
                       (1, "batch_extent"), (1.2, "gap"), (1, "a5_load"), (0.6, "oob_window"),
                       (1, "nz_lhs"), (1, "const_misaligned"), (0.5, "wrap")])
    g.tag(f"probe:{probe}")
    dt = str(g.choice(MATMUL))
    c0 = c0_of(dt)
    g.tag(f"dtype:{dt}")
    if probe == "rank1":
        n = c0 * 4
        g.tensor("w", (n,), dt, True)
        g.tensor("out", (n,), dt, False, "out")
        g.refuse.add("L11")
        g.emit(1, f"t = pl.load(w, [0], [{n}], target_memory=pl.Mem.Vec)", None)
        g.emit(1, "pl.store(t, [0], out)", f"put(out, (0,), ({n},), w)")
    elif probe == "dyn_trailing":
        which = g.choice(["rows", "cols"])
        g.dyn["D"] = 64 if which == "cols" else 32
        shape = (32, "D") if which == "cols" else ("D", 64)
        g.tensor("w", shape, dt, True)
        g.refuse.add("L3")
        _mm_into_out(g, 1, load_text("w", [lit(0), lit(0)], [16, 64]), "w[0:16, 0:64]", 64, 16, dt)
    elif probe in ("dyn_lead4", "dyn_batch3"):
        g.dyn["B"] = 3
        shape = ("B", 2, 32, 2 * c0) if probe == "dyn_lead4" else ("B", 32, 2 * c0)
        g.tensor("w", shape, dt, True)
        layer = int(g.choice([0, 1, 2]))  # type: ignore[call-overload]
        g.scalar("layer", layer)
        if probe == "dyn_lead4":
            g.refuse.add("L12")
            src_k, src_r = "w[layer, 1]", f"win(w, (layer, 1, 0, 0), (None, None, 32, {2 * c0}))"
        else:
            g.tag("nz29")
            src_k, src_r = "w[layer]", f"win(w, (layer, 0, 0), (None, 32, {2 * c0}))"
        g.emit(1, f"wl = {src_k}", f"wl = {src_r}")
        _mm_into_out(g, 1, load_text("wl", [lit(16), lit(0)], [16, 2 * c0]), f"win(wl, (16, 0), (16, {2 * c0}))", 2 * c0, 16, dt)
    elif probe in ("subbyte", "int64"):
        sdt = str(g.choice(SUB_BYTE)) if probe == "subbyte" else "INT64"
        g.tag(f"dtype:{sdt}")
        g.tensor("w", (32, 128), sdt, True)
        g.refuse.add("X1" if probe == "subbyte" else "X2")
        g.emit(1, "t = pl.load(w, [0, 0], [16, 128], target_memory=pl.Mem.Mat)", None)
        g.emit(1, "pl.store(t, [0, 0], w)", None)
        g.unknown = True
    elif probe == "view":
        g.tensor("w", (32, 2 * c0), dt, True)
        g.tensor("out", (64,), dt, False, "out")
        g.refuse.add("L24")
        if g.p(0.5):
            g.emit(1, f"v = pl.tensor.view(w, [{64 * c0}])", None)
        else:
            g.emit(1, "v = pl.tensor.reinterpret_view(w, pl.INT8)", None)
        g.emit(1, "t = pl.load(v, [0], [64], target_memory=pl.Mem.Vec)", None)
        g.emit(1, "pl.store(t, [0], out)", None)
        g.unknown = True
    elif probe == "plane_slice":
        kind = g.choice(["rows", "cols", "valid", "full", "full_colon"])
        g.tag(f"slice:{kind}")
        g.tensor("w", (64, 2 * c0), dt, True)
        if kind == "rows":
            g.refuse.add("L15")
            sk, sr = "w[16:48, :]", f"win(w, (16, 0), (32, {2 * c0}))"
        elif kind == "cols":
            g.refuse.add("L15")
            sk, sr = f"w[:, {c0}:{2 * c0}]", f"win(w, (0, {c0}), (64, {c0}))"
        elif kind == "valid":
            g.refuse.add("L20")
            sk, sr = f"pl.slice(w, [64, {2 * c0}], [0, 0], valid_shape=[32, {2 * c0}])", "w"
        elif kind == "full":
            sk, sr = f"w[0:64, 0:{2 * c0}]", "w"
        else:
            sk, sr = "w[:, :]", "w"
        g.emit(1, f"ws = {sk}", f"ws = {sr}")
        cols = c0 if kind == "cols" else 2 * c0
        _mm_into_out(g, 1, load_text("ws", [lit(16), lit(0)], [16, cols]), f"win(ws, (16, 0), (16, {cols}))", cols, 16, dt)
    elif probe == "lead_window":
        kind = g.choice(["outer_window", "inner_window", "outer_full", "index_then_window"])
        g.tag(f"lead_window:{kind}")
        g.tensor("w", (2, 3, 32, 2 * c0), dt, True)
        if kind == "outer_window":  # [0:2, 1]: two batches 3 apart, not contiguous once folded
            g.refuse.add("X5")
            sk, sr, lo = "w[0:2, 1]", f"win(w, (0, 1, 0, 0), (2, None, 32, {2 * c0}))", [lit(1)]
        elif kind == "inner_window":
            sk, sr, lo = "w[1, 1:3]", f"win(w, (1, 1, 0, 0), (None, 2, 32, {2 * c0}))", [lit(1)]
        elif kind == "outer_full":
            sk, sr, lo = "w[0:2, :]", "w", [lit(1), lit(2)]
        else:
            sk, sr, lo = "w[1][0:3]", f"win(w, (1, 0, 0, 0), (None, 3, 32, {2 * c0}))", [lit(2)]
        g.emit(1, f"ws = {sk}", f"ws = {sr}")
        _mm_into_out(g, 1, load_text("ws", [*lo, lit(16), lit(0)], [*(1 for _ in lo), 16, 2 * c0]),
                     load_ref("ws", [*lo, lit(16), lit(0)], [*(1 for _ in lo), 16, 2 * c0]), 2 * c0, 16, dt)
    elif probe == "vec_load":
        g.tensor("w", (32, 2 * c0), dt, True)
        g.tensor("out", (16, 2 * c0), dt, False, "out")
        g.refuse.add("L13")
        mem = g.choice(["pl.Mem.Vec", None])
        g.emit(1, "t = " + load_text("w", [lit(16), lit(0)], [16, 2 * c0], mem), None)  # type: ignore[arg-type]
        g.emit(1, "pl.store(t, [0, 0], out)", f"put(out, (0, 0), (16, {2 * c0}), win(w, (16, 0), (16, {2 * c0})))")
    elif probe == "batch_extent":
        g.tensor("w", (3, 32, 2 * c0), dt, True)
        g.tensor("out", (2, 16, 2 * c0), dt, False, "out")
        g.refuse.add("X4")
        g.emit(1, "t = " + load_text("w", [lit(1), lit(16), lit(0)], [2, 16, 2 * c0]), None)
        g.emit(1, "pl.store(t, [0, 0, 0], out)", f"put(out, (0, 0, 0), (2, 16, {2 * c0}), win(w, (1, 16, 0), (2, 16, {2 * c0})))")
        g.unknown = True
    elif probe == "gap":
        _probe_gap(g)
    elif probe == "a5_load":
        g.target = "pl.A5"
        g.tensor("w", (64, 2 * c0), dt, True)
        _mm_into_out(g, 1, load_text("w", [lit(32), lit(0)], [16, 2 * c0]), f"win(w, (32, 0), (16, {2 * c0}))", 2 * c0, 16, dt)
    elif probe == "oob_window":  # the last symbolic window runs past the rows: only a refusal is right
        g.tag("oob")
        nt, tn = int(g.choice([1, 2, 3])), 16  # type: ignore[call-overload]
        kc = c0 if g.p(0.7) else 2 * c0  # one column block: rows past R read column block 1
        g.tensor("w", (nt * tn, 2 * c0), dt, True)
        g.tensor("x", (16, kc), dt)
        g.tensor("out", (16, (nt + 1) * tn), ACC[dt], False, "out")
        g.emit(1, f"for nb in pl.range({nt + 1}):", f"for nb in range({nt + 1}):")
        g.emit(2, f"n0 = nb * {tn}")
        g.emit(2, "xt = " + load_text("x", [lit(0), lit(0)], [16, kc]), "xt = x")
        g.emit(2, "wt = " + load_text("w", [var("n0"), lit(0)], [tn, kc]), f"wt = win(w, (n0, 0), ({tn}, {kc}))")
        g.emit(2, "pl.store(pl.matmul(xt, wt, b_trans=True), [0, n0], out)", f"put(out, (0, n0), (16, {tn}), mm(xt, wt, True))")
        g.unknown = True
    elif probe == "wrap":  # NZ-17: INDEX products wrap at 64 bits; a wrapped product has no sign proof
        kind = g.choice(["negative", "zero"])
        g.tag(f"wrap:{kind}")
        g.tensor("w", (64, 2 * c0), dt, True)
        big = "2**31 * 2**32" if kind == "negative" else "2**32 * 2**32"  # nb = 1: -2**63, or 0
        g.emit(1, "for nb in pl.range(2):", "for nb in range(2):")
        g.emit(2, f"n0 = nb * {big} + 16", f"n0 = wrap64(nb * {big} + 16)")
        if kind == "negative":
            g.refuse.add("L7")
        else:
            g.unknown = True  # always 16: correct when mapped, harmless when refused
        _mm_into_out(g, 2, load_text("w", [var("n0"), lit(0)], [16, 2 * c0]), f"win(w, (n0, 0), (16, {2 * c0}))",
                     2 * c0, 16, dt)
    elif probe == "const_misaligned":  # a literal window offset off the fractal / C0 grid (NZ-12)
        g.tensor("w", (64, 4 * c0), dt, True)
        axis = g.choice(["row", "col", "row_ok", "col_ok"])
        g.tag(f"const:{axis}")
        r0 = {"row": 8, "col": 0, "row_ok": 32, "col_ok": 0}[axis]  # type: ignore[index]
        k0 = {"row": 0, "col": c0 // 2, "row_ok": 0, "col_ok": 2 * c0}[axis]  # type: ignore[index]
        if axis in ("row", "col"):
            g.refuse.add("L4")
        form = g.choice(["load", "slice"])
        if form == "load":
            tk = load_text("w", [lit(r0), lit(k0)], [16, 2 * c0])
        else:
            tk = load_text(f"w[{r0}:{r0 + 16}, {k0}:{k0 + 2 * c0}]", [lit(0), lit(0)], [16, 2 * c0])
            g.refuse.discard("L4")
            g.refuse.add("L15")  # a plane window that stays a slice (pl.load of it) is not contiguous
        _mm_into_out(g, 1, tk, f"win(w, ({r0}, {k0}), (16, {2 * c0}))", 2 * c0, 16, dt)
    else:  # nz_lhs: the NZ tensor as the left operand (also NZ -> NZ into Mat)
        g.tensor("a", (32, 2 * c0), dt, True)
        g.tensor("b", (2 * c0, 48), dt, False)
        mat_window(g, 2 * c0, 48, dt, left=False)
        g.tensor("out", (32, 48), ACC[dt], False, "out")
        g.emit(1, "for mb in pl.range(2):", "for mb in range(2):")
        g.emit(2, "m0 = mb * 16")
        g.emit(2, "acc = pl.matmul(a[m0:m0 + 16, :], b)", f"acc = mm(win(a, (m0, 0), (16, {2 * c0})), b, False)")
        g.emit(2, "out[m0:m0 + 16, :] = acc", "put(out, (m0, 0), (16, 48), acc)")


def _probe_gap(g: G) -> None:
    """NZ-25..27: the 16-bit GM gap between column blocks (R - loaded rows > 65535 is refused)."""
    r = int(g.choice([65536, 65552, 65568]))  # type: ignore[call-overload]
    cols = int(g.choice([32, 64]))  # type: ignore[call-overload]
    tr = int(g.choice([16, 32, 48]))  # type: ignore[call-overload]
    vr = int(g.choice([v for v in (16, 32) if v <= tr])) if g.p(0.3) else tr  # type: ignore[call-overload]
    r0 = 16 * int(g.choice([0, 1, (r - tr) // 16]))  # type: ignore[call-overload]
    g.tag(f"gap:{r - vr}", f"gap_cols:{cols // 32}")
    g.tensor("w", (r, cols), "INT8", True)
    if cols > 32 and r - vr > 65535:
        g.refuse.add("L25")
    valid = [lit(vr), lit(cols)] if vr != tr else None
    g.tensor("x", (16, cols), "INT8")
    g.tensor("out", (16, tr), "INT32", False, "out")
    g.emit(1, "for rb in pl.range(1):", "for rb in range(1):")
    g.emit(2, f"r0 = rb * 16 + {r0}", f"r0 = rb * 16 + {r0}")
    g.emit(2, "xt = " + load_text("x", [lit(0), lit(0)], [16, cols]), "xt = x")
    g.emit(2, "wt = " + load_text("w", [var("r0"), lit(0)], [tr, cols], valid=valid),
           f"wt = win(w, (r0, 0), ({vr}, {cols}))")
    g.emit(2, "pl.store(pl.matmul(xt, wt, b_trans=True), [0, 0], out)", None)
    g.emit(2, None, f"put(out, (0, 0), (16, {vr}), mm(xt, wt, True))")
    if vr < tr:
        g.emit(2, None, f"put(out, (0, {vr}), (16, {tr - vr}), np.nan)")


# --------------------------------------------------------------------------------- assembly
FAMILIES: dict[str, tuple[float, Callable[[G], None]]] = {
    "tensor_mm": (35, fam_tensor_mm),
    "tile_mm": (30, fam_tile_mm),
    "acc_store": (15, fam_acc_store),
    "flatten": (5, fam_flatten),
    "vec_ew": (8, fam_vec_ew),
    "probe": (15, fam_probe),
    "orch_slices": (6, fam_orch_slices),  # HOOK (issue 25): orchestration views, fuzz/orch_slices.py
}

# the vector unit's families (issue 22) live in gen_vector.py, which does not import this module
FAMILIES["vec_alu"] = (6, fam_vec_alu)
FAMILIES["vec_mix"] = (4, fam_vec_mix)


def generate(seed: int, index: int, family: str | None = None, exclude: Sequence[str] = ()) -> Program:
    """Program `index` of campaign `seed` (deterministic). `exclude` drops programs carrying any of
    those tags (e.g. known, reported defects) by drawing again from the same stream."""
    rnd = random.Random(f"nzjit.fuzz:{seed}:{index}")
    for _ in range(1000):
        g = G(rnd)
        fam = family or str(g.wchoice([(w, n) for n, (w, _) in FAMILIES.items()]))
        FAMILIES[fam][1](g)
        if not any(t in exclude for t in g.tags):
            break
    src = getattr(g, "own_source", None) or _source(g, seed, index, fam, rnd)  # HOOK (issue 25): a family
    # with its own module text (orch_slices: an orchestration and its own execute())
    return Program(seed, index, fam, tuple(g.tags), _expect(g), frozenset(g.refuse), src, g.unknown)


def _expect(g: G) -> str:
    if g.refuse:
        return "refuse"
    return "any" if g.unknown else "ok"


def _source(g: G, seed: int, index: int, fam: str, rnd: random.Random) -> str:
    data_seed = rnd.randrange(2**31)
    call = rnd.choices(["numpy", "omit", "device"], weights=[6, 2, 2])[0]
    if call == "omit" and ("inout" in g.tags or not g.outs):
        call = "numpy"  # an InOut parameter is always passed
    params = ", ".join(f"{n}: {a}" for n, a, _, _ in g.params)
    kbody = g.kl or ["    pass"]
    lines = [
        f'"""nzjit fuzz program {seed}_{index} (family {fam}).',
        "",
        "tags: " + " ".join(g.tags),
        "",
        "Standalone: `python this_file.py` runs the kernel on the simulated NPU and asserts the numpy",
        'reference (see the harness at the end)."""',
        "",
        "import ml_dtypes  # noqa: F401",
        "import numpy as np",
        "",
        "import runtime",
        "from nzjit import pl",
        "",
        "",
        f"@pl.kernel(target={g.target})",
        f"def kernel({params}):",
        *kbody,
        "",
        "",
        f"SEED = {data_seed}",
        f"CALL = {call!r}  # numpy: outputs given; omit: Out parameters omitted; device: DeviceTensors",
        "PARAMS = [" + ", ".join(f"({n!r}, {k!r}, {z})" for n, _, k, z in g.params) + "]",
        "OUTS = {" + ", ".join(f"{n!r}: ({s}, {npt}, {z})" for n, (s, npt, z) in g.outs.items()) + "}",
        "",
        "",
        "def inputs():",
        "    rng = np.random.default_rng(SEED)",
        "    return {" + ", ".join(f"{n!r}: {v}" for n, v in g.inputs.items()) + "}",
        "",
        "",
        "def reference(d, outs):",
        *(f"    {n} = outs[{n!r}]" for n in g.outs),
        *g.rl,
        "    return outs",
    ]
    return "\n".join(lines) + "\n" + HARNESS
