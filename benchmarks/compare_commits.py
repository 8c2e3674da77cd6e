"""Every row of `benchmarks/run_all.py`, this tree against another commit, side by side (issue 21
item 7): each target runs in fresh processes, the two trees alternating and the order flipped
every round; each cell is the best of the rounds. Writes the before / after table into
benchmarks/RESULTS.md (its own marked block) and prints it.

    git worktree add --detach /tmp/base bc31bc9     # once (or let --base-commit do it)
    python benchmarks/compare_commits.py --base /tmp/base [--rounds 5] [--clock cpu|wall]
        [--targets bench_compile,bench_interp] [--no-write]

- `--clock cpu` (the default): every benchmark's `time.perf_counter` reads this process's CPU time
  (`time.process_time`, through benchmarks/cpu_clock/sitecustomize.py, inherited by the
  benchmarks' own fresh processes) and `NZJIT_THREADS=1` keeps the simulator on one thread, so
  CPU time is the work done: on a shared machine wall time mostly measures the neighbours.
  Ratios against a reference timed in the same process stay meaningful under either clock.
- `--clock wall`: the benchmarks as they are (helper threads, wall time); for a quiet machine.
- The targets are those of both trees' run_all.py (by module name) unless `--targets` names some.
- Rows are matched by name, then the rest in order; a row only one tree has is listed as such.
- Each tree runs its own checkout (benchmarks/harness.py puts its root first on sys.path) with its
  compiled NZ line swap, built here when missing.
"""
# isort: skip_file

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "RESULTS.md"
BEGIN = "<!-- benchmarks/compare_commits.py: begin (generated; do not edit by hand) -->"
END = "<!-- benchmarks/compare_commits.py: end -->"
_RESULT = "harness result: "
_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}


def targets_of(tree: Path) -> list[tuple[str, str]]:
    """(title, module) of every target in `tree`'s benchmarks/run_all.py (its TARGETS literal)."""
    mod = ast.parse((tree / "benchmarks" / "run_all.py").read_text())
    for node in mod.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "TARGETS" for t in node.targets):
            return [tuple(item) for item in ast.literal_eval(node.value)]  # type: ignore[misc]
    raise ValueError(f"{tree}/benchmarks/run_all.py has no TARGETS list")


def ensure_tree(base: Path | None, commit: str | None) -> Path:
    """The base tree: `base` as given, or a detached worktree of `commit` under /tmp."""
    if base is not None:
        if not (base / "benchmarks" / "run_all.py").exists():
            raise SystemExit(f"{base} is not a checkout with benchmarks/run_all.py")
        return base
    if commit is None:
        raise SystemExit("give --base <tree> or --base-commit <commit>")
    path = Path(f"/tmp/nzjit-base-{commit}")
    if not path.exists():
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(path), commit], check=True)
    return path


def build_swap(tree: Path) -> None:
    """The compiled NZ line swap of `tree` (setup.py build_ext), when it has none yet."""
    if not list((tree / "runtime").glob("_lines*.so")) and (tree / "setup.py").exists():
        subprocess.run(
            [sys.executable, "setup.py", "build_ext", "--inplace", "-q"],
            cwd=tree,
            check=False,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )


def run_module(tree: Path, module: str, clock: str) -> list[dict[str, str]]:
    """`module.run()` of `tree`'s benchmarks in a fresh process: its rows."""
    env = dict(os.environ)
    if clock == "cpu":
        env["PYTHONPATH"] = os.pathsep.join([str(HERE / "cpu_clock"), env.get("PYTHONPATH", "")]).rstrip(
            os.pathsep
        )
        env["NZJIT_BENCH_CLOCK"] = "cpu"
        env["NZJIT_THREADS"] = "1"
    call = "run(with_ray=False)" if module == "bench_ranks" else "run()"  # Ray actors' CPU is not ours
    code = f"import harness, json, {module}; print({_RESULT!r} + json.dumps({module}.{call}))"
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tree / "benchmarks",
        env=env,
        check=True,
        stdout=subprocess.PIPE,
        text=True,
    ).stdout
    for line in out.splitlines():
        if line.startswith(_RESULT):
            return json.loads(line[len(_RESULT) :])
    raise RuntimeError(f"{tree}: {module}.{call} returned nothing")


