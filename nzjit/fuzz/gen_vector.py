"""Fuzzer family vec_alu: SPMD lanes running random chains of the vector unit's ops (tile-scalar
ALU, tile-tile minimum / maximum / div, row and column reductions with their broadcasts, unary
ops, conversions with a rounding mode, fills and padding) on fp32 Vec windows, against a numpy
reference on float64 that rounds every instruction's result to fp32 once, as the device does.

Data are small integers, so every sum and product stays exact in fp32 and the comparison is exact;
a division only divides by |y| + 1 (never zero) and is followed by no sum or conversion, whose
results would then depend on rounding the reference does not model bit for bit.
"""

from __future__ import annotations

from .gen import G

_R32 = ".astype(np.float32).astype(np.float64)"
_SCALAR = {"add": "+", "sub": "-", "mul": "*"}
_CVT_REF = {"rint": "np.rint({x})", "round": "np.sign({x}) * np.floor(np.abs({x}) + 0.5)",
            "trunc": "np.trunc({x})", "floor": "np.floor({x})", "ceil": "np.ceil({x})"}


def fam_vec_alu(g: G) -> None:
    """One program of the family (see the module docstring)."""
    lanes = int(g.choice([1, 2, 3, 4]))  # type: ignore[call-overload]
    r = int(g.choice([8, 16]))  # type: ignore[call-overload]
    c = int(g.choice([8, 16, 64]))  # type: ignore[call-overload]
    g.tag("dtype:FP32", f"alu_lanes:{lanes}")
    for name in ("a", "b"):
        g.tensor(name, (lanes * r, c), "FP32")
    g.tensor("out", (lanes * r, c), "FP32", False, "out")
    g.emit(1, f"for lane in pl.spmd({lanes}):", f"for lane in range({lanes}):")
    for nm, src in (("x", "a"), ("y", "b")):
        g.emit(2, f"{nm} = pl.load({src}, [lane * {r}, 0], [{r}, {c}], target_memory=pl.Mem.Vec)",
               f"{nm} = win({src}, (lane * {r}, 0), ({r}, {c})).copy()")
    names, exact = ["x", "y"], True
    for step in range(int(g.choice([1, 2, 3, 4]))):  # type: ignore[call-overload]
        kinds = ["scalar", "minmax", "row", "col", "unary", "full"] + (["cvt", "sum", "div"] if exact else [])
        kind = str(g.choice(kinds))
        g.tag(f"alu:{kind}")
        a, b, t = str(g.choice(names)), str(g.choice(names)), f"t{step}"
        if kind == "scalar":
            op = str(g.choice(list(_SCALAR)))
            s = float(g.choice([2.0, -1.0, 0.5]))  # type: ignore[arg-type]
            g.emit(2, f"{t} = pl.{op}({a}, {s})", f"{t} = ({a} {_SCALAR[op]} {s}){_R32}")
        elif kind == "minmax":
            op = str(g.choice(["minimum", "maximum"]))
            g.emit(2, f"{t} = pl.{op}({a}, {b})", f"{t} = np.{op}({a}, {b})")
        elif kind == "row":
            red, exp = str(g.choice(["max", "min"])), str(g.choice(["add", "sub", "mul"]))
            g.emit(2, f"{t} = pl.row_expand_{exp}({a}, pl.row_{red}({a}))",
                   f"{t} = ({a} {_SCALAR[exp]} {a}.{red}(axis=1, keepdims=True)){_R32}")
        elif kind == "col":
            red, exp = str(g.choice(["max", "min"])), str(g.choice(["add", "sub"]))
            g.emit(2, f"{t} = pl.col_expand_{exp}({a}, pl.col_{red}({a}))",
                   f"{t} = ({a} {_SCALAR[exp]} {a}.{red}(axis=0, keepdims=True)){_R32}")
        elif kind == "unary":
            op = str(g.choice(["abs", "neg", "relu"]))
            ref = {"abs": f"np.abs({a})", "neg": f"-{a}", "relu": f"np.maximum({a}, 0)"}[op]
            g.emit(2, f"{t} = pl.{op}({a})", f"{t} = {ref}")
        elif kind == "full":
            g.emit(2, f"{t} = pl.add({a}, pl.full([{r}, {c}], dtype=pl.FP32, value=3.0))", f"{t} = ({a} + 3.0){_R32}")
        elif kind == "sum":  # integer-valued halves: the tree sum is exact
            g.emit(2, f"{t} = pl.row_expand_sub({a}, pl.row_sum({a}))",
                   f"{t} = ({a} - {a}.sum(axis=1, keepdims=True)){_R32}")
        elif kind == "cvt":
            mode = str(g.choice(list(_CVT_REF)))
            half = f"({a} * 0.5)"
            g.emit(2, f"{t} = pl.cast(pl.cast(pl.mul({a}, 0.5), pl.INT32, mode={mode!r}), pl.FP32, mode='rint')",
                   f"{t} = " + _CVT_REF[mode].format(x=half))
        else:  # div
            exact = False
            g.emit(2, f"{t} = pl.div({a}, pl.add(pl.abs({b}), 1.0))",
                   f"{t} = ({a} / (np.abs({b}) + 1.0)){_R32}")
        names.append(t)
    g.emit(2, f"pl.store({names[-1]}, [lane * {r}, 0], out)", f"put(out, (lane * {r}, 0), ({r}, {c}), {names[-1]})")
