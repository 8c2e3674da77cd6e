"""`GuardBypass`: the one switch a guard pass offers the tests, to compile a kernel it refuses and
show what the executor or the device does with it. Thread-local, so a test that turns a guard off
cannot change what another thread compiles."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator


class GuardBypass:
    """`with guard_bypass(): ...` turns the guard off on this thread; `guard_bypass.active` is what
    the guard asks. Test-only: no library code enters it."""

    def __init__(self) -> None:
        self._state = threading.local()

    @property
    def active(self) -> bool:
        """True inside a `with` of this bypass on the current thread."""
        return getattr(self._state, "on", False)

    @contextlib.contextmanager
    def __call__(self) -> Iterator[None]:
        saved = self.active
        self._state.on = True
        try:
            yield
        finally:
            self._state.on = saved
