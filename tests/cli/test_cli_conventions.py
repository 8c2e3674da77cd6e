"""`nzjit --version` / `nzjit.__version__` (one source of truth with pyproject.toml), and `nzjit ir` /
`nzjit pto` on an orchestration: its program (the calls per rank), then each kernel it calls."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import nzjit

ROOT = Path(__file__).resolve().parents[2]
TP_MOE = ROOT / "examples" / "tp_moe.py"


def test_version_has_one_source_of_truth(cli):
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "nzjit.__version__"}
    assert re.fullmatch(r"\d+\.\d+\.\d+", nzjit.__version__)
    r = cli("--version")
    assert (r.code, r.out, r.err) == (0, f"nzjit {nzjit.__version__}\n", "")


def test_version_from_the_installed_command():
    r = subprocess.run([sys.executable, "-m", "nzjit", "--version"], capture_output=True, text=True, cwd=ROOT)
    assert (r.returncode, r.stdout.strip()) == (0, f"nzjit {nzjit.__version__}")


def test_ir_of_an_orchestration_prints_its_program_per_rank(cli):
    r = cli("ir", TP_MOE, "--kernel", "moe_experts")
    assert r.code == 0, r.err
    lines = r.out.splitlines()
    assert lines[0] == "# orchestration moe_experts: 12 kernel calls on 4 ranks"
    for rank in range(4):
        i = lines.index(f"rank {rank}:")
        assert lines[i + 1].startswith(
            f"  gate_up(xe[{rank}], wg[{rank}], wu[{rank}]) -> "
            f"gate_up.g@rank{rank}, gate_up.u@rank{rank}  # tp_moe.py:"
        )
        assert lines[i + 2].startswith(
            f"  act(gate_up.g@rank{rank}, gate_up.u@rank{rank}) -> act.h@rank{rank}"
        )
        assert lines[i + 3].startswith(f"  down(act.h@rank{rank}, wd[{rank}]) -> ye[{rank}]")
    # then the final graph of each kernel it calls, once each, in call order
    heads = [t for t in lines if t.startswith("# kernel ")]
    assert heads == ["# kernel gate_up", "# kernel act", "# kernel down"]
    assert "tile.load" in r.out


def test_pto_of_an_orchestration(cli):
    r = cli("pto", TP_MOE, "--kernel", "moe_experts")
    assert r.code == 0, r.err
    assert r.out.startswith("# orchestration moe_experts: 12 kernel calls on 4 ranks\n")
    assert r.out.count("pto.tload") >= 3 and "# kernel down" in r.out


def test_unknown_name_lists_the_orchestrations(cli):
    r = cli("ir", TP_MOE, "--kernel", "nope")
    assert r.code == 2
    assert "kernels in this file: gate_up, act, down; orchestrations: moe_experts" in r.err


def test_orchestration_with_a_dynamic_dimension_is_a_usage_error(cli, write):
    path = write(
        "dyn.py",
        """
        from nzjit import pl

        B = pl.dynamic("B")


        @pl.kernel
        def k(x: pl.Tensor[[B, 16, 32], pl.FP32], out: pl.Out[pl.Tensor[[B, 16, 32], pl.FP32]]):
            pass


        @pl.orchestration
        def o(x: pl.Tensor[[2, B, 16, 32], pl.FP32], out: pl.Out[pl.Tensor[[2, B, 16, 32], pl.FP32]]):
            for r in range(2):
                k(x[r], out[r], device=r)
        """,
    )
    r = cli("ir", path, "--kernel", "o")
    assert r.code == 2 and r.out == ""
    assert "parameter 'x' has the dynamic dimension B" in r.err and ".record(...)" in r.err
