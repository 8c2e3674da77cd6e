"""`nzjit run / ir / pto` through `nzjit.cli.main`, and one real `python -m nzjit` process."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

import nzjit
from nzjit.cli import main

PASSES = [
    "ConvertTensorToTileOps",
    "LowerCompositeOps",
    "FlattenTileNdTo2D",
    "BlockNzTensorViews",
    "LegalizeTileCast",
    "AutoTileMatmulL0",
    "MaterializeTensorStrides",
]
DEMO_SUM = str(64 * 256 * 512)

TWO_KERNELS = """\
from nzjit import pl

@pl.kernel
def copy_a(x: pl.Tensor[[64, 64], pl.INT8], w: pl.Tensor[[64, 64], pl.INT8, pl.NZ],
           out: pl.Out[pl.Tensor[[64, 64], pl.INT32]]):
    out[:, :] = pl.matmul(x[:, :], w[:, :], b_trans=True)

@pl.kernel
def copy_b(x: pl.Tensor[[64, 128], pl.INT8], w: pl.Tensor[[64, 128], pl.INT8],
           out: pl.Out[pl.Tensor[[64, 64], pl.INT32]]):
    out[:, :] = pl.matmul(x[:, :], w[:, :], b_trans=True)

alias = copy_a  # the same kernel under a second name is listed once
"""


@pytest.mark.parametrize("cmd", [[], ["run"], ["ir"], ["pto"], ["explain-layout"]])
def test_every_subcommand_has_help(cli, cmd):
    r = cli(*cmd, "--help")
    assert r.code == 0
    assert r.out.startswith("usage: nzjit")
    if cmd:
        assert f"nzjit {cmd[0]}" in r.out


def test_no_command_prints_usage(cli):
    r = cli()
    assert r.code == 2 and "usage: nzjit" in r.err


def test_run_executes_the_main_block(cli, nzmm_file):
    r = cli("run", nzmm_file)
    assert r.code == 0, r.err
    assert r.out.strip() == DEMO_SUM


def test_run_calls_main_and_passes_argv(cli, write):
    path = write(
        "demo.py",
        """\
        import sys
        def main():
            print("main", sys.argv[1:])
            return 3
        """,
    )
    r = cli("run", path, "--size", "7")
    assert r.code == 3
    assert r.out.strip() == "main ['--size', '7']"


def test_run_main_block_is_not_doubled_with_main(cli, write):
    path = write(
        "demo.py",
        """\
        def main():
            print("once")
        if __name__ == "__main__":
            main()
        """,
    )
    r = cli("run", path)
    assert (r.code, r.out) == (0, "once\n")


def test_run_sees_sibling_modules(cli, write):
    write("helper_mod_for_cli.py", "VALUE = 41\n")
    path = write(
        "demo.py",
        """\
        import helper_mod_for_cli
        if __name__ == "__main__":
            print(helper_mod_for_cli.VALUE + 1)
        """,
    )
    r = cli("run", path)
    assert (r.code, r.out.strip()) == (0, "42")
    sys.modules.pop("helper_mod_for_cli", None)


def test_run_without_a_demo_is_a_usage_error(cli, write):
    r = cli("run", write("lib.py", "X = 1\n"))
    assert r.code == 2
    assert "has no demo" in r.err


def test_run_missing_file(cli, tmp_path):
    r = cli("run", tmp_path / "nope.py")
    assert r.code == 2 and "no such file" in r.err


def test_run_demo_sys_exit_code(cli, write):
    r = cli("run", write("d.py", 'import sys\nif __name__ == "__main__":\n    sys.exit(5)\n'))
    assert r.code == 5


def test_ir_defaults_to_the_last_pass_and_skips_the_demo(cli, nzmm_file):
    r = cli("ir", nzmm_file)
    assert r.code == 0, r.err
    assert DEMO_SUM not in r.out  # imported under a non-main name: the demo did not run
    assert "w:i8[1,16,16,16,32]{NZ}/[131072,8192,512,32,1]" in r.out  # strides materialised
    assert "tile.mad" in r.out


def test_ir_after_a_pass(cli, nzmm_file):
    r = cli("ir", nzmm_file, "--after", "BlockNzTensorViews")
    assert r.code == 0, r.err
    assert "w:i8[1,16,16,16,32]{NZ} " in r.out and "/[131072" not in r.out
    assert "blocked=True" in r.out and "tile.mad" not in r.out


def test_ir_after_trace_and_case_insensitive(cli, nzmm_file):
    r = cli("ir", nzmm_file, "--after", "trace")
    assert r.code == 0 and "tensor.slice" in r.out and "w:i8[256,512]{NZ}" in r.out
    assert (
        cli("ir", nzmm_file, "--after", "blocknztensorviews").out
        == cli("ir", nzmm_file, "--after", "BlockNzTensorViews").out
    )


def test_ir_unknown_pass_lists_the_passes(cli, nzmm_file):
    r = cli("ir", nzmm_file, "--after", "Bogus")
    assert r.code == 2
    assert "unknown pass 'Bogus'" in r.err and "trace, " + ", ".join(PASSES) in r.err


def test_ir_after_and_all_are_exclusive(cli, nzmm_file):
    assert cli("ir", nzmm_file, "--all", "--after", "trace").code == 2


def test_ir_all_shows_every_pass_and_what_changed(cli, nzmm_file):
    r = cli("ir", nzmm_file, "--all")
    assert r.code == 0, r.err
    heads = [line for line in r.out.splitlines() if line.startswith("=== ")]
    assert heads[0] == "=== trace ==="
    assert [h.split()[1].rstrip(":") for h in heads[1:]] == PASSES
    assert "=== LegalizeTileCast: unchanged ===" in heads  # A2/A3: nothing to legalise
    assert "=== BlockNzTensorViews: changed ===" in heads
    # the blocking pass's diff: the NZ parameter goes from logical to blocked
    block = r.out.split("=== BlockNzTensorViews: changed ===")[1].split("=== ")[0]
    assert "--- FlattenTileNdTo2D\n+++ BlockNzTensorViews" in block
    assert any(line.startswith("-") and "w:i8[256,512]{NZ}" in line for line in block.splitlines())
    assert any(line.startswith("+") and "w:i8[1,16,16,16,32]{NZ}" in line for line in block.splitlines())
    assert any(line.startswith("+") and "floordiv n0 16" in line for line in block.splitlines())


def test_ir_kernel_selection(cli, write):
    path = write("two.py", TWO_KERNELS)
    both = cli("ir", path, "--after", "trace")
    assert both.code == 0, both.err
    assert both.out.count("# kernel ") == 2
    assert "# kernel copy_a" in both.out and "# kernel copy_b" in both.out
    one = cli("ir", path, "--kernel", "copy_b", "--after", "trace")
    assert one.code == 0 and "# kernel" not in one.out and "x:i8[64,128]" in one.out
    assert cli("ir", path, "--kernel", "alias").code == 0  # the bound name works too
    bad = cli("ir", path, "--kernel", "nope")
    assert bad.code == 2 and "no kernel named 'nope'" in bad.err and "copy_a, copy_b" in bad.err


def test_ir_file_without_kernels(cli, write):
    r = cli("ir", write("empty.py", "import numpy\n"))
    assert r.code == 2 and "defines no @pl.kernel" in r.err and "(functions in this file: none)" in r.err


FACTORY = """\
from nzjit import pl

