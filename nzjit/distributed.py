"""Ranks beyond one process: `RayCluster` (api.md "Distributed"; docs/ray.md).

    from nzjit.distributed import RayCluster
    cluster = RayCluster(4)                      # a local Ray, one actor per rank
    w_d = cluster.alloc_stacked_tensor(runtime.pack_nz(w))
    out = my_orchestration(x, w_d)               # runs on the actors that hold w_d's shards

Ray is an optional extra (`pip install 'nzjit[ray]'`); without it, using `RayCluster` raises
ImportError naming the extra, and the rest of nzjit does not notice.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported when first used: `import nzjit.distributed` must work without ray
    from .distributed_ray.cluster import RayCluster

__all__ = ["RayCluster"]


def __getattr__(name: str) -> Any:
    if name != "RayCluster":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        from .distributed_ray.cluster import RayCluster
    except ModuleNotFoundError as e:
        if e.name != "ray":
            raise
        raise ImportError("nzjit.distributed.RayCluster needs Ray: pip install 'nzjit[ray]'") from None
    return RayCluster
