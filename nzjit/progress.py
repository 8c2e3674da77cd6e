"""Progress of long work on a terminal: `  420/10000 programs  38.5/s  4m09s left`.

    with Progress(total=10000, what="programs") as bar:
        for chunk in work:
            ...
            bar.advance(len(chunk))

The line is redrawn in place (carriage return, clear to end of line) at most every `interval`
seconds, on `stream` (stderr by default, so that stdout carries only the results). It is shown
only when that stream is a terminal: piped or redirected, nothing is written, so logs and
`| grep` see the results alone. `NZJIT_PROGRESS=0` switches it off, `NZJIT_PROGRESS=1` forces
it on (as plain lines, one per tenth of the work, when the stream is not a terminal).
"""

from __future__ import annotations

import os
import re
import sys
import time
from types import TracebackType
from typing import TextIO

__all__ = ["Progress", "CountLines", "progress_enabled", "format_seconds"]

ENV_VAR = "NZJIT_PROGRESS"


def progress_enabled(stream: TextIO) -> bool:
    """Whether progress is shown on `stream`: `NZJIT_PROGRESS` if set (0 or 1), else whether the
    stream is a terminal (and not TERM=dumb)."""
    forced = os.environ.get(ENV_VAR, "").strip()
    if forced in ("0", "1"):
        return forced == "1"
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):  # a closed or exotic stream
        return False
    return tty and os.environ.get("TERM", "") != "dumb"


def format_seconds(s: float) -> str:
    """`42s`, `4m09s`, `2h03m`."""
    s = max(0, int(round(s)))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


class Progress:
    """Done / total, the rate and the time left, redrawn in place on a terminal (see the module)."""

    def __init__(
        self,
        total: int,
        what: str = "items",
        stream: TextIO | None = None,
        enabled: bool | None = None,
        interval: float = 0.2,
    ) -> None:
        self.total = max(0, int(total))
        self.what = what
        self.stream = stream if stream is not None else sys.stderr
        self.out = sys.stdout  # where `write` prints results (taken now: a CountLines may replace sys.stdout)
        self.enabled = progress_enabled(self.stream) if enabled is None else enabled
        try:
            self.live = self.enabled and self.stream.isatty()  # redraw in place, else plain lines
        except (AttributeError, ValueError):
            self.live = False
        self.interval = interval
        self.done = 0
        self.label = ""
        self._start = time.monotonic()
        self._last_draw = float("-inf")
        self._last_tenth = -1
        self._drawn = False

    # ------------------------------------------------------------------------------ reporting
    def advance(self, n: int = 1, label: str | None = None) -> None:
        """`n` more items done (and optionally what is being worked on now)."""
        self.update(self.done + n, label)

    def update(self, done: int, label: str | None = None) -> None:
        """`done` items done in all."""
        self.done = min(max(0, int(done)), self.total) if self.total else max(0, int(done))
        if label is not None:
            self.label = label
        if not self.enabled:
            return
        now = time.monotonic()
        if self.live:
            if now - self._last_draw >= self.interval or self.done >= self.total:
                self._draw(now)
        else:
            tenth = 10 * self.done // self.total if self.total else 0
            if tenth != self._last_tenth:
                self._last_tenth = tenth
                self.stream.write(self.text(now) + "\n")
                self.stream.flush()

    def write(self, line: str) -> None:
        """Print a line of output above the progress line (which is redrawn under it)."""
        if self.live and self._drawn:
            self.stream.write("\r\x1b[K")
            self._drawn = False
        self.out.write(line + "\n")
        self.out.flush()
        if self.live and self.done:
            self._draw(time.monotonic())

    def text(self, now: float | None = None) -> str:
        """`  done/total what  rate/s  time left` (no rate before the first item)."""
        now = time.monotonic() if now is None else now
        elapsed = max(now - self._start, 1e-9)
        width = len(str(self.total))
        parts = [f"  {self.done:>{width}}/{self.total} {self.what}"]
        if self.done:
            rate = self.done / elapsed
            parts.append(f"{rate:.1f}/s" if rate >= 1 else f"{elapsed / self.done:.1f} s each")
            if self.done < self.total:
                parts.append(f"{format_seconds((self.total - self.done) / rate)} left")
            else:
                parts.append(f"done in {format_seconds(elapsed)}")
        if self.label:
            parts.append(self.label)
        return "  ".join(parts)

    def _draw(self, now: float) -> None:
        columns = _columns(self.stream)
        line = self.text(now)
        if len(line) >= columns:
            line = line[: columns - 1]
        self.stream.write("\r\x1b[K" + line)
        self.stream.flush()
        self._drawn = True
        self._last_draw = now

    def close(self) -> None:
        """End the display: the last state stays on screen, on its own line."""
        if self.live and self._drawn:
            self._draw(time.monotonic())
            self.stream.write("\n")
            self.stream.flush()
            self._drawn = False

    def __enter__(self) -> Progress:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _columns(stream: TextIO) -> int:
    try:
        columns = os.get_terminal_size(stream.fileno()).columns
    except (OSError, ValueError, AttributeError):
        columns = 0
    return columns if columns > 0 else 100  # a terminal that reports no size (a fresh pty)


class CountLines:
    """A stdout stand-in for code that reports progress as `done/total` lines (`  420/10000`): each
    such line updates `bar`, every other line is printed as usual (above the progress line)."""

    def __init__(self, bar: Progress) -> None:
        self.bar = bar
        self._pending = ""

    def write(self, text: str) -> int:
        """Take printed text: complete count lines update the bar, other lines are printed."""
        self._pending += text
        *lines, self._pending = self._pending.split("\n")
        for line in lines:
            m = _COUNT.fullmatch(line)
            if m is not None:
                self.bar.update(int(m.group(1)))
            else:
                self.bar.write(line)
        return len(text)

    def flush(self) -> None:
        """Nothing to flush: a partial line waits for its newline."""
        pass


_COUNT = re.compile(r"\s*(\d+)/\d+\s*")
