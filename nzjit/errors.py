"""User-facing and internal errors, how they are rendered, and the traceback filter at the API edge.

A CompileError reads, as `str(err)` and therefore in a plain `python my_kernel.py` traceback:

    kern.py:6: [NZ-12] load of NZ tensor 'w': the row offset 8 must be a non-negative multiple of 16
      --> kern.py:6:44
        6 |     out[:, 0:128] = pl.matmul(x[:, 0:512], w[8:136, 0:512], b_trans=True)
          |                                            ^^^^^^^^^^^^^^^
    help: align the window to a multiple of 16

The first line keeps the `file:line: ` prefix that tools and tests match; the `-->` line gives the
1-based column (as gcc, rustc and editors count), the gutter shows the kernel line and a caret
under the expression. `nzjit.diagnostics` prints the same body under a Triton-style header.

`api_boundary` wraps the public entry points (a kernel call, `lower`, an orchestration call): an
exception leaving them carries only the user's frames, as JAX filters its own; set
`NZJIT_TRACEBACK=full` to keep nzjit's and runtime's frames.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import inspect
import linecache
import os
import re
import runpy
import sys
import types
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from types import CodeType, FrameType
from typing import Any, TypeVar


@dataclass(frozen=True)
class Source:
    """Where in the kernel an equation was made: file, line, column range and the line's text.

    `col` / `end_col` are 0-based UTF-8 byte offsets (as bytecode positions and `ast` give them)."""

    file: str
    line: int
    col: int = 0
    end_col: int | None = None

    @property
    def text(self) -> str:
        """The source line itself (trailing newline stripped; empty when the file cannot be read)."""
        return linecache.getline(self.file, self.line).rstrip("\n")

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


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


def param_source(fn: Callable[..., Any], name: str) -> Source | None:
    """Where parameter `name` of `fn` is annotated (its name when it has no annotation): a
    parameter error points there, also for a parameter the body never uses."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return None
    try:
        lines, first = inspect.getsourcelines(fn)
    except (OSError, TypeError):
        return None
    text = "".join(lines)
    indented = bool(lines) and lines[0][:1] in " \t"
    try:  # an indented def (a kernel made in a function) parses inside a dummy block, columns kept
        tree = ast.parse("if True:\n" + text if indented else text)
    except SyntaxError:
        return None
    shift = first - 1 - (1 if indented else 0)
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == code.co_name:
            a = node.args
            for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs]:
                if arg.arg == name:
                    at: ast.expr | ast.arg = arg.annotation or arg
                    same_line = at.end_lineno == at.lineno
                    return Source(
                        code.co_filename,
                        at.lineno + shift,
                        at.col_offset,
                        at.end_col_offset if same_line else None,
                    )
    return None


# ------------------------------------------------------------------------------------- rendering
def _display_width(text: str) -> int:
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def _char_col(line: str, byte_col: int) -> int:
    """Bytecode columns count UTF-8 bytes; the caret needs characters."""
    return len(line.encode("utf-8")[:byte_col].decode("utf-8", errors="ignore"))


def caret_under(line: str, src: Source) -> tuple[int, str]:
    """(1-based character column, the caret line under `line`): wide characters take two cells,
    tabs stay tabs; without a column the statement is underlined, not its indent."""
    start = min(_char_col(line, src.col), len(line))
    if src.col == 0 and src.end_col is None:
        start = len(line) - len(line.lstrip())
    stripped_end = len(line.rstrip())
    end = _char_col(line, src.end_col) if src.end_col is not None else stripped_end
    end = max(start + 1, min(end, max(stripped_end, start + 1)))
    pad = "".join(ch if ch == "\t" else " " * _display_width(ch) for ch in line[:start])
    return start + 1, pad + "^" * max(1, _display_width(line[start:end]))


def source_excerpt(src: Source | None) -> tuple[int | None, list[str]]:
    """(1-based column or None, the gutter lines `  N | text` / `    | ^^^`) of `src`; no lines when
    the file cannot be read. The one caret renderer of nzjit (str(err) and the CLI share it)."""
    line = src.text if src is not None else ""
    if src is None or not line:
        return None, []
    col, caret = caret_under(line, src)
    gutter = str(src.line)
    return col, [f"    {gutter} | {line}", f"    {' ' * len(gutter)} | {caret}"]


