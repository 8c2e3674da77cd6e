"""The probe family: one row of the §7 refusal table each, or its accepted neighbour."""

from __future__ import annotations

from .expr import lit, var
from .forms import load_ref, load_text
from .program import ACC, MATMUL, SUB_BYTE, G, c0_of, mat_window


# ------------------------------------------------------------------------------------ probe
def _mm_into_out(g: G, ind: int, tile_k: str, tile_r: str, x_cols: int, rows: int, dt: str) -> None:
    """x[16, x_cols] @ tile^T stored into out[16, rows] (ND)."""
    acc = ACC.get(dt, "FP32")
    g.tensor("x", (16, x_cols), dt)
    g.tensor("out", (16, rows), acc, False, "out")
    g.emit(ind, "xt = " + load_text("x", [lit(0), lit(0)], [16, x_cols]), "xt = x")
    g.emit(ind, f"wt = {tile_k}", f"wt = {tile_r}")
    g.emit(
        ind,
        "pl.store(pl.matmul(xt, wt, b_trans=True), [0, 0], out)",
        f"put(out, (0, 0), (16, {rows}), mm(xt, wt, True))",
    )


def fam_probe(g: G) -> None:
    """One row of the §7 table each (a refusal, or its accepted neighbour)."""
    probe = g.wchoice(
        [
            (1, "rank1"),
            (1, "dyn_trailing"),
            (1, "dyn_lead4"),
            (2, "dyn_batch3"),
            (1, "subbyte"),
            (0.5, "int64"),
            (1, "view"),
            (2, "plane_slice"),
            (2, "lead_window"),
            (1, "vec_load"),
            (1, "batch_extent"),
            (1.2, "gap"),
            (1, "a5_load"),
            (0.6, "oob_window"),
            (1, "nz_lhs"),
            (1, "const_misaligned"),
            (0.5, "wrap"),
        ]
    )
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
        shape: tuple[int | str, ...] = (32, "D") if which == "cols" else ("D", 64)
        g.tensor("w", shape, dt, True)
        g.refuse.add("L3")
        _mm_into_out(g, 1, load_text("w", [lit(0), lit(0)], [16, 64]), "w[0:16, 0:64]", 64, 16, dt)
    elif probe in ("dyn_lead4", "dyn_batch3"):
        g.dyn["B"] = 3
        shape = ("B", 2, 32, 2 * c0) if probe == "dyn_lead4" else ("B", 32, 2 * c0)
        g.tensor("w", shape, dt, True)
        layer = int(g.choice([0, 1, 2]))
        g.scalar("layer", layer)
        if probe == "dyn_lead4":
            g.refuse.add("L12")
            src_k, src_r = "w[layer, 1]", f"win(w, (layer, 1, 0, 0), (None, None, 32, {2 * c0}))"
        else:
            g.tag("nz29")
            src_k, src_r = "w[layer]", f"win(w, (layer, 0, 0), (None, 32, {2 * c0}))"
        g.emit(1, f"wl = {src_k}", f"wl = {src_r}")
        _mm_into_out(
            g,
            1,
            load_text("wl", [lit(16), lit(0)], [16, 2 * c0]),
            f"win(wl, (16, 0), (16, {2 * c0}))",
            2 * c0,
            16,
            dt,
        )
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
        _mm_into_out(
            g,
            1,
            load_text("ws", [lit(16), lit(0)], [16, cols]),
            f"win(ws, (16, 0), (16, {cols}))",
            cols,
            16,
            dt,
        )
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
        _mm_into_out(
            g,
            1,
            load_text("ws", [*lo, lit(16), lit(0)], [*(1 for _ in lo), 16, 2 * c0]),
            load_ref("ws", [*lo, lit(16), lit(0)], [*(1 for _ in lo), 16, 2 * c0]),
            2 * c0,
            16,
            dt,
        )
    elif probe == "vec_load":
        g.tensor("w", (32, 2 * c0), dt, True)
        g.tensor("out", (16, 2 * c0), dt, False, "out")
        g.refuse.add("L13")
        mem = g.choice(["pl.Mem.Vec", None])
        g.emit(1, "t = " + load_text("w", [lit(16), lit(0)], [16, 2 * c0], mem), None)
        g.emit(
            1,
            "pl.store(t, [0, 0], out)",
            f"put(out, (0, 0), (16, {2 * c0}), win(w, (16, 0), (16, {2 * c0})))",
        )
    elif probe == "batch_extent":
        g.tensor("w", (3, 32, 2 * c0), dt, True)
        g.tensor("out", (2, 16, 2 * c0), dt, False, "out")
        g.refuse.add("X4")
        g.emit(1, "t = " + load_text("w", [lit(1), lit(16), lit(0)], [2, 16, 2 * c0]), None)
        g.emit(
            1,
            "pl.store(t, [0, 0, 0], out)",
            f"put(out, (0, 0, 0), (2, 16, {2 * c0}), win(w, (1, 16, 0), (2, 16, {2 * c0})))",
        )
        g.unknown = True
    elif probe == "gap":
        _probe_gap(g)
    elif probe == "a5_load":
        g.target = "pl.A5"
        g.tensor("w", (64, 2 * c0), dt, True)
        _mm_into_out(
            g,
            1,
            load_text("w", [lit(32), lit(0)], [16, 2 * c0]),
            f"win(w, (32, 0), (16, {2 * c0}))",
            2 * c0,
            16,
            dt,
        )
    elif probe == "oob_window":  # the last symbolic window runs past the rows: only a refusal is right
        g.tag("oob")
        nt, tn = int(g.choice([1, 2, 3])), 16
        kc = c0 if g.p(0.7) else 2 * c0  # one column block: rows past R read column block 1
        g.tensor("w", (nt * tn, 2 * c0), dt, True)
        g.tensor("x", (16, kc), dt)
        g.tensor("out", (16, (nt + 1) * tn), ACC[dt], False, "out")
        g.emit(1, f"for nb in pl.range({nt + 1}):", f"for nb in range({nt + 1}):")
        g.emit(2, f"n0 = nb * {tn}")
        g.emit(2, "xt = " + load_text("x", [lit(0), lit(0)], [16, kc]), "xt = x")
        g.emit(
            2, "wt = " + load_text("w", [var("n0"), lit(0)], [tn, kc]), f"wt = win(w, (n0, 0), ({tn}, {kc}))"
        )
        g.emit(
            2,
            "pl.store(pl.matmul(xt, wt, b_trans=True), [0, n0], out)",
            f"put(out, (0, n0), (16, {tn}), mm(xt, wt, True))",
        )
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
        _mm_into_out(
            g,
            2,
            load_text("w", [var("n0"), lit(0)], [16, 2 * c0]),
            f"win(w, (n0, 0), (16, {2 * c0}))",
            2 * c0,
            16,
            dt,
        )
    elif probe == "const_misaligned":  # a literal window offset off the fractal / C0 grid (NZ-12)
        g.tensor("w", (64, 4 * c0), dt, True)
        axis = g.choice(["row", "col", "row_ok", "col_ok"])
        g.tag(f"const:{axis}")
        r0 = {"row": 8, "col": 0, "row_ok": 32, "col_ok": 0}[axis]
        k0 = {"row": 0, "col": c0 // 2, "row_ok": 0, "col_ok": 2 * c0}[axis]
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
        g.emit(
            2, "acc = pl.matmul(a[m0:m0 + 16, :], b)", f"acc = mm(win(a, (m0, 0), (16, {2 * c0})), b, False)"
        )
        g.emit(2, "out[m0:m0 + 16, :] = acc", "put(out, (m0, 0), (16, 48), acc)")


def _probe_gap(g: G) -> None:
    """NZ-25..27: the 16-bit GM gap between column blocks (R - loaded rows > 65535 is refused)."""
    r = int(g.choice([65536, 65552, 65568]))
    cols = int(g.choice([32, 64]))
    tr = int(g.choice([16, 32, 48]))
    vr = int(g.choice([v for v in (16, 32) if v <= tr])) if g.p(0.3) else tr
    r0 = 16 * int(g.choice([0, 1, (r - tr) // 16]))
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
    g.emit(
        2,
        "wt = " + load_text("w", [var("r0"), lit(0)], [tr, cols], valid=valid),
        f"wt = win(w, (r0, 0), ({vr}, {cols}))",
    )
    g.emit(2, "pl.store(pl.matmul(xt, wt, b_trans=True), [0, 0], out)", None)
    g.emit(2, None, f"put(out, (0, 0), (16, {vr}), mm(xt, wt, True))")
    if vr < tr:
        g.emit(2, None, f"put(out, (0, {vr}), (16, {tr - vr}), np.nan)")
