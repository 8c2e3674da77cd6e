"""One local Ray for the RayCluster tests (2 CPUs, no dashboard), started here and shut down after.

Skipped only when ray is not importable (`pip install -e '.[ray]'`)."""

from __future__ import annotations

import pytest

ray = pytest.importorskip("ray")


@pytest.fixture(scope="package")
def ray_session():
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield ray
    if started:
        ray.shutdown()


@pytest.fixture(scope="package")
def cluster(ray_session):
    from nzjit.distributed import RayCluster

    c = RayCluster(2)
    yield c
    c.shutdown()
