"""Kernels the codegen tests emit and check: one per feature of the text (loops, lanes, NZ loads,
slices, reshapes, scalar arithmetic, Vec ops, dynamic dims, the NZ Acc store)."""

from __future__ import annotations

from nzjit import pl

M, K, N = 64, 512, 256


@pl.kernel
def golden_nz_load(
    x: pl.Tensor[[128, 512], pl.INT8],
    w: pl.Tensor[[256, 512], pl.INT8, pl.NZ],
    out: pl.Out[pl.Tensor[[128, 256], pl.INT32]],
):
    """nz-layout.md §10: w loaded whole into Mat (each lane takes 64 rows of x)."""
    for mb in pl.spmd(2):
        wt = pl.load(w, [0, 0], [256, 512], target_memory=pl.Mem.Mat)
        xt = pl.load(x, [mb * 64, 0], [64, 512], target_memory=pl.Mem.Mat)
        acc = pl.matmul(xt, wt, b_trans=True)
        pl.store(acc, [mb * 64, 0], out)


@pl.kernel
def spmd_nz_load(
    x: pl.Tensor[[64, 512], pl.INT8],
    w: pl.Tensor[[512, 512], pl.INT8, pl.NZ],
    out: pl.Out[pl.Tensor[[64, 512], pl.INT32]],
):
    """NZ-16/18: the row offset n0 = nb * 256 of a lane, proven and divided whole."""
    for nb in pl.spmd(2):
        n0 = nb * 256
        wt = pl.load(w, [n0, 0], [256, 512], target_memory=pl.Mem.Mat)
        xt = pl.load(x, [0, 0], [64, 512], target_memory=pl.Mem.Mat)
        acc = pl.matmul(xt, wt, b_trans=True)
        pl.store(acc, [0, n0], out)


