"""The cube examples of issue 23 (bias matmul, gemv with ragged K and N, a Qwen3-style decode
projection with the `if k0 == 0` idiom, per-head scores with pl.batch_matmul), each run as `python examples/<name>.py` runs it: its
`main()` checks the result against numpy (INT8 exact, floats within the float32 accumulation bound)."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ["matmul_bias.py", "gemv_ragged.py", "qwen3_decode_proj.py", "batch_matmul.py"]


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_matches_numpy(name, monkeypatch, capsys):
    path = ROOT / "examples" / name
    monkeypatch.setattr(sys, "argv", [str(path)])
    ns = runpy.run_path(str(path), run_name="example")
    ns["main"]()  # asserts against numpy
    out = capsys.readouterr().out
    assert "against numpy" in out or "accumulation of numpy" in out


def test_the_ragged_gemv_reads_only_valid_k_and_n():
    ns = runpy.run_path(str(ROOT / "examples" / "gemv_ragged.py"), run_name="example")
    ir = str(ns["gemv_ragged"].lower().ir())
    assert "tx:i8[16,1024]@Mat<valid 1,1000> = tile.load" in ir  # the row: one fractal, K tail 1000
    assert "@Left<valid 1,488> = tile.extract[shape=(16, 512) memory=Left valid_shape=(1, 488)]" in ir
    assert "@Right<valid 512,?> = tile.extract" in ir and "@Acc<valid 1,?> = tile.mad_acc[gemv=True]" in ir
    assert "@Right<valid 488,?> = tile.extract" in ir  # the K tail: TGEMV reads k = Right.validRow
    text = ns["gemv_ragged"].lower().pto()
    assert "pto.tgemv ins(" in text and "pto.tgemv.acc ins(" in text


def test_the_bias_example_splits_n_to_fit_the_bias_table():
    ns = runpy.run_path(str(ROOT / "examples" / "matmul_bias.py"), run_name="example")
    ir = str(ns["linear_bias"].lower().ir())
    assert ir.count("tile.mad_bias") == 2 and "memory=Bias] tb 0 256" in ir


def test_the_batched_example_runs_one_tmatmul_per_head_of_its_lane():
    ns = runpy.run_path(str(ROOT / "examples" / "batch_matmul.py"), run_name="example")
    low = ns["head_scores"].lower()
    assert "tile.batch_matmul" in str(low.ir("LowerCompositeOps"))
    final = str(low.ir())
    assert final.count("tile.mad[") == ns["HB"] and final.count("tile.store") == ns["HB"]
    assert low.memory().peak["Acc"] == ns["S"] * ns["S_KV"] * 4  # one head's scores at a time