def make(dtype, n=64):  # a kernel per dtype and size: none at module level
    @pl.kernel
    def scaled(x: pl.Tensor[[n, 64], dtype], w: pl.Tensor[[64, 64], dtype, pl.NZ],
               out: pl.Out[pl.Tensor[[n, 64], pl.INT32 if dtype is pl.INT8 else pl.FP32]]):
        out[:, :] = pl.matmul(x[:, :], w[:, :], b_trans=True)
    return scaled

def _helper():
    return 1
"""


def test_a_factory_kernel_is_shown_by_its_call(cli, write):
    path = write("factory.py", FACTORY)
    none = cli("ir", path)
    assert none.code == 2 and "--kernel 'make(pl.INT8)'" in none.err
    assert "(functions in this file: make)" in none.err  # _helper is private
    r = cli("ir", path, "--kernel", "make(pl.INT8, n=32)", "--after", "trace")
    assert r.code == 0, r.err
    assert "x:i8[32,64] w:i8[64,64]{NZ} out:i32[32,64]" in r.out
    assert "# kernel" not in r.out
    t = cli("pto", path, "--kernel", "make(pl.FP16)")
    assert t.code == 0, t.err
    assert "func.func @scaled(%arg0: !pto.ptr<f16>" in t.out
    nzjit.check_ptoas(t.out)


@pytest.mark.parametrize(
    "expr,message",
    [
        ("make(", "--kernel 'make(' is neither a name nor a Python expression: '(' was never closed"),
        ("make(pl.INT8, n=48", "is neither a name nor a Python expression"),
        ("_helper()", "--kernel '_helper()' gave a int, not a @pl.kernel"),
        ("make(3)", "--kernel 'make(3)' failed: TypeError:"),
        ("nope(1)", "--kernel 'nope(1)' failed: NameError: name 'nope' is not defined"),
    ],
)
def test_a_kernel_expression_that_gives_no_kernel_is_a_usage_error(cli, write, expr, message):
    r = cli("ir", write("factory.py", FACTORY), "--kernel", expr)
    assert r.code == 2 and message in r.err and "Traceback" not in r.err


def test_ir_import_error_in_user_file_has_a_filtered_traceback(cli, write):
    path = write("broken.py", "import numpy\nraise RuntimeError('boom at import')\n")
    r = cli("ir", path)
    assert r.code == 1
    assert "RuntimeError: boom at import" in r.err
    assert f'File "{path}", line 2' in r.err
    assert "nzjit/cli.py" not in r.err and "runpy" not in r.err


def _have_codegen() -> bool:
    return importlib.util.find_spec("nzjit.codegen.pto") is not None


@pytest.mark.skipif(_have_codegen(), reason="codegen landed: the real output is tested below")
def test_pto_without_codegen_reports_cleanly(cli, nzmm_file):
    r = cli("pto", nzmm_file)
    assert r.code == 1
    assert "PTO codegen is not available" in r.err and "Traceback" not in r.err


@pytest.mark.skipif(not _have_codegen(), reason="nzjit/codegen/pto has not landed yet")
def test_pto_prints_the_emitted_text(cli, nzmm_file):
    r = cli("pto", nzmm_file)
    assert r.code == 0, r.err
    text = " ".join(r.out.split())  # the spec's example wraps lines; compare token streams
    assert (
        "%w_view = pto.make_tensor_view %arg1, shape = [%c1, %c16, %c16, %c16, %c32], "
        "strides = [%c131072, %c8192, %c512, %c32, %c1] {layout = #pto.layout<nz>}" in text
    )
    assert "pto.tload" in r.out and "pto.tstore" in r.out
    nzjit.check_ptoas(r.out)  # the assembler-compat check accepts what the command printed


def test_pto_compile_error_is_rendered(cli, write):
    path = write(
        "align.py",
        """\
        from nzjit import pl
        @pl.kernel
        def k(x: pl.Tensor[[64, 512], pl.INT8], w: pl.Tensor[[256, 512], pl.INT8, pl.NZ],
              out: pl.Out[pl.Tensor[[64, 128], pl.INT32]]):
            out[:, 0:128] = pl.matmul(x[:, 0:512], w[8:136, 0:512], b_trans=True)
        """,
    )
    r = cli("pto", path)
    assert r.code == 1 and r.out == ""
    assert r.err.startswith(f"{path}:5:") and "error[NZ-12]" in r.err and "Traceback" not in r.err


def test_python_dash_m_nzjit_subprocess(nzmm_file, tmp_path):
    """The real entry point: a fresh interpreter, `python -m nzjit`, stdout and exit status."""
    env = {k: v for k, v in os.environ.items() if k != "NZJIT_TRACEBACK"}
    ir = subprocess.run(
        [sys.executable, "-m", "nzjit", "ir", nzmm_file, "--after", "BlockNzTensorViews"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert ir.returncode == 0, ir.stderr
    assert "w:i8[1,16,16,16,32]{NZ}" in ir.stdout
    run = subprocess.run(
        [sys.executable, "-m", "nzjit", "run", nzmm_file],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert (run.returncode, run.stdout.strip()) == (0, DEMO_SUM), run.stderr


def test_main_returns_instead_of_exiting():
    assert main(["--help"]) == 0
