"""The matmul families: tensor-level windows (`tensor_mm`) and pl.load of NZ windows into Mat
(`tile_mm`), with ND or FP32 NZ outputs.
"""

from __future__ import annotations

import math

from .expr import Expr, lit, pyvar, var
from .forms import (
    Iter,
    _assign,
    iterate,
    lanes_share_window,
    load_ref,
    load_text,
    offset_form,
    out_target,
    pick,
    store_checks,
    window,
)
from .program import ACC, DTYPES, G, c0_of, check_nz_param, data_dtype, mat_window


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
    m = int(
        g.wchoice(
            [(0.3, 1), (0.5, 8), (0.3, 4), (0.2, 15), (0.2, 17), (4, 16), (4, 32), (3, 64), (1, 48), (1, 128)]
        )
    )
    n_align, k_align = (16, c0) if b_trans else (c0, 16)
    tn = pick(g, (16, 32, 48, 64, 96, 128, 256), lambda v: v % n_align == 0 and m * v * 4 <= 128 << 10)
    tk = pick(g, (8, 16, 32, 64, 128, 256), lambda v: v % k_align == 0 and v % 8 == 0)
    lead: tuple[int, ...] = g.choice(
        [(), (), (int(g.choice([1, 2, 3])),), (int(g.choice([1, 2])), int(g.choice([1, 2, 3])))]
    )
    nt, kt = int(g.choice([1, 2, 3, 4])), int(g.choice([1, 1, 2, 3]))
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
        e, pad_n, form = offset_form(g, it.t, tn, n_len, n_align, "n0")
        n0 = _assign(g, ind, "n0", e)
        lanes_share_window(g, it, form)
    # K loop (its offset expression is chosen now: a shifted window widens the K axis)
    kstyle = "single" if kt == 1 else g.wchoice([(4, "pipe"), (2, "range"), (1, "python"), (1, "carried")])
    g.tag(f"kloop:{kstyle}")
    pad_k, k_expr = 0, None
    if kstyle in ("range", "python"):
        kb = pyvar("kb") if kstyle == "python" else var("kb")
        k_expr, pad_k, _ = offset_form(g, kb, tk, kt * tk, k_align, "k0")
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
        g.emit(
            ind,
            f"for k0 in pl.pipeline({tk}, {big_k}, {tk}, stage={stage}):",
            f"for k0 in range({tk}, {big_k}, {tk}):",
        )
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
        ka, ra = operands(k0)
        g.emit(ind + 1, f"acc = pl.matmul_acc(acc, {ka})", f"acc = acc + mm({ra})")
        if kstyle == "carried":
            g.emit(ind + 1, f"kc = kc + {tk}", f"kc = kc + {tk}")
    # the store
    oaxes = [*[("i", b) for b in it.batch], ("all", m), ("w", n0, tn)]
    ok, orf = window("out", oaxes)
    g.emit(ind, f"{ok} = acc", f"put(out, {orf[len('win(out, ') : -1]}, acc)")
    if out_nz:
        store_checks(g, m, tn, n0)


