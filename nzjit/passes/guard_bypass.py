"""`GuardBypass`: the one switch a guard pass offers the tests, to compile a kernel it refuses and
show what the executor or the device does with it. Thread-local, so a test that turns a guard off
cannot change what another thread compiles; and part of the compile-cache key
(`active_bypasses`, driver/cache.py), so a kernel compiled inside a bypass is never served,
unchecked, to a call outside it (nor the reverse); calls inside a bypass keep no call plan."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

_REGISTRY: list[GuardBypass] = []
#: bypasses on, over all threads: a call asks `active_bypasses` only when nonzero (no call at all
#: in library use: the hot paths read this list)
ON_ANYWHERE = [0]
_lock = threading.Lock()


def active_bypasses() -> tuple[int, ...]:
    """The bypasses on in this thread (their registration numbers): () in every library call."""
    if not ON_ANYWHERE[0]:
        return ()
    return tuple(i for i, b in enumerate(_REGISTRY) if b.active)


class GuardBypass:
    """`with guard_bypass(): ...` turns the guard off on this thread; `guard_bypass.active` is what
    the guard asks. Test-only: no library code enters it."""

    def __init__(self) -> None:
        self._state = threading.local()
        _REGISTRY.append(self)

    @property
    def active(self) -> bool:
        """True inside a `with` of this bypass on the current thread."""
        return getattr(self._state, "on", False)

    @contextlib.contextmanager
    def __call__(self) -> Iterator[None]:
        saved = self.active
        self._state.on = True
        with _lock:
            ON_ANYWHERE[0] += 1
        try:
            yield
        finally:
            self._state.on = saved
            with _lock:
                ON_ANYWHERE[0] -= 1
