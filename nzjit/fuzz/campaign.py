"""A campaign: generate and classify programs (seed, 0..n-1) in worker processes, summarise.

Each worker rebuilds its programs from (seed, index), so only small outcome records cross
process boundaries; the parent regenerates the few wrong / crashing programs to write their
reproducers.
"""

from __future__ import annotations

import concurrent.futures as cf
import os
import re
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from .classify import CLASSES, Outcome, classify
from .gen import generate
from .gen_program_safety import safety_campaign
from .repro import write_reproducer
from .rules import ROWS


@dataclass
class Record:
    """One program's outcome in a campaign (programs are rebuilt from (seed, index), so no source here)."""

    index: int
    family: str
    outcome: Outcome


@dataclass
class Report:
    """A campaign's result: every program's record, the reproducers written and the wall time."""

    seed: int
    n: int
    jobs: int
    seconds: float = 0.0
    records: list[Record] = field(default_factory=list)
    reproducers: list[str] = field(default_factory=list)
    #: classes of the safety probes (gen_program_safety.py, issue 24): "refused" / "equal" / "wrong: ..."
    safety: Counter[str] = field(default_factory=Counter)

    def count(self, cls: str) -> int:
        """Number of programs classified `cls`."""
        return sum(1 for r in self.records if r.outcome.cls == cls)

    @property
    def bugs(self) -> list[Record]:
        """The records classified wrong or crash."""
        return [r for r in self.records if r.outcome.bug]

    def rows_covered(self) -> Counter[str]:
        """How many refusals matched each rule-table row (rules.py)."""
        c: Counter[str] = Counter()
        for r in self.records:
            c.update(r.outcome.rows)
        return c


def _work(seed: int, indices: Sequence[int], exclude: Sequence[str], family: str | None) -> list[Record]:
    out = []
    workdir = tempfile.mkdtemp(prefix="nzjit_fuzz_")
    try:
        for i in indices:
            p = generate(seed, i, family, exclude)
            out.append(Record(i, p.family, classify(p, workdir)))
    finally:
        try:
            os.rmdir(workdir)
        except OSError:
            pass
    return out


def run_campaign(
    n: int,
    seed: int = 0,
    jobs: int | None = None,
    out_dir: str | None = None,
    exclude: Sequence[str] = (),
    family: str | None = None,
    chunk: int = 50,
    progress: bool = False,
    safety: int = 0,
) -> Report:
    """Classify programs 0..n-1 of `seed`; write a reproducer for every wrong or crashing one.
    `safety`: also run that many safety probes of `seed` (unpacked NZ arguments, aliasing, lane
    windows; in this process, they are cheap)."""
    jobs = jobs or os.cpu_count() or 1
    rep = Report(seed, n, jobs)
    t0 = time.perf_counter()
    chunks = [list(range(i, min(n, i + chunk))) for i in range(0, n, chunk)]
    if jobs == 1:
        for c in chunks:
            rep.records.extend(_work(seed, c, exclude, family))
            if progress:
                print(f"  {len(rep.records)}/{n}", flush=True)
    else:
        with cf.ProcessPoolExecutor(max_workers=jobs) as pool:
            futs = [pool.submit(_work, seed, c, tuple(exclude), family) for c in chunks]
            for f in cf.as_completed(futs):
                rep.records.extend(f.result())
                if progress:
                    print(f"  {len(rep.records)}/{n}", flush=True)
    rep.records.sort(key=lambda r: r.index)
    if safety:
        rep.safety = safety_campaign(seed, safety)
    rep.seconds = time.perf_counter() - t0
    if out_dir is not None:
        for r in rep.bugs:
            rep.reproducers.append(
                write_reproducer(generate(seed, r.index, family, exclude), r.outcome, out_dir)
            )
    return rep


