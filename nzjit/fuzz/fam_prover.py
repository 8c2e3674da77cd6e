"""The prover family (issue 29): offsets in the forms where a wrong prover rule is silently wrong.

Each program loads 16-row NZ windows `w[n0 : n0 + 16, 0 : TK]` at a row offset in one of the
forms below, multiplies and stores every product into its own 16 columns of an ND output:

- loop_start: `pl.range(S, STOP, STEP)` with unaligned (8, 24, 4) or negative starts, so the
  factor is gcd(start, step) and the start's sign counts (NZ-16 loop row, NZ-18);
- odd_div: `(i * F) // D` and `((i * F) % D) * 16` with odd D (3, 5, 7), so a factor survives a
  floordiv only when D divides it (`(i * 49) // 3` = 49 for i = 3);
- sym_step: a symbolic step from a kernel scalar, `s * 16` (sign unknown, may be negative) or
  `pl.min(pl.max(s, 1), 4) * 16` (proven positive: `pl.max(s, 1) * 16` alone may wrap);
- wrap: INT32 products that wrap, `pl.max((s * F) // D, 0)` with s chosen so that `s * F` wraps
  to a small value (89478486 * 48 = 32 mod 2^32): only gcd(F, 2^32) survives the wrap (NZ-17);
- lanes: `pl.get_block_num() * 16` and `pl.cast(lane, pl.INT32) * 2^28`, whose bounds come from
  the lane count: within INT32 for 8 lanes (then the window overhangs: refused, NZ-12), a wrap
  for 9 or more (sign unknown: refused, NZ-18).

The prediction is the spec's (NZ-16..18 with the wrap of NZ-17), computed here independently
of the prover; the classifier counts each program as equal or refused per rule, never wrong.
"""

from __future__ import annotations

import math

from .expr import lit, var
from .forms import load_text
from .program import ACC, MATMUL, G, c0_of

WRAP32 = "((({v}) + 2**31) % 2**32 - 2**31)"  # INT32 arithmetic in the reference


def _body(g: G, ind: int, n0_k: str, n0_r: str, col_r: str, tk: int) -> None:
    """Load the 16-row window at n0 and store x @ window^T at column `col` of out."""
    g.emit(ind, f"n0 = {n0_k}", f"n0 = {n0_r}")
    g.emit(ind, "xt = " + load_text("x", [lit(0), lit(0)], [16, tk]), "xt = x")
    g.emit(ind, "wt = " + load_text("w", [var("n0"), lit(0)], [16, tk]), f"wt = win(w, (n0, 0), (16, {tk}))")
    g.emit(ind, "pl.store(pl.matmul(xt, wt, b_trans=True), [0, col], out)", None)
    g.emit(ind, None, f"put(out, (0, {col_r}), (16, 16), mm(xt, wt, True))")


def _setup(g: G, rows: int, trips: int) -> tuple[str, int]:
    dt = str(g.choice(MATMUL))
    tk = c0_of(dt) * int(g.choice([1, 2]))
    g.tag(f"dtype:{dt}")
    g.tensor("w", (rows, tk), dt, True)
    g.tensor("x", (16, tk), dt)
    g.tensor("out", (16, 16 * trips), ACC[dt], False, "out")
    return dt, tk


def _predict(g: G, factor: int, nonneg: bool) -> None:
    if factor % 16:
        g.refuse.add("L6")
    elif not nonneg:
        g.refuse.add("L7")


def fam_prover(g: G) -> None:
    """One offset form of the module docstring."""
    kind = str(g.wchoice([(3, "loop_start"), (3, "odd_div"), (2, "sym_step"), (2, "wrap"), (3, "lanes")]))
    g.tag(f"prover:{kind}")
    {"loop_start": _loop_start, "odd_div": _odd_div, "sym_step": _sym_step, "wrap": _wrap, "lanes": _lanes}[
        kind
    ](g)