@pl.kernel
def nd_spmd_matmul(
    x: pl.Tensor[[M, K], pl.INT8], w: pl.Tensor[[N, K], pl.INT8], out: pl.Out[pl.Tensor[[M, N], pl.INT32]]
):
    """ND int8 SPMD matmul with a pipelined K loop carrying the accumulator."""
    for nb in pl.spmd(N // 128):
        n0 = nb * 128
        xt = pl.load(x, [0, 0], [M, 128], target_memory=pl.Mem.Mat)
        wt = pl.load(w, [n0, 0], [128, 128], target_memory=pl.Mem.Mat)
        acc = pl.matmul(xt, wt, b_trans=True)
        for k0 in pl.pipeline(128, K, 128):
            xt = pl.load(x, [0, k0], [M, 128], target_memory=pl.Mem.Mat)
            wt = pl.load(w, [n0, k0], [128, 128], target_memory=pl.Mem.Mat)
            acc = pl.matmul_acc(acc, xt, wt, b_trans=True)
        pl.store(acc, [0, n0], out)


E, GN, GK, T, NT, KT = 4, 512, 1024, 64, 256, 512


@pl.kernel
def grouped_nz_matmul(
    x: pl.Tensor[[E, T, GK], pl.INT8],
    w: pl.Tensor[[E, GN, GK], pl.INT8, pl.NZ],
    out: pl.Out[pl.Tensor[[E, T, GN], pl.INT32]],
):
    """Grouped NZ matmul: tensor-level slices x[e, :, k0:k0+KT] / w[e, n0:n0+NT, k0:k0+KT]."""
    for e in pl.spmd(E):
        for nb in pl.range(GN // NT):
            n0 = nb * NT
            acc = pl.matmul(x[e, :, 0:KT], w[e, n0 : n0 + NT, 0:KT], b_trans=True)
            for k0 in pl.pipeline(KT, GK, KT):
                acc = pl.matmul_acc(
                    acc, x[e, :, k0 : k0 + KT], w[e, n0 : n0 + NT, k0 : k0 + KT], b_trans=True
                )
            out[e, :, n0 : n0 + NT] = acc


@pl.kernel
def mod_floordiv_offsets(
    x: pl.Tensor[[64, 1024], pl.INT8],
    w: pl.Tensor[[512, 1024], pl.INT8, pl.NZ],
    out: pl.Out[pl.Tensor[[4, 64, 256], pl.INT32]],
):
    """NZ-16 `x % k` / `x // k` forms: the k and n blocks of a lane, floor semantics (NZ-19)."""
    for blk in pl.spmd(4):
        k0 = (blk % 2) * 512
        n0 = (blk // 2) * 256
        wt = pl.load(w, [n0, k0], [256, 512], target_memory=pl.Mem.Mat)
        xt = pl.load(x, [0, k0], [64, 512], target_memory=pl.Mem.Mat)
        acc = pl.matmul(xt, wt, b_trans=True)
        pl.store(acc, [blk, 0, 0], out)


@pl.kernel
def stacked_layers(
    x: pl.Tensor[[64, 256], pl.INT8],
    w: pl.Tensor[[3, 128, 256], pl.INT8, pl.NZ],
    out: pl.Out[pl.Tensor[[3, 64, 128], pl.INT32]],
):
    """NZ-30: a leading-axis slice w[layer] handed to an explicit pl.load stays a tensor.slice."""
    xt = pl.load(x, [0, 0], [64, 256], target_memory=pl.Mem.Mat)
    for layer in pl.range(3):
        wl = w[layer]
        wt = pl.load(wl, [0, 0], [128, 256], target_memory=pl.Mem.Mat)
        acc = pl.matmul(xt, wt, b_trans=True)
        pl.store(acc, [layer, 0, 0], out)


@pl.kernel
def vec_elementwise(
    a: pl.Tensor[[64, 128], pl.FP32],
    b: pl.Tensor[[64, 128], pl.FP32],
    out: pl.Out[pl.Tensor[[64, 128], pl.FP32]],
):
    """Vec tiles (ND): add, maximum, exp."""
    for r in pl.spmd(2):
        at = pl.load(a, [r * 32, 0], [32, 128])
        bt = pl.load(b, [r * 32, 0], [32, 128])
        s = pl.exp(pl.maximum(pl.add(at, bt), bt))
        pl.store(s, [r * 32, 0], out)


@pl.kernel
def ragged_rows(x: pl.Tensor[[800, 64], pl.FP32], out: pl.Out[pl.Tensor[[800, 64], pl.FP32]]):
    """A dynamic valid_shape: the last row tile is min(800 - o0, 256) rows."""
    for o0 in pl.range(0, 800, 256):
        rows = pl.min(800 - o0, 256)
        t = pl.load(x, [o0, 0], [256, 64], valid_shape=[rows, 64])
        pl.store(pl.add(t, t), [o0, 0], out)


@pl.kernel
def dynamic_batch(
    x: pl.Tensor[[pl.dynamic("B"), 64, 128], pl.FP32],
    out: pl.Out[pl.Tensor[[pl.dynamic("B"), 64, 128], pl.FP32]],
):
    """A dynamic leading dimension (an `index` argument %B); lanes stride over batches."""
    for core in pl.spmd(2):
        for b in pl.range(core, 4, pl.get_block_num()):
            t = pl.load(x, [b, 0, 0], [1, 64, 128])
            pl.store(t, [b, 0, 0], out)


@pl.kernel
def dynamic_nz_batch(
    x: pl.Tensor[[64, 256], pl.INT8],
    w: pl.Tensor[[pl.dynamic("B"), 128, 256], pl.INT8, pl.NZ],
    out: pl.Out[pl.Tensor[[4, 64, 128], pl.INT32]],
):
    """NZ-29: a rank-3 NZ weight with a dynamic batch blocks to [B, 8, 8, 16, 32]."""
    for b in pl.spmd(4):
        wt = pl.load(w, [b, 0, 0], [1, 128, 256], target_memory=pl.Mem.Mat)
        xt = pl.load(x, [0, 0], [64, 256], target_memory=pl.Mem.Mat)
        acc = pl.matmul(xt, wt, b_trans=True)
        pl.store(acc, [b, 0, 0], out)


@pl.kernel
def scalar_mod(
    x: pl.Tensor[[64, 128], pl.FP32], out: pl.Out[pl.Tensor[[64, 128], pl.FP32]], s: pl.Scalar[pl.INDEX]
):
    """A scalar parameter, `%` and `//` on values that may be negative (NZ-19 floor semantics)."""
    for i in pl.range(2):
        r = (s - i * 5) % 3
        q = (s - i * 5) // 3
        t = pl.load(x, [r * 16, 0], [16, 128])
        pl.store(t, [r * 16 + q * 0, 0], out)


@pl.kernel
def slice_flatten(x: pl.Tensor[[4, 64, 128], pl.FP32], out: pl.Out[pl.Tensor[[8192], pl.FP32]]):
    """A reshape of a slice: a new view of the base pointer moved to the slice's first element."""
    for _lane in pl.spmd(1):  # a loop so the trace keeps the names (see the report)
        xs = x[2]
        flat = pl.reshape(xs, [8192])
        t = pl.load(flat, [0], [8192])
        pl.store(t, [0], out)


@pl.kernel
def two_phases(x: pl.Tensor[[64, 128], pl.FP32], out: pl.Out[pl.Tensor[[64, 128], pl.FP32]]):
    """Two SPMD loops of different widths: lanes become scf.for loops, not the launch grid."""
    for r in pl.spmd(2):
        t = pl.load(x, [r * 32, 0], [32, 128])
        pl.store(t, [r * 32, 0], out)
    for r in pl.spmd(4):
        t = pl.load(x, [r * 16, 0], [16, 128])
        pl.store(pl.add(t, t), [pl.get_block_idx() * 16, 0], out)


@pl.kernel
def flatten_nz(w: pl.Tensor[[64, 128], pl.INT8, pl.NZ], out: pl.Out[pl.Tensor[[8192], pl.INT8]]):
    """NZ-31: a whole-tensor flatten of an NZ tensor is an ND view of the same bytes."""
    flat = pl.reshape(w, [8192])
    t = pl.load(flat, [0], [8192])
    pl.store(t, [0], out)


@pl.kernel
def nz_acc_store(
    a: pl.Tensor[[64, 32], pl.FP16],
    b: pl.Tensor[[32, 16], pl.FP16],
    out: pl.Out[pl.Tensor[[64, 16], pl.FP32, pl.NZ]],
):
    """NZ-20: a 64 x 16 FP32 Acc tile stored straight into an FP32 NZ [64, 16] target."""
    at = pl.load(a, [0, 0], [64, 32], target_memory=pl.Mem.Mat)
    bt = pl.load(b, [0, 0], [32, 16], target_memory=pl.Mem.Mat)
    acc = pl.matmul(at, bt)
    pl.store(acc, [0, 0], out, st_phase="Final")


#: Kernels that lower under NZJIT_VERIFY=1 (flatten_nz and nz_acc_store have their own tests).
ALL = [
    golden_nz_load,
    spmd_nz_load,
    nd_spmd_matmul,
    grouped_nz_matmul,
    mod_floordiv_offsets,
    stacked_layers,
    vec_elementwise,
    ragged_rows,
    dynamic_batch,
    dynamic_nz_batch,
    scalar_mod,
    slice_flatten,
    two_phases,
]


def has_nz(kernel) -> bool:
    return any(getattr(p.type, "layout", None) is pl.NZ for p in kernel.params)
