"""Fixtures of the multi-rank tests.

- A watchdog for the pld tests: a program of communicating ranks that the simulator failed to stop
  would hang the suite; every test here must finish within DEADLINE seconds (issue 28).
- One local Ray per test module of the RayCluster tests (2 CPUs, no dashboard), started here and
  shut down after the module: module scope, since "package" scope without an `__init__.py` is the
  whole session, and a Ray left running would keep every later test from rank processes
  (nzjit/backend/rank_processes.py: a Ray driver is never forked). Those tests are skipped only
  when ray is not importable (`pip install -e '.[ray]'`), the pld tests run either way.
"""

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


@pytest.fixture(scope="module")
def ray_session():
    ray = pytest.importorskip("ray")
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield ray
    if started:
        ray.shutdown()


@pytest.fixture(scope="module")
def cluster(ray_session):
    from nzjit.distributed import RayCluster

    c = RayCluster(2)
    yield c
    c.shutdown()
