"""The Acc -> NZ store family (NZ-20..24), the whole-tensor flatten (NZ-31) and SPMD Vec
elementwise programs (lanes reading bytes other lanes store).
"""

from __future__ import annotations

import math

from .expr import Expr, add, lit, mul, pyvar, sub, var
from .forms import _assign, load_ref, load_text, store_checks, window
from .gen_branch import branch_lines
from .gen_unary import unary_ops, unary_step
from .program import ACC, DTYPES, G, c0_of, check_nz_param, mat_window


# -------------------------------------------------------------------------------- acc_store
def fam_acc_store(g: G) -> None:
    """Acc tile -> FP32 NZ GM (NZ-20..24) and each row of the NZ-21 table."""
    dt = g.wchoice([(4, "FP16"), (3, "BF16"), (3, "FP32"), (0.7, "INT8")])
    acc = ACC[dt]
    g.tag(f"dtype:{dt}")
    big = g.wchoice([(12, "no"), (1, "split"), (0.4, "huge_m")])
    m = int(g.wchoice([(3, 16), (3, 32), (3, 64), (1, 48), (1, 128), (0.3, 8)]))
    tn = int(g.wchoice([(3, 16), (3, 32), (2, 64), (1, 128), (1, 48), (0.3, 8), (0.3, 24)]))
    k = int(g.choice([16, 32, 64]))
    if big == "split":
        m, tn = int(g.choice([64, 128])), int(g.choice([512, 1024]))
        k = 32
    elif big == "huge_m":
        m, tn, k = 2064, 16, 16
        g.refuse.add("S4")
    g.tag(f"big:{big}")
    nt = int(g.choice([1, 2, 3])) if big == "no" else 1
    panels = int(g.choice([0, 0, 1, 2, 3]))
    mut = g.wchoice(
        [
            (10, "none"),
            (1, "sub_rows"),
            (1, "row_off"),
            (1, "panel_rows"),
            (1, "vec_src"),
            (1, "mat_src"),
            (1, "a5"),
            (1, "col_shift"),
            (1, "col_shift4"),
            (1, "col_diff"),
            (0.7, "col_const4"),
            (1, "attr"),
            (0.5, "fp16_out"),
        ]
    )
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
    shift = {"col_shift": 8, "col_shift4": 4, "col_const4": 4}.get(mut, 0)
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
    g.tensor("x", (x_rows, k), dt)
    mat_window(g, x_rows, k, dt, left=True)
    w_nz = g.p(0.5)
    kn = dt == "FP32" and g.p(0.4)  # w [K, N], no b_trans: N is the column axis (c0 = 8 for FP32)
    wshape = (k, n_len) if kn else (n_len, k)
    g.tensor("w", wshape, dt, w_nz)
    if w_nz:
        check_nz_param(g, wshape, dt)
        if tn % (8 if kn else 16):
            g.refuse.add("X3")
    else:
        mat_window(g, *((k, tn) if kn else (tn, k)), dt, left=False)
    g.tensor("out", oshape, out_dt, True, "out")
    check_nz_param(g, oshape, out_dt)
    if mut in ("vec_src", "mat_src"):
        g.tensor("xf", (x_rows, n_len), "FP32")
    # iterate panels x tiles
    ind = 1
    pidx: list[Expr] = []
    if panels:
        kind = g.choice(["pl.range", "range", "pl.spmd"])
        g.emit(
            1,
            f"for p in {kind}({panels}):",
            f"for p in {'lanes' if kind == 'pl.spmd' else 'range'}({panels}):",
        )
        pidx = [var("p") if kind != "range" else pyvar("p")]
        ind = 2
    kind = g.choice(["pl.range", "range"] if panels else ["pl.spmd", "pl.range", "range"])
    g.emit(ind, f"for nb in {kind}({nt}):", f"for nb in {'lanes' if kind == 'pl.spmd' else 'range'}({nt}):")
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
        g.emit(
            ind,
            "wt = " + load_text("w", [lit(0), n0], [k, tn]),
            f"wt = {load_ref('w', [lit(0), n0], [k, tn])}",
        )
        g.emit(ind, "acc = pl.matmul(xt, wt)", "acc = mm(xt, wt, False)")
    else:
        g.emit(
            ind,
            "wt = " + load_text("w", [n0, lit(0)], [tn, k]),
            f"wt = {load_ref('w', [n0, lit(0)], [tn, k])}",
        )
        g.emit(ind, "acc = pl.matmul(xt, wt, b_trans=True)", "acc = mm(xt, wt, True)")
    if w_nz:
        g.offset(n0, 8 if kn else 16)
    src = "acc"
    if mut in ("vec_src", "mat_src"):
        mem = "pl.Mem.Vec" if mut == "vec_src" else "pl.Mem.Mat"
        g.emit(
            ind,
            "src = " + load_text("xf", [lit(0), n0], [x_rows, tn], mem),
            f"src = {load_ref('xf', [lit(0), n0], [x_rows, tn])}",
        )
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
    g.emit(
        ind,
        None,
        f"put(out, ({', '.join(o.r for o in offs)},), ({'None, ' if pidx else ''}{x_rows}, {tn}), {src})",
    )
    store_checks(g, x_rows, tn, n0)


