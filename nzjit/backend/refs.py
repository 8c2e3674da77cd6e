"""The references a program of kernel calls is made of (backend/call.py runs it).

A recorded call (`KernelCall`) holds one reference per tensor parameter: a caller's host array or
a view of it (`HostRef`), a resident DeviceTensor or a view of one (`DeviceRef`), a whole
StackedDeviceTensor (`StackedRef`: only its shards reach a kernel), or an intermediate of one rank
(`PendingRef`). The calling convention (call.py) and a cluster whose ranks live in other
processes (nzjit/distributed_ray) read the same references.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from runtime import DeviceTensor, StackedDeviceTensor

from ..core.ir import Graph
from ..errors import Source


@dataclass(frozen=True, eq=False)
class HostRef:
    """A caller's numpy array, or its plane `root[index]`: uploaded to the rank's worker once per
    program; as an output, copied back only after every rank succeeded. `fresh`: allocated by the
    call itself (an omitted Out), so there is nothing to upload."""

    root: np.ndarray
    index: Any = None  # None, an int plane, or a numpy index of ints and slices (an orchestration view)
    name: str = "argument"
    fresh: bool = False

    @property
    def array(self) -> np.ndarray:
        """The referenced array: `root`, or its view `root[index]`."""
        return self.root if self.index is None else self.root[self.index]

    @property
    def key(self) -> tuple[int, Any]:
        """Identity of the referenced array (root object, view): an argument passed twice uploads once."""
        idx = self.index
        if isinstance(idx, tuple):  # slices are not hashable before Python 3.12
            idx = tuple((k.start, k.stop) if isinstance(k, slice) else k for k in idx)
        return id(self.root), idx

    @property
    def shape(self) -> tuple[int, ...]:
        """Shape of the referenced array (of the plane when `index` is set)."""
        return tuple(self.array.shape)

    @property
    def dtype(self) -> np.dtype:
        """The array's dtype."""
        return self.root.dtype


@dataclass(frozen=True, eq=False)
class DeviceRef:
    """A resident DeviceTensor (a whole argument, or shard `w[r]` of a stacked one): never copied."""

    tensor: DeviceTensor
    name: str = "argument"

    @property
    def shape(self) -> tuple[int, ...]:
        """Shape of the resident tensor."""
        return tuple(self.tensor.shape)

    @property
    def dtype(self) -> np.dtype:
        """The resident tensor's dtype."""
        return self.tensor.dtype


@dataclass(frozen=True, eq=False)
class StackedRef:
    """A whole StackedDeviceTensor: only its shards (`w[r]`) reach a kernel."""

    tensor: StackedDeviceTensor
    name: str = "argument"

    @property
    def shape(self) -> tuple[int, ...]:
        """The stacked tensor's full shape (leading axis = ranks)."""
        return tuple(self.tensor.full_shape)

    @property
    def dtype(self) -> np.dtype:
        """The shards' dtype."""
        return self.tensor.dtype


@dataclass(eq=False)
class PendingRef:
    """An Out left out of a call inside an orchestration: an intermediate on rank `device`,
    allocated when the program is validated, freed when the program ends."""

    shape: tuple[int, ...]
    dtype: np.dtype
    device: int
    name: str = "intermediate"
    tensor: DeviceTensor | None = None


Ref = HostRef | DeviceRef | StackedRef | PendingRef


@dataclass(eq=False)
class KernelCall:
    """One recorded call: a kernel, one ref (or int) per parameter, its rank.

    `graph` / `low` pin a compiled stage (`Lowered.run(after=...)`); else the kernel's final graph."""

    kernel: Any
    args: list[Any]
    device: int
    source: Source | None = None
    graph: Graph | None = None
    low: Any = None
    dims: dict[str, int] | None = None  # set when the entry already checked these very arguments


def as_ref(a: Any, name: str) -> Any:
    """A raw argument as a ref; ints and refs pass through."""
    if isinstance(a, np.ndarray):
        return HostRef(a, None, name)
    if isinstance(a, DeviceTensor):
        return DeviceRef(a, name)
    if isinstance(a, StackedDeviceTensor):
        return StackedRef(a, name)
    return a


def default_device(args: Iterable[Any]) -> int:
    """`device=None`: the rank of the first resident argument, else 0."""
    for a in args:
        if isinstance(a, DeviceRef):
            return a.tensor.worker.device_id
        if isinstance(a, PendingRef):
            return a.device
    return 0


def call_name(call: KernelCall) -> str:
    """How errors name a call: "kernel (file:line)"."""
    return call.kernel.__name__ + (f" ({call.source})" if call.source else "")


def resident_tensors(residents: Iterable[Any]) -> Iterable[tuple[str, DeviceTensor]]:
    """(name, tensor) of every resident tensor among `residents`: a DeviceRef's, each shard of a StackedRef."""
    for r in residents:
        if isinstance(r, StackedRef):
            for i, s in enumerate(r.tensor.shards):
                yield f"{r.name}[{i}]", s
        elif isinstance(r, DeviceRef):
            yield r.name, r.tensor


def pending_refs(calls: Sequence[KernelCall]) -> list[PendingRef]:
    """The intermediates of a program, each once, in order of first use."""
    out: list[PendingRef] = []
    seen: set[int] = set()  # ids of `out`'s refs, alive in it (asked for ~5 times per program)
    for c in calls:
        for a in c.args:
            if isinstance(a, PendingRef) and id(a) not in seen:
                seen.add(id(a))
                out.append(a)
    return out


__all__ = [
    "DeviceRef",
    "HostRef",
    "KernelCall",
    "PendingRef",
    "Ref",
    "StackedRef",
    "as_ref",
    "call_name",
    "default_device",
    "pending_refs",
    "resident_tensors",
]
