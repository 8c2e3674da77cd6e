"""tests/backend: a bug in the lane-batched path must fail the test, not fall back silently."""

from __future__ import annotations

import pytest

from nzjit.backend.options import current, using


@pytest.fixture(autouse=True)
def _strict_batching():
    with using(current().with_(strict=True)):
        yield
