"""The cube-variant families `cube_tail` and `cube_batch` (issue 23): one-row and small-M matmuls whose K and N run
past the tensors (`pl.load(..., clamp=True)`: valid K, a ragged last N tile), with or without a
bias row (`pl.tile.matmul_bias` / `pl.tile.gemv_bias`, TMATMUL_BIAS), each N tile stored into an
exact-size ND output (its valid part only); the valid K is sometimes a scalar argument (a
dynamic K tail: TMATMUL's run-time k). The reference multiplies the valid parts in float64
(the data are small integers: every sum is exact)."""

from __future__ import annotations

from .forms import pick
from .program import ACC, DTYPES, G, c0_of, data_dtype


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
    esize = DTYPES[dt][1] // 8
    # a run-time K (a scalar argument): one mad, so the K window must fit L0A / L0B in one chunk
    # (else refused, rule k-tail); TGEMV takes static K tails only, so it is not drawn with one
    dyn_k = g.p(0.3) and tk * tn * esize <= 65536 and max(m, 16) * tk * esize <= 65536
    gemv = m == 1 and not dyn_k and g.p(0.5)
    g.tag(
        f"k_dynamic:{dyn_k}",
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
    kvalid = ""
    if dyn_k:
        g.scalar("kv", kv)
        kvalid = f"valid_shape=[{m}, kv], "
    g.emit(
        1,
        f"tx = pl.load(x, [0, 0], [{m}, {tk}], {kvalid}target_memory=pl.Mem.Mat, clamp=True)",
        f"tx = win(x, (0, 0), ({m}, {kv}))",
    )
    loop = g.choice(["pl.range", "pl.spmd", "range"])
    g.tag(f"loop:{loop}")
    g.emit(1, f"for nb in {loop}({nt}):", f"for nb in range({nt}):")
    g.emit(2, f"n0 = nb * {tn}", f"n0 = nb * {tn}")
    g.emit(2, None, f"v = min({tn}, {n_real} - n0)")
    wvalid = f"valid_shape=[kv, {tn}], " if dyn_k else ""
    g.emit(2, f"tw = pl.load(w, [0, n0], [{tk}, {tn}], {wvalid}target_memory=pl.Mem.Mat, clamp=True)", None)
    if bias:
        g.emit(2, f"tb = pl.load(b, [0, n0], [1, {tn}], target_memory=pl.Mem.Mat, clamp=True)", None)
        op = "pl.tile.gemv_bias(tx, tw, tb)" if gemv else "pl.tile.matmul_bias(tx, tw, tb)"
        ref = "mm(tx, win(w, (0, n0), (" + str(kv) + ", v)), False) + win(b, (0, n0), (1, v))"
    else:
        op = "pl.tile.gemv(tx, tw)" if gemv else "pl.matmul(tx, tw)"
        ref = "mm(tx, win(w, (0, n0), (" + str(kv) + ", v)), False)"
    g.emit(2, f"pl.store({op}, [0, n0], out)", f"put(out, (0, n0), ({m}, v), {ref})")


def fam_cube_batch(g: G) -> None:
    """Family cube_batch: `pl.batch_matmul` of rank-3 Mat tiles (a transposed rhs through
    `pl.tile.transpose_view` or `b_trans=True`, an ND or NZ weight, a broadcast rhs batch of 1),
    each lane or loop trip multiplying its own group of batches into its `[nb, M, N]` window."""
    dt = data_dtype(g)
    c0, acc = c0_of(dt), ACC[dt]
    g.tag(f"dtype:{dt}")
    nb = int(g.choice([2, 3, 4]))
    m = int(g.choice([16, 32]))
    k = pick(g, (32, 64, 128), lambda v: v % c0 == 0)
    n = pick(g, (16, 32, 48, 64), lambda v: v % c0 == 0)
    b_trans = g.p(0.5)
    nz = b_trans and g.p(0.5)  # an NZ weight [B, N, K]: each batch's plane its own NZ block
    wb = 1 if g.p(0.2) else nb  # a rhs batch of 1 is broadcast over the lhs's batches
    groups = int(g.choice([1, 2, 3]))
    spelling = g.choice(["view", "flag"]) if b_trans else "plain"
    g.tag(f"b_trans:{b_trans}", f"nz:{nz}", f"broadcast:{wb == 1}", f"spelling:{spelling}")
    wshape = (groups * wb, n, k) if b_trans else (groups * wb, k, n)
    g.tensor("x", (groups * nb, m, k), dt)
    g.tensor("w", wshape, dt, nz=nz)
    g.tensor("out", (groups * nb, m, n), acc, kind="out")
    loop = g.choice(["pl.range", "pl.spmd", "range"])
    g.tag(f"loop:{loop}")
    g.emit(1, f"for gi in {loop}({groups}):", f"for gi in range({groups}):")
    g.emit(2, f"b0 = gi * {nb}", f"b0 = gi * {nb}")
    g.emit(2, f"w0 = gi * {wb}", f"w0 = gi * {wb}")
    g.emit(2, f"tx = pl.load(x, [b0, 0, 0], [{nb}, {m}, {k}], target_memory=pl.Mem.Mat)", None)
    g.emit(
        2, f"tw = pl.load(w, [w0, 0, 0], [{wb}, {wshape[1]}, {wshape[2]}], target_memory=pl.Mem.Mat)", None
    )
    op = {
        "view": "pl.batch_matmul(tx, pl.tile.transpose_view(tw))",
        "flag": "pl.tile.batch_matmul(tx, tw, b_trans=True)",
        "plain": "pl.batch_matmul(tx, tw)",
    }[spelling]
    g.emit(2, f"pl.store({op}, [b0, 0, 0], out)", None)
    g.emit(2, None, f"for i in range({nb}):")
    wi = "w0" if wb == 1 else "w0 + i"
    ref = f"mm(win(x, (b0 + i, 0, 0), (None, {m}, {k})), win(w, ({wi}, 0, 0), (None, {wshape[1]}, {wshape[2]})), {b_trans})"
    g.emit(3, None, f"put(out, (b0 + i, 0, 0), (1, {m}, {n}), {ref})")


__all__ = ["fam_cube_batch", "fam_cube_tail"]
