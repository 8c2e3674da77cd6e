"""Human diagnostics (nzjit/diagnostics.py): `file:line:col: error[NZ-n]: message`, source, caret, help.

One kernel file per diagnostic form, driven through `nzjit ir` (and `nzjit run`); each test checks
the file, the line, where the caret sits in the printed source line, and the help text.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading

import numpy as np
import pytest

import nzjit
import runtime
from nzjit import diagnostics
from nzjit.errors import CompileError, Source

HEAD = re.compile(
    r"^(?P<file>.+?):(?P<line>\d+):(?P<col>\d+): error(\[(?P<rule>[A-Z]+-\d+)\])?: (?P<msg>.*)$"
)
SRC = re.compile(r"^ +(?P<no>\d+) \| (?P<text>.*)$")
CARET = re.compile(r"^ +\| (?P<pad>[ \t]*)(?P<carets>\^+)$")

PRELUDE = """\
import numpy as np
from nzjit import pl

"""

ALIGN = (
    PRELUDE
    + """\
@pl.kernel
def align(x: pl.Tensor[[64, 512], pl.INT8], w: pl.Tensor[[256, 512], pl.INT8, pl.NZ],
          out: pl.Out[pl.Tensor[[64, 128], pl.INT32]]):
    out[:, 0:128] = pl.matmul(x[:, 0:512], w[8:136, 0:512], b_trans=True)
"""
)

SIGN = (
    PRELUDE
    + """\
@pl.kernel
def sign(x: pl.Tensor[[64, 512], pl.INT8], w: pl.Tensor[[256, 512], pl.INT8, pl.NZ],
         out: pl.Out[pl.Tensor[[64, 128], pl.INT32]]):
    for nb in pl.spmd(2):
        n0 = nb * 128 - 128
        out[:, 0:128] = pl.matmul(x[:, 0:512], w[n0:n0 + 128, 0:512], b_trans=True)
"""
)

BREAK = (
    PRELUDE
    + """\
@pl.kernel
def brk(x: pl.Tensor[[64, 512], pl.INT8], w: pl.Tensor[[256, 512], pl.INT8, pl.NZ],
        out: pl.Out[pl.Tensor[[64, 256], pl.INT32]]):
    for nb in pl.range(2):
        n0 = nb * 128
        out[:, n0:n0 + 128] = pl.matmul(x[:, 0:512], w[n0:n0 + 128, 0:512], b_trans=True)
        break
"""
)

IF = (
    PRELUDE
    + """\
@pl.kernel
def iff(x: pl.Tensor[[64, 512], pl.INT8], w: pl.Tensor[[256, 512], pl.INT8, pl.NZ],
        out: pl.Out[pl.Tensor[[64, 256], pl.INT32]]):
    for nb in pl.range(2):
        n0 = nb * 128
        while n0 > 0:  # issue 28: a one-armed `if` is staged now; a `while` stays refused
            out[:, n0:n0 + 128] = pl.matmul(x[:, 0:512], w[n0:n0 + 128, 0:512], b_trans=True)
