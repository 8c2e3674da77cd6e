"""Defects the campaign found, one standalone reproducer each (tests/fuzz/repros/), kept as strict
xfails: when a fix lands the test passes and fails, so the entry moves from DEFECTS to FIXED (a
regression test) and its generator tag leaves KNOWN_DEFECT_TAGS (test_fuzz.py), together.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

REPROS = os.path.join(os.path.dirname(__file__), "repros")

DEFECTS = {}


#: Reproducers of defects fixed since they were found: they must keep passing.
FIXED = {
    "nd_partial_mat_tile.py": "an ND matmul operand window that is not whole 16 x c0 fractals crashed at run "
    "time; a Left operand of M < 16 rows now runs on a padded 16-row Mat tile "
    "(passes/auto_tile_matmul.py), other partial windows are refused when compiled "
    "(passes/auto_tile_matmul.check_mat_fractals)",
    "oob_runtime_index.py": "a runtime leading index w[layer] past the last layer read the next allocation; "
    "every partition is now bounds-checked when it is made (impl.check_window)",
    "rank1_store.py": "pl.store into a rank-1 tensor crashed in backend/impl.py _store (partition (1, L))",
    "oob_symbolic_window.py": "a symbolic NZ window past the last row read the next column block; now "
    "refused from the offset's proven range (block_nz.check_in_bounds)",
}


def _run(name: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    return subprocess.run(
        [sys.executable, os.path.join(REPROS, name)], capture_output=True, text=True, env=env, timeout=120
    )


@pytest.mark.parametrize("name", sorted({**DEFECTS, **FIXED}))
def test_reproducer_exists_and_documents_its_cause(name):
    with open(os.path.join(REPROS, name)) as f:
        text = f.read()
    assert text.startswith('"""') and "nzjit.fuzz" in text and "python tests/fuzz/repros/" in text


@pytest.mark.parametrize("name", sorted(DEFECTS))
def test_known_defect_is_fixed(name):
    r = _run(name)
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or [""])[-1]
        pytest.xfail(f"{DEFECTS[name]} -- {last}")
    assert "OK" in r.stdout or "refused" in r.stdout
    pytest.fail(
        f"{name} passes now: remove it from DEFECTS here and its tag from KNOWN_DEFECT_TAGS in test_fuzz.py"
    )


@pytest.mark.parametrize("name", sorted(FIXED))
def test_fixed_defect_stays_fixed(name):
    r = _run(name)
    ok = r.returncode == 0 and ("OK" in r.stdout or "refused" in r.stdout)
    assert ok, f"{FIXED[name]} is back:\n{r.stderr[-2000:]}"