# ---------------------------------------------------------------------------------- tile_mm
def fam_tile_mm(g: G) -> None:
    """Family tile_mm: pl.load of NZ windows into Mat (leading-axis slices, static or dynamic valid_shape),
    pl.store of the Acc tile."""
    dt = data_dtype(g)
    c0, acc = c0_of(dt), ACC[dt]
    g.tag(f"dtype:{dt}")
    m = int(g.wchoice([(4, 16), (4, 32), (3, 64), (1, 48), (1, 128)]))
    tn = pick(g, (16, 32, 48, 64, 128, 256), lambda v: m * v * 4 <= 128 << 10)
    tk = pick(g, (16, 32, 64, 128, 256), lambda v: v % c0 == 0)
    lead: tuple[int, ...] = g.choice(
        [(), (int(g.choice([1, 2, 3, 4])),), (int(g.choice([1, 2])), int(g.choice([1, 2, 3])))]
    )
    nt, kt = int(g.choice([1, 2, 3, 4])), int(g.choice([1, 1, 2]))
    g.tag(f"rank:{len(lead) + 2}")
    valid = (
        "none"
        if kt > 1
        else g.wchoice(
            [
                (6, "none"),
                (1, "static"),
                (2, "dynamic"),
                (0.3, "static_bad"),
                (0.3, "dynamic_bad"),
                (0.3, "cols_dynamic"),
            ]
        )
    )
    g.tag(f"valid:{valid}")
    rag = 16 * int(g.choice(range(0, tn // 16))) if valid == "dynamic" and nt > 1 else 0
    n_real = nt * tn - rag  # the weight's rows; the output is padded to whole tiles
    big_k = kt * tk
    # how the batch index reaches the load
    mode = "direct"
    if lead:
        mode = g.wchoice(
            [
                (2, "direct"),
                (3, "index"),
                (1, "chain"),
                (1, "scalar") if len(lead) == 1 else (0, "x"),
                (1, "partial") if len(lead) == 2 else (0, "x"),
            ]
        )
    g.tag(f"lead:{mode}")
    layer_val = None
    if mode == "scalar":
        layer_val = int(g.choice(range(lead[0])))
        if g.p(0.06):  # a runtime index out of range: the reference refuses
            layer_val = int(g.choice([-1, lead[0], lead[0] + 1]))
            g.tag("runtime_oob_layer")
            g.unknown = True
        it = Iter(1, [var("layer", 1, False)], None)
        g.emit(1, "wl = w[layer]", "wl = win(w, (layer, 0, 0), (None, w.shape[1], w.shape[2]))")
        loop = g.choice(["pl.range", "pl.spmd", "range"])
        g.emit(1, f"for nb in {loop}({nt}):", f"for nb in {'lanes' if loop == 'pl.spmd' else 'range'}({nt}):")
        it = Iter(
            2,
            it.batch,
            pyvar("nb") if loop == "range" else var("nb"),
            parallel_tiles=loop == "pl.spmd" and nt > 1,
        )
    else:
        it = iterate(g, lead, nt, tn, nt * tn)
    ind = it.ind
    pad = 0
    if it.t is None:
        n0 = it.direct
        assert n0 is not None
    else:
        e, pad, form = offset_form(g, it.t, tn, nt * tn, 16, "n0")
        n0 = _assign(g, ind, "n0", e)
        lanes_share_window(g, it, form)
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
    lead_offs: list[Expr]
    if mode == "index" and len(lead) == 1:
        g.emit(ind, f"wl = w[{b[0].k}]", f"wl = win(w, ({b[0].r}, 0, 0), (None, w.shape[1], w.shape[2]))")
        src, lead_offs = "wl", []
    elif mode == "index":
        g.emit(
            ind,
            f"wl = w[{b[0].k}, {b[1].k}]",
            f"wl = win(w, ({b[0].r}, {b[1].r}, 0, 0), (None, None, w.shape[2], w.shape[3]))",
        )
        src, lead_offs = "wl", []
    elif mode == "chain":
        g.emit(
            ind,
            f"wl = w{''.join(f'[{x.k}]' for x in b)}",
            f"wl = win(w, ({', '.join(x.r for x in b)}, 0, 0), ({', '.join('None' for _ in b)}, w.shape[-2], w.shape[-1]))",
        )
        src, lead_offs = "wl", []
    elif mode == "partial":
        g.emit(
            ind,
            f"wl = w[{b[0].k}]",
            f"wl = win(w, ({b[0].r}, 0, 0, 0), (None, {lead[1]}, w.shape[2], w.shape[3]))",
        )
        src, lead_offs = "wl", [b[1]]
    elif mode == "scalar":
        src, lead_offs = "wl", []
    else:
        src, lead_offs = "w", list(b)

    def loads(k0: Expr, first: bool) -> tuple[str, str]:
        rows: Expr = lit(tn)
        vexprs = None
        if valid in ("static", "static_bad"):
            v = 16 * int(g.choice(range(1, tn // 16 + 1)))
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
                g.emit(
                    ind,
                    f"vr = pl.min({n_real} - {n0.k}{traced}, {cap})",
                    f"vr = min({n_real} - {n0.r}, {cap})",
                )
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
        attrs = ", " + str(
            g.choice(['st_phase="Final"', "atomic=False", "atomic=True", "pre_relu=True", 'pre_quant="int8"'])
        )
        g.tag(f"attr:{attrs[2:].split('=')[0]}")
        if attrs.endswith(("atomic=True", "pre_relu=True", '"int8"')):
            g.refuse.add("S9")
    g.emit(ind, f"pl.store(acc, [{', '.join(o.k for o in offs)}]{', out'}{attrs})", None)
    if valid == "none":
        g.emit(ind, None, f"put(out, ({', '.join(o.r for o in offs)},), ({', '.join(sizes)}, {tn}), acc)")
    else:  # columns computed from rows past the valid region are left as the hardware leaves them
        g.emit(
            ind, None, f"put(out, ({', '.join(o.r for o in offs)},), ({', '.join(sizes)}, acc.shape[1]), acc)"
        )
        g.emit(ind, None, f"if acc.shape[1] < {tn}:")
        tail = [*(o.r for o in olead), "0", f"{n0.r} + acc.shape[1]"]
        g.emit(
            ind + 1,
            None,
            f"put(out, ({', '.join(tail)},), ({', '.join(sizes)}, {tn} - acc.shape[1]), np.nan)",
        )
    if out_nz:
        store_checks(g, m, tn, n0)
