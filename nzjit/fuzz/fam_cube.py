"""The cube-variant family `cube_tail` (issue 23): one-row and small-M matmuls whose K and N run
past the tensors (`pl.load(..., clamp=True)`: valid K, a ragged last N tile), with or without a
bias row (`pl.tile.matmul_bias` / `pl.tile.gemv_bias`, TMATMUL_BIAS), each N tile stored into an
exact-size ND output (its valid part only). The reference multiplies the valid parts in float64
(the data are small integers: every sum is exact)."""

from __future__ import annotations

from .forms import pick
from .program import ACC, G, c0_of, data_dtype


def fam_cube_tail(g: G) -> None:
    """Family cube_tail (module docstring)."""
    dt = data_dtype(g)
    c0, acc = c0_of(dt), ACC[dt]
    g.tag(f"dtype:{dt}")
    m = int(g.wchoice([(3, 1), (1, 4), (2, 16), (1, 32)]))
    tk = pick(g, (32, 64, 128, 256), lambda v: v % c0 == 0 and v % 16 == 0)
    kv = tk if g.p(0.3) else int(g.choice(range(1, tk + 1)))
    tn = pick(g, (16, 32, 64, 128), lambda v: v % c0 == 0)
    nt = int(g.choice([1, 2, 3]))
    n_real = nt * tn - (int(g.choice(range(tn))) if g.p(0.7) else 0)
    bias = g.p(0.4)
    gemv = m == 1 and g.p(0.5)
    g.tag(
        f"k_tail:{kv < tk}",
        f"n_tail:{n_real < nt * tn}",
        "bias" if bias else "no_bias",
        "gemv" if gemv else "matmul",
    )
    g.tensor("x", (m, kv), dt)
    g.tensor("w", (kv, n_real), dt)
    if bias:
        g.tensor("b", (1, n_real), acc)
    g.tensor("out", (m, n_real), acc, kind="out")
    g.emit(
        1,
        f"tx = pl.load(x, [0, 0], [{m}, {tk}], target_memory=pl.Mem.Mat, clamp=True)",
        f"tx = win(x, (0, 0), ({m}, {kv}))",
    )
    loop = g.choice(["pl.range", "pl.spmd", "range"])
    g.tag(f"loop:{loop}")
    g.emit(1, f"for nb in {loop}({nt}):", f"for nb in range({nt}):")
    g.emit(2, f"n0 = nb * {tn}", f"n0 = nb * {tn}")
    g.emit(2, None, f"v = min({tn}, {n_real} - n0)")
    g.emit(2, f"tw = pl.load(w, [0, n0], [{tk}, {tn}], target_memory=pl.Mem.Mat, clamp=True)", None)
    if bias:
        g.emit(2, f"tb = pl.load(b, [0, n0], [1, {tn}], target_memory=pl.Mem.Mat, clamp=True)", None)
        op = "pl.tile.gemv_bias(tx, tw, tb)" if gemv else "pl.tile.matmul_bias(tx, tw, tb)"
        ref = "mm(tx, win(w, (0, n0), (" + str(kv) + ", v)), False) + win(b, (0, n0), (1, v))"
    else:
        op = "pl.tile.gemv(tx, tw)" if gemv else "pl.matmul(tx, tw)"
        ref = "mm(tx, win(w, (0, n0), (" + str(kv) + ", v)), False)"
    g.emit(2, f"pl.store({op}, [0, n0], out)", f"put(out, (0, n0), ({m}, v), {ref})")


__all__ = ["fam_cube_tail"]
