"""Target (c): bandwidth of runtime.pack_nz / unpack_nz against np.copyto of the same bytes.

Both sides write a preallocated buffer (``out=``), so the ratio is the cost of the NZ
permutation itself; reported as a bandwidth ratio, np.copyto time / pack time (target >= 0.5),
of the median of harness.PROCESSES fresh processes.
For scale, pack_nz is also set against the same permutation written the obvious numpy way (a
typed copy of a swapped-axes view). pack_nz moves 32-byte lines: a plane of up to 1 MiB in one
np.take gather (up to 8 MiB when unpacking), a larger one tile by tile (512 rows x 64 lines per
copy), so that neither side walks a column of lines at a stride that is a multiple of 4 KiB
(such a stride maps every line to the same few cache sets). In cache, numpy moves a scattered
32-byte line in ~2.5-3 ns and a contiguous copy 32 bytes in ~1 ns, which bounds every ratio here;
a compiled, cache-blocked loop (tried with numba) moved lines no faster.
Not a timed test: nothing is asserted.

    python benchmarks/bench_pack_nz.py
"""
# isort: skip_file

from __future__ import annotations

from harness import in_fresh_processes, interleaved, median_run, row  # first: pins BLAS threads

import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402

from runtime import pack_nz, unpack_nz  # noqa: E402

CASES = [
    ((8, 2048, 2048), np.int8),
    ((2048, 2048), ml_dtypes.bfloat16),
    ((4, 1024, 4096), np.float32),
    ((64, 256, 512), np.int8),
    ((4096, 4096), np.float32),  # one large plane: 512 C0 lines per row, 128 KiB between NZ runs
]


def _cell(t: float, nbytes: int) -> str:
    return f"{t * 1e3:.2f} ms {nbytes / t / 1e9:.1f} GB/s"


def _typed_swap(a: np.ndarray, buf: np.ndarray):
    """The same NZ permutation written the obvious numpy way: a typed copy of a swapped-axes view
    ([..., R, C/c0, c0] -> [..., C/c0, R, c0])."""
    c0 = 32 // a.itemsize
    *lead, R, C = a.shape
    src = np.swapaxes(a.reshape(*lead, R, C // c0, c0), -3, -2)
    dst = buf.reshape(*lead, C // c0, R, c0)
    assert np.array_equal(np.copyto(dst, src) or buf.view(np.uint8), pack_nz(a).view(np.uint8))
    return lambda: np.copyto(dst, src)


def measure(case: int) -> dict[str, float]:
    """Best-of-9 interleaved times (s) of pack, unpack, copy and swap for CASES[case]."""
    shape, dtype = CASES[case]
    a = np.random.default_rng(0).integers(-100, 100, size=shape).astype(dtype)
    buf = np.empty_like(a)
    packed = pack_nz(a)
    assert np.array_equal(unpack_nz(packed).view(np.uint8), a.view(np.uint8))
    return interleaved({"pack": lambda: pack_nz(a, out=buf),
                        "unpack": lambda: unpack_nz(packed, out=buf),
                        "copy": lambda: np.copyto(buf, a),
                        "swap": _typed_swap(a, buf)}, repeat=9)


def run() -> list[dict[str, str]]:
    rows = []
    for case, (shape, dtype) in enumerate(CASES):
        runs = in_fresh_processes("bench_pack_nz", f"measure({case})")
        nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
        name = f"{np.dtype(dtype).name}{list(shape)}"
        for op in ("pack", "unpack"):
            t = median_run(runs, lambda t, op=op: t["copy"] / t[op])
            rows.append(row(f"{op}_nz(out=) {name}", _cell(t[op], nbytes), _cell(t["copy"], nbytes),
                            f"{t['copy'] / t[op]:.2f}x bw", ">= 0.5x bw"))
        t = median_run(runs, lambda t: t["swap"] / t["pack"])
        rows.append(row(f"  pack_nz vs numpy's own axis swap of {name}", _cell(t["pack"], nbytes),
                        _cell(t["swap"], nbytes), f"{t['swap'] / t['pack']:.2f}x bw", "-"))
    return rows


if __name__ == "__main__":
    run()
