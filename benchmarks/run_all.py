"""Run every benchmark of issue 11 and print one markdown table; also write it into
docs/performance.md (the "Latest recorded run" block) and, with the machine description, to
benchmarks/RESULTS.md.

    python benchmarks/run_all.py [--no-write]

On a terminal a progress line (benchmarks done, rate, time left) is kept under the output on
stderr; piped or redirected, only the results are printed (nzjit/progress.py).

Ratios are measured side by side in one run (interleaved best-of-N), so a busy machine slows
both sides; absolute times are only indicative. Each target runs in a fresh Python process, as
it does standalone: what one benchmark leaves behind (fragmented memory without huge pages, live
objects for the garbage collector) once halved the next one's unpack_nz bandwidth.
"""
# isort: skip_file

from __future__ import annotations

import harness  # first: pins BLAS threads before numpy loads

import contextlib  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

import compare_commits  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # nzjit.progress from this checkout
from nzjit.progress import CountLines, Progress  # noqa: E402

PERFORMANCE = Path(__file__).resolve().parents[1] / "docs" / "performance.md"
BEGIN = "<!-- benchmarks/run_all.py: begin (generated; do not edit by hand) -->"
END = "<!-- benchmarks/run_all.py: end -->"

TARGETS = [
    ("(a) execution: grouped NZ matmul vs numpy", "bench_grouped_matmul"),
    ("(b) compile time and cached-call overhead", "bench_compile"),
    ("(c) NZ packing bandwidth vs np.copyto", "bench_pack_nz"),
    ("(d) interpreter overhead per equation", "bench_interp"),
    ("(e) vector unit: softmax and fused MoE expert vs numpy (issue 22)", "bench_vector"),
    ("(f) ranks side by side: 4-rank tp_moe, local Cluster and RayCluster", "bench_ranks"),
    ("(g) decode, gemv, int8 prefill and ND-weight kernels vs numpy (issue 27)", "bench_decode"),
    ("(h) where the cube kernels' time goes: CPU profile, one thread (issue 27)", "bench_breakdown"),
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
    threads = {
        k: os.environ.get(k, "-") for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
    }
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


#: The targets of issue 27's rows against numpy: each row at most 1.5x (the grouped bf16 prefill 1.0x),
#: and their geometric mean at most 1.1x.
NUMPY_TARGETS = ("<= 1.5x", "<= 1.0x")
GEOMEAN_TARGET = 1.1


def geomean_row(sections: list[tuple[str, list[dict[str, str]]]]) -> dict[str, str] | None:
    """The geometric mean of the ratios of every row with one of `NUMPY_TARGETS`, as a row."""
    ratios = [
        float(r["ratio"].rstrip("x"))
        for _, rows in sections
        for r in rows
        if r["target"] in NUMPY_TARGETS and r["ratio"].endswith("x")
    ]
    if not ratios:
        return None
    g = float(np.exp(np.mean(np.log(ratios))))
    return {
        "benchmark": f"geometric mean of the {len(ratios)} rows against numpy (targets <= 1.5x / 1.0x)",
        "nzjit": "-",
        "reference": "-",
        "ratio": f"{g:.2f}x",
        "target": f"<= {GEOMEAN_TARGET}x",
    }


def table(sections: list[tuple[str, list[dict[str, str]]]]) -> list[str]:
    out = ["| benchmark | nzjit | reference | ratio | target |", "| --- | --- | --- | --- | --- |"]
    for title, rows in sections:
        out.append(f"| **{title}** | | | | |")
        for r in rows:
            out.append(
                f"| {r['benchmark'].strip()} | {r['nzjit']} | {r['reference']} | {r['ratio']} | {r['target']} |"
            )
    return out


def performance_page(text: str, table_lines: list[str], machine_line: str, date_line: str) -> str:
    """docs/performance.md `text` with its generated block replaced by this run's table."""
    if BEGIN not in text or END not in text:
        raise ValueError(f"{PERFORMANCE} lost its {BEGIN!r} / {END!r} markers")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    block = "\n".join([*table_lines, "", machine_line, date_line])
    return f"{head}{BEGIN}\n{block}\n{END}{tail}"


def main(write: bool = True) -> str:
    head = machine()
    rows = {}
    order = sorted(TARGETS, key=lambda t: t[1] not in ABSOLUTE)
    # the targets measured against a fixed budget (b, d) run first: a minute of BLAS at full load
    # (a) leaves this machine's clock lower for a while (compile measured 69 ms right after it,
    # 38-43 ms alone); the ratio targets time both sides under the same clock anyway
    with Progress(len(order), "benchmarks") as bar:
        out = CountLines(bar) if bar.enabled else None  # echoed lines go above the progress line
        with contextlib.redirect_stdout(out) if out is not None else contextlib.nullcontext():
            for title, module in order:
                bar.update(bar.done, label=f"running {title[:3]}")
                print(f"== {title}", flush=True)
                rows[title] = run_target(module)
                bar.advance()
    sections = [(title, rows[title]) for title, _ in TARGETS]
    mean = geomean_row(sections)
    if mean is not None:
        sections.append(("(i) issue 27: all the rows against numpy", [mean]))
    note = (
        "Ratios are measured side by side in one run (interleaved best-of-N); absolute times move with "
        "the machine's load. The numbers before issue 11 are in BASELINE.md."
    )
    text = "\n".join(["# nzjit benchmarks (issue 11)", "", *head, "", note, "", *table(sections), ""])
    print()
    print(text)
    if write:
        results = Path(__file__).with_name("RESULTS.md")
        kept = (
            compare_commits.block_of(results.read_text()) if results.exists() else ""
        )  # the before / after table
        results.write_text(text + (f"\n{kept}\n" if kept else ""))
        uname = platform.uname()
        cpu = next((h.split(", ", 1)[1].rstrip(")") for h in head if h.startswith("- platform:")), "?")
        PERFORMANCE.write_text(
            performance_page(
                PERFORMANCE.read_text(),
                table(sections),
                f"Machine: {platform.platform()} ({uname.machine}, {cpu})",
                f"Date: {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}",
            )
        )
    return text


if __name__ == "__main__":
    _ = harness
    main(write="--no-write" not in sys.argv)
