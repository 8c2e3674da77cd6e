"""The ND example kernel (examples/matmul_nd.py) against plain numpy on the same data, plus the
trace + lower time and the overhead of a cached call.

    python benchmarks/bench_matmul_nd.py
"""

from __future__ import annotations

from harness import best_of, fmt_time, row  # first: pins BLAS threads before numpy loads

import numpy as np  # isort: skip


def run() -> list[dict[str, str]]:
    sys_path_examples()
    import matmul_nd as ex

    rng = np.random.default_rng(0)
    x = rng.integers(-128, 128, (ex.M, ex.K), dtype=np.int8)
    w = rng.integers(-128, 128, (ex.N, ex.K), dtype=np.int8)
    x32, w32 = x.astype(np.int32), w.astype(np.int32)
    rows = []
    t_ours = best_of(lambda: ex.matmul_nd(x, w))
    t_ref = best_of(lambda: x32 @ w32.T)
    rows.append(
        row(
            f"matmul_nd int8 {ex.M}x{ex.K}x{ex.N}",
            fmt_time(t_ours),
            fmt_time(t_ref),
            f"{t_ours / t_ref:.2f}x",
            "numpy int32 matmul",
        )
    )

    def compile_fresh() -> None:
        ex.matmul_nd.clear_cache()
        ex.matmul_nd.lower()

    t_compile = best_of(compile_fresh)
    rows.append(row("matmul_nd trace + all passes", fmt_time(t_compile), "-", "-"))
    low = ex.matmul_nd.lower()
    t_run = best_of(lambda: low.run(x, w))
    t_call = best_of(lambda: ex.matmul_nd(x, w))
    rows.append(row("matmul_nd cached-call overhead", fmt_time(max(0.0, t_call - t_run)), "-", "-"))
    return rows


def sys_path_examples() -> None:
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))


if __name__ == "__main__":
    run()
