"""Bandwidth of runtime.pack_nz / unpack_nz against np.copyto of the same bytes.

Run: ``python benchmarks/bench_pack_nz.py``.  Per case, best-of-N time and GB/s of

* ``pack_nz(a, out=buf)`` / ``unpack_nz(p, out=buf)`` against ``np.copyto(buf, a)`` (both write
  a preallocated buffer: the ratio is the cost of the NZ permutation itself, target >= 0.5);
* ``pack_nz(a)`` against ``a.copy()`` (both allocate: first-touch page faults included).

Not a timed test: nothing is asserted.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # before numpy: pin BLAS threads so runs compare

import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from runtime import pack_nz, unpack_nz  # noqa: E402

CASES = [
    ((8, 2048, 2048), np.int8),
    ((2048, 2048), ml_dtypes.bfloat16),
    ((4, 1024, 4096), np.float32),
    ((64, 256, 512), np.int8),
]


def _best(fn, repeat: int = 9) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def _case(shape: tuple[int, ...], dtype: type) -> str:
    """One table row: times are best-of-N; ratios are np.copyto / pack_nz (higher is better)."""
    a = np.random.default_rng(0).integers(-100, 100, size=shape).astype(dtype)
    buf = np.empty_like(a)
    packed = pack_nz(a)
    gb = a.nbytes / 1e9
    t_copy = _best(lambda: np.copyto(buf, a))
    t_pack = _best(lambda: pack_nz(a, out=buf))
    t_unpack = _best(lambda: unpack_nz(packed, out=buf))
    t_pack_new = _best(lambda: pack_nz(a))
    t_copy_new = _best(lambda: a.copy())

    def cell(t: float) -> str:
        return f"{t * 1e3:6.2f}ms {gb / t:4.1f}GB/s"

    name = f"{np.dtype(dtype).name}{list(shape)}"
    return (
        f"{name:<24}"
        + "".join(f"{cell(t):>17}" for t in (t_pack, t_unpack, t_copy))
        + f"{t_copy / t_pack:>7.2f}"
        + "".join(f"{cell(t):>17}" for t in (t_pack_new, t_copy_new))
        + f"{t_copy_new / t_pack_new:>7.2f}"
    )


def main() -> None:
    head = ["pack_nz(out=)", "unpack_nz(out=)", "np.copyto", "ratio", "pack_nz()", "a.copy()", "ratio"]
    print(
        f"{'case':<24}"
        + "".join(f"{h:>17}" for h in head[:3])
        + f"{head[3]:>7}"
        + "".join(f"{h:>17}" for h in head[4:6])
        + f"{head[6]:>7}"
    )
    for shape, dtype in CASES:
        print(_case(shape, dtype))


if __name__ == "__main__":
    main()
