"""Fuzzer family vec_alu: SPMD lanes running random chains of the vector unit's ops (tile-scalar
and tile-tile ALU, row and column reductions with their broadcasts, unary ops and the float math
(exp / log / sqrt / recip, as runtime.vector models them: the fp32 function), TLRELU, conversions
with and without a rounding mode, fills and padding, TGATHER's index form, compare + select) on
fp32 Vec windows, against a numpy reference on float64 that rounds every instruction's result to
fp32 once, as the device does.

Data are small integers, so every sum and product stays exact in fp32 and the comparison is exact;
a division only divides by |y| + 1 (never zero) and is followed by no sum or conversion, whose
results would then depend on rounding the reference does not model bit for bit.
"""

from __future__ import annotations

from typing import Any

#: The program under construction (gen.G; not imported: gen.py imports this module).
G = Any

_R32 = ".astype(np.float32).astype(np.float64)"
_SCALAR = {"add": "+", "sub": "-", "mul": "*"}
_CVT_REF = {
    "rint": "np.rint({x})",
    "round": "np.sign({x}) * np.floor(np.abs({x}) + 0.5)",
    "trunc": "np.trunc({x})",
    "floor": "np.floor({x})",
    "ceil": "np.ceil({x})",
}


def fam_vec_alu(g: G) -> None:
    """One program of the family (see the module docstring)."""
    lanes = int(g.choice([1, 2, 3, 4]))
    r = int(g.choice([8, 16]))
    c = int(g.choice([8, 16, 64]))
    g.tag("dtype:FP32", f"alu_lanes:{lanes}")
    for name in ("a", "b"):
        g.tensor(name, (lanes * r, c), "FP32")
    g.tensor("out", (lanes * r, c), "FP32", False, "out")
    g.emit(1, f"for lane in pl.spmd({lanes}):", f"for lane in lanes({lanes}):")
    for nm, src in (("x", "a"), ("y", "b")):
        g.emit(
            2,
            f"{nm} = pl.load({src}, [lane * {r}, 0], [{r}, {c}], target_memory=pl.Mem.Vec)",
            f"{nm} = win({src}, (lane * {r}, 0), ({r}, {c})).copy()",
        )
    names, exact = ["x", "y"], True
    for step in range(int(g.choice([1, 2, 3, 4]))):
        kinds = ["scalar", "minmax", "row", "col", "unary", "full", "select", "tiles", "expand", "lrelu"]
        kinds += ["odd"] if c >= 16 else []  # an fp16 row is whole 32-byte blocks: 16 columns
        kinds += (
            ["cvt", "sum", "div", "rsqrt", "math", "colsum", "gather"] + (["cast"] if c >= 16 else [])
            if exact
            else []
        )
        kind = str(g.choice(kinds))
        g.tag(f"alu:{kind}")
        a, b, t = str(g.choice(names)), str(g.choice(names)), f"t{step}"
        if kind == "scalar":
            op = str(g.choice([*_SCALAR, "div", "maximum", "minimum"]))
            s = float(g.choice([2.0, -1.0, 0.5]))
            ref = (
                f"np.{op}({a}, {s})" if op in ("maximum", "minimum") else f"({a} {_SCALAR.get(op, '/')} {s})"
            )
            g.emit(2, f"{t} = pl.{op}({a}, {s})", f"{t} = {ref}{_R32}")
        elif kind == "tiles":  # tile <op> tile: one fp32 rounding, as the reference's
            op = str(g.choice(list(_SCALAR)))
            g.emit(2, f"{t} = pl.{op}({a}, {b})", f"{t} = ({a} {_SCALAR[op]} {b}){_R32}")
        elif kind == "expand":  # the plain broadcasts and the max / min ones of a reduction
            form = str(g.choice(["row", "col", "rowmax", "rowmin", "colmax", "colmin"]))
            ref = {
                "row": f"np.broadcast_to({a}.max(axis=1, keepdims=True), {a}.shape)",
                "col": f"np.broadcast_to({a}.min(axis=0, keepdims=True), {a}.shape)",
                "rowmax": f"np.maximum({b}, {a}.min(axis=1, keepdims=True))",
                "rowmin": f"np.minimum({b}, {a}.max(axis=1, keepdims=True))",
                "colmax": f"np.maximum({b}, {a}.min(axis=0, keepdims=True))",
                "colmin": f"np.minimum({b}, {a}.max(axis=0, keepdims=True))",
            }[form]
            src = {
                "row": f"pl.row_expand({a}, pl.row_max({a}))",
                "col": f"pl.col_expand({a}, pl.col_min({a}))",
                "rowmax": f"pl.maximum({b}, pl.row_min({a}))",
                "rowmin": f"pl.minimum({b}, pl.row_max({a}))",
                "colmax": f"pl.maximum({b}, pl.col_min({a}))",
                "colmin": f"pl.minimum({b}, pl.col_max({a}))",
            }[form]
            g.emit(2, f"{t} = {src}", f"{t} = {ref}")
        elif kind == "lrelu":
            g.emit(2, f"{t} = pl.tile.lrelu({a}, 0.25)", f"{t} = np.maximum({a}, ({a} * 0.25){_R32})")
        elif kind == "math":  # the model of each (runtime.vector): the fp32 function, rounded once
            exact = False
            op = str(g.choice(["exp", "log", "sqrt", "recip"]))
            x = f"(np.abs({a}) + 1.0).astype(np.float32)"
            ref = {
                "exp": f"np.exp({x})",
                "log": f"np.log({x})",
                "sqrt": f"np.sqrt({x})",
                "recip": f"(1.0 / {x})",
            }[op]
            hp = ", high_precision=True" if op in ("log", "recip") and g.p(0.5) else ""
            g.emit(2, f"{t} = pl.{op}(pl.add(pl.abs({a}), 1.0){hp})", f"{t} = {ref}.astype(np.float64)")
        elif kind == "colsum":  # integer-valued: the tree sum is exact
            g.emit(
                2,
                f"{t} = pl.col_expand_sub({a}, pl.col_sum({a}))",
                f"{t} = ({a} - {a}.sum(axis=0, keepdims=True)){_R32}",
            )
        elif kind == "cast":  # tile.cast without a mode: nearest-even to fp16 and back
            g.emit(
                2,
                f"{t} = pl.cast(pl.cast({a}, pl.FP16), pl.FP32)",
                f"{t} = {a}.astype(np.float16).astype(np.float64)",
            )
        elif kind == "gather":
            rev = f"pl.arange({c - 1}, [1, {c}], dtype=pl.INT32, descending=True)"
            if g.p(0.5):  # TGATHER's flat index form: the first row reversed, on every row
                g.emit(
                    2,
                    f"{t} = pl.col_expand({a}, pl.tile.gather({a}, {rev}))",
                    f"{t} = np.broadcast_to({a}[0, ::-1], {a}.shape).copy()",
                )
            else:  # the row-wise form (pl.gather(x, -1, index)): every row reversed
                g.emit(
                    2,
                    f"{t} = pl.gather({a}, -1, pl.col_expand(pl.full([{r}, {c}], dtype=pl.INT32, value=0), {rev}))",
                    f"{t} = {a}[:, ::-1].copy()",
                )
        elif kind == "odd":  # TCVT round-to-odd into fp16: toward zero, an inexact result made odd
            x = f"np.clip({a}, -64.0, 64.0)"
            g.emit(
                2,
                f"{t} = pl.cast(pl.cast(pl.maximum(pl.minimum({a}, 64.0), -64.0), pl.FP16, mode='odd'), "
                "pl.FP32, mode='none')",
                f"_h = {x}.astype(np.float16); "
                f"_z = np.where(np.abs(_h.astype(np.float64)) > np.abs({x}), np.nextafter(_h, np.float16(0)), _h); "
                f"{t} = np.where((_z.astype(np.float64) == {x}) | ((_z.view(np.uint16) & 1) == 1), _z, "
                f"np.nextafter(_z, np.where({x} < 0, -np.inf, np.inf).astype(np.float16))).astype(np.float64)",
            )
        elif kind == "minmax":
            op = str(g.choice(["minimum", "maximum"]))
            g.emit(2, f"{t} = pl.{op}({a}, {b})", f"{t} = np.{op}({a}, {b})")
        elif kind in ("row", "col"):  # a reduction broadcast back along its axis
            axis = 1 if kind == "row" else 0
            red, exp = str(g.choice(["max", "min"])), str(g.choice(["add", "sub", "mul", "div"]))
            if exp == "div":  # by |max| + 1: never zero
                exact = False
                g.emit(
                    2,
                    f"{t} = pl.{kind}_expand_div({a}, pl.add(pl.abs(pl.{kind}_{red}({a})), 1.0))",
                    f"{t} = ({a} / (np.abs({a}.{red}(axis={axis}, keepdims=True)) + 1.0){_R32}){_R32}",
                )
            else:
                g.emit(
                    2,
                    f"{t} = pl.{kind}_expand_{exp}({a}, pl.{kind}_{red}({a}))",
                    f"{t} = ({a} {_SCALAR[exp]} {a}.{red}(axis={axis}, keepdims=True)){_R32}",
                )
        elif kind == "unary":
            op = str(g.choice(["abs", "neg", "relu"]))
            ref = {"abs": f"np.abs({a})", "neg": f"-{a}", "relu": f"np.maximum({a}, 0)"}[op]
            g.emit(2, f"{t} = pl.{op}({a})", f"{t} = {ref}")
        elif kind == "select":  # TCMP(S) + TSEL(S): a choice of existing values, exact
            code = int(g.choice([0, 1, 2, 3, 4, 5]))
            op = ("==", "!=", "<", "<=", ">", ">=")[code]
            if g.p(0.5):
                tmp = ", pl.create_tile([1, 32], dtype=pl.UINT8)" if g.p(0.5) else ""
                g.emit(
                    2,
                    f"{t} = pl.sel(pl.cmp({a}, {b}, cmp_type={code}), {a}, {b}{tmp})",
                    f"{t} = np.where({a} {op} {b}, {a}, {b})",
                )
            else:
                g.emit(
                    2,
                    f"{t} = pl.sels(pl.cmp({a}, 1.0, cmp_type={code}), {a}, scalar=-2.0)",
                    f"{t} = np.where({a} {op} 1.0, {a}, -2.0)",
                )
        elif kind == "full":
            g.emit(
                2,
                f"{t} = pl.add({a}, pl.full([{r}, {c}], dtype=pl.FP32, value=3.0))",
                f"{t} = ({a} + 3.0){_R32}",
            )
        elif kind == "sum":  # integer-valued halves: the tree sum is exact
            g.emit(
                2,
                f"{t} = pl.row_expand_sub({a}, pl.row_sum({a}))",
                f"{t} = ({a} - {a}.sum(axis=1, keepdims=True)){_R32}",
            )
        elif kind == "cvt":
            mode = str(g.choice(list(_CVT_REF)))
            half = f"({a} * 0.5)"
            g.emit(
                2,
                f"{t} = pl.cast(pl.cast(pl.mul({a}, 0.5), pl.INT32, mode={mode!r}), pl.FP32, mode='rint')",
                f"{t} = " + _CVT_REF[mode].format(x=half),
            )
        elif kind == "rsqrt":  # TSQRT then TDIV, each rounded to fp32 (the default's model is the same)
            exact = False
            hp = g.p(0.5)
            g.emit(
                2,
                f"{t} = pl.rsqrt(pl.add(pl.abs({a}), 1.0), high_precision={hp})",
                f"{t} = (1.0 / np.sqrt((np.abs({a}) + 1.0){_R32}){_R32}){_R32}",
            )
        else:  # div
            exact = False
            g.emit(
                2, f"{t} = pl.div({a}, pl.add(pl.abs({b}), 1.0))", f"{t} = ({a} / (np.abs({b}) + 1.0)){_R32}"
            )
        names.append(t)
    g.emit(
        2,
        f"pl.store({names[-1]}, [lane * {r}, 0], out)",
        f"put(out, (lane * {r}, 0), ({r}, {c}), {names[-1]})",
    )


