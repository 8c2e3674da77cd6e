"""A refused kernel run as `python my_kernel.py`, without the `nzjit` command: the exception text
carries `file:line:col`, the kernel line, a caret, the rule and `help:`; the traceback shows the
user's frames only (nzjit's with NZJIT_TRACEBACK=full); at most 20 lines (issue 26)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import nzjit
from nzjit import pl
from nzjit.errors import Source, caret_under, param_source

ROOT = Path(__file__).resolve().parents[1]

MISALIGNED = """\
import numpy as np
import runtime
from nzjit import pl


@pl.kernel
def k(x: pl.Tensor[[64, 512], pl.INT8],
      w: pl.Tensor[[256, 512], pl.INT8, pl.NZ],
      out: pl.Out[pl.Tensor[[64, 128], pl.INT32]]):
    out[:, 0:128] = pl.matmul(x[:, 0:512], w[8:136, 0:512], b_trans=True)


def main():
    x = np.zeros((64, 512), np.int8)
    w = np.zeros((256, 512), np.int8)
    k(x, runtime.pack_nz(w))


main()
"""

UNUSED_SUB_BYTE = """\
from nzjit import pl


@pl.kernel
def k(x: pl.Tensor[[64, 512], pl.INT8],
      w: pl.Tensor[[256, 512], pl.INT8, pl.NZ],
      v: pl.Tensor[[64, 64], pl.INT4, pl.NZ],
      out: pl.Out[pl.Tensor[[64, 256], pl.INT32]]):
    out[:, :] = pl.matmul(x[:, :], w[:, :], b_trans=True)


k.lower()
"""

MISSING_ANNOTATION = """\
from nzjit import pl


@pl.kernel
def k(x: pl.Tensor[[64, 64], pl.INT8],
      w,
      out: pl.Out[pl.Tensor[[64, 64], pl.INT8]]):
    pass
