"""Kernel annotations under mypy (docs/typing.md): with the shipped plugin `nzjit.mypy_plugin`,
today's spelling `pl.Tensor[[64, 2048], pl.INT8]` type-checks and a parameter is a Tracer in the
body (so a real mistake is still caught); the files of the docs/CLI area are mypy-clean."""

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

OWN = [
    "nzjit/errors.py",
    "nzjit/diagnostics.py",
    "nzjit/cli.py",
    "nzjit/layout_picture.py",
    "nzjit/__init__.py",
    "nzjit/mypy_plugin.py",
    "nzjit/progress.py",
    "docs/rule_map.py",
    "docs/op_reference.py",
    "docs/error_catalogue.py",
    "benchmarks/run_all.py",
]


@pytest.mark.skipif(importlib.util.find_spec("mypy") is None, reason="mypy is not installed")
def test_mypy_accepts_kernel_annotations_with_the_plugin(tmp_path):
    (tmp_path / "sample_kernel.py").write_text(SAMPLE)
    (tmp_path / "mistake.py").write_text(MISTAKE)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MYPYPATH": str(ROOT)}
    files = [str(tmp_path / "sample_kernel.py"), str(tmp_path / "mistake.py"), *OWN]
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
    lines = [t for t in r.stdout.splitlines() if ": error:" in t or ": note:" in t]
    mistake = [t for t in lines if "mistake.py" in t]
    assert [t.split(": ", 1)[1] for t in mistake] == [
        'note: Revealed type is "nzjit.tracing.tracer.Tracer"',
        'error: "Tracer" has no attribute "no_such_method"  [attr-defined]',
    ], r.stdout
    others = [t for t in lines if "mistake.py" not in t]
    assert others == [], "\n".join(others)  # the sample kernel and our own files are clean


def test_annotations_keep_working_at_run_time():
    import nzjit
    from nzjit import pl

    @pl.kernel
    def k(x: pl.Tensor[[16, 32], pl.FP32], out: pl.Out[pl.Tensor[[16, 32], pl.FP32]]) -> None:
        pl.store(pl.load(x, [0, 0], [16, 32]), [0, 0], out)

    assert isinstance(k, nzjit.Kernel) and [p.name for p in k.params] == ["x", "out"]
