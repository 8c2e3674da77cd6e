"""Progress on long work (nzjit/progress.py): `python -m nzjit.fuzz` and benchmarks/run_all.py show
programs done, the rate and the time left on a terminal (tested through a pty) and print nothing
but their results when piped."""

from __future__ import annotations

import io
import os
import pty
import re
import select
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from nzjit.progress import CountLines, Progress, format_seconds

ROOT = Path(__file__).resolve().parents[1]
FUZZ = [sys.executable, "-m", "nzjit.fuzz", "--n", "60", "--seed", "5", "--jobs", "1", "--out", "fuzz-out"]
# run_all.main with each benchmark replaced by a quick fake (the real ones take minutes)
RUN_ALL = [
    sys.executable,
    "-c",
    textwrap.dedent("""\
    import sys, time
    sys.path.insert(0, "benchmarks")
    import run_all
    def fake(module):
        time.sleep(0.3)
        print(f"measured {module}")
        return [dict(benchmark=module, nzjit="1 ms", reference="2 ms", ratio="0.50x", target="-")]
    run_all.run_target = fake
    run_all.main(write=False)
"""),
]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("NZJIT_PROGRESS", "TERM")}
    env.update(PYTHONPATH=str(ROOT), TERM="xterm", **extra)
    return env


def _on_a_terminal(argv: list[str], cwd: Path) -> tuple[str, str]:
    """Run with stderr on a pseudo-terminal and stdout piped: (stdout, what the terminal showed)."""
    master, slave = pty.openpty()
    p = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=slave, env=_env())
    os.close(slave)
    seen = b""
    while True:
        ready, _, _ = select.select([master], [], [], 0.1)
        if ready:
            try:
                chunk = os.read(master, 4096)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            seen += chunk
        elif p.poll() is not None:
            break
    out = p.stdout.read().decode() if p.stdout else ""
    p.wait(timeout=300)
    os.close(master)
    assert p.returncode == 0, seen.decode(errors="replace")
    return out, seen.decode(errors="replace")


def _piped(argv: list[str], cwd: Path) -> tuple[str, str]:
    r = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, env=_env(), timeout=300)
    assert r.returncode == 0, r.stderr
    return r.stdout, r.stderr


def test_fuzz_shows_progress_on_a_terminal(tmp_path):
    out, term = _on_a_terminal(FUZZ, tmp_path)
    assert "\r\x1b[K" in term  # redrawn in place
    assert re.search(r"60/60 programs  [\d.]+(/s| s each)  done in \d+s", term), term
    assert out.startswith("nzjit.fuzz: 60 programs, seed 5")  # results on stdout, untouched


def test_fuzz_is_quiet_when_piped(tmp_path):
    out, err = _piped(FUZZ, tmp_path)
    assert err == ""
    assert out.startswith("nzjit.fuzz: 60 programs, seed 5") and "/60" not in out


def test_run_all_shows_progress_on_a_terminal():
    out, term = _on_a_terminal(RUN_ALL, ROOT)
    n = 8  # benchmarks/run_all.py TARGETS: (a)..(h): issue 22 added bench_vector, issue 25 bench_ranks, issue 27 bench_decode and bench_breakdown
    assert re.search(rf" {n}/{n} benchmarks  .*done in \d+s", term), term
    assert re.search(rf"1/{n} benchmarks  .*\d+s left", term), term
    assert "measured bench_compile" in out and "| bench_interp | 1 ms | 2 ms | 0.50x | - |" in out


def test_run_all_is_quiet_when_piped():
    out, err = _piped(RUN_ALL, ROOT)
    assert err == ""
    assert "benchmarks" not in out.split("# nzjit benchmarks", 1)[0].replace("== ", "")
    assert "measured bench_pack_nz" in out


def test_progress_text_and_forcing(monkeypatch):
    class Clock:
        t = 100.0

    monkeypatch.setattr("nzjit.progress.time.monotonic", lambda: Clock.t)
    buf = io.StringIO()
    bar = Progress(1000, "programs", stream=buf, enabled=True)
    assert not bar.live  # not a terminal: plain lines, one per tenth
    Clock.t += 10
    bar.update(250)
    assert bar.text() == "   250/1000 programs  25.0/s  30s left"
    bar.update(260)  # the same tenth: no new line
    Clock.t += 30
    bar.update(1000)
    assert buf.getvalue().splitlines() == [
        "   250/1000 programs  25.0/s  30s left",
        "  1000/1000 programs  25.0/s  done in 40s",
    ]
    monkeypatch.setenv("NZJIT_PROGRESS", "0")
    assert Progress(10, stream=io.StringIO()).enabled is False
    monkeypatch.setenv("NZJIT_PROGRESS", "1")
    assert Progress(10, stream=io.StringIO()).enabled is True
    assert [format_seconds(s) for s in (5, 65, 3725)] == ["5s", "1m05s", "1h02m"]


def test_count_lines_turns_counts_into_progress_and_passes_the_rest(monkeypatch, capsys):
    bar = Progress(100, stream=io.StringIO(), enabled=True)
    sink = CountLines(bar)
    sink.write("  50/100\nresult line\n  7")
    assert bar.done == 50 and capsys.readouterr().out == "result line\n"
    sink.write("0/100\n")
    assert bar.done == 70


@pytest.mark.parametrize("table, machine, date", [(["| a |", "| b |"], "Machine: m", "Date: d")])
def test_run_all_rewrites_only_the_generated_block(table, machine, date):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import run_all

    page = (ROOT / "docs" / "performance.md").read_text()
    new = run_all.performance_page(page, table, machine, date)
    before, after = page.split(run_all.BEGIN)[0], page.split(run_all.END)[1]
    assert new == f"{before}{run_all.BEGIN}\n| a |\n| b |\n\nMachine: m\nDate: d\n{run_all.END}{after}"
    assert "| benchmark | nzjit | reference | ratio | target |" in page.split(run_all.BEGIN)[1]
    with pytest.raises(ValueError, match="markers"):
        run_all.performance_page("no markers", table, machine, date)
