"""benchmarks/compare_commits.py (issue 21 item 7): the parts that do not time anything - cells
parsed from run_all's rows, rows paired across the two trees, the RESULTS.md block - and a run
of the script on two fake trees (no benchmark of the real ones: they take minutes)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import compare_commits as cc  # noqa: E402


@pytest.mark.parametrize(
    "cell,seconds",
    [
        ("138.37 ms", 138.37e-3),
        ("18.0 us", 18e-6),
        ("3.51 ms 9.5 GB/s", 3.51e-3),
        ("2.44 s", 2.44),
        ("0.78", None),
        ("-", None),
    ],
)
def test_seconds_reads_the_first_time_of_a_cell(cell, seconds):
    got = cc.seconds(cell)
    assert got == pytest.approx(seconds) if seconds is not None else got is None


def test_ratio_reads_a_ratio_cell():
    assert cc.ratio("1.24x") == 1.24 and cc.ratio("0.76x bw") == 0.76 and cc.ratio("-") is None


def test_rows_pair_by_name_then_in_order():
    before = ["a", "old name", "gone"]
    after = ["a", "new name", "c"]
    assert cc.pair_rows(before, after) == [("a", "a"), ("old name", "new name"), ("gone", "c")]
    assert cc.pair_rows(["a", "b"], ["a"]) == [("a", "a"), ("b", None)]
    assert cc.pair_rows(["a"], ["a", "new"]) == [("a", "a"), (None, "new")]


def test_cells_take_the_best_time_and_the_median_ratio():
    c = cc.Cells()
    for t, r in (("3.00 ms", "1.30x"), ("2.00 ms", "1.10x"), ("4.00 ms", "1.20x")):
        c.add([{"benchmark": "row ", "nzjit": t, "ratio": r}])
    assert c.best_time("row") == pytest.approx(2e-3)
    assert c.median_ratio("row") == pytest.approx(1.2)
    assert c.spread("row") == "100%"


def test_results_block_is_replaced_and_kept():
    text = cc.replace_block("# run_all's table\n", "first")
    assert text.startswith("# run_all's table\n") and "first" in text
    again = cc.replace_block(text, "second")
    assert "first" not in again and again.count(cc.BEGIN) == 1 and "second" in cc.block_of(again)
    assert cc.block_of("no block") == ""


def _fake_tree(root: Path, ms: float) -> Path:
    (root / "benchmarks").mkdir(parents=True)
    (root / "benchmarks" / "run_all.py").write_text('TARGETS = [("(z) fake", "bench_fake")]\n')
    (root / "benchmarks" / "harness.py").write_text("")
    (root / "benchmarks" / "bench_fake.py").write_text(
        "import time\n"
        "def run():\n"
        f"    return [{{'benchmark': 'fake row', 'nzjit': '{ms} ms', 'reference': '1 ms', 'ratio': '{ms}x',\n"
        "             'target': '-', 'clock': 'cpu' if time.perf_counter is time.process_time else 'wall'}]\n"
    )
    return root


def test_a_run_on_two_trees_prints_the_before_after_table(tmp_path, monkeypatch):
    before, after = _fake_tree(tmp_path / "before", 2.0), _fake_tree(tmp_path / "after", 3.0)
    monkeypatch.setattr(cc, "ROOT", after)
    monkeypatch.setattr(cc, "commit_of", lambda tree: "fake")
    clocks = []
    real = cc.run_module

    def spy(tree, module, clock):
        rows = real(tree, module, clock)
        clocks.append(rows[0]["clock"])
        return rows

    monkeypatch.setattr(cc, "run_module", spy)
    text = cc.main(["--base", str(before), "--rounds", "2", "--no-write"])
    assert "| fake row | 2.00 ms (2.00x) | 3.00 ms (3.00x) | 1.50 | 1.50 | 0% / 0% |" in text
    assert clocks == ["cpu"] * 4  # sitecustomize swapped perf_counter in every fresh process


def test_the_script_refuses_a_tree_without_benchmarks(tmp_path):
    p = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "compare_commits.py"), "--base", str(tmp_path)],
        capture_output=True,
        text=True,
    )
    assert p.returncode != 0 and "is not a checkout with benchmarks/run_all.py" in p.stderr


def test_run_all_takes_the_geometric_mean_of_the_rows_against_numpy():
    # issue 27 item 2: the rows with a numpy target (<= 1.5x, the grouped prefill <= 1.0x); other
    # rows (budgets, sub-rows) do not count
    import run_all

    rows = [
        {"ratio": "1.44x", "target": "<= 1.5x"},
        {"ratio": "0.81x", "target": "<= 1.0x"},
        {"ratio": "9.00x", "target": "-"},
        {"ratio": "0.50x", "target": "< 1x (of 50 ms)"},
    ]
    row = run_all.geomean_row([("(z)", rows)])
    assert row is not None and row["ratio"] == "1.08x" and row["target"] == "<= 1.1x"
    assert "of the 2 rows" in row["benchmark"]
    assert run_all.geomean_row([("(z)", rows[2:])]) is None
