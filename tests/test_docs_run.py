"""What the README and docs/ promise runs: every ```python block of README.md and docs/*.md (the
blocks of one page run in order in one namespace, as a reader would paste them), every ```console
block's `$ nzjit ...` command prints exactly the output shown, the README's refusal is what a plain
`python my_kernel.py` prints, the layout picture in docs/img is what `explain-layout --svg` writes,
and every example's demo runs (each asserts its numbers against numpy).

A python block whose first line is `# not run: <reason>` is skipped (none of ours is)."""

from __future__ import annotations

import contextlib
import io
import os
import re
import runpy
import shlex
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w+)[^\n]*\n(.*?)^```", re.S | re.M)
SKIP = "# not run:"


def blocks(page: Path, lang: str) -> list[str]:
    """The fenced blocks of `lang` in `page`, in order."""
    return [body for kind, body in FENCE.findall(page.read_text()) if kind == lang]


def _id(p: Path) -> str:
    return str(p.relative_to(ROOT))


@pytest.mark.parametrize("page", [p for p in PAGES if blocks(p, "python")], ids=_id)
def test_python_blocks_run(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a block may write files
    namespace: dict[str, object] = {"__name__": f"doc_{page.stem}"}
    ran = 0
    for i, code in enumerate(blocks(page, "python")):
        if code.startswith(SKIP):
            continue
        # a real file, so that tracing and error messages can read the kernel's lines
        path = tmp_path / f"{page.stem}_block{i}.py"
        path.write_text(code)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            exec(compile(code, str(path), "exec"), namespace)  # the blocks assert their own numbers
        ran += 1
    assert ran, f"{page.name}: no block ran"


def console_blocks(page: Path) -> list[tuple[str, str]]:
    """(command, expected output) of each `$ nzjit ...` line of the page's console blocks."""
    out = []
    for body in blocks(page, "console"):
        lines = body.splitlines()
        starts = [i for i, t in enumerate(lines) if t.startswith("$ ")]
        for j, i in enumerate(starts):
            end = starts[j + 1] if j + 1 < len(starts) else len(lines)
            out.append((lines[i][2:], "\n".join(lines[i + 1 : end])))
    return out


def run_nzjit(command: str) -> str:
    """Run an `nzjit ...` command line in-process; its stdout, lines right-stripped."""
    from nzjit.cli import main

    argv = shlex.split(command)
    assert argv[0] == "nzjit", command
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(argv[1:]) == 0, command
    return "\n".join(t.rstrip() for t in buf.getvalue().rstrip("\n").splitlines())


CONSOLE = [(p, cmd, want) for p in PAGES for cmd, want in console_blocks(p)]


@pytest.mark.parametrize("page, command, expected", CONSOLE, ids=[f"{_id(p)}:{c}" for p, c, _ in CONSOLE])
def test_console_blocks_print_what_they_show(page, command, expected):
    got = run_nzjit(command)
    shown = "\n".join(t.rstrip() for t in expected.splitlines())
    assert got == shown, f"{page.name}: `{command}` prints something else now; paste its output:\n{got}"


def test_layout_guide_shows_pictures():
    assert any("explain-layout" in c for _, c, _ in CONSOLE)


def test_layout_guide_svg_is_what_explain_layout_writes(tmp_path):
    from nzjit.cli import main

    out = tmp_path / "nz.svg"
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["explain-layout", "64x64", "int8", "--svg", str(out)]) == 0
    committed = ROOT / "docs" / "img" / "nz-64x64-int8.svg"
    assert "img/nz-64x64-int8.svg" in (ROOT / "docs" / "nz-layout-guide.md").read_text()
    assert committed.read_text() == out.read_text(), (
        "rewrite docs/img/nz-64x64-int8.svg with explain-layout --svg"
    )


def test_readme_refusal_is_what_plain_python_prints(tmp_path):
    text = (ROOT / "README.md").read_text()
    code = re.search(r"## A first kernel\n\n```python\n(.*?)```", text, re.S).group(1)
    shown = re.search(r"## When nzjit refuses a kernel\n\n.*?```text\n(.*?)```", text, re.S).group(1)
    change = re.search(r"Change `(.*?)` above to `(.*?)`", text)
    assert change is not None and change.group(1) in code
    (tmp_path / "my_kernel.py").write_text(code.replace(change.group(1), change.group(2), 1))
    env = {k: v for k, v in os.environ.items() if k != "NZJIT_TRACEBACK"}
    env["PYTHONPATH"] = str(ROOT)
    r = subprocess.run(
        [sys.executable, "my_kernel.py"], cwd=tmp_path, capture_output=True, text=True, env=env, timeout=120
    )
    assert r.returncode == 1
    assert r.stderr.replace(str(tmp_path) + os.sep, "") == shown


def test_readme_is_an_introduction():
    text = (ROOT / "README.md").read_text()
    assert len(text.encode()) <= 15 * 1024
    for section in (
        "## Requirements",
        "## Install",
        "## Fresh machine: the two commands",
        "## A first kernel",
        "## What is supported",
        "## What is refused",
        "## Documentation",
    ):
        assert section in text, section
    fresh = text.split("## Fresh machine: the two commands", 1)[1].split("\n## ", 1)[0]
    assert blocks_of(fresh, "bash") == [
        "python3 -m pip install -e . && python3 examples/nz_matmul.py",
        "python3 -m pip install -e '.[test]' && python3 -m pytest -q",
    ]
    ci = (ROOT / ".ci" / "run").read_text()
    # CI installs the ray extra too, so that the RayCluster tests run there (they skip without ray)
    assert "python -m pip install --quiet -e '.[test,ray]'" in ci and "\npython -m pytest -q\n" in ci


def blocks_of(text: str, lang: str) -> list[str]:
    return [body.strip() for kind, body in FENCE.findall(text) if kind == lang]


#: pages other helpers write (contributors' notes), which may cite the design contract
CONTRIBUTOR_PAGES = {"architecture.md", "safety.md", "verification.md"}


def test_user_pages_cite_nothing_outside_the_repository():
    """The design contract (nz-layout.md, hardware-model.md, ...) is not shipped: a user page
    must not send the reader to its sections."""
    for page in PAGES:
        if page.name in CONTRIBUTOR_PAGES:
            continue
        text = page.read_text()
        hit = re.search(r"\b(hardware-model|nz-layout|api|design|style)\.md\b|§", text)
        assert hit is None, f"{page.name} cites {hit.group(0)!r}"


def test_doc_links_resolve():
    for page in PAGES:
        for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", page.read_text()):
            assert (page.parent / target).exists(), f"{page.name} links to missing {target}"


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_demo_runs(path, capsys, monkeypatch):
    monkeypatch.setattr(sys, "argv", [str(path)])
    monkeypatch.syspath_prepend(str(path.parent))
    runpy.run_path(str(path), run_name="__main__")
    assert capsys.readouterr().out.strip(), f"{path.name} printed nothing"