def strip_rule(message: str, rule: str | None) -> str:
    """`message` without a leading `NZ-n: ` / `[NZ-n] ` that repeats the rule."""
    for prefix in (f"{rule}: ", f"[{rule}] ") if rule else ():
        if message.startswith(prefix):
            return message[len(prefix) :]
    return message


class CompileError(ValueError):
    """A user-facing refusal: names the kernel line, the rule and the fix."""

    def __init__(
        self, message: str, source: Source | None = None, *, rule: str | None = None, help: str | None = None
    ) -> None:
        self.raw_message = message
        self.source = source
        self.rule = rule
        self.help = help
        #: a second place the message is about, with its label (a refused parameter's annotation)
        self.related: tuple[Source, str] | None = None
        super().__init__(message)

    def __reduce__(self) -> tuple[Any, ...]:
        # pickled whole (another process, a Ray worker): the place, the rule and the fix survive
        return (
            _rebuild_compile_error,
            (type(self), self.raw_message, self.source, self.rule, self.help, self.related),
        )

    def __str__(self) -> str:
        return self.render()

    def headline(self) -> str:
        """`file:line: [NZ-n] message`: the first line of `str(err)`."""
        head = f"{self.source}: " if self.source else ""
        rule = f"[{self.rule}] " if self.rule and f"{self.rule}" not in self.raw_message else ""
        return f"{head}{rule}{self.raw_message}"

    def render(self, caret: bool = True) -> str:
        """The headline, then (with caret) `--> file:line:col`, the kernel line with a caret under
        the expression, and `help:`; without caret one line ending `; help: ...`."""
        text = self.headline()
        if not caret:
            return text + (f"; help: {self.help}" if self.help else "")
        col, excerpt = source_excerpt(self.source)
        if excerpt and self.source is not None:
            text += f"\n  --> {self.source.file}:{self.source.line}:{col}\n" + "\n".join(excerpt)
        text += "".join(f"\n{line}" for line in self.related_lines())
        if self.help:
            text += f"\nhelp: {self.help}"
        return text

    def related_lines(self) -> list[str]:
        """`  --> file:line:col (label)` and the excerpt of the related place, if any."""
        if self.related is None:
            return []
        src, label = self.related
        col, excerpt = source_excerpt(src)
        if not excerpt:
            return []
        return [f"  --> {src.file}:{src.line}:{col} ({label})", *excerpt]


def _rebuild_compile_error(
    cls: type[CompileError],
    message: str,
    source: Source | None,
    rule: str | None,
    help: str | None,
    related: tuple[Source, str] | None,
) -> CompileError:
    err = cls(message, source, rule=rule, help=help)
    err.related = related
    return err


class InternalError(RuntimeError):
    """A broken compiler invariant (e.g. pass order): a bug in nzjit, not in the kernel."""


# ------------------------------------------------------------------------- traceback filtering
TRACEBACK_ENV = "NZJIT_TRACEBACK"


def _toolchain_dirs() -> tuple[str, ...]:
    """nzjit's folder and runtime's (found, not imported: errors.py is imported first)."""
    spec = importlib.util.find_spec("runtime")
    dirs = [_PKG_DIR + os.sep]
    if spec is not None and spec.origin:
        dirs.append(os.path.dirname(os.path.abspath(spec.origin)) + os.sep)
    return tuple(dirs)


_INTERNAL_DIRS = _toolchain_dirs()
_LAUNCHER_FILES = tuple(os.path.abspath(f) for f in (runpy.__file__,) if f)


def show_internal_frames(show_internal: bool | None = None) -> bool:
    """`show_internal` if given, else whether the environment asks for `NZJIT_TRACEBACK=full`."""
    if show_internal is not None:
        return show_internal
    return os.environ.get(TRACEBACK_ENV, "").strip().lower() == "full"


@functools.lru_cache(maxsize=1024)
def is_internal_frame(filename: str) -> bool:
    """True for frames of the toolchain: nzjit, runtime, runpy, `<frozen importlib...>`."""
    if filename.startswith("<frozen"):
        return True
    path = os.path.abspath(filename)
    return path.startswith(_INTERNAL_DIRS) or path in _LAUNCHER_FILES


def filter_traceback(tb: types.TracebackType | None) -> types.TracebackType | None:
    """A new traceback chain without the internal frames (None if every frame was internal)."""
    kept = []
    while tb is not None:
        if not is_internal_frame(tb.tb_frame.f_code.co_filename):
            kept.append(tb)
        tb = tb.tb_next
    out: types.TracebackType | None = None
    for t in reversed(kept):
        out = types.TracebackType(out, t.tb_frame, t.tb_lasti, t.tb_lineno)
    return out


