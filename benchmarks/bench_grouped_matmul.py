"""Target (a): the grouped NZ matmul of issue 11 on the numpy backend against plain numpy.

E = 8 experts, T = 128 tokens, N = K = 2048, tiles NT = 128, KT = 512: 128 SPMD lanes x 4 K chunks.
The tiles are the ones a device kernel would pick: x and w tiles of 128 KiB each fill half of L1
(room for double buffering), and AutoTileMatmulL0 splits a K chunk into mads of K = 256, as deep
as L0A / L0B allow, so each accumulator takes half the read-modify-writes of K = 128 mads
(NT = KT = 256 gives 128 x 128 @ 128 x 256 mads and measured ~5-10% slower here).
nzjit runs on resident device tensors (the kernel's execution: no host copies); the reference
is ``x[e] @ w[e].T`` in float32 on operands converted beforehand (bf16), and numpy's own int32
matmul of the same operands (int8, exact). The host-array call (uploads + download included)
is reported too, and, for bf16, the kernel's tile products alone on operands in cache: the
compute floor of a model that computes every tile product as its own float32 BLAS call (so
batched and per-lane runs give the same bits); the rest is operand conversion, accumulation and
data movement. The resident bf16 ratio, near its target, is the median of harness.PROCESSES
fresh processes.

    python benchmarks/bench_grouped_matmul.py
"""
# isort: skip_file

from __future__ import annotations

from harness import PROCESSES, fmt_time, in_fresh_processes, interleaved, median_run, row  # first: pins BLAS

import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402

import runtime  # noqa: E402
from runtime import threads  # noqa: E402
from nzjit import pl  # noqa: E402

E, T, N, K, NT, KT = 8, 128, 2048, 2048, 128, 512


