"""Target (d): what the interpreter adds per executed equation on small tiles (<= 5 us).

A `pl.range` loop of 16x16 fp32 Vec tiles (per trip: index arithmetic, two loads, add, mul,
store: 6 equations, every tile freed at its last use), on resident tensors. Its trips are
independent, so by default they run batched (nzjit/backend/batched.py); the trip-by-trip run
(the per-equation interpreter itself) is reported too. The reference is the same per-tile work
written directly in numpy (slice, add, mul, copy back) in a Python loop.

    python benchmarks/bench_interp.py
"""
# isort: skip_file

from __future__ import annotations

from harness import fmt_time, interleaved, row  # first: pins BLAS threads before numpy loads

import numpy as np  # noqa: E402

import runtime  # noqa: E402
from nzjit import pl  # noqa: E402

R, C, NIT = 16, 16, 1024
EQNS_PER_TRIP = 6


@pl.kernel
def small_tiles(
    a: pl.Tensor[[NIT * R, C], pl.FP32],
    b: pl.Tensor[[NIT * R, C], pl.FP32],
    out: pl.Out[pl.Tensor[[NIT * R, C], pl.FP32]],
):
    for i in pl.range(NIT):
        r0 = i * R
        ta = pl.load(a, [r0, 0], [R, C])
        tb = pl.load(b, [r0, 0], [R, C])
        pl.store(pl.mul(pl.add(ta, tb), ta), [r0, 0], out)


def run() -> list[dict[str, str]]:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((NIT * R, C)).astype(np.float32)
    b = rng.standard_normal((NIT * R, C)).astype(np.float32)
    w = runtime.Worker(0)
    ad, bd = w.alloc_tensor(a.shape, a.dtype, init=a), w.alloc_tensor(b.shape, b.dtype, init=b)
    od = w.alloc_tensor(a.shape, a.dtype)
    n_eqns = sum(1 for e in small_tiles.lower(ad, bd, od).final.walk() if e.primitive.name != "for")
    assert n_eqns == EQNS_PER_TRIP
    small_tiles(ad, bd, od)
    assert np.array_equal(w.copy_from(od), (a + b) * a)
    out = np.empty_like(a)

    def numpy_loop() -> None:
        for i in range(NIT):
            r0 = i * R
            ta, tb = a[r0 : r0 + R], b[r0 : r0 + R]
            out[r0 : r0 + R] = np.multiply(np.add(ta, tb), ta)

    from nzjit.backend.options import Options, using

    per_trip_options = Options(batch=False)

    def trip_by_trip() -> None:  # the interpreter proper: independent trips not batched
        with using(per_trip_options):
            small_tiles(ad, bd, od)

    t = interleaved(
        {"ours": lambda: small_tiles(ad, bd, od), "trips": trip_by_trip, "ref": numpy_loop}, repeat=21
    )  # spans the seconds-long slow stretches of this shared machine
    executed = NIT * EQNS_PER_TRIP
    per, per_trip, ref_per = t["ours"] / executed, t["trips"] / executed, t["ref"] / executed
    return [
        row(
            f"interpreter, per executed equation ({executed} eqns, trips batched)",
            fmt_time(per),
            "5.0 us",
            f"{per / 5e-6:.2f}x",
            "< 1x (of 5 us)",
        ),
        row(
            "  same, trip by trip (Options(batch=False): the per-equation interpreter)",
            fmt_time(per_trip),
            "5.0 us",
            f"{per_trip / 5e-6:.2f}x",
            "< 1x (of 5 us)",
        ),
        row(
            "  per equation vs the same work in a numpy loop",
            fmt_time(per),
            fmt_time(ref_per),
            f"{per / ref_per:.2f}x",
            "-",
        ),
    ]


if __name__ == "__main__":
    run()
