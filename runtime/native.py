"""The compiled loops of runtime/_lines.c (typed in _lines.pyi), or None where they were not built
(no C compiler at install): each caller then takes numpy's way to the same bytes. One optional
import here, so that every module asks the same question the same way."""

from __future__ import annotations

try:
    from . import _lines as lines
except ImportError:  # pragma: no cover - depends on the install
    lines = None  # type: ignore[assignment]  # the module or None: mypy cannot spell an optional module

__all__ = ["lines"]
