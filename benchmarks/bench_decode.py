"""Issue 27 item 1: the decode-shaped kernels against the plain numpy a user would write for the
same math on the same data (one BLAS thread, interleaved best of 3, in one run).

| row | kernel | lanes x K steps |
| --- | --- | --- |
| decode | 16 tokens x bf16 NZ W[4096, 4096] (`x @ W.T`), 256-wide lanes, K pipelined by 256 | 16 x 16 |
| gemv | 1 token x bf16 NZ W[4096, 4096], 128-wide lanes, K by 512 | 32 x 8 |
| int8 prefill | 256 tokens x int8 NZ W[4096, 4096], 128-wide lanes, K by 256 | 32 x 16 |
| ND weight | 16 tokens x bf16 ND W[K, N] = [4096, 4096] (`x @ W`, the Qwen3 decode projection), 256-wide lanes, K chunks of 128 | 16 x 32 |

Every kernel runs on resident device tensors (its execution: no host copies) and is checked once
against its reference (int8 exactly).

The reference is what a user writes in numpy from the arrays as stored: bf16 operands cast to
float32, then one BLAS matmul (``x.astype(f32) @ w.astype(f32).T``); int8 ones cast to float64, whose
products and sums are exact here (numpy's int32 matmul has no BLAS). A second row gives the ratio
to that BLAS call alone, on operands converted beforehand: the floor of a model that must convert
the weights it reads on every call (the simulator keeps device bytes, bf16 / int8, in GM). The
ratio is also given in CPU time (`time.process_time`, every thread of the process: the work done,
which a shared machine's load moves far less than wall time).

    python benchmarks/bench_decode.py [case ...]
"""
# isort: skip_file

from __future__ import annotations

from harness import (
    fmt_time,
    interleaved,
    interleaved_clocks,
    row,
)  # first: pins BLAS threads before numpy loads

import sys  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402

import runtime  # noqa: E402
from nzjit import pl  # noqa: E402

TARGET = "<= 1.5x"
REPEAT = 3


