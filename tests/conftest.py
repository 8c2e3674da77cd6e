"""Suite-wide setup: the IR verifier runs after every pass of every kernel the suite lowers.

`NZJIT_VERIFY` is read when `nzjit.passes.pipeline` is imported, so it is set here, before any
test module imports nzjit.
"""

from __future__ import annotations

import os

os.environ["NZJIT_VERIFY"] = "1"

import pytest  # noqa: E402


@pytest.fixture
def line_of():
    """`line_of(fn, "marker")`: the line number of the first line of `fn`'s file containing `marker`
    at or after `fn`'s `def` (so tests can check a diagnostic's `file:line:` exactly). `fn` may also
    be a path (an example, a doc): the first line of that file containing `marker`. Expected lines
    come from the source, never literals, so that reformatting a file (`ruff format`) moves them
    with it."""

    def find(fn, marker: str) -> int:
        if isinstance(fn, str | os.PathLike):
            path, first = os.fspath(fn), 1
        else:
            code = getattr(fn, "__wrapped__", fn).__code__
            path, first = code.co_filename, code.co_firstlineno
        with open(path) as f:
            lines = f.read().splitlines()
        for i in range(first - 1, len(lines)):
            if marker in lines[i]:
                return i + 1
        raise AssertionError(f"marker {marker!r} not found in {path} after line {first}")

    return find


@pytest.fixture
def where(line_of):
    """`where(fn, "marker")`: the `file:line: ` prefix a CompileError about that line starts with."""

    def prefix(fn, marker: str) -> str:
        return f"{getattr(fn, '__wrapped__', fn).__code__.co_filename}:{line_of(fn, marker)}: "

    return prefix
