"""docs/distributed.md's first example runs and checks itself against numpy (issue 28)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_distributed_doc_first_example_runs(tmp_path) -> None:
    text = (ROOT / "docs" / "distributed.md").read_text()
    code = re.search(r"## A first all-reduce\n\n```python\n(.*?)```", text, re.S)
    assert code is not None, "docs/distributed.md lost its first example"
    path = tmp_path / "distributed_doc.py"  # kernels need a real file: their source is traced
    path.write_text(code.group(1))
    exec(compile(code.group(1), str(path), "exec"), {"__name__": "doc"})  # asserts inside