"""
)


def parse(err: str) -> dict:
    """Split a rendered diagnostic into header fields, source line, caret span and help."""
    lines = err.rstrip("\n").splitlines()
    head = HEAD.match(lines[0])
    assert head, lines[0]
    src = SRC.match(lines[1])
    caret = CARET.match(lines[2])
    assert src and caret, err
    start = len(caret["pad"])
    d = dict(
        head.groupdict(),
        line=int(head["line"]),
        col=int(head["col"]),
        no=int(src["no"]),
        text=src["text"],
        start=start,
        span=src["text"][start : start + len(caret["carets"])],
    )
    d["help"] = lines[3].removeprefix("help: ") if len(lines) > 3 and lines[3].startswith("help: ") else None
    assert len(lines) == (4 if d["help"] else 3), err
    return d


def line_of(source: str, needle: str) -> int:
    return next(i for i, t in enumerate(source.splitlines(), 1) if needle in t)


def check_common(r, path: str, source: str) -> dict:
    assert r.code == 1, r.err
    assert r.out == ""
    assert "Traceback" not in r.err and "nzjit/" not in r.err  # no Python traceback by default
    d = parse(r.err)
    assert d["file"] == path
    assert d["no"] == d["line"]
    assert d["text"] == source.splitlines()[d["line"] - 1]  # the kernel line, verbatim
    assert d["start"] == d["col"] - 1  # the header column is 1-based, the caret 0-based
    return d


def test_alignment_refusal(cli, write):
    path = write("align.py", ALIGN)
    d = check_common(cli("ir", path), path, ALIGN)
    assert d["rule"] == "NZ-12"
    assert d["line"] == line_of(ALIGN, "w[8:136, 0:512]")
    assert "row offset 8 must be a non-negative multiple of 16" in d["msg"]
    assert "w[8:136, 0:512]" in d["span"]  # the caret covers the misaligned NZ window
    assert d["span"].startswith(("pl.matmul(", "w[8:136"))
    assert d["help"] == "align the window to a multiple of 16"


def test_sign_refusal(cli, write):
    path = write("sign.py", SIGN)
    d = check_common(cli("ir", path), path, SIGN)
    assert d["rule"] == "NZ-18"
    assert d["line"] == line_of(SIGN, "w[n0:n0 + 128, 0:512]")
    assert "cannot be proven non-negative" in d["msg"] and "n0 = nb * 128 - 128" in d["msg"]
    assert "w[n0:n0 + 128, 0:512]" in d["span"]
    assert d["help"].startswith("build offsets from non-negative loop variables")


def test_break_in_a_staged_loop(cli, write):
    path = write("brk.py", BREAK)
    d = check_common(cli("ir", path), path, BREAK)
    brk = line_of(BREAK, "break")
    assert "`break`" in d["msg"] and "leaves the staged loop" in d["msg"]
    assert f"line {line_of(BREAK, 'pl.range(2)')}" in d["msg"] or f"line {brk}" in d["msg"]
    # the caret points at the staged loop it leaves (or, equally good, at the `break` itself)
    assert (d["line"], d["span"]) in {(line_of(BREAK, "pl.range(2)"), "pl.range(2)"), (brk, "break")}
    assert d["help"].startswith("compute the trip count up front")


def test_python_while_on_a_traced_value(cli, write):
    path = write("iff.py", IF)
    d = check_common(cli("ir", path), path, IF)
    assert d["line"] == line_of(IF, "while n0 > 0:")
    assert d["span"] == "n0 > 0"
    assert "a Python `if`/`while`/`and`/`or` on a traced value cannot be staged" in d["msg"]
    assert d["help"] == "compute both sides, or use pl.min / pl.max"


def test_compile_error_from_a_demo_via_run(cli, write):
    source = IF + (
        'if __name__ == "__main__":\n    iff(np.zeros((64, 512), np.int8), '
        '__import__("runtime").pack_nz(np.zeros((256, 512), np.int8)))\n'
    )
    path = write("iff_demo.py", source)
    d = check_common(cli("run", path), path, source)
    assert d["span"] == "n0 > 0"


def test_full_traceback_on_request(cli, write, monkeypatch):
    monkeypatch.setenv("NZJIT_TRACEBACK", "full")
    path = write("iff.py", IF)
    r = cli("ir", path)
    assert r.code == 1
    assert r.err.startswith("Traceback (most recent call last):")
    assert os.sep + os.path.join("nzjit", "tracing", "tracer.py") in r.err  # internal frames shown
    tail = r.err[r.err.index(f"{path}:") :]
    assert parse(tail.split("\n\n")[-1] if "\n\n" in tail else tail)["span"] == "n0 > 0"


def test_subprocess_compile_error_has_no_traceback(write, tmp_path):
    path = write("align.py", ALIGN)
    env = {k: v for k, v in os.environ.items() if k != "NZJIT_TRACEBACK"}
    p = subprocess.run(
        [sys.executable, "-m", "nzjit", "ir", path],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert p.returncode == 1 and p.stdout == ""
    assert "Traceback" not in p.stderr
    assert parse(p.stderr)["rule"] == "NZ-12"


def test_internal_error_exits_70_with_the_full_traceback(cli, write):
    path = write(
        "ice.py",
        """\
        import nzjit
        def main():
            raise nzjit.InternalError("'w' is not blocked at MaterializeTensorStrides")
        """,
    )
    r = cli("run", path)
    assert r.code == 70
    assert r.err.startswith("nzjit: internal compiler error: 'w' is not blocked")
    assert "Traceback (most recent call last):" in r.err
    assert os.path.join("nzjit", "cli.py") in r.err  # full: internal frames are kept
    assert "please report it" in r.err


def test_user_exception_traceback_hides_nzjit_frames(cli, write):
    path = write(
        "badcall.py",
        """\
        import numpy as np
        from nzjit import pl

        @pl.kernel
        def k(x: pl.Tensor[[64, 64], pl.INT8], w: pl.Tensor[[64, 64], pl.INT8],
              out: pl.Out[pl.Tensor[[64, 64], pl.INT32]]):
            out[:, :] = pl.matmul(x[:, :], w[:, :], b_trans=True)

        if __name__ == "__main__":
            k(np.zeros((64, 32), np.int8), np.zeros((64, 64), np.int8))
        """,
    )
    r = cli("run", path)
    assert r.code == 1
    assert r.err.startswith("Traceback (most recent call last):")
    assert f'File "{path}", line 10, in <module>' in r.err
    assert "DispatchError" in r.err
    assert os.sep + "nzjit" + os.sep not in r.err and os.sep + "runtime" + os.sep not in r.err
    assert re.search(r"\(\d+ nzjit-internal frames? hidden; set NZJIT_TRACEBACK=full", r.err)


# ---------------------------------------------------------------- format_compile_error, directly
def _err(tmp_path, line: str, needle: str, **kw) -> tuple[CompileError, str]:
    path = tmp_path / "k.py"
    path.write_text(f"# first line\n{line}\n", encoding="utf-8")
    byte_col = line.encode().index(needle.encode())
    src = Source(str(path), 2, byte_col, byte_col + len(needle.encode()))
    return CompileError(kw.pop("message", "bad thing"), src, **kw), str(path)


def test_caret_counts_characters_not_utf8_bytes(tmp_path):
    line = '    y = "héllo, 世界" + bad(x)'
    err, path = _err(tmp_path, line, "bad(x)", rule="NZ-16", help="fix it")
    d = parse(diagnostics.format_compile_error(err, show_internal=False))
    assert (d["file"], d["line"], d["col"], d["rule"]) == (path, 2, line.index("bad(x)") + 1, "NZ-16")
    # the caret sits under bad(x) on a terminal: 世界 are two columns wide each
    rendered = diagnostics.format_compile_error(err, show_internal=False).splitlines()
    caret_cells = rendered[2].index("^") - rendered[2].index("|") - 2
    assert caret_cells == len('    y = "héllo, ') + 2 * 2 + len('" + ')  # display cells before bad(x)
    assert rendered[2].count("^") == len("bad(x)")


def test_rule_prefix_is_not_repeated_and_no_rule_is_plain_error(tmp_path):
    err, _ = _err(tmp_path, "z = f(1)", "f(1)", rule="NZ-8", message="NZ-8: rows must be a multiple of 16")
    text = diagnostics.format_compile_error(err, show_internal=False)
    assert ": error[NZ-8]: rows must be a multiple of 16" in text.splitlines()[0]
    err2, _ = _err(tmp_path, "z = f(1)", "f(1)", message="plain")
    assert parse(diagnostics.format_compile_error(err2, show_internal=False))["rule"] is None


def test_error_without_source_or_text():
    assert (
        diagnostics.format_compile_error(CompileError("no place", help="h"), False)
        == "error: no place\nhelp: h"
    )
    err = CompileError("gone", Source("/nonexistent/k.py", 3, 4, 6), rule="NZ-1")
    assert diagnostics.format_compile_error(err, False) == "/nonexistent/k.py:3: error[NZ-1]: gone"


def test_multi_line_expression_caret_runs_to_end_of_line(tmp_path):
    line = "    out = pl.matmul(a,   "
    path = tmp_path / "k.py"
    path.write_text(f"#\n{line}\n", encoding="utf-8")
    err = CompileError("m", Source(str(path), 2, line.index("pl."), None))
    d = parse(diagnostics.format_compile_error(err, False))
    assert d["span"] == "pl.matmul(a,"


def test_no_column_underlines_the_statement_not_its_indent(tmp_path):
    path = tmp_path / "k.py"
    path.write_text("#\n        break\n", encoding="utf-8")
    d = parse(diagnostics.format_compile_error(CompileError("m", Source(str(path), 2)), False))
    assert (d["col"], d["span"]) == (9, "break")


# ---------------------------------------------------------------------- traceback filtering
def _compile_error_through_nzjit(write) -> CompileError:
    import runpy

    ns = runpy.run_path(write("iff.py", IF), run_name="iff_mod")
    with pytest.raises(CompileError) as info:
        ns["iff"](np.zeros((64, 512), np.int8), runtime.pack_nz(np.zeros((256, 512), np.int8)))
    return info.value


def test_filter_traceback_keeps_only_user_frames(write, monkeypatch):
    monkeypatch.setenv("NZJIT_TRACEBACK", "full")  # the API boundary keeps every frame: filter here
    err = _compile_error_through_nzjit(write)
    files = []
    tb = err.__traceback__
    while tb:
        files.append(tb.tb_frame.f_code.co_filename)
        tb = tb.tb_next
    assert any(diagnostics.is_internal_frame(f) for f in files)
    kept = []
    tb = diagnostics.filter_traceback(err.__traceback__)
    while tb:
        kept.append((tb.tb_frame.f_code.co_filename, tb.tb_lineno))
        tb = tb.tb_next
    assert kept and not any(diagnostics.is_internal_frame(f) for f, _ in kept)
    assert kept[0][0] == __file__  # this test's own call
    assert kept[-1] == (err.source.file, err.source.line)  # the kernel line, innermost
    assert diagnostics.filter_traceback(None) is None


def test_format_exception_filtered_and_full(write, monkeypatch):
    monkeypatch.setenv("NZJIT_TRACEBACK", "full")  # the API boundary keeps every frame: filter here
    err = _compile_error_through_nzjit(write)
    monkeypatch.delenv("NZJIT_TRACEBACK")
    short = diagnostics.format_exception(err, show_internal=False)
    full = diagnostics.format_exception(err, show_internal=True)
    assert os.path.join("nzjit", "tracing", "tracer.py") not in short and "hidden" in short
    assert os.path.join("nzjit", "tracing", "tracer.py") in full and "hidden" not in full


def test_env_var_selects_full(monkeypatch):
    monkeypatch.delenv("NZJIT_TRACEBACK", raising=False)
    assert diagnostics.show_internal_frames() is False
    monkeypatch.setenv("NZJIT_TRACEBACK", "full")
    assert diagnostics.show_internal_frames() is True
    assert diagnostics.show_internal_frames(False) is False


def test_importing_nzjit_installs_nothing_and_install_is_reversible(capsys, write):
    before = sys.excepthook, threading.excepthook
    assert sys.excepthook is not diagnostics.excepthook  # `import nzjit` has no side effect
    diagnostics.install()
    diagnostics.install()  # idempotent
    try:
        assert sys.excepthook is diagnostics.excepthook
        err = _compile_error_through_nzjit(write)
        sys.excepthook(type(err), err, err.__traceback__)
        printed = capsys.readouterr().err
        assert parse(printed)["span"] == "n0 > 0"
        ice = nzjit.InternalError("broken")
        sys.excepthook(type(ice), ice, None)
        assert "internal compiler error: broken" in capsys.readouterr().err
    finally:
        diagnostics.uninstall()
    assert (sys.excepthook, threading.excepthook) == before
