"""A watchdog for the pld tests: a program of communicating ranks that the simulator failed to stop
would hang the suite; every test here must finish within DEADLINE seconds (issue 28)."""

from __future__ import annotations

import faulthandler
import sys

import pytest

DEADLINE = 120.0


@pytest.fixture(autouse=True)
def _watchdog():
    # dumps every thread's stack and exits the run instead of hanging it forever
    faulthandler.dump_traceback_later(DEADLINE, exit=True, file=sys.stderr)
    yield
    faulthandler.cancel_dump_traceback_later()