"""


def _run(tmp_path: Path, text: str, **env: str) -> tuple[str, str]:
    path = tmp_path / "my_kernel.py"
    path.write_text(text)
    environ = {k: v for k, v in os.environ.items() if k != "NZJIT_TRACEBACK"}
    environ.update(env, PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, env=environ, timeout=120)
    assert r.returncode == 1 and r.stdout == "", r.stderr
    return str(path), r.stderr


def _line_of(text: str, needle: str) -> int:
    return next(i for i, t in enumerate(text.splitlines(), 1) if needle in t)


def test_refused_kernel_in_plain_python_is_short_and_complete(tmp_path):  # NZ-12
    path, err = _run(tmp_path, MISALIGNED)
    lines = err.rstrip("\n").splitlines()
    assert len(lines) <= 20, err
    assert lines[0] == "Traceback (most recent call last):"
    assert os.sep + "nzjit" + os.sep not in err and os.sep + "runtime" + os.sep not in err, err
    frames = re.findall(r'File "([^"]+)", line (\d+), in (\S+)', err)
    assert frames == [
        (path, str(len(MISALIGNED.splitlines())), "<module>"),
        (path, str(_line_of(MISALIGNED, "k(x, runtime")), "main"),
    ], err
    line = _line_of(MISALIGNED, "w[8:136")
    text = MISALIGNED.splitlines()[line - 1]
    col = text.index("w[8:136") + 1
    head = next(i for i, t in enumerate(lines) if t.startswith("nzjit.errors.CompileError: "))
    assert lines[head] == (
        f"nzjit.errors.CompileError: {path}:{line}: [NZ-12] load of NZ tensor 'w': the row "
        "offset 8 must be a non-negative multiple of 16 (fractal rows)"
    )
    assert lines[head + 1] == f"  --> {path}:{line}:{col}"
    assert lines[head + 2] == f"    {line} | {text}"
    caret = lines[head + 3]
    assert caret.startswith(f"    {' ' * len(str(line))} | ")
    span = caret[len(f"    {' ' * len(str(line))} | ") :]
    assert text[span.index("^") : span.index("^") + span.count("^")] == "w[8:136, 0:512]"
    assert lines[head + 4] == "help: align the window to a multiple of 16"


def test_full_traceback_on_request(tmp_path):
    _, err = _run(tmp_path, MISALIGNED, NZJIT_TRACEBACK="full")
    assert os.path.join("nzjit", "passes", "block_nz.py") in err
    assert "hidden" not in err


def test_short_is_the_default_spelling(tmp_path):
    _, default = _run(tmp_path, MISALIGNED)
    _, short = _run(tmp_path, MISALIGNED, NZJIT_TRACEBACK="short")
    assert short == default


def test_unused_bad_parameter_points_at_its_annotation(tmp_path):  # NZ-33
    path, err = _run(tmp_path, UNUSED_SUB_BYTE)
    line = _line_of(UNUSED_SUB_BYTE, "pl.INT4")
    text = UNUSED_SUB_BYTE.splitlines()[line - 1]
    assert f"{path}:{line}: [NZ-33] parameter 'v': INT4 is a sub-byte dtype" in err
    assert f"  --> {path}:{line}:{text.index('pl.Tensor') + 1}" in err
    assert "^" * len("pl.Tensor[[64, 64], pl.INT4, pl.NZ]") in err
    assert len(err.splitlines()) <= 20


def test_missing_annotation_points_at_the_parameter(tmp_path):
    path, err = _run(tmp_path, MISSING_ANNOTATION)
    line = _line_of(MISSING_ANNOTATION, "w,")
    assert f"{path}:{line}: kernel parameter 'w' needs a pl.Tensor" in err
    assert f"  --> {path}:{line}:7" in err
    assert os.sep + "nzjit" + os.sep not in err


def test_refusal_caught_in_python_keeps_its_type_fields_and_user_frames():
    @pl.kernel
    def k(
        x: pl.Tensor[[64, 512], pl.INT8],
        w: pl.Tensor[[256, 512], pl.INT8, pl.NZ],
        out: pl.Out[pl.Tensor[[64, 128], pl.INT32]],
    ):
        out[:, 0:128] = pl.matmul(x[:, 0:512], w[8:136, 0:512], b_trans=True)  # the load

    with pytest.raises(nzjit.CompileError) as info:
        k.lower()
    err = info.value
    assert err.rule == "NZ-12" and err.help == "align the window to a multiple of 16"
    assert str(err).splitlines()[0] == err.headline()
    assert err.render(caret=False) == err.headline() + "; help: align the window to a multiple of 16"
    tb, files = err.__traceback__, []
    while tb is not None:
        files.append(tb.tb_frame.f_code.co_filename)
        tb = tb.tb_next
    assert files and all(f == __file__ for f in files), files


def test_param_source_of_an_indented_def():
    def make():
        @pl.kernel
        def k(x: pl.Tensor[[16, 32], pl.INT8], out: pl.Out[pl.Tensor[[16, 32], pl.INT8]]):
            pass

        return k

    src = param_source(make().fn, "out")
    assert src is not None and src.file == __file__
    assert src.text[src.col : src.end_col] == "pl.Out[pl.Tensor[[16, 32], pl.INT8]]"


def test_caret_under_tabs_and_wide_characters():
    line = "\tz = '世界' + f(1)"
    byte = line.encode().index(b"f(1)")
    col, caret = caret_under(line, Source("x.py", 1, byte, byte + 4))
    assert col == line.index("f(1)") + 1
    assert caret == "\t" + " " * len("z = '") + " " * 4 + " " * len("' + ") + "^^^^"


def test_compile_error_survives_pickling():  # a refusal raised in a worker process keeps its place
    import pickle

    err = nzjit.CompileError("bad window", Source(__file__, 3, 4, 9), rule="NZ-12", help="align it")
    err.related = (Source(__file__, 1), "parameter 'w' declared here")
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is nzjit.CompileError and str(back) == str(err)
    assert (back.source, back.rule, back.help, back.related) == (err.source, err.rule, err.help, err.related)