def summary(rep: Report) -> str:
    """The campaign's text report: classes, refusals per rule and per table row, bugs, surprises."""
    n = max(1, len(rep.records))
    lines = [
        f"nzjit.fuzz: {len(rep.records)} programs, seed {rep.seed}, {rep.jobs} jobs, "
        f"{rep.seconds:.1f} s ({1000 * rep.seconds / n:.1f} ms/program)",
        "",
    ]
    lines.append("programs by class:")
    for cls in CLASSES:
        lines.append(f"  {cls:<8} {rep.count(cls):>6}")
    fam: Counter[tuple[str, str]] = Counter((r.family, r.outcome.cls) for r in rep.records)
    lines.append("")
    lines.append("by family:        " + "".join(f"{c:>9}" for c in CLASSES))
    for f in sorted({r.family for r in rep.records}):
        lines.append(f"  {f:<15} " + "".join(f"{fam[(f, c)]:>9}" for c in CLASSES))
    rules = Counter(r.outcome.rule for r in rep.records if r.outcome.cls == "refused")
    lines.append("")
    lines.append("refusals by rule:")
    for rule, k in sorted(rules.items(), key=lambda kv: _rule_key(kv[0])):
        lines.append(f"  {rule:<7} {k:>6}")
    unrowed = Counter(
        r.outcome.error.split(": ", 2)[-1][:100]
        for r in rep.records
        if r.outcome.cls == "refused" and not r.outcome.rows
    )
    covered = rep.rows_covered()
    lines.append("")
    lines.append("refusals by rule-table row (nz-layout.md §7 and the NZ-21 table; X: other NZ rows):")
    for row in ROWS:
        mark = f"{covered[row.id]:>6}" if covered[row.id] else "     -"
        lines.append(f"  {row.id:<4} {mark}  [{row.table}] {row.condition}")
    missing = [row for row in ROWS if not covered[row.id]]
    if missing:
        lines.append("  not covered:")
        for row in missing:
            lines.append(f"    {row.id}: {row.note or 'not reached in this run'}")
    if unrowed:
        lines.append(f"  refusals outside the tables ({sum(unrowed.values())}), most frequent:")
        for msg, k in unrowed.most_common(6):
            lines.append(f"    {k:>5}  {msg}")
    for cls in ("crash", "wrong"):
        bugs = [r for r in rep.records if r.outcome.cls == cls]
        lines.append("")
        lines.append(f"{cls} ({len(bugs)}):")
        groups: dict[str, list[Record]] = {}
        for r in bugs:
            key = _shape_free(r.outcome.error or r.outcome.detail)[:110]
            groups.setdefault(key, []).append(r)
        for key, rs in sorted(groups.items(), key=lambda kv: -len(kv[1])):
            tags = sorted({t for r in rs for t in r.outcome.tags if t in _KNOWN_TAGS})
            lines.append(f"  {len(rs):>5}  {key}")
            lines.append(
                f"         programs {', '.join(str(r.index) for r in rs[:8])}{' ...' if len(rs) > 8 else ''}"
                f"{'  tags ' + ' '.join(tags) if tags else ''}"
            )
    sur = Counter(
        r.outcome.surprise.split(", ")[0] + ", " + r.outcome.surprise.split(", ")[-1]
        for r in rep.records
        if r.outcome.surprise
    )
    if sur:
        lines.append("")
        lines.append("where the outcome differs from the spec's prediction (not failures):")
        for s, k in sur.most_common(12):
            first = next(
                r.index for r in rep.records if r.outcome.surprise and s.split(", ")[0] in r.outcome.surprise
            )
            lines.append(f"  {k:>5}  {s}  (e.g. program {first})")
    warned = [r for r in rep.records if r.outcome.warnings]
    if warned:
        lines.append("")
        lines.append(
            f"programs that raised HardwareDefectWarning: {len(warned)} "
            f"({sum(1 for r in warned if r.outcome.cls == 'equal')} of them still equal)"
        )
    if rep.safety:
        lines.append("")
        lines.append(f"safety probes ({sum(rep.safety.values())}, issue 24):")
        for probe, v in sorted(rep.safety.items()):
            lines.append(f"  {v:>5}  {probe}")
    if rep.reproducers:
        lines.append("")
        lines.append(f"reproducers ({len(rep.reproducers)}): {os.path.dirname(rep.reproducers[0])}/")
    return "\n".join(lines)


#: Generator tags of known, reported defect classes (listed with the programs they appear in).
_KNOWN_TAGS: set[str] = set()  # defect classes to skip; none are open


def _shape_free(msg: str) -> str:
    """Group messages that differ only in numbers (sizes, addresses, file names)."""
    msg = re.sub(r"/\S+/prog_\S+\.py:\d+", "<program>", msg)
    return re.sub(r"0x[0-9a-f]+|\d+", "#", msg)


def _rule_key(rule: str | None) -> tuple[int, str]:
    if rule and rule.startswith("NZ-"):
        return int(rule[3:]), rule
    return 10**6, str(rule)
