"""The device never depends on the compiler (design.md "Backend and runtime")."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def test_runtime_never_imports_nzjit():
    code = (
        "import sys, runtime, runtime.isa, runtime.dispatch; "
        "bad = sorted(m for m in sys.modules if m.split('.')[0] == 'nzjit'); "
        "assert not bad, bad"
    )
    root = Path(__file__).resolve().parents[2]
    subprocess.run([sys.executable, "-c", code], check=True, cwd=root)
