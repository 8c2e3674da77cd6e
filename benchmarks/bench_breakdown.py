"""Issue 27 item 4: what each cube kernel's time is made of, measured. Each kernel of
bench_decode.py and the grouped bf16 prefill (bench_grouped_matmul.py) runs under cProfile with
the calling thread's CPU clock (`time.thread_time`) and `NZJIT_THREADS=1` semantics (every piece
on the calling thread, so the clock sees it all); the profile's functions are summed into parts:

- BLAS: the time `mad_lanes` spends itself, which is its stacked `np.matmul` (a ufunc: cProfile
  does not list it apart) and a few lines of Python per chunk;
- operand conversion: the mad operands gathered from GM or the tile images and cast to float
  (`LaneWindow.operands` / `operand`, which hold `gather_cast`);
- accumulation: products added into the accumulators (`_add_products`);
- the Python rest: the tile.load / tile.store rules (lane addresses, load plans, lazy GM views,
  the deferred stores), interpretation (plan steps, loops), lane bookkeeping and scratch buffers:
  the profiled call less the three parts above and less the profiler's own cost, which is
  calibrated here per profiled function call (on a trivial function) and charged to every call
  the profile counted: it inflates exactly this part (many small calls), not the numpy parts.

Each part is given in ms of CPU per call and as its share of the profiled call less the
profiler's cost; the first row of each kernel is that CPU time against the CPU time of its numpy
reference
(bench_decode's "user" numpy: the cast from the stored dtype and one BLAS call; for the grouped
prefill its float32 BLAS on converted operands), both on one thread.

    python benchmarks/bench_breakdown.py
"""
# isort: skip_file

from __future__ import annotations

import harness  # first: pins BLAS threads before numpy loads

import cProfile  # noqa: E402
import inspect  # noqa: E402
import pstats  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402

from nzjit.backend import lane_cube, lane_values  # noqa: E402
from runtime import threads  # noqa: E402

CALLS = 3


def _lines(fn: Callable[..., object]) -> tuple[str, int, int]:
    """(file, first line, last line) of `fn`: the closures it returns are profiled by line."""
    src, first = inspect.getsourcelines(fn)
    return inspect.getsourcefile(fn) or "", first, first + len(src)


def _parts() -> list[tuple[str, Callable[[tuple[str, int, str]], bool], bool]]:
    """(part, which profile entries, cumulative?) - cumulative entries hold their callees."""

    def fn(f: Callable[..., object]) -> Callable[[tuple[str, int, str]], bool]:
        file, lo, hi = _lines(f)
        return lambda k: k[0] == file and lo <= k[1] < hi

    def either(*tests: Callable[[tuple[str, int, str]], bool]) -> Callable[[tuple[str, int, str]], bool]:
        return lambda k: any(t(k) for t in tests)

    win = lane_values.LaneWindow
    return [
        ("BLAS (np.matmul inside mad_lanes)", fn(lane_cube.mad_lanes), False),
        ("operand conversion (gather + cast)", either(fn(win.operands), fn(win.operand)), True),
        ("accumulation into the accumulators", fn(lane_cube._add_products), True),
    ]


def _noop() -> None:
    pass


def profiler_cost(n: int = 200_000) -> float:
    """CPU seconds the profiler adds to one Python function call (calibrated on a trivial one)."""

    def loop() -> None:
        for _ in range(n):
            _noop()

    bare = cpu(loop)
    prof = cProfile.Profile(time.thread_time)
    c0 = time.thread_time()
    prof.runcall(loop)
    return max(0.0, (time.thread_time() - c0 - bare) / n)


def profile(call: Callable[[], object], calls: int = CALLS) -> tuple[float, dict[str, float]]:
    """(CPU seconds per call without the profiler's cost, {part: CPU seconds per call}) of `call`
    on one thread, from one profile."""
    count = threads.THREADS
    threads.THREADS = 1
    try:
        call()
        prof = cProfile.Profile(time.thread_time)
        prof.enable()
        for _ in range(calls):
            call()
        prof.disable()
    finally:
        threads.THREADS = count
    stats = pstats.Stats(prof).stats  # type: ignore[attr-defined]
    n_calls = sum(v[1] for v in stats.values())
    total = (sum(v[2] for v in stats.values()) - n_calls * PROFILER_COST[0]) / calls
    parts = {}
    for name, test, cumulative in _parts():
        hits = [v for k, v in stats.items() if test(k)]
        if cumulative:  # an entry called from inside another one of the same part is counted once
            hits = [v for k, v in stats.items() if test(k) and not any(test(c) for c in v[4])]
        parts[name] = sum(v[3] if cumulative else v[2] for v in hits) / calls
    return total, parts


def cpu(fn: Callable[[], object], calls: int = CALLS) -> float:
    return harness.best_of(fn, calls, 1, time.thread_time)


#: profiler_cost(), measured once per run
PROFILER_COST = [0.0]


def rows_of(title: str, call: Callable[[], object], ref: Callable[[], object]) -> list[dict[str, str]]:
    total, parts = profile(call)
    t_ref = cpu(ref)
    rows = [
        harness.row(
            f"{title}: CPU per call, one thread",
            harness.fmt_time(total),
            harness.fmt_time(t_ref),
            f"{total / t_ref:.2f}x",
            "-",
        )
    ]
    rest = total - sum(parts.values())
    for name, t in [*parts.items(), ("the Python rest (loads, stores, interpretation, bookkeeping)", rest)]:
        rows.append(
            harness.row(f"  {name}", harness.fmt_time(max(t, 0.0)), "-", f"{max(t, 0.0) / total:.0%}", "-")
        )
    return rows


def run() -> list[dict[str, str]]:
    import bench_decode
    import bench_grouped_matmul as g
    from nzjit import pl
    import numpy as np

    PROFILER_COST[0] = profiler_cost()
    rows = []
    for name in bench_decode.CASES:
        call, user, _, _ = bench_decode.setup(name)
        rows += rows_of(name, call, user)
        del call, user
    xb, wb, ref = g._bf16()
    _, call, _ = g._setup(pl.BF16, np.float32, xb, wb, ref, False, "bf16->fp32")
    rows += rows_of(f"grouped bf16 prefill E{g.E} T{g.T} N{g.N} K{g.K}", call, ref)
    return rows


if __name__ == "__main__":
    run()
