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
    at or after `fn`'s `def` (so tests can check a diagnostic's `file:line:` exactly)."""

    def find(fn, marker: str) -> int:
        code = getattr(fn, "__wrapped__", fn).__code__
        with open(code.co_filename) as f:
            lines = f.read().splitlines()
        for i in range(code.co_firstlineno - 1, len(lines)):
            if marker in lines[i]:
                return i + 1
        raise AssertionError(f"marker {marker!r} not found after line {code.co_firstlineno}")

    return find


@pytest.fixture
def where(line_of):
    """`where(fn, "marker")`: the `file:line: ` prefix a CompileError about that line starts with."""

    def prefix(fn, marker: str) -> str:
        return f"{getattr(fn, '__wrapped__', fn).__code__.co_filename}:{line_of(fn, marker)}: "

    return prefix
