"""Fixtures the vector tests share."""

from __future__ import annotations

import pytest

from nzjit.backend import batched


@pytest.fixture
def attempts(monkeypatch):
    """The results of every batched SPMD attempt (True: it ran batched)."""
    seen: list[bool] = []
    real = batched.try_run_spmd

    def spy(*a, **k):
        ok = real(*a, **k)
        seen.append(ok)
        return ok

    monkeypatch.setattr(batched, "try_run_spmd", spy)
    return seen
