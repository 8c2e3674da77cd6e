"""Target (c): bandwidth of runtime.pack_nz / unpack_nz against np.copyto of the same bytes.

Both sides write a preallocated buffer (``out=``), so the ratio is the cost of the NZ
permutation itself; reported as a bandwidth ratio, np.copyto time / pack time (target >= 0.5).
Not a timed test: nothing is asserted.

    python benchmarks/bench_pack_nz.py
"""
# isort: skip_file

from __future__ import annotations

from harness import interleaved, row  # first: pins BLAS threads before numpy loads

import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402

from runtime import pack_nz, unpack_nz  # noqa: E402

CASES = [
    ((8, 2048, 2048), np.int8),
    ((2048, 2048), ml_dtypes.bfloat16),
    ((4, 1024, 4096), np.float32),
    ((64, 256, 512), np.int8),
]


def _cell(t: float, nbytes: int) -> str:
    return f"{t * 1e3:.2f} ms {nbytes / t / 1e9:.1f} GB/s"


def run() -> list[dict[str, str]]:
    rows = []
    for shape, dtype in CASES:
        a = np.random.default_rng(0).integers(-100, 100, size=shape).astype(dtype)
        buf = np.empty_like(a)
        packed = pack_nz(a)
        assert np.array_equal(unpack_nz(packed).view(np.uint8), a.view(np.uint8))
        t = interleaved({"pack": lambda a=a, buf=buf: pack_nz(a, out=buf),
                         "unpack": lambda packed=packed, buf=buf: unpack_nz(packed, out=buf),
                         "copy": lambda a=a, buf=buf: np.copyto(buf, a)}, repeat=9)
        name = f"{np.dtype(dtype).name}{list(shape)}"
        for op in ("pack", "unpack"):
            rows.append(row(f"{op}_nz(out=) {name}", _cell(t[op], a.nbytes), _cell(t["copy"], a.nbytes),
                            f"{t['copy'] / t[op]:.2f}x bw", ">= 0.5x bw"))
    return rows


if __name__ == "__main__":
    run()
