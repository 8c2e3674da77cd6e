"""Run every benchmark of issue 11 and print one markdown table; also write it, with the
machine description, to benchmarks/RESULTS.md.

    python benchmarks/run_all.py [--no-write]

Ratios are measured side by side in one run (interleaved best-of-N), so a busy machine slows
both sides; absolute times are only indicative. Each target runs in a fresh Python process, as
it does standalone: what one benchmark leaves behind (fragmented memory without huge pages, live
objects for the garbage collector) once halved the next one's unpack_nz bandwidth.
"""
# isort: skip_file

from __future__ import annotations

import harness  # first: pins BLAS threads before numpy loads

import os  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

TARGETS = [
    ("(a) execution: grouped NZ matmul vs numpy", "bench_grouped_matmul"),
    ("(b) compile time and cached-call overhead", "bench_compile"),
    ("(c) NZ packing bandwidth vs np.copyto", "bench_pack_nz"),
    ("(d) interpreter overhead per equation", "bench_interp"),
    ("(e) ranks side by side: 4-rank tp_moe, local Cluster and RayCluster", "bench_ranks"),
]
#: Targets with an absolute budget (not a ratio against numpy measured alongside).
ABSOLUTE = ("bench_compile", "bench_interp")


def run_target(module: str) -> list[dict[str, str]]:
    """Run one benchmark module in a fresh process, echo what it prints, and return its rows."""
    return harness.in_fresh_process(module, "run()", echo=True)


def machine() -> list[str]:
    blas = "unknown"
    try:
        cfg = np.show_config(mode="dicts")  # numpy >= 1.26
        b = cfg.get("Build Dependencies", {}).get("blas", {})
        blas = f"{b.get('name', '?')} {b.get('version', '')} ({b.get('openblas configuration', '').strip()})"
    except Exception:  # pragma: no cover - older numpy
        pass
    threads = {k: os.environ.get(k, "-") for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    try:
        load = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:  # pragma: no cover
        load = "?"
    cpu = platform.processor() or "cpu ?"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return [
        f"- platform: {platform.platform()} ({platform.machine()}, {cpu})",
        f"- python {platform.python_version()}, numpy {np.__version__}, os.cpu_count() = {os.cpu_count()}",
        f"- BLAS: {blas}; threads pinned: {threads}",
        f"- load average at start (1/5/15 min): {load}",
        f"- date: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}",
    ]


def table(sections: list[tuple[str, list[dict[str, str]]]]) -> list[str]:
    out = ["| benchmark | nzjit | reference | ratio | target |", "| --- | --- | --- | --- | --- |"]
    for title, rows in sections:
        out.append(f"| **{title}** | | | | |")
        for r in rows:
            out.append(f"| {r['benchmark'].strip()} | {r['nzjit']} | {r['reference']} | {r['ratio']} | {r['target']} |")
    return out


def main(write: bool = True) -> str:
    head = machine()
    rows = {}
    # the targets measured against a fixed budget (b, d) run first: a minute of BLAS at full load
    # (a) leaves this machine's clock lower for a while (compile measured 69 ms right after it,
    # 38-43 ms alone); the ratio targets time both sides under the same clock anyway
    for title, module in sorted(TARGETS, key=lambda t: t[1] not in ABSOLUTE):
        print(f"== {title}", flush=True)
        rows[title] = run_target(module)
    sections = [(title, rows[title]) for title, _ in TARGETS]
    note = ("Ratios are measured side by side in one run (interleaved best-of-N); absolute times move with "
            "the machine's load. The numbers before issue 11 are in BASELINE.md.")
    text = "\n".join(["# nzjit benchmarks (issue 11)", "", *head, "", note, "", *table(sections), ""])
    print()
    print(text)
    if write:
        Path(__file__).with_name("RESULTS.md").write_text(text)
    return text


if __name__ == "__main__":
    _ = harness
    main(write="--no-write" not in sys.argv)