def seconds(cell: str) -> float | None:
    """The first time in a table cell ("138.37 ms", "3.51 ms 9.5 GB/s") in seconds, else None."""
    m = re.search(r"([-+]?\d+(?:\.\d+)?)\s*(ns|us|ms|s)\b", cell)
    return float(m.group(1)) * _UNITS[m.group(2)] if m else None


def ratio(cell: str) -> float | None:
    m = re.match(r"\s*([-+]?\d+(?:\.\d+)?)x", cell)
    return float(m.group(1)) if m else None


def pair_rows(before: list[str], after: list[str]) -> list[tuple[str | None, str | None]]:
    """Row names of the two trees paired: equal names first, then the unmatched in order."""
    left = [b for b in before if b not in after]
    right = [a for a in after if a not in before]
    pairs: list[tuple[str | None, str | None]] = []
    extra = dict(zip(right, left))  # an after row renamed: paired with the unmatched before row
    for a in after:
        if a in before:
            pairs.append((a, a))
        else:
            pairs.append((extra.get(a), a))
    paired = {b for b, _ in pairs}
    pairs += [(b, None) for b in before if b not in paired]
    return pairs


class Cells:
    """Every round's rows of one tree and target, by row name."""

    def __init__(self) -> None:
        self.rounds: list[dict[str, dict[str, str]]] = []

    def add(self, rows: list[dict[str, str]]) -> None:
        self.rounds.append({r["benchmark"].strip(): r for r in rows})

    def names(self) -> list[str]:
        return list(self.rounds[0]) if self.rounds else []

    def best_time(self, name: str) -> float | None:
        ts = [t for r in self.rounds if name in r and (t := seconds(r[name]["nzjit"])) is not None]
        return min(ts) if ts else None

    def median_ratio(self, name: str) -> float | None:
        rs = [x for r in self.rounds if name in r and (x := ratio(r[name]["ratio"])) is not None]
        return statistics.median(rs) if rs else None

    def spread(self, name: str) -> str:
        ts = [t for r in self.rounds if name in r and (t := seconds(r[name]["nzjit"])) is not None]
        return f"{max(ts) / min(ts) - 1:.0%}" if len(ts) > 1 and min(ts) > 0 else "-"


def fmt(s: float | None) -> str:
    if s is None:
        return "-"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if s >= scale or unit == "us":
            return f"{s / scale:.2f} {unit}"
    return "-"  # pragma: no cover


def cell(c: Cells, name: str | None) -> str:
    if name is None:
        return "(no such row)"
    r = c.median_ratio(name)
    return fmt(c.best_time(name)) + (f" ({r:.2f}x)" if r is not None else "")


def quotient(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}" if a is not None and b else "-"


