"""The hook between the calling convention and clusters whose ranks live in other processes.

backend/call.py `run_program` asks `remote_cluster_of(cluster, residents)` first; a cluster it
returns runs the program itself (`RemoteCluster.run_program`: the same checks on the driver, then
its own dispatch). Nothing here imports the backend or ray, so the hook costs call.py one import.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class RemoteCluster:
    """A cluster that runs a recorded program on its own ranks (nzjit.distributed.RayCluster)."""

    def run_program(self, calls: Sequence[Any], residents: Sequence[Any], rank_prefix: bool) -> None:
        """Validate `calls` (backend/call.py KernelCalls) on the driver, run them on the ranks,
        commit the outputs only when every rank succeeded."""
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
