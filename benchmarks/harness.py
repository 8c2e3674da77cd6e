"""Shared benchmark harness: pins BLAS threads (import this before numpy), times best-of-N, and
prints rows `name | nzjit | reference | ratio`. Benchmarks report ratios measured side by side in
one run; nothing here is a timed assertion."""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # pinned before numpy loads its BLAS: stable numbers

import json  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def best_of(
    fn: Callable[[], object], repeat: int = 5, warmup: int = 1, clock: Callable[[], float] | None = None
) -> float:
    """The best time of `repeat` runs after `warmup` (seconds): wall time, or `clock`'s (e.g.
    `time.thread_time`, the calling thread's CPU time)."""
    clock = clock or time.perf_counter  # looked up per call: compare_commits may swap perf_counter
    for _ in range(warmup):
        fn()
    best = float("inf")
    for _ in range(repeat):
        t0 = clock()
        fn()
        best = min(best, clock() - t0)
    return best


def fmt_time(s: float) -> str:
    if s < 1e-3:
        return f"{s * 1e6:.1f} us"
    if s < 1:
        return f"{s * 1e3:.2f} ms"
    return f"{s:.2f} s"


def row(name: str, ours: str, ref: str, ratio: str, target: str = "") -> dict[str, str]:
    r = {"benchmark": name, "nzjit": ours, "reference": ref, "ratio": ratio, "target": target}
    print(f"{name:<48} {ours:>12} {ref:>12} {ratio:>10}  {target}")
    return r


def interleaved(fns: dict[str, Callable[[], object]], repeat: int = 5, warmup: int = 1) -> dict[str, float]:
    """Best wall time of each function, runs alternating between them (a busy machine slows both
    sides alike, so their ratio stays meaningful)."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    best = {name: float("inf") for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - t0)
    return best


def interleaved_clocks(
    fns: dict[str, Callable[[], object]], repeat: int = 5, warmup: int = 1
) -> dict[str, tuple[float, float]]:
    """`interleaved`, timing each run on two clocks at once: (best wall time, best CPU time of the
    whole process, every thread included: `time.process_time`). On a shared machine the CPU time
    is the work done; wall time also counts the neighbours."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    best = {name: (float("inf"), float("inf")) for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            c0, t0 = time.process_time(), time.perf_counter()
            fn()
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            best[name] = (min(best[name][0], wall), min(best[name][1], cpu))
    return best


#: How many fresh processes measure a ratio that sits near its target.  Where the kernel puts a
#: process's pages moves a memory-bound ratio by up to 0.3x from one process to the next (the
#: same pack_nz code measured 0.28x and 0.60x; the bf16 grouped matmul 1.25x and 1.34x), far
#: more than the rounds inside one process do; the median process is reported.
PROCESSES = 5


_RESULT = "harness result: "  # marks the line that carries a fresh process's result back


def in_fresh_process(module: str, call: str, echo: bool = False) -> Any:
    """Evaluate ``module.call`` (e.g. ``"run()"``) in a fresh Python process and return its
    JSON-able result; with `echo`, what the process prints is printed here too."""
    code = f"import harness, json, {module}; print({_RESULT!r} + json.dumps({module}.{call}))"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=Path(__file__).parent, check=True, stdout=subprocess.PIPE, text=True
    ).stdout
    result, found = None, False
    for line in out.splitlines():
        if line.startswith(_RESULT):
            result, found = json.loads(line[len(_RESULT) :]), True
        elif echo:
            print(line)
    if not found:
        raise RuntimeError(f"{module}.{call} returned nothing")
    return result


def in_fresh_processes(module: str, call: str, n: int = PROCESSES) -> list[dict[str, float]]:
    """Evaluate ``module.call`` (e.g. ``"measure(2)"``, returning a dict of times) in `n` fresh
    Python processes, one after another; return their dicts."""
    return [in_fresh_process(module, call) for _ in range(n)]


def median_run(runs: list[dict[str, float]], ratio: Callable[[dict[str, float]], float]) -> dict[str, float]:
    """The run whose `ratio` is the median of all runs (an odd count gives one exact run)."""
    return sorted(runs, key=ratio)[len(runs) // 2]