def hide_internal_frames(exc: BaseException, note: bool | None = None) -> int:
    """Filter `exc`'s traceback and those of the exceptions it was raised from, in place; returns
    how many frames were hidden in all (nested boundaries add up, in `exc._nzjit_hidden`).

    With `note` (default: for exceptions other than refusals) one PEP 678 note says how many frames
    are hidden and how to see them. A refusal (CompileError, runtime's DispatchError / DeviceError)
    gets none: its message is complete, and its text stays what `pytest.raises(match=)` expects."""
    seen: set[int] = set()
    hidden = 0
    todo = [exc]
    while todo:
        e = todo.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        tb = e.__traceback__
        kept = filter_traceback(tb)
        hidden += _length(tb) - _length(kept)
        e.__traceback__ = kept
        todo.extend(x for x in (e.__cause__, e.__context__) if x is not None)
    old = getattr(exc, "_nzjit_hidden", 0)
    total = old + hidden
    exc._nzjit_hidden = total  # type: ignore[attr-defined]
    if note is None:
        note = not _is_refusal(exc)
    notes = getattr(exc, "__notes__", None)
    if old and notes is not None and _hidden_note(old) in notes:
        notes.remove(_hidden_note(old))
    if note and total:
        exc.add_note(_hidden_note(total))
    return total


def _is_refusal(exc: BaseException) -> bool:
    if isinstance(exc, CompileError):
        return True
    mod = sys.modules.get("runtime")
    kinds = tuple(
        k for k in (getattr(mod, "DispatchError", None), getattr(mod, "DeviceError", None)) if k is not None
    )
    return bool(kinds) and isinstance(exc, kinds)


def _hidden_note(n: int) -> str:
    return f"({n} nzjit-internal frame{'s' if n != 1 else ''} hidden; set {TRACEBACK_ENV}=full to show them)"


def _length(tb: types.TracebackType | None) -> int:
    n = 0
    while tb is not None:
        n, tb = n + 1, tb.tb_next
    return n


class user_frames_only:
    """Context manager of an API boundary: an exception (other than InternalError, a compiler bug
    whose frames are the point) leaves it with only the user's frames, unless NZJIT_TRACEBACK=full.
    (A class, not `contextlib.contextmanager`, which would restore the unfiltered traceback.)"""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> None:
        if isinstance(exc, Exception) and not isinstance(exc, InternalError) and not show_internal_frames():
            hide_internal_frames(exc)  # in place; returning None lets the exception go on


F = TypeVar("F", bound=Callable[..., Any])


def api_boundary(fn: F) -> F:
    """Decorator of a public entry point: see `user_frames_only`. A bare `raise` re-raises with the
    filtered traceback and adds no entry for this wrapper's own frame.

    On a method of an object holding the user's function as `.fn` (a kernel, an orchestration), a
    CompileError about one of that function's parameters that has no kernel line (a pass sees the
    graph, not the `def`: an unused parameter has no use to point at) is placed at the parameter's
    annotation."""

    @functools.wraps(fn)
    def entry(*args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True  # noqa: F841 - pytest hides this frame in its own reports
        try:
            return fn(*args, **kwargs)
        except InternalError:
            raise
        except Exception as e:
            if isinstance(e, CompileError) and args:
                _place_at_parameter(e, getattr(args[0], "fn", None))
            if not show_internal_frames():
                hide_internal_frames(e)
            raise

    return entry  # type: ignore[return-value]


_PARAM_NAMED = re.compile(r"parameter '([A-Za-z_][A-Za-z0-9_]*)'")


def _place_at_parameter(err: CompileError, fn: Any) -> None:
    """A refusal naming a parameter of `fn` points at its annotation: as the place of the error when
    it has no kernel line (or only the `def` line), else as a second place after the kernel line."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return
    m = _PARAM_NAMED.search(err.raw_message)
    if m is None or m.group(1) not in code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]:
        return
    at = param_source(fn, m.group(1))
    if at is None:
        return
    src = err.source
    if src is None or (src.file == code.co_filename and src.line == code.co_firstlineno):
        err.source = at
    elif err.related is None and (src.file, src.line) != (at.file, at.line):
        err.related = (at, f"parameter '{m.group(1)}' declared here")
