"""Fixtures for the `nzjit` command line tests: call `nzjit.cli.main` in-process, write kernel files."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass

import pytest

from nzjit.cli import main

NZMM = """\
import numpy as np
from nzjit import pl
@pl.kernel
def nzmm(x: pl.Tensor[[64, 512], pl.INT8], w: pl.Tensor[[256, 512], pl.INT8, pl.NZ], out: pl.Out[pl.Tensor[[64, 256], pl.INT32]]):
    for nb in pl.spmd(2):
        n0 = nb * 128
        out[:, n0:n0 + 128] = pl.matmul(x[:, 0:512], w[n0:n0 + 128, 0:512], b_trans=True)
if __name__ == "__main__":
    import runtime
    x = np.ones((64, 512), np.int8); w = np.ones((256, 512), np.int8)
    print(nzmm(x, runtime.pack_nz(w)).sum())
"""


@dataclass
class Result:
    """Exit status and captured streams of one `nzjit` invocation."""

    code: int
    out: str
    err: str


@pytest.fixture
def cli(capsys):
    """`cli("ir", path, "--all")` runs `nzjit.cli.main` and returns a Result."""

    def run(*argv: object) -> Result:
        capsys.readouterr()
        code = main([str(a) for a in argv])
        cap = capsys.readouterr()
        return Result(code, cap.out, cap.err)

    return run


@pytest.fixture
def write(tmp_path):
    """`write("k.py", source)` writes a dedented kernel file into tmp_path and returns its path."""

    def w(name: str, source: str) -> str:
        path = tmp_path / name
        path.write_text(textwrap.dedent(source))
        return str(path)

    return w


@pytest.fixture
def nzmm_file(write):
    """The issue's example kernel file (its demo prints 64 * 256 * 512 = 8388608)."""
    return write("nzmm.py", NZMM)