def nz_weight_kernel(M: int, N: int, K: int, NT: int, KT: int, dtype: Any, out_dtype: Any) -> Any:
    """``out = x @ w.T`` with w an NZ [N, K] weight: one lane per NT columns, K pipelined by KT."""

    @pl.kernel
    def nz_matmul(
        x: pl.Tensor[[M, K], dtype],
        w: pl.Tensor[[N, K], dtype, pl.NZ],
        out: pl.Out[pl.Tensor[[M, N], out_dtype]],
    ):
        for lane in pl.spmd(N // NT):
            n0 = lane * NT
            acc = pl.matmul(x[:, 0:KT], w[n0 : n0 + NT, 0:KT], b_trans=True)
            for k0 in pl.pipeline(KT, K, KT, stage=2):
                acc = pl.matmul_acc(acc, x[:, k0 : k0 + KT], w[n0 : n0 + NT, k0 : k0 + KT], b_trans=True)
            out[:, n0 : n0 + NT] = acc

    return nz_matmul


def nd_weight_kernel(M: int, N: int, K: int, NT: int, KT: int, dtype: Any, out_dtype: Any) -> Any:
    """``out = x @ w`` with w an ND [K, N] weight (as checkpoints store it): one lane per NT
    columns, K in chunks of KT, each chunk loaded ND -> NZ."""

    @pl.kernel
    def nd_matmul(
        x: pl.Tensor[[M, K], dtype], w: pl.Tensor[[K, N], dtype], out: pl.Out[pl.Tensor[[M, N], out_dtype]]
    ):
        for lane in pl.spmd(N // NT):
            n0 = lane * NT
            acc = pl.matmul(x[:, 0:KT], w[0:KT, n0 : n0 + NT])
            for k0 in pl.pipeline(KT, K, KT, stage=2):
                acc = pl.matmul_acc(acc, x[:, k0 : k0 + KT], w[k0 : k0 + KT, n0 : n0 + NT])
            out[:, n0 : n0 + NT] = acc

    return nd_matmul


#: name -> (M, N, K, NT, KT, operand dtype, weight layout)
CASES: dict[str, tuple[int, int, int, int, int, str, str]] = {
    "decode": (16, 4096, 4096, 256, 256, "bf16", "NZ"),
    "gemv": (1, 4096, 4096, 128, 512, "bf16", "NZ"),  # 256-wide lanes: 2 x 256 KiB buffers overfill L1
    "int8 prefill": (256, 4096, 4096, 128, 256, "int8", "NZ"),
    "ND weight": (16, 4096, 4096, 256, 128, "bf16", "ND"),
}


def setup(name: str) -> tuple[Callable[[], object], Callable[[], np.ndarray], Callable[[], np.ndarray], str]:
    """(the resident call, the user's numpy, BLAS alone on converted operands, a title) of a case,
    checked once."""
    M, N, K, NT, KT, dt, layout = CASES[name]
    rng = np.random.default_rng(0)
    if dt == "int8":
        x = rng.integers(-128, 128, (M, K), dtype=np.int8)
        w = rng.integers(-128, 128, (N, K), dtype=np.int8)
        ops, out_np, ft = (pl.INT8, pl.INT32), np.int32, np.float64
    else:
        x = rng.standard_normal((M, K)).astype(ml_dtypes.bfloat16)
        w = rng.standard_normal((K, N) if layout == "ND" else (N, K)).astype(ml_dtypes.bfloat16)
        ops, out_np, ft = (pl.BF16, pl.FP32), np.float32, np.float32
    make = nd_weight_kernel if layout == "ND" else nz_weight_kernel
    kern = make(M, N, K, NT, KT, *ops)
    stored = w if layout == "ND" else runtime.pack_nz(w)
    worker = runtime.Worker(0)
    xd = worker.alloc_tensor(x.shape, x.dtype, init=x)
    wd = worker.alloc_tensor(stored.shape, stored.dtype, init=stored)
    od = worker.alloc_tensor((M, N), out_np)
    xf, wf = x.astype(ft), w.astype(ft)
    if layout == "ND":

        def user() -> np.ndarray:
            return x.astype(ft) @ w.astype(ft)

        def blas() -> np.ndarray:
            return xf @ wf
    else:

        def user() -> np.ndarray:
            return x.astype(ft) @ w.astype(ft).T

        def blas() -> np.ndarray:
            return xf @ wf.T

    def call() -> None:
        kern(xd, wd, od)

    call()
    got, ref = worker.copy_from(od), user()
    if dt == "int8":
        assert np.array_equal(got, ref.astype(np.int64).astype(np.int32)), f"{name}: not exact"
    else:
        err = np.abs(got - ref).max() / np.abs(ref).max()
        assert err < 1e-5, f"{name}: relative error {err}"
    shape = f"W[K, N] [{K}, {N}]" if layout == "ND" else f"NZ W[{N}, {K}]"
    title = f"{name}: {M} x {dt} {shape}, {N // NT} lanes x {K // KT} K steps (resident)"
    return call, user, blas, title


def measure(name: str, repeat: int = REPEAT) -> dict[str, float]:
    """Interleaved best-of-`repeat` times (s) of a case: "ours", "user" (numpy from the stored
    dtypes) and "blas" (the matmul alone on converted operands)."""
    call, user, blas, _ = setup(name)
    return interleaved({"ours": call, "user": user, "blas": blas}, repeat=repeat)


def case_rows(name: str, repeat: int = REPEAT) -> list[dict[str, str]]:
    call, user, blas, title = setup(name)
    both = interleaved_clocks({"ours": call, "user": user, "blas": blas}, repeat=repeat)
    t = {k: wall for k, (wall, _) in both.items()}
    c = {k: cpu for k, (_, cpu) in both.items()}
    return [
        row(title, fmt_time(t["ours"]), fmt_time(t["user"]), f"{t['ours'] / t['user']:.2f}x", TARGET),
        row(
            "  same in CPU time (the process's, helper threads included)",
            fmt_time(c["ours"]),
            fmt_time(c["user"]),
            f"{c['ours'] / c['user']:.2f}x",
            "-",
        ),
        row(
            "  same vs the BLAS call alone on operands converted beforehand",
            fmt_time(t["ours"]),
            fmt_time(t["blas"]),
            f"{t['ours'] / t['blas']:.2f}x",
            "-",
        ),
    ]


def run(names: list[str] | None = None) -> list[dict[str, str]]:
    rows: list[dict[str, str]] = []
    for name in names or list(CASES):
        rows += case_rows(name)
    return rows


if __name__ == "__main__":
    run(sys.argv[1:] or None)
