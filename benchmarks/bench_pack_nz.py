"""Target (c): bandwidth of runtime.pack_nz / unpack_nz against np.copyto of the same bytes.

Both sides read the same bytes and write the same preallocated buffer (``out=``), so the ratio
is the cost of the NZ permutation itself: pack against np.copyto of the logical array, unpack
against np.copyto of the NZ-ordered one. Reported as a bandwidth ratio, np.copyto time / pack
time (target >= 0.5), of the median of harness.PROCESSES fresh processes.
For scale, pack_nz is also set against the same permutation written the obvious numpy way (a
typed copy of a swapped-axes view). pack_nz moves 32-byte lines with the compiled swap
(runtime/_lines.c: bands of 8 source rows, every cache line fetched once) where the install
built it, else with numpy's copies: a plane of up to 1 MiB in one np.take gather (up to 8 MiB
when unpacking), a larger one tile by tile (1 MiB of lines per copy); both are timed, numpy's
copies in the rows "same, numpy's copies". A call of 4 MiB or more is shared by
runtime.threads.THREADS threads. On one thread numpy moves a 32-byte line of an 8 MiB plane held
in L3 in ~4 ns (unpack) to ~6 ns (pack) in NZ order, against ~1.9 ns in order: its per-element
dispatch, not the memory, bounds it, as the compiled loop's ~0.75x of np.copyto on that plane
shows.
Not a timed test: nothing is asserted.

    python benchmarks/bench_pack_nz.py
"""
# isort: skip_file

from __future__ import annotations

from harness import in_fresh_processes, interleaved, median_run, row  # first: pins BLAS threads

import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402

from runtime import nz, pack_nz, threads, unpack_nz  # noqa: E402

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
    """Best-of-9 times (s) for CASES[case], each operation interleaved with its own reference:
    pack with np.copyto of the same logical bytes, unpack with np.copyto of the same NZ bytes
    (both into the same buffer), numpy's axis swap with pack.  Pairs, not one round of all: an
    8 MiB array read by the operation just before stays in the L3 cache, one read three
    operations earlier may not, and that alone moved the bf16[2048, 2048] unpack ratio from
    ~0.7x to ~0.4x.  Pack and unpack are timed with runtime.threads.THREADS threads, with one
    (keys suffixed "1"), and with the THREADS threads but numpy's copies instead of the compiled
    swap (suffix "np"); the axis swap, a one-thread numpy copy, against pack on one thread."""
    shape, dtype = CASES[case]
    a = np.random.default_rng(0).integers(-100, 100, size=shape).astype(dtype)
    buf = np.empty_like(a)
    packed = pack_nz(a)
    assert np.array_equal(unpack_nz(packed).view(np.uint8), a.view(np.uint8))
    pack = lambda: pack_nz(a, out=buf)  # noqa: E731
    ops = (("pack", pack, "copy", a), ("unpack", lambda: unpack_nz(packed, out=buf), "unpack_copy", packed))
    native, count = nz._native, threads.THREADS
    t: dict[str, float] = {"threads": count, "compiled": native is not None}
    for suffix, n, compiled in (("np", count, None), ("", count, native), ("1", 1, native)):
        threads.THREADS, nz._native = n, compiled  # left at one thread, compiled, for the swap below
        for name, op, reference, src in ops:
            pair = interleaved({name: op, reference: lambda src=src: np.copyto(buf, src)}, repeat=9)
            t |= {k + suffix: v for k, v in pair.items()}
    swap = interleaved({"swap": _typed_swap(a, buf), "pack": pack}, repeat=9)
    return t | {"swap": swap["swap"], "swap_pack": swap["pack"]}


def run() -> list[dict[str, str]]:
    rows = []
    for case, (shape, dtype) in enumerate(CASES):
        runs = in_fresh_processes("bench_pack_nz", f"measure({case})")
        nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
        name = f"{np.dtype(dtype).name}{list(shape)}"
        how = "" if runs[0]["compiled"] else " (numpy: runtime._lines not built)"
        for op, copy in (("pack", "copy"), ("unpack", "unpack_copy")):
            for suffix, label in (
                ("", f"{op}_nz(out=) {name}, {runs[0]['threads']:.0f} threads{how}"),
                ("1", "  same, one thread"),
                ("np", "  same, numpy's copies (no compiled swap)"),
            ):
                t = median_run(runs, lambda t, s=suffix, op=op, copy=copy: t[copy + s] / t[op + s])
                ratio = t[copy + suffix] / t[op + suffix]
                rows.append(
                    row(
                        label,
                        _cell(t[op + suffix], nbytes),
                        _cell(t[copy + suffix], nbytes),
                        f"{ratio:.2f}x bw",
                        ">= 0.5x bw" if suffix == "" else "-",
                    )
                )
        t = median_run(runs, lambda t: t["swap"] / t["swap_pack"])
        rows.append(
            row(
                f"  pack_nz (one thread) vs numpy's own axis swap of {name}",
                _cell(t["swap_pack"], nbytes),
                _cell(t["swap"], nbytes),
                f"{t['swap'] / t['swap_pack']:.2f}x bw",
                "-",
            )
        )
    return rows


if __name__ == "__main__":
    run()
