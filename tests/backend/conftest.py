"""tests/backend: a bug in the lane-batched path must fail the test, not fall back silently."""

from __future__ import annotations

import pytest
from batched_checks import record

from nzjit.backend import batched
from nzjit.backend.options import current, using


@pytest.fixture(autouse=True)
def _strict_batching():
    with using(current().with_(strict=True)):
        yield


@pytest.fixture
def spy(monkeypatch):
    """Records whether each SPMD loop ran batched (True) or fell back to per-lane (False); carry-free
    range loops are tried too, and not recorded."""
    return record(monkeypatch, batched, "try_run_spmd", lambda k: k.get("spmd", True))
