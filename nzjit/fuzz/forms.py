"""Offset forms, loops over (batch, tile) and window text shared by the program families: the
NZ-16 binding forms an offset is written in, and the loops (lanes, cores, ranges) around it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .expr import Expr, add, floordiv, lit, mod, mul, named, pmax, pmin, pyvar, sub, var
from .program import G, check_nz_param

#: Offset forms that map two tile indices to one offset (max_diff: tiles 0 and 1 both to 0).
MERGES_TILES = frozenset({"max_diff"})


def offset_form(g: G, t: Expr, T: int, length: int, align: int, name: str) -> tuple[Expr, int, str]:
    """An offset worth `t * T` (usually) in one of the NZ-16 binding forms; returns the named
    expression, the padding the axis needs so that shifted windows stay in bounds, and the form
    (see `MERGES_TILES`)."""
    forms: list[tuple[float, str]] = [
        (6, "mul"),
        (2, "rmul"),
        (2, "split"),
        (2, "min"),
        (1, "max"),
        (1, "max_diff"),
        (1, "fdiv"),
        (1, "reassoc"),
        (1, "diff"),
        (1, "misalign"),
        (0.5, "scalar_add"),
        (0.5, "scalar_mul"),
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
        e = mul(mul(t, lit(T // q)), lit(q))
    elif f == "diff":
        e = sub(mul(add(t, lit(1)), lit(T)), lit(T))
    elif f == "misalign":
        delta = g.choice([1, 4, 8, 16, 32])
        e = add(mul(t, lit(T)), lit(delta))
        pad = int(delta)
    elif f == "scalar_add":
        e = add(mul(t, lit(T)), var("base", 1, False))
        g.tag("scalar_offset")
    elif f == "scalar_mul":
        e = add(mul(var("base", 1, False), lit(align)), mul(t, lit(T)))
        g.tag("scalar_offset")
    else:  # neg: negative for t > 0; the reference refuses
        e = mul(t, lit(-T))
    g.tag(f"off:{f}")
    return e, pad, str(f)


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
    # tiles t and t + 1 of one batch index run on two concurrent pl.spmd lanes (two lanes, or two
    # cores' ranges): an offset form mapping both to one window makes those lanes race (issue 24)
    parallel_tiles: bool = False


def iterate(g: G, lead: Sequence[int], nt: int, tile: int, length: int) -> Iter:
    """Loops over every (batch index, N tile): spmd lanes, cores, ranges, unrolled, direct."""
    bi = math.prod(lead)
    total = bi * nt
    s = g.wchoice(
        [
            (4, "lane"),
            (1, "block_idx"),
            (2, "cores"),
            (2, "range"),
            (2, "nested"),
            (1, "python"),
            (1, "direct"),
        ]
    )
    g.tag(f"loop:{s}")
    ind = 2
    parallel = nt > 1 and s in ("lane", "block_idx")
    if s == "lane":
        g.emit(1, f"for lane in pl.spmd({total}):", f"for lane in lanes({total}):")
        lane = var("lane")
    elif s == "block_idx":
        g.emit(1, f"for _lane in pl.spmd({total}):", f"for _lane in lanes({total}):")
        g.emit(2, "lane = pl.get_block_idx()", "lane = _lane")
        lane = var("lane")
    elif s == "cores":
        cores = int(g.choice([1, 2, 3, 4]))
        parallel = nt > 1 and cores > 1  # lanes l, l + 1 on cores l % cores, (l + 1) % cores
        step = "pl.get_block_num()" if g.p(0.4) else str(cores)
        g.emit(1, f"for core in pl.spmd({cores}):", f"for core in lanes({cores}):")
        g.emit(
            2, f"for lane in pl.range(core, {total}, {step}):", f"for lane in range(core, {total}, {cores}):"
        )
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
        start = tile * int(g.choice([0, 0, 1])) if nt > 1 else 0
        g.emit(
            ind,
            f"for n0 in pl.range({start}, {nt * tile}, {tile}):",
            f"for n0 in range({start}, {nt * tile}, {tile}):",
        )
        return Iter(ind + 1, batch, None, var("n0", math.gcd(start, tile), True))
    else:  # nested: one loop per leading axis, then the tiles
        batch, ind = _nested_batch(g, lead)
        kind = g.choice(["pl.range", "range"])
        g.emit(ind, f"for nb in {kind}({nt}):", f"for nb in range({nt}):")
        t = var("nb") if kind == "pl.range" else pyvar("nb")
        return Iter(ind + 1, batch, t)
    # decompose the lane into (batch..., tile)
    if not lead:
        return Iter(ind, [], lane, parallel_tiles=parallel)
    t = _assign(g, ind, "nb", mod(lane, nt)) if nt > 1 else lit(0)
    b = _assign(g, ind, "bi", floordiv(lane, nt)) if nt > 1 else lane
    batch = []
    rest = b
    for i, _d in enumerate(lead):
        inner = math.prod(lead[i + 1 :])
        batch.append(_assign(g, ind, f"b{i}", floordiv(rest, inner) if inner > 1 else rest))
        rest = _assign(g, ind, f"r{i}", mod(rest, inner)) if inner > 1 else lit(0)
    return Iter(ind, batch, t, parallel_tiles=parallel)


def lanes_share_window(g: G, it: Iter, form: str) -> None:
    """Predict the lane race of an N offset in form `form` over the tiles of `it`: when the form maps
    tiles 0 and 1 to one window and those tiles run on two concurrent lanes, both lanes store that
    window, and the run is refused (row R2, issue 24) - the reference's lanes race too."""
    if form in MERGES_TILES and it.parallel_tiles:
        g.refuse.add("R2")
        g.tag("lanes_share_window")


def _ref_loop(kind: str) -> str:
    """The reference's loop for a kernel loop of `kind`: `lanes` (the harness records what each
    lane of a pl.spmd touches, to find lane races) or `range`."""
    return "lanes" if kind == "pl.spmd" else "range"


def _nested_batch(g: G, lead: Sequence[int]) -> tuple[list[Expr], int]:
    ind, batch = 1, []
    for i, d in enumerate(lead):
        kind = "pl.spmd" if ind == 1 and g.p(0.3) else g.choice(["pl.range", "range"])
        g.emit(ind, f"for b{i} in {kind}({d}):", f"for b{i} in {_ref_loop(kind)}({d}):")
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


def load_text(
    src: str,
    offs: Sequence[Expr],
    shape: Sequence[int],
    mem: str | None = "pl.Mem.Mat",
    valid: Sequence[Expr] | None = None,
) -> str:
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
    return int(g.choice(good))


def out_target(g: G, acc: str, lead: Sequence[int], m: int, n: int, nz_prob: float) -> tuple[bool, str]:
    """The output: ND in the accumulator dtype, or an FP32 NZ target (an Acc store, NZ-20)."""
    nz = g.p(nz_prob)
    dt = "FP32" if nz else acc
    if nz and acc != "FP32":
        dt = g.choice(["INT32", "FP32"]) if acc == "INT32" else "FP32"
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