def make(dtype, out_dtype):  # one kernel per dtype: the annotations are part of the kernel
    @pl.kernel
    def gmm(
        x: pl.Tensor[[E, T, K], dtype],
        w: pl.Tensor[[E, N, K], dtype, pl.NZ],
        out: pl.Out[pl.Tensor[[E, T, N], out_dtype]],
    ):
        for lane in pl.spmd(E * (N // NT)):
            e = lane // (N // NT)
            n0 = (lane % (N // NT)) * NT
            acc = pl.matmul(x[e, :, 0:KT], w[e, n0 : n0 + NT, 0:KT], b_trans=True)
            for k0 in pl.pipeline(KT, K, KT):
                acc = pl.matmul_acc(
                    acc, x[e, :, k0 : k0 + KT], w[e, n0 : n0 + NT, k0 : k0 + KT], b_trans=True
                )
            out[e, :, n0 : n0 + NT] = acc

    return gmm


def _l0_depth(kern, x: np.ndarray, w: np.ndarray) -> tuple[int, int, int]:
    """(m, k, n) of the kernel's mads after AutoTileMatmulL0 (all the same here)."""
    shapes = {
        (e.inputs[-2].type.shape[0], e.inputs[-2].type.shape[1], e.inputs[-1].type.shape[1])
        for e in kern.lower(x, runtime.pack_nz(w)).final.walk()
        if e.primitive.name in ("tile.mad", "tile.mad_acc")
    }
    (shape,) = shapes
    return tuple(int(d) for d in shape)  # type: ignore[return-value]


def _tile_products(m: int, k: int, n: int):
    """The compute floor of an exact per-tile model: the kernel's tile products alone, every
    lane's m x k @ k x n float32 product as its own BLAS call (stacked over a group of 16 lanes,
    its experts' Left images, as the backend calls them), on operands already converted and in cache; no
    conversion, no accumulation, no data movement."""
    rng = np.random.default_rng(1)
    group = 16
    images = max(1, group // (N // NT))  # a group's lanes span this many experts
    a = rng.standard_normal((images, m, k)).astype(np.float32)
    b = rng.standard_normal((images, group // images, n, k)).astype(np.float32)
    prod = np.empty((images, group // images, m, n), np.float32)
    steps = (E * N // NT) // group * (K // k)

    def run() -> None:
        for _ in range(steps):
            np.matmul(a[:, None], b.transpose(0, 1, 3, 2), out=prod)

    return run


def _setup(dtype, out_np, x: np.ndarray, w: np.ndarray, ref_fn, exact: bool, name: str):
    """The kernel on resident device tensors, checked once against the reference: (kern, call, the
    NZ-packed host weights)."""
    kern = make(dtype, {np.float32: pl.FP32, np.int32: pl.INT32}[out_np])
    worker = runtime.Worker(0)
    wp = runtime.pack_nz(w)
    xd = worker.alloc_tensor(x.shape, x.dtype, init=x)
    wd = worker.alloc_tensor(wp.shape, wp.dtype, init=wp)
    od = worker.alloc_tensor((E, T, N), out_np)
    ref = ref_fn()
    kern(xd, wd, od)
    got = worker.copy_from(od)
    if exact:
        assert np.array_equal(got, ref), f"{name}: not exact"
    else:
        err = np.abs(got - ref).max() / max(1.0, float(np.abs(ref).max()))
        assert err < 1e-5, f"{name}: relative error {err}"
    return kern, lambda: kern(xd, wd, od), wp


def _case(
    name: str,
    dtype,
    out_np,
    x: np.ndarray,
    w: np.ndarray,
    ref_fn,
    repeat: int,
    exact: bool,
    target: str,
    resident: dict[str, float] | None = None,
    one_thread: dict[str, float] | None = None,
    floor: bool = False,
) -> list[dict[str, str]]:
    """The rows of one dtype.  `resident`: times of the resident call measured elsewhere (the
    median of fresh processes); measured here when None.  `one_thread`: the same on one thread
    ("ours1"), measured elsewhere, reported in the row after it."""
    kern, call, wp = _setup(dtype, out_np, x, w, ref_fn, exact, name)
    t = resident or interleaved({"ours": call, "ref": ref_fn}, repeat=repeat)
    how = f", median of {PROCESSES} processes" if resident else ""
    rows = [
        row(
            f"grouped matmul {name} E{E} T{T} N{N} K{K} (resident{how})",
            fmt_time(t["ours"]),
            fmt_time(t["ref"]),
            f"{t['ours'] / t['ref']:.2f}x",
            target,
        )
    ]
    if one_thread:
        rows.append(
            row(
                "  same, one thread (no helper converting the next operands)",
                fmt_time(one_thread["ours1"]),
                fmt_time(one_thread["ref"]),
                f"{one_thread['ours1'] / one_thread['ref']:.2f}x",
                "-",
            )
        )
    if floor:
        m, k, n = _l0_depth(kern, x, w)
        tf = interleaved({"floor": _tile_products(m, k, n), "ref": ref_fn}, repeat=repeat)
        rows.append(
            row(
                f"  its {E * N // NT * K // k} tile products {m}x{k} @ {k}x{n} alone (in cache)",
                fmt_time(tf["floor"]),
                fmt_time(tf["ref"]),
                f"{tf['floor'] / tf['ref']:.2f}x",
                "-",
            )
        )
    th = interleaved({"ours": lambda: kern(x, wp), "ref": ref_fn}, repeat=max(1, repeat - 2))
    rows.append(
        row(
            f"grouped matmul {name}, host arrays (upload+download)",
            fmt_time(th["ours"]),
            fmt_time(th["ref"]),
            f"{th['ours'] / th['ref']:.2f}x",
            "-",
        )
    )
    return rows


def _bf16():
    """bf16 operands, and the reference: float32 matmuls on operands converted beforehand."""
    rng = np.random.default_rng(0)
    xb = rng.standard_normal((E, T, K)).astype(ml_dtypes.bfloat16)
    wb = rng.standard_normal((E, N, K)).astype(ml_dtypes.bfloat16)
    xf, wf = xb.astype(np.float32), wb.astype(np.float32)
    out_f = np.empty((E, T, N), np.float32)

    def ref() -> np.ndarray:
        for e in range(E):
            np.matmul(xf[e], wf[e].T, out=out_f[e])
        return out_f

    return xb, wb, ref


def measure_bf16(repeat: int = 9) -> dict[str, float]:
    """Best-of-`repeat` interleaved times (s) of the resident bf16 call with runtime.threads.THREADS
    threads ("ours"), on one thread ("ours1": no helper converting operands), and the reference."""
    xb, wb, ref = _bf16()
    _, call, _ = _setup(pl.BF16, np.float32, xb, wb, ref, False, "bf16->fp32")
    count = threads.THREADS

    def one_thread() -> None:
        threads.THREADS = 1
        try:
            call()
        finally:
            threads.THREADS = count

    return interleaved({"ours": call, "ours1": one_thread, "ref": ref}, repeat=repeat)


def run() -> list[dict[str, str]]:
    # bf16 sits near its target, where a process's page placement moves the ratio (harness.PROCESSES)
    runs = in_fresh_processes("bench_grouped_matmul", "measure_bf16()")
    resident = median_run(runs, lambda t: t["ours"] / t["ref"])
    xb, wb, ref_bf16 = _bf16()
    one = median_run(runs, lambda t: t["ours1"] / t["ref"])
    rows = _case(
        "bf16->fp32",
        pl.BF16,
        np.float32,
        xb,
        wb,
        ref_bf16,
        9,
        False,
        "<= 1.0x",
        resident=resident,
        one_thread=one,
        floor=True,
    )
    rng = np.random.default_rng(1)
    xi = rng.integers(-128, 128, (E, T, K), dtype=np.int8)
    wi = rng.integers(-128, 128, (E, N, K), dtype=np.int8)
    x32, w32 = xi.astype(np.int32), wi.astype(np.int32)  # numpy's own int32 matmul, exact
    out_i = np.empty((E, T, N), np.int32)

    def ref_int() -> np.ndarray:
        for e in range(E):
            np.matmul(x32[e], w32[e].T, out=out_i[e])
        return out_i

    rows += _case("int8->int32", pl.INT8, np.int32, xi, wi, ref_int, 2, True, "< 1x, exact")
    return rows


if __name__ == "__main__":
    run()
