"""The tensor-language family `tensor_lang` (issue 23 items 3, 5, 6): scalar access to GM
(`pl.read` / `pl.write`, also the `pl.tensor.` forms), `pl.tensor.dim` of a static or a
`pl.dynamic` axis, `pl.transpose` of a tile or a tensor, explicit carries (`pl.range(...,
init_values=...)` with `pl.yield_`) and `if`/`else` on traced values (a read scalar, a trip index),
including an `if` that is the kernel's last statement.

A program gathers row tiles of `x` by indices it reads from `idx` (`pl.read`, values in range by
construction), optionally rebinds the tile in the arms of an `if` on the read index, stores it,
and optionally sums the tiles in an explicit carry; then it writes scalars (a read value, a
dimension) with `pl.write`, stores a transposed tile, and may end in an `if` on a read scalar. The
data are small integers, so every sum is exact in FP32 and the float64 reference is exact."""

from __future__ import annotations

from .program import G

ARM_OPS = {
    "add": ("pl.add({a}, {a})", "{a} + {a}"),
    "neg": ("pl.neg({a})", "-{a}"),
    "sub": ("pl.sub({a}, {b})", "{a} - {b}"),
}


def fam_tensor_lang(g: G) -> None:
    """Family tensor_lang (module docstring)."""
    rt = int(g.choice([8, 16]))  # rows of a tile
    cols = int(g.choice([16, 32, 64]))
    trips = int(g.choice([2, 3, 4]))
    rows = rt * trips
    dyn = g.p(0.3)
    if dyn:
        g.dyn["R"] = rows
    g.tensor("x", ("R" if dyn else rows, cols), "FP32")
    g.tensor("idx", (trips,), "INT32")
    g.inputs["idx"] = f"rng.integers(0, {trips}, ({trips},)).astype(np.int32)"  # in range by construction
    g.tensor("y", (rows, cols), "FP32", kind="out")
    g.tensor("s", (4,), "INT32", kind="out")
    g.tag(f"dyn_rows:{dyn}")
    read = "pl.read" if g.p(0.7) else "pl.tensor.read"
    write = "pl.write" if g.p(0.7) else "pl.tensor.write"

    carry = g.p(0.5)
    g.tag(f"init_values:{carry}")
    if carry:
        g.emit(
            1, f"acc0 = pl.full([{rt}, {cols}], dtype=pl.FP32, value=0.0)", f"acc = np.zeros(({rt}, {cols}))"
        )
        g.emit(1, f"for i, (acc,) in pl.range({trips}, init_values=(acc0,)):", f"for i in range({trips}):")
    else:
        g.emit(1, f"for i in pl.range({trips}):", f"for i in range({trips}):")
    g.emit(2, f"r = {read}(idx, [i])", "r = int(idx[i])")
    g.emit(
        2,
        f"t = pl.load(x, [pl.cast(r, pl.INDEX) * {rt}, 0], [{rt}, {cols}])",
        f"t = x[r * {rt}:(r + 1) * {rt}]",
    )
    branch = g.choice(["none", "read", "trip"])
    g.tag(f"branch:{branch}")
    if branch != "none":
        k = int(g.choice(range(1, trips)))
        cond = (f"r < {k}", f"r < {k}") if branch == "read" else (f"i < {k}", f"i < {k}")
        g.emit(2, f"if {cond[0]}:", f"if {cond[1]}:")
        for head in (None, "else:"):
            if head is not None:
                g.emit(2, head, head)
            op = str(g.choice(list(ARM_OPS)))
            kern, ref = ARM_OPS[op]
            g.emit(3, "t = " + kern.format(a="t", b="t"), "t = " + ref.format(a="t", b="t"))
    g.emit(2, f"pl.store(t, [i * {rt}, 0], y)", f"y[i * {rt}:(i + 1) * {rt}] = t")
    if carry:
        g.emit(2, "acc_out = pl.yield_(pl.add(acc, t))", "acc = acc + t")
        # the sum of the trips' tiles goes to rows the trips never store: the first tile, added again
        g.emit(1, f"pl.store(pl.add(acc_out, pl.load(y, [0, 0], [{rt}, {cols}])), [0, 0], y)", None)
        g.emit(1, None, f"y[0:{rt}] = acc + y[0:{rt}]")

    j = int(g.choice(range(trips)))
    bump = int(g.choice(range(-3, 4)))
    g.emit(1, f"{write}(s, [0], {read}(idx, [{j}]) + {bump})", f"s[0] = int(idx[{j}]) + {bump}")
    dim_form = g.choice(["tensor.dim", "shape"])
    g.tag(f"dim:{dim_form}")
    dim = "pl.tensor.dim(x, 0)" if dim_form == "tensor.dim" else "x.shape[0]"
    if dyn:  # a traced INDEX scalar (the call's extent)
        g.emit(1, f"{write}(s, [1], pl.cast({dim}, pl.INT32))", f"s[1] = {rows}")
    else:  # a static dimension is a Python int: a literal write
        g.emit(1, f"{write}(s, [1], {dim})", f"s[1] = {rows}")

    if g.p(0.5) and cols % 8 == 0 and rt % 8 == 0:
        g.tag("transpose")
        tform = g.choice(["tile", "tensor"])
        g.tag(f"transpose:{tform}")
        g.tensor("z", (cols, rt), "FP32", kind="out")
        src = (
            f"pl.load(x, [0, 0], [{rt}, {cols}])"
            if tform == "tile"
            else f"pl.slice(x, [{rt}, {cols}], [0, 0])"
        )
        g.emit(1, f"pl.store(pl.transpose({src}, 0, 1), [0, 0], z)", f"z[...] = x[0:{rt}].T")

    last = g.choice(["none", "if_else", "one_armed"])
    g.tag(f"last_if:{last}")
    if last != "none":
        k = int(g.choice(range(trips)))
        g.emit(1, f"if {read}(idx, [0]) > {k}:", f"if int(idx[0]) > {k}:")
        g.emit(2, f"{write}(s, [2], 1)", "s[2] = 1")
        if last == "if_else":
            g.emit(1, "else:", "else:")
            g.emit(2, f"{write}(s, [2], 2)", "s[2] = 2")


__all__ = ["fam_tensor_lang"]