def _loop_start(g: G) -> None:
    start = int(g.choice([0, 16, 32, 8, 24, 4, -16, -32]))
    step = int(g.choice([16, 32, 48, 8]))
    trips = int(g.choice([1, 2, 3]))
    stop = start + step * (trips - 1) + 1
    g.tag(f"start:{start % 16 and 'unaligned' or 'aligned'}", f"step:{step}")
    if start < 0:
        g.tag("start:negative")
    end = start + step * (trips - 1) + 16 + (16 if g.p(0.3) else 0)
    _, tk = _setup(g, max(16, (end + 15) // 16 * 16), trips)
    g.emit(1, f"for i in pl.range({start}, {stop}, {step}):", f"for i in range({start}, {stop}, {step}):")
    g.emit(2, f"col = (i - {start}) // {step} * 16", "")
    _body(g, 2, "i", "i", "col", tk)
    _predict(g, math.gcd(start, step), start >= 0)


def _odd_div(g: G) -> None:
    d = int(g.choice([3, 5, 7, 2, 4]))
    f = int(g.choice([48, 49, 80, 112, 16 * d, 32 * d, 49 * d]))
    trips = int(g.choice([2, 3, 4]))
    form = str(g.choice(["div", "mod"]))
    g.tag(f"div:{d}", f"divform:{form}")
    if form == "div":
        k_text, top = f"(i * {f}) // {d}", (trips - 1) * f // d
        factor = f // d if f % d == 0 else 1
    else:
        k_text, top = f"((i * {f}) % {d}) * 16", (d - 1) * 16
        factor = 16 * math.gcd(f, d)
    rows = (top + 16 + 15) // 16 * 16
    _, tk = _setup(g, rows, trips)
    g.emit(1, f"for i in pl.range({trips}):", f"for i in range({trips}):")
    g.emit(2, "col = i * 16", "")
    _body(g, 2, k_text, k_text, "col", tk)
    _predict(g, factor, True)


def _sym_step(g: G) -> None:
    s = int(g.choice([1, 2, -1, 0]))
    form = str(g.choice(["raw", "max"]))
    g.tag(f"symstep:{form}", f"symstep_value:{'neg' if s < 0 else s}")
    g.scalar("s", s, "INT32")
    step = 16 * s if form == "raw" else 16 * min(max(s, 1), 4)
    if form == "raw" and step <= 0:  # a zero or negative step: run the loop downwards from 48
        start, stop = 48, -1
    else:
        start, stop = 0, 48
    trips = len(range(start, stop, step)) if step else 1
    _, tk = _setup(g, 64, max(trips, 4))
    st_k = "s * 16" if form == "raw" else "pl.min(pl.max(s, 1), 4) * 16"  # in [16, 64]: no wrap
    g.emit(1, f"st = {st_k}", f"st = {step}")
    g.emit(
        1,
        f"for i in pl.range({start}, {stop}, st):",
        f"for i in (range({start}, {stop}, st) if st else [{start}]):",
    )
    g.emit(2, "col = (i // 16) * 16" if start == 0 else "col = (48 - i) // 16 * 16", "")
    _body(g, 2, "i", "i", "col", tk)
    if form == "raw":
        g.refuse.add("L7")  # the scalar's sign is unknown: so is the loop variable's
        if step == 0:
            g.unknown = True  # a zero step: refused at compile time or at run time
    # pl.min(pl.max(s, 1), 4) * 16: a multiple of 16 in [16, 64], accepted (pl.max(s, 1) * 16 alone
    # may wrap at 32 bits and is rightly refused)


def _wrap(g: G) -> None:
    f, d, s = g.choice(
        [
            (48, 3, 89478486),
            (48, 3, 1),
            (256, 4, (1 << 24) + 1),
            (256, 4, 1),
            (96, 3, 44739243),
            (64, 1, (1 << 26) + 1),
        ]
    )
    g.tag(f"wrap:{f}/{d}")
    g.scalar("s", s, "INT32")
    _, tk = _setup(g, 128, 1)
    k_text = f"pl.max((s * {f}) // {d}, 0)"
    r_text = f"max({WRAP32.format(v=f'int(s) * {f}')} // {d}, 0)"
    g.emit(1, "col = 0", "col = 0")
    _body(g, 1, k_text, r_text, "col", tk)
    survives = math.gcd(f, 1 << 32)  # INT32 s * f may wrap: only gcd(f, 2^32) survives (NZ-17)
    factor = survives // d if survives % d == 0 else 1
    _predict(g, factor, True)
    if not g.refuse:
        g.unknown = True  # unbounded above: the backend checks the window at run time


def _lanes(g: G) -> None:
    lanes = int(g.choice([1, 2, 4, 8, 9, 16]))
    form = str(g.choice(["num", "num_minus", "cast_big", "num_fits"]))
    g.tag(f"lanes:{form}", f"lane_count:{lanes}")
    rows = 16 * lanes + (16 if form == "num_fits" else 0)
    _, tk = _setup(g, max(rows, 16), lanes)
    g.emit(1, f"for lane in pl.spmd({lanes}):", f"for lane in lanes({lanes}):")
    g.emit(2, "col = lane * 16", "")
    if form in ("num", "num_fits"):
        _body(g, 2, "pl.get_block_num() * 16", f"{lanes} * 16", "col", tk)
        if form == "num":
            g.refuse.add("X8")  # [16 * lanes, 16 * lanes + 16) ends past the rows
    elif form == "num_minus":
        _body(g, 2, "(pl.get_block_num() - 1) * 16", f"({lanes} - 1) * 16", "col", tk)
        g.refuse.add("L7")  # a difference: its sign is never proven
    else:
        _body(
            g, 2, "pl.cast(lane, pl.INT32) * 268435456", WRAP32.format(v="int(lane) * 268435456"), "col", tk
        )
        if (lanes - 1) * (1 << 28) >= 1 << 31:
            g.refuse.add("L7")  # the product may wrap at 32 bits: sign unknown
        elif lanes > 1:
            g.refuse.add("X8")  # no wrap, but lane 1 already starts at row 2^28