def fam_vec_mix(g: G) -> None:
    """Family vec_mix: the vector unit's data movement and sorting, exact by construction - a cube
    result moved to Vec (A2/A3's GM pipe or A5's TMOV) and combined there, a Vec tile moved to the
    cube (Vec -> Mat -> Left), a partial load padded with pl.tile.fillpad, tile windows and window
    assignment, and a row top-k (sort32 / mrgsort / gather). Small integers keep every product
    and sum exact in fp32."""
    kind = str(g.choice(["mm", "vec2mat", "pad", "win", "topk", "deq"]))
    g.target = str(g.choice(["pl.A2A3", "pl.A5"]))
    lanes = int(g.choice([1, 2, 3]))
    g.tag(f"mix:{kind}", f"target:{g.target}")
    g.emit(1, f"for lane in pl.spmd({lanes}):", f"for lane in lanes({lanes}):")
    if kind == "deq":  # int8 x int8 -> int32 Acc, the fixpipe's DEQF16 to fp16 (its model, exact)
        m, k, n = 16, int(g.choice([32, 64])), int(g.choice([32, 64]))  # int8 Mat: 16 x 32 fractals
        s = float(g.choice([0.5, 0.0078125, 3.0]))
        relu = g.p(0.3)
        g.tensor("x", (lanes * m, k), "INT8")
        g.tensor("w", (k, n), "INT8")
        g.tensor("out", (lanes * m, n), "FP16", False, "out")
        g.emit(
            2,
            f"acc = pl.matmul(pl.load(x, [lane * {m}, 0], [{m}, {k}], target_memory=pl.Mem.Mat), "
            f"pl.load(w, [0, 0], [{k}, {n}], target_memory=pl.Mem.Mat))",
            f"acc = win(x, (lane * {m}, 0), ({m}, {k})) @ w",
        )
        g.emit(
            2,
            f"v = pl.move(acc, target_memory=pl.Mem.Vec, dtype=pl.FP16, scale={s}, relu={relu})",
            f"v = np.clip(acc.astype(np.float32) * np.float32({s}), -65504, 65504)"
            + (".clip(0)" if relu else "")
            + ".astype(np.float16).astype(np.float64)",
        )
        g.emit(2, f"pl.store(v, [lane * {m}, 0], out)", f"put(out, (lane * {m}, 0), ({m}, {n}), v)")
        return
    if kind in ("mm", "vec2mat"):
        m, k, n = 16, int(g.choice([16, 32])), int(g.choice([16, 32]))
        g.tensor("x", (lanes * m, k), "FP16")
        g.tensor("w", (k, n), "FP16")
        g.tensor("out", (lanes * m, n), "FP32", False, "out")
        if kind == "mm":
            g.emit(
                2,
                f"acc = pl.matmul(pl.load(x, [lane * {m}, 0], [{m}, {k}], target_memory=pl.Mem.Mat), "
                f"pl.load(w, [0, 0], [{k}, {n}], target_memory=pl.Mem.Mat))",
                f"acc = win(x, (lane * {m}, 0), ({m}, {k})) @ w",
            )
            relu = g.p(0.3)
            g.emit(
                2,
                f"v = pl.move(acc, target_memory=pl.Mem.Vec, relu={relu})",
                "v = np.maximum(acc, 0)" if relu else "v = acc",
            )
            op = str(g.choice(["row_max", "col_min", "scalar"]))
            if op == "row_max":
                g.emit(2, "v = pl.sub(v, pl.row_max(v))", "v = v - v.max(axis=1, keepdims=True)")
            elif op == "col_min":
                g.emit(2, "v = pl.sub(v, pl.col_min(v))", "v = v - v.min(axis=0, keepdims=True)")
            else:
                g.emit(2, "v = pl.mul(v, 2.0)", "v = v * 2.0")
        else:
            g.emit(
                2,
                f"va = pl.cast(pl.relu(pl.cast(pl.load(x, [lane * {m}, 0], [{m}, {k}]), pl.FP32, mode='rint')), "
                "pl.FP16, mode='rint')",
                f"va = np.maximum(win(x, (lane * {m}, 0), ({m}, {k})), 0)",
            )
            g.emit(
                2, "left = pl.move(pl.move(va, target_memory=pl.Mem.Mat), target_memory=pl.Mem.Left)", None
            )
            g.emit(
                2,
                f"right = pl.move(pl.load(w, [0, 0], [{k}, {n}], target_memory=pl.Mem.Mat), "
                "target_memory=pl.Mem.Right)",
                None,
            )
            g.emit(2, "v = pl.matmul(left, right)", "v = va @ w")
        g.emit(2, f"pl.store(v, [lane * {m}, 0], out)", f"put(out, (lane * {m}, 0), ({m}, {n}), v)")
        return
    if kind == "topk":
        n, k = int(g.choice([128, 512])), int(g.choice([8, 16]))
        g.tensor("s", (lanes, n), "INT32")
        g.tensor("vals", (lanes, k), "FP32", False, "out")
        g.tensor("idx", (lanes, k), "INT32", False, "out")
        g.emit(2, f"t = pl.cast(pl.load(s, [lane, 0], [1, {n}]), pl.FP32, mode='rint')", None)
        g.emit(2, f"p = pl.sort32(t, pl.arange(0, [1, {n}], dtype=pl.INT32))", None)
        lists = g.p(0.5)  # the last merge as format 2: the row's four sorted runs as four lists
        g.tag(f"mrgsort:{'format2' if lists else 'format1'}")
        bl = 64
        while bl * (16 if lists else 4) <= 2 * n:
            g.emit(2, f"p = pl.mrgsort(p, block_len={bl})", None)
            bl *= 4
        if lists:
            runs = ", ".join(f"p[:, {i * bl}:{(i + 1) * bl}]" for i in range(4))
            # the suspending merge: the first k pairs are merged before a list of bl / 2 >= k runs out
            ex = ", exhausted=True" if g.p(0.5) else ""
            g.tag(f"mrgsort:exhausted={bool(ex)}")
            g.emit(2, f"p = pl.mrgsort({runs}, pl.create_tile([1, {4 * bl}], dtype=pl.FP32){ex})", None)
            bl *= 4
        if bl < 2 * n:  # the last merge: runs of bl elements, 2n / bl of them
            g.unknown = True  # (not generated: n is 128 or 512, 2n a power of 4 times 64)
        g.emit(2, f"top = p[:, 0:{2 * k}]", None)
        g.emit(2, "pl.store(pl.gather(top, mask_pattern=pl.tile.MaskPattern.P0101), [lane, 0], vals)", None)
        g.emit(
            2,
            "pl.store(pl.gather(top, mask_pattern=pl.tile.MaskPattern.P1010, output_dtype=pl.INT32), "
            "[lane, 0], idx)",
            None,
        )
        g.rl.append(f"        row = win(s, (lane, 0), (1, {n}))[0]")
        g.rl.append(f"        order = np.argsort(-row, kind='stable')[:{k}]")
        g.rl.append(f"        put(vals, (lane, 0), (1, {k}), row[order][None, :])")
        g.rl.append(f"        put(idx, (lane, 0), (1, {k}), order[None, :].astype(np.float64))")
        return
    r, c = 8, int(g.choice([16, 32, 64]))
    if kind == "pad":
        vc = int(g.choice([v for v in (1, 5, 8, 13, c - 1) if 0 < v < c]))
        pad = str(g.choice(["zero", "max", "min"]))
        fill = {"zero": "0.0", "max": "np.inf", "min": "-np.inf"}[pad]
        g.tensor("a", (lanes * r, c), "FP32")
        g.tensor("out", (lanes * r, c), "FP32", False, "out")
        # the valid columns come from the load, from a view's valid region (pl.slice valid_shape=,
        # language/valid_regions.py), or from both (the narrower wins): the same tile every way
        source = str(g.choice(["load", "view", "both"]))
        g.tag(f"pad_region:{source}")
        wider = int(g.choice([v for v in (vc, c - 1, c) if vc <= v <= c]))
        view_vc, load_vc = {
            "load": (None, vc),
            "view": (vc, None),
            "both": g.choice([(vc, wider), (wider, vc)]),
        }[source]
        if view_vc is not None:
            g.emit(2, f"v = pl.slice(a, [{r}, {c}], [lane * {r}, 0], valid_shape=[{r}, {view_vc}])", None)
        load_at = "[0, 0]" if view_vc is not None else f"[lane * {r}, 0]"
        src = "v" if view_vc is not None else "a"
        valid = f", valid_shape=[{r}, {load_vc}]" if load_vc is not None else ""
        g.emit(
            2,
            f"t = pl.load({src}, {load_at}, [{r}, {c}]{valid})",
            f"t = win(a, (lane * {r}, 0), ({r}, {c})).copy()",
        )
        g.emit(2, f"t = pl.tile.fillpad(t, pad_value=pl.PadValue.{pad})", f"t[:, {vc}:] = {fill}")
        if pad == "min" and g.p(0.5):
            g.emit(2, "t = pl.sub(t, pl.row_max(t))", "t = t - t.max(axis=1, keepdims=True)")
        g.emit(2, f"pl.store(t, [lane * {r}, 0], out)", f"put(out, (lane * {r}, 0), ({r}, {c}), t)")
        return
    half = c // 2 if c >= 32 else c  # windows start on 32-byte blocks (8 fp32)
    g.tensor("a", (lanes * r, 2 * c), "FP32")
    g.tensor("out", (lanes * r, c), "FP32", False, "out")
    g.emit(
        2,
        f"s = pl.load(a, [lane * {r}, 0], [{r}, {2 * c}])",
        f"s = win(a, (lane * {r}, 0), ({r}, {2 * c})).copy()",
    )
    g.emit(2, f"t = pl.add(s[:, 0:{c}], s[:, {c}:{2 * c}])", f"t = s[:, 0:{c}] + s[:, {c}:{2 * c}]")
    if g.p(0.5):  # a Vec -> Vec TMOV: a copy
        g.emit(2, "t = pl.move(t, target_memory=pl.Mem.Vec)", None)
    row = int(g.choice(range(r)))
    g.emit(
        2,
        f"t[{row}:{row + 1}, 0:{half}] = pl.full([1, {half}], dtype=pl.FP32, value=-2.0)",
        f"t[{row}:{row + 1}, 0:{half}] = -2.0",
    )
    if g.p(0.5):
        g.emit(2, f"t = pl.reshape(pl.reshape(t, [{r * c // 8}, 8]), [{r}, {c}])", None)
    g.emit(2, f"pl.store(t, [lane * {r}, 0], out)", f"put(out, (lane * {r}, 0), ({r}, {c}), t)")