def table(order: list[tuple[str, str]], before: dict[str, Cells], after: dict[str, Cells]) -> list[str]:
    out = [
        "| benchmark | before: nzjit (ratio) | after: nzjit (ratio) | after / before, time "
        "| after / before, ratio | spread before / after |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for title, module in order:
        out.append(f"| **{title}** | | | | | |")
        b, a = before[module], after[module]
        for nb, na in pair_rows(b.names(), a.names()):
            t_b, t_a = (b.best_time(nb) if nb else None), (a.best_time(na) if na else None)
            r_b, r_a = (b.median_ratio(nb) if nb else None), (a.median_ratio(na) if na else None)
            out.append(
                f"| {na or nb} | {cell(b, nb)} | {cell(a, na)} | {quotient(t_a, t_b)} | "
                f"{quotient(r_a, r_b)} | {b.spread(nb) if nb else '-'} / {a.spread(na) if na else '-'} |"
            )
    return out


def replace_block(text: str, block: str) -> str:
    """`text` with its compare_commits block replaced by `block` (appended when it has none)."""
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        _, tail = rest.split(END, 1)
        return f"{head}{BEGIN}\n{block}\n{END}{tail}"
    return f"{text.rstrip()}\n\n{BEGIN}\n{block}\n{END}\n"


def block_of(text: str) -> str:
    """The compare_commits block of `text`, markers included ("" when it has none): run_all.py
    keeps it when it rewrites RESULTS.md."""
    if BEGIN in text and END in text:
        return BEGIN + text.split(BEGIN, 1)[1].split(END, 1)[0] + END
    return ""


def commit_of(tree: Path) -> str:
    r = subprocess.run(
        ["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], stdout=subprocess.PIPE, text=True
    )
    dirty = subprocess.run(
        ["git", "-C", str(tree), "status", "--porcelain", "--untracked-files=no"],
        stdout=subprocess.PIPE,
        text=True,
    ).stdout.strip()
    return r.stdout.strip() + (" + uncommitted changes" if dirty else "")


def main(argv: list[str] | None = None) -> str:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base", type=Path, help="the tree to compare against (a checkout)")
    p.add_argument("--base-commit", help="make a detached worktree of this commit under /tmp")
    p.add_argument("--rounds", type=int, default=5, help="fresh processes per tree and target")
    p.add_argument("--clock", choices=("cpu", "wall"), default="cpu")
    p.add_argument("--targets", help="comma-separated modules (default: the targets both trees have)")
    p.add_argument("--no-write", action="store_true", help="print the table only")
    args = p.parse_args(argv)
    base = ensure_tree(args.base, args.base_commit)
    trees = {"before": base, "after": ROOT}
    for tree in trees.values():
        build_swap(tree)
    ours, theirs = targets_of(ROOT), dict((m, t) for t, m in targets_of(base))
    order = [(t, m) for t, m in ours if m in theirs]
    if args.targets:
        wanted = args.targets.split(",")
        order = [(t, m) for t, m in ours if m in wanted]
        if missing := [m for m in wanted if m not in theirs or m not in dict((m2, t) for t, m2 in ours)]:
            raise SystemExit(f"not a target of both trees: {', '.join(missing)}")
    cells = {side: {m: Cells() for _, m in order} for side in trees}
    load0 = os.getloadavg()
    t0 = time.time()
    for rnd in range(args.rounds):
        sides = list(trees) if rnd % 2 == 0 else list(reversed(trees))
        for _, module in order:
            for side in sides:
                print(f"round {rnd + 1}/{args.rounds}: {module} ({side})", file=sys.stderr, flush=True)
                cells[side][module].add(run_module(trees[side], module, args.clock))
    load1 = os.getloadavg()
    clock = (
        "CPU time of each benchmark process (time.process_time for time.perf_counter), NZJIT_THREADS=1"
        if args.clock == "cpu"
        else "wall time (time.perf_counter), the simulator's default threads"
    )
    lines = [
        "## Before / after, side by side (benchmarks/compare_commits.py)",
        "",
        f"- before: {base} at {commit_of(base)}; after: {ROOT} at {commit_of(ROOT)}",
        f"- {args.rounds} rounds, fresh processes, the two trees alternating (order flipped every round); "
        f"clock: {clock}",
        "- each cell: the best time of the rounds, and (in brackets) the median of the row's own ratio "
        "against the reference it times alongside",
        f"- load average (1/5/15 min) at start {' / '.join(f'{x:.2f}' for x in load0)}, at end "
        f"{' / '.join(f'{x:.2f}' for x in load1)}; {time.time() - t0:.0f} s; "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        "",
        *table(order, cells["before"], cells["after"]),
    ]
    text = "\n".join(lines)
    print(text)
    if not args.no_write:
        RESULTS.write_text(replace_block(RESULTS.read_text() if RESULTS.exists() else "", text))
    return text


if __name__ == "__main__":
    main()
