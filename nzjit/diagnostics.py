"""Errors rendered for humans: `file:line:col: error[NZ-n]: message`, the source line, a caret, `help:`.

Triton's error format (spec/style.md), with a gutter like rustc's:

    kern.py:6:44: error[NZ-12]: load of NZ tensor 'w': the row offset 8 must be ...
        6 |     out[:, 0:128] = pl.matmul(x[:, 0:512], w[8:136, 0:512], b_trans=True)
          |                                            ^^^^^^^^^^^^^^^
    help: align the window to a multiple of 16

Columns in the header are 1-based (as gcc, rustc and editors count them); `Source.col` /
`Source.end_col` are the 0-based UTF-8 byte offsets of the bytecode position, converted here.

Tracebacks hide the toolchain's own frames (the `nzjit` and `runtime` packages, runpy and the
import machinery) by default: a kernel author needs their own lines, not the pass internals.
`NZJIT_TRACEBACK=full` in the environment (or `show_internal=True`) shows every frame.
Importing this module changes nothing; `install()` opts in to the excepthooks.
"""

from __future__ import annotations

import sys
import threading
import traceback
import types
from typing import Any

from .errors import (
    TRACEBACK_ENV,
    CompileError,
    InternalError,
    _length,
    filter_traceback,
    is_internal_frame,
    show_internal_frames,
    source_excerpt,
    strip_rule,
)

__all__ = [
    "render",
    "format_compile_error",
    "format_exception",
    "format_internal_error",
    "filter_traceback",
    "is_internal_frame",
    "show_internal_frames",
    "install",
    "uninstall",
    "excepthook",
]

ENV_VAR = TRACEBACK_ENV


def format_compile_error(err: CompileError, show_internal: bool | None = None) -> str:
    """The human form of a CompileError (no trailing newline).

    `file:line:col: error[RULE]: message`, the kernel line with its number, a caret under the
    offending expression, then `help: ...`. With internal frames shown (`show_internal=True` or
    `NZJIT_TRACEBACK=full`) the full Python traceback comes first.
    """
    src, rule = err.source, err.rule
    message = strip_rule(getattr(err, "raw_message", str(err)), rule)
    kind = f"error[{rule}]" if rule else "error"
    col, excerpt = source_excerpt(src)
    where = "" if src is None else f"{src.file}:{src.line}:{col}: " if col else f"{src.file}:{src.line}: "
    out = [f"{where}{kind}: {message}", *excerpt, *err.related_lines()]
    if err.help:
        out.append(f"help: {err.help}")
    text = "\n".join(out)
    if show_internal_frames(show_internal):
        text = "".join(traceback.format_exception(type(err), err, err.__traceback__)) + "\n" + text
    return text


def format_exception(exc: BaseException, show_internal: bool | None = None) -> str:
    """A Python traceback of `exc`, internal frames hidden unless asked for (no trailing newline)."""
    tb = exc.__traceback__
    if show_internal_frames(show_internal):
        return "".join(traceback.format_exception(type(exc), exc, tb)).rstrip("\n")
    kept = filter_traceback(tb)
    # frames an API boundary hid already count too (its note, if any, is replaced by this line)
    hidden = getattr(exc, "_nzjit_hidden", 0) + _length(tb) - _length(kept)
    notes = getattr(exc, "__notes__", None)
    saved = list(notes) if notes is not None else None
    if notes is not None:
        notes[:] = [n for n in notes if not n.endswith(f"set {ENV_VAR}=full to show them)")]
    try:
        text = "".join(traceback.format_exception(type(exc), exc, kept)).rstrip("\n")
    finally:
        if saved is not None and notes is not None:
            notes[:] = saved
    if hidden:
        text += (
            f"\n({hidden} nzjit-internal frame{'s' if hidden != 1 else ''} hidden; "
            f"set {ENV_VAR}=full to show them)"
        )
    return text


def format_internal_error(exc: BaseException) -> str:
    """`internal compiler error`, the full traceback (internal frames are the point), a bug note."""
    full = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)).rstrip("\n")
    return (
        f"nzjit: internal compiler error: {exc}\n{full}\n"
        "This is a bug in nzjit, not in your kernel: please report it with the traceback above."
    )


def render(exc: BaseException, show_internal: bool | None = None) -> str:
    """The human form of any exception: CompileError, InternalError, or a filtered traceback."""
    if isinstance(exc, CompileError):
        return format_compile_error(exc, show_internal)
    if isinstance(exc, InternalError):
        return format_internal_error(exc)
    return format_exception(exc, show_internal)


def excepthook(exc_type: type[BaseException], exc: BaseException, tb: types.TracebackType | None) -> None:
    """A `sys.excepthook` that prints `render(exc)` to stderr."""
    if exc.__traceback__ is None and tb is not None:
        exc = exc.with_traceback(tb)
    print(render(exc), file=sys.stderr)


def _thread_hook(args: Any) -> None:
    if args.exc_value is None:
        if _previous_thread_hook:
            _previous_thread_hook(args)
        return
    name = args.thread.name if args.thread is not None else "?"
    print(f"Exception in thread {name}:", file=sys.stderr)
    excepthook(args.exc_type, args.exc_value, args.exc_traceback)


_previous_hook: Any = None
_previous_thread_hook: Any = None


def install() -> None:
    """Route uncaught exceptions (main thread and threads) through `render`. Idempotent."""
    global _previous_hook, _previous_thread_hook
    if sys.excepthook is excepthook:
        return
    _previous_hook, _previous_thread_hook = sys.excepthook, threading.excepthook
    sys.excepthook = excepthook
    threading.excepthook = _thread_hook


def uninstall() -> None:
    """Restore the hooks that `install()` replaced."""
    global _previous_hook, _previous_thread_hook
    if sys.excepthook is excepthook:
        sys.excepthook = _previous_hook or sys.__excepthook__
        threading.excepthook = _previous_thread_hook or threading.__excepthook__
    _previous_hook = _previous_thread_hook = None