# ---------------------------------------------------------------------------------- flatten
def fam_flatten(g: G) -> None:
    """`pl.reshape(w, [N])` of a whole NZ tensor is kept and its result is ND (NZ-31): read back
    in NZ byte order. Other reshape targets are refused."""
    dt = g.wchoice(
        [
            (3, "INT8"),
            (2, "FP16"),
            (1, "BF16"),
            (2, "FP32"),
            (1, "UINT8"),
            (1, "INT16"),
            (1, "INT32"),
            (0.5, "FP8E4M3"),
        ]
    )
    g.tag(f"dtype:{dt}")
    c0 = c0_of(dt)
    lead: tuple[int, ...] = g.choice([(), (2,), (2, 2)])
    rows, cols = 16 * int(g.choice([1, 2, 4])), c0 * int(g.choice([1, 2, 4]))
    shape = (*lead, rows, cols)
    n = math.prod(shape)
    g.tensor("w", shape, dt, True)
    check_nz_param(g, shape, dt)
    target = g.wchoice([(8, "flat"), (1, "other"), (1, "flat_then_2d")])
    g.tag(f"reshape:{target}")
    length = int(g.choice([x for x in (n, n // 2, n // 4, 256, 512) if 0 < x <= n]))
    o = 32 * int(g.choice(range(0, (n - length) // 32 + 1)))
    rank1_out = g.p(0.1)  # a rank-1 output: the store of a [1, L] tile into a rank-1 tensor
    g.tensor("out", (length,) if rank1_out else (1, length), dt, False, "out")
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
        g.emit(
            1,
            f"pl.store(t, [0, 0], pl.reshape(out, [{length // 32}, 32]))",
            f"out.reshape(-1)[:] = flat[:{length}]",
        )
        g.unknown = True
    else:  # the flattened tensor is ND (NZ-31): reshaping it again is an ordinary ND reshape
        two = 32
        g.emit(1, f"f = pl.reshape(w, [{n}])", None)
        g.emit(1, f"f2 = pl.reshape(f, [{n // two}, {two}])", None)
        g.emit(
            1, f"t = pl.load(f2, [{o // two}, 0], [{length // two}, {two}], target_memory=pl.Mem.Vec)", None
        )
        g.emit(
            1,
            f"pl.store(t, [0, 0], pl.reshape(out, [{length // two}, {two}]))",
            f"out.reshape(-1)[:] = win(flat, ({o // two * two},), ({length},))",
        )
        g.unknown = True


# ----------------------------------------------------------------------------------- vec_ew
#: How a lane picks its row block: its own, its own with a gap after every 4 lanes (several runs
#: of addresses), shared by two lanes, in reverse lane order, or one block for every lane (for an
#: output: later lanes overwrite earlier ones).
_BLOCKS = {
    "own": "{l} * {t} + {i}",
    "gapped": "({l} + {l} // 4) * {t} + {i}",
    "shared": "({l} // 2) * {t} + {i}",
    "reversed": "({n} - 1 - {l}) * {t} + {i}",
    "same": "{i}",
}
_EW = {"add": "np.add", "sub": "np.subtract", "maximum": "np.maximum", "mul": "np.multiply"}


#: `_BLOCKS` evaluated: (lane, trips, trip, lanes) -> the row block
_BLOCK_OF = {
    "own": lambda ln, t, i, n: ln * t + i,
    "gapped": lambda ln, t, i, n: (ln + ln // 4) * t + i,
    "shared": lambda ln, t, i, n: (ln // 2) * t + i,
    "reversed": lambda ln, t, i, n: (n - 1 - ln) * t + i,
    "same": lambda ln, t, i, n: i,
}


def _block(pat: str, lane: int, i: int, trips: int, lanes: int) -> int:
    return int(_BLOCK_OF[pat](lane, trips, i, lanes))


def _reads_anothers_block(read: str, write: str, lanes: int, trips: int) -> bool:
    """Does some lane read (pattern `read`) a row block that another lane writes (`write`), at any
    trip? Brute force over lanes and trips (issue 24: a lane race)."""
    writer: dict[int, set[int]] = {}
    for lane in range(lanes):
        for i in range(trips):
            writer.setdefault(_block(write, lane, i, trips, lanes), set()).add(lane)
    return any(
        writer.get(_block(read, lane, i, trips, lanes), set()) - {lane}
        for lane in range(lanes)
        for i in range(trips)
    )


def fam_vec_ew(g: G) -> None:
    """Family vec_ew: SPMD lanes, with range trips inside, load Vec windows, combine them with
    elementwise ops and store the result, or sum it over the trips in a loop-carried tile. Windows
    are a lane's own (contiguous or in runs), shared, in reverse lane order or the same for every
    lane; some lanes read bytes other lanes store (an InOut output). The lane-batched path must
    give what the lanes give one by one (the reference's loop order)."""
    dt = str(g.wchoice([(3, "FP32"), (2, "FP16"), (2, "INT32"), (1, "INT16")]))
    g.tag(f"dtype:{dt}")
    c0 = c0_of(dt)
    lanes = int(g.choice([2, 3, 4, 8, 17]))
    tr = int(g.choice([1, 2, 4, 16]))
    tc = c0 * int(g.choice([1, 2, 4]))
    cols = tc * int(g.choice([1, 2]))
    trips = int(g.choice([1, 1, 2, 3]))
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
    c_off = tc * int(g.choice(range(cols // tc)))
    carry = (
        trips > 1 and not self_read and dt != "INT16" and g.p(0.3)
    )  # a Vec tile summed over the trips (int16 could wrap)
    outer = str(g.wchoice([(3, "pl.spmd"), (1, "pl.range")]))  # range trips without carries run batched too
    g.tag(f"ew_loop:{outer}")
    if outer == "pl.spmd" and dst_pat == "same":  # concurrent lanes writing one window race (issue 24)
        g.refuse.add("R1")
    g.emit(
        1,
        f"for lane in {outer}({lanes}):",
        f"for lane in {'lanes' if outer == 'pl.spmd' else 'range'}({lanes}):",
    )
    ind, it = 2, "0"

    def block(pat: str) -> str:
        return "(" + _BLOCKS[pat].format(l="lane", t=trips, i=it, n=lanes) + f") * {tr}"

    if carry:
        g.tag("ew:carry")
        g.emit(
            2,
            f"acc = pl.load(b, [{block(dst_pat)}, {c_off}], [{tr}, {tc}], target_memory=pl.Mem.Vec)",
            f"acc = win(b, ({block(dst_pat)}, {c_off}), ({tr}, {tc})).copy()",
        )
        store_at = block(dst_pat)
    if trips > 1:
        g.emit(2, f"for i in pl.range({trips}):", f"for i in range({trips}):")
        ind, it = 3, "i"

    names = ["ta", "tb"]
    for nm, src, pat in (("ta", "a", src_pat), ("tb", "b", str(g.choice(list(_BLOCKS))))):
        g.emit(
            ind,
            f"{nm} = pl.load({src}, [{block(pat)}, {c_off}], [{tr}, {tc}], target_memory=pl.Mem.Vec)",
            f"{nm} = win({src}, ({block(pat)}, {c_off}), ({tr}, {tc})).copy()",
        )
    muls = 0 if dt == "INT16" else 1  # products stay exact: one at most, never of int16 data
    # a round trip through another dtype that holds every value (integers up to 9e6 fit float32);
    # its tile must still be whole 32-byte lines
    mids = [
        m
        for m in (("FP32",) if dt.startswith("INT") else ("FP32", "FP16", "INT32", "INT16"))
        if m != dt and tc * DTYPES[m][1] // 8 % 32 == 0
    ]
    npt = DTYPES[dt][0]
    # float32 results round like the tile's arithmetic: the float64 result of one op on float32
    # values is exact here, so rounding it once to float32 is the device's rounding
    rnd = f".astype({npt}).astype(np.float64)" if dt == "FP32" else ""
    for step in range(int(g.choice([1, 2, 3]))):
        exps = ["exp"] if dt == "FP32" and step == 0 else []  # of loaded data only: e**5 keeps all finite
        unary = unary_ops(dt)  # gen_unary.py: pl.neg / pl.abs
        op = str(
            g.choice([*(o for o in _EW if o != "mul" or muls), *(["cast"] if mids else []), *exps, *unary])
        )
        muls -= op == "mul"
        x, y = str(g.choice(names)), str(g.choice(names))
        if op == "cast":
            # after an exp, sums can pass int16's range (a float -> int16 overflow is undefined)
            mid = str(g.choice([m for m in mids if m != "INT16" or "ew:exp" not in g.tags] or ["FP32"]))
            g.tag("ew:cast")
            g.emit(
                ind,
                f"t{step} = pl.cast(pl.cast({x}, pl.{mid}), pl.{dt})",
                f"t{step} = {x}.astype({DTYPES[mid][0]}).astype(np.float64)",
            )
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
        if outer == "pl.spmd" and dst_pat != "same" and _reads_anothers_block(pat, dst_pat, lanes, trips):
            g.refuse.add("R2")  # a lane reads a block another lane stores: a lane race at run time
        g.emit(
            ind,
            f"to = pl.load(out, [{block(pat)}, {c_off}], [{tr}, {tc}], target_memory=pl.Mem.Vec)",
            f"to = win(out, ({block(pat)}, {c_off}), ({tr}, {tc})).copy()",
        )
        op = str(g.choice(["maximum"] if dt == "INT16" else ["add", "sub", "maximum"]))
        g.emit(ind, f"ts = pl.{op}(to, {names[-1]})", f"ts = {_EW[op]}(to, {names[-1]}){rnd}")
        names.append("ts")
    if carry:  # the loop-carried sum, stored once after the trips
        g.emit(ind, f"acc = pl.add(acc, {names[-1]})", f"acc = np.add(acc, {names[-1]}){rnd}")
        g.emit(
            2,
            f"pl.store(acc, [{store_at}, {c_off}], out)",
            f"put(out, ({store_at}, {c_off}), ({tr}, {tc}), acc)",
        )
        return
    g.emit(
        ind,
        f"pl.store({names[-1]}, [{block(dst_pat)}, {c_off}], out)",
        f"put(out, ({block(dst_pat)}, {c_off}), ({tr}, {tc}), {names[-1]})",
    )
