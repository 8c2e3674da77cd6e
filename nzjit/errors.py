"""User-facing and internal errors. A CompileError message starts `file:line: ` at the kernel line."""

from __future__ import annotations

import functools
import linecache
import os
import sys
import unicodedata
from dataclasses import dataclass
from types import CodeType, FrameType


@dataclass(frozen=True)
class Source:
    """Where in the kernel an equation was made: file, line, column range and the line's text."""

    file: str
    line: int
    col: int = 0
    end_col: int | None = None

    @property
    def text(self) -> str:
        """The source line itself (trailing newline stripped; empty when the file cannot be read)."""
        return linecache.getline(self.file, self.line).rstrip("\n")

    def caret(self) -> tuple[int, str]:
        """(1-based character column, the caret line under `text`): bytecode columns count UTF-8
        bytes and a wide character takes two cells, so both are converted; with no column known
        the statement is underlined, not its indent."""
        line = self.text
        start = min(_char_col(line, self.col), len(line))
        if self.col == 0 and self.end_col is None:
            start = len(line) - len(line.lstrip())
        stripped_end = len(line.rstrip())
        end = _char_col(line, self.end_col) if self.end_col is not None else stripped_end
        end = max(start + 1, min(end, max(stripped_end, start + 1)))
        pad = "".join(ch if ch == "\t" else " " * _display_width(ch) for ch in line[:start])
        return start + 1, pad + "^" * max(1, _display_width(line[start:end]))

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


def _display_width(text: str) -> int:
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def _char_col(line: str, byte_col: int) -> int:
    return len(line.encode("utf-8")[:byte_col].decode("utf-8", errors="ignore"))


_PKG_DIR = os.path.dirname(os.path.abspath(__file__))


@functools.lru_cache(maxsize=1024)
def _is_internal(filename: str) -> bool:
    return os.path.abspath(filename).startswith(_PKG_DIR + os.sep) or filename.startswith("<frozen")


def user_frame(depth: int = 1) -> FrameType | None:
    """The first frame outside nzjit (cheap frame walk, never `inspect.stack`)."""
    f: FrameType | None = sys._getframe(depth + 1)
    while f is not None and _is_internal(f.f_code.co_filename):
        f = f.f_back
    return f


@functools.lru_cache(maxsize=512)
def _positions(code: CodeType) -> tuple[tuple[int | None, int | None, int | None, int | None], ...]:
    """Source positions per instruction (one entry per 2-byte code unit), computed once per code
    object: a kernel body of thousands of ops would otherwise rescan them at every op."""
    return tuple(code.co_positions())


@functools.lru_cache(maxsize=4096)
def _source_at(code: CodeType, file: str, lasti: int, line: int) -> Source:
    """The Source of instruction `lasti` of `code` on `line`: one shared (immutable) object per
    position, so an unrolled kernel line builds its Source once, not at every op. (`file` is
    part of the key because code objects compare equal across files: the same function in a
    copy of a script must not get the first copy's path.)"""
    col, end = 0, None
    positions = _positions(code)
    i = lasti // 2
    if 0 <= i < len(positions):
        pos = positions[i]
        if pos[0] == line and pos[2] is not None:
            col, end = pos[2], (pos[3] if pos[1] == pos[0] else None)
    return Source(file, line, col, end)


def source_of(f: FrameType) -> Source:
    """The line `f` is executing, with the column range of the instruction (3.11+) for the caret."""
    code = f.f_code
    return _source_at(code, code.co_filename, f.f_lasti, f.f_lineno)


def user_source(depth: int = 1) -> Source | None:
    """The kernel line that is being traced: the first frame outside nzjit."""
    f = user_frame(depth + 1)
    return None if f is None else source_of(f)


class CompileError(ValueError):
    """A user-facing refusal: names the kernel line, the rule and the fix."""

    def __init__(self, message: str, source: Source | None = None, *, rule: str | None = None,
                 help: str | None = None) -> None:
        self.raw_message = message
        self.source = source
        self.rule = rule
        self.help = help
        super().__init__(self.render(caret=False))

    def render(self, caret: bool = True) -> str:
        """`file:line: [NZ-n] message`, then (with caret) the source line, a caret and `help:`."""
        head = f"{self.source}: " if self.source else ""
        rule = f"[{self.rule}] " if self.rule and f"{self.rule}" not in self.raw_message else ""
        text = f"{head}{rule}{self.raw_message}"
        if self.help and not caret:
            text += f"; help: {self.help}"
        if caret and self.source is not None:
            line = self.source.text
            if line:
                text += f"\n    {line}\n    {self.source.caret()[1]}"
            if self.help:
                text += f"\n  help: {self.help}"
        return text


class InternalError(RuntimeError):
    """A broken compiler invariant (e.g. pass order): a bug in nzjit, not in the kernel."""
