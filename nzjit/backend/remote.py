"""Clusters whose ranks live in other processes (nzjit.distributed.RayCluster), seen from the
calling convention.

`call.run_program` asks `remote_cluster_of(cluster, residents)` first; a cluster it returns runs
the program itself (`RemoteCluster.run_program`): it checks the program on the driver with the
same planner as a local run (`call.plan_program`, so the messages are the same), then dispatches
each rank's share to the process that holds the rank. Nothing here imports ray.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .options import Options


class RemoteCluster:
    """A cluster that runs a recorded program on its own ranks (nzjit.distributed.RayCluster)."""

    @property
    def n_ranks(self) -> int:
        """Number of ranks."""
        raise NotImplementedError

    def run_program(
        self, calls: Sequence[Any], residents: Sequence[Any], rank_prefix: bool, options: Options
    ) -> None:
        """Validate `calls` (refs.KernelCalls) on the driver, run them on the ranks under
        `options`, commit the outputs only when every rank succeeded."""
        raise NotImplementedError


def remote_cluster_of(cluster: Any, residents: Sequence[Any]) -> RemoteCluster | None:
    """The remote cluster that runs this program: `cluster=` if it is one; with no `cluster=`, the
    one the first resident argument lives on. None: the program runs in this process."""
    if isinstance(cluster, RemoteCluster):
        return cluster
    if cluster is not None:
        return None  # a local cluster: its own checks refuse tensors of a remote one
    for ref in residents:
        tensor = getattr(ref, "tensor", None)
        for t in getattr(tensor, "shards", (tensor,)):
            owner = getattr(getattr(t, "worker", None), "remote_cluster", None)
            if isinstance(owner, RemoteCluster):
                return owner
    return None


__all__ = ["RemoteCluster", "remote_cluster_of"]
