"""tests/backend: a bug in the lane-batched path must fail the test, not fall back silently."""

from __future__ import annotations

import pytest

from nzjit.backend import batched


@pytest.fixture(autouse=True)
def _strict_batching(monkeypatch):
    monkeypatch.setattr(batched, "STRICT", True)
