"""What the README and the examples promise runs: the README's first kernel and every example's
demo (each asserts its numbers against numpy)."""

from __future__ import annotations

import re
import runpy
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))


def test_readme_first_kernel_runs():
    text = (ROOT / "README.md").read_text()
    code = re.search(r"## A first kernel\n\n```python\n(.*?)```", text, re.S)
    assert code is not None, "README lost its first-kernel block"
    exec(compile(code.group(1), "README.md", "exec"), {"__name__": "readme"})  # asserts inside


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_demo_runs(path, capsys, monkeypatch):
    monkeypatch.setattr(sys, "argv", [str(path)])
    monkeypatch.syspath_prepend(str(path.parent))
    runpy.run_path(str(path), run_name="__main__")
    assert capsys.readouterr().out.strip(), f"{path.name} printed nothing"
