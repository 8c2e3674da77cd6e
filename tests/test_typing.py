"""Kernel annotations under mypy (docs/typing.md): with the shipped plugin `nzjit.mypy_plugin`,
today's spelling `pl.Tensor[[64, 2048], pl.INT8]` type-checks and a parameter is a Tracer in the
body (so a real mistake is still caught); every example file type-checks; nzjit/, runtime/ and the
docs/CLI scripts are mypy-clean (issue 26)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

SAMPLE = """\
import numpy as np
import runtime
from nzjit import pl

B = pl.dynamic("B")


@pl.kernel
def nz_matmul(x: pl.Tensor[[64, 2048], pl.INT8],
              w: pl.Tensor[[1024, 2048], pl.INT8, pl.NZ],
              out: pl.Out[pl.Tensor[[64, 1024], pl.INT32]]) -> None:
    for nb in pl.spmd(4):
        n0 = nb * 256
        acc = pl.matmul(x[:, 0:512], w[n0:n0 + 256, 0:512], b_trans=True)
        for k0 in pl.pipeline(512, 2048, 512):
            acc = pl.matmul_acc(acc, x[:, k0:k0 + 512], w[n0:n0 + 256, k0:k0 + 512], b_trans=True)
        out[:, n0:n0 + 256] = acc


@pl.kernel
def batched(x: pl.Tensor[[B, 16, 32], pl.FP16], s: pl.Scalar[pl.INT32],
            y: pl.InOut[pl.Tensor[[B, 16, 32], pl.FP16]]) -> None:
    pass


out = nz_matmul(np.zeros((64, 2048), np.int8), runtime.pack_nz(np.zeros((1024, 2048), np.int8)))
"""

MISTAKE = """\
from nzjit import pl


@pl.kernel
def k(x: pl.Tensor[[16, 32], pl.FP32]) -> None:
    reveal_type(x)
    x.no_such_method()
"""

#: checked with the library: the docs/CLI area's scripts (nzjit/ and runtime/ are checked whole)
OWN = [
    "docs/rule_map.py",
    "docs/op_reference.py",
    "docs/error_catalogue.py",
    "benchmarks/run_all.py",
]
#: every example kernel file: mypy with the plugin accepts them as written (pl.Tensor, pl.Out,
#: pld.DistributedTensor signatures, pl.range loops in kernels and orchestrations)
EXAMPLES = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "examples").glob("*.py"))


@pytest.fixture(scope="module")
def mypy_lines(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """One mypy run (the configuration of pyproject.toml, its plugin included) over the sample
    kernels, the examples, nzjit/, runtime/ and OWN: its error and note lines."""
    if importlib.util.find_spec("mypy") is None:
        pytest.skip("mypy is not installed")
    tmp = tmp_path_factory.mktemp("typing")
    (tmp / "sample_kernel.py").write_text(SAMPLE)
    (tmp / "mistake.py").write_text(MISTAKE)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MYPYPATH": str(ROOT)}
    files = [str(tmp / "sample_kernel.py"), str(tmp / "mistake.py"), "nzjit", "runtime", *EXAMPLES, *OWN]
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--no-incremental",
            "--follow-imports=silent",
            "--config-file",
            str(ROOT / "pyproject.toml"),
            *files,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert r.returncode in (0, 1), r.stdout + r.stderr  # 2: mypy itself failed (a crash, a bad option)
    return [t for t in r.stdout.splitlines() if ": error:" in t or ": note:" in t]


def test_mypy_accepts_kernel_annotations_with_the_plugin(mypy_lines):
    mistake = [t for t in mypy_lines if "mistake.py" in t]
    assert [t.split(": ", 1)[1] for t in mistake] == [
        'note: Revealed type is "nzjit.tracing.tracer.Tracer"',
        'error: "Tracer" has no attribute "no_such_method"  [attr-defined]',
    ], "\n".join(mypy_lines)
    sample = [t for t in mypy_lines if "sample_kernel.py" in t]
    assert sample == [], "\n".join(sample)


def test_mypy_accepts_the_example_kernel_files(mypy_lines):
    assert len(EXAMPLES) >= 2 and "examples/nz_matmul.py" in EXAMPLES
    assert "examples/ep_dispatch_all_to_all.py" in EXAMPLES  # pld.DistributedTensor parameters
    bad = [t for t in mypy_lines if t.startswith("examples/")]
    assert bad == [], "\n".join(bad)


def test_library_is_mypy_clean(mypy_lines):
    # issue 26: nzjit/ and runtime/ whole (as .ci/run checks them), and the docs/CLI scripts
    bad = [t for t in mypy_lines if t.startswith(("nzjit/", "runtime/", *OWN))]
    assert bad == [], "\n".join(bad)
    others = [t for t in mypy_lines if "mistake.py" not in t]
    assert others == [], "\n".join(others)


def test_annotations_keep_working_at_run_time():
    import nzjit
    from nzjit import pl

    @pl.kernel
    def k(x: pl.Tensor[[16, 32], pl.FP32], out: pl.Out[pl.Tensor[[16, 32], pl.FP32]]) -> None:
        pl.store(pl.load(x, [0, 0], [16, 32]), [0, 0], out)

    assert isinstance(k, nzjit.Kernel) and [p.name for p in k.params] == ["x", "out"]
