"""Simulated devices and the tensors that live on them.

A :class:`Worker` is one A2/A3 device: its own :class:`GlobalMemory` (so a pointer of another
device is meaningless there) and the on-chip accounting of a core.  A :class:`DeviceTensor` is
a *logical* tensor resident in one worker's GM (NZ tensors keep their logical shape, NZ-32).
A :class:`StackedDeviceTensor` is the per-rank sharding of one ``[RANKS, ...]`` tensor across a
:class:`Cluster`, shard r resident on rank r (NZ-29).

Host-side misuse (use after free, a tensor of another worker, a malformed stack) is a
:class:`DispatchError`: it is refused before anything reaches the device.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .errors import DispatchError
from .layout_marks import is_nz, layout_of, mark_nz
from .memory import GlobalMemory, OnChip
from .nz import nz_blocked_shape

__all__ = ["Worker", "DeviceTensor", "NzDeviceTensor", "StackedDeviceTensor", "Cluster"]

_LAYOUT_HELP = (
    "pack a logical array with runtime.pack_nz(a), or declare bytes that are already NZ with runtime.as_nz(a)"
)


@dataclass(frozen=True, eq=False)
class DeviceTensor:
    """A dense tensor of logical ``shape`` at byte ``address`` of ``worker``'s GM.

    Identity semantics (``eq=False``): two handles are the same tensor only if they are the
    same object, as with device pointers handed out by an allocator. ``layout`` is ``"ND"``; an
    :class:`NzDeviceTensor` holds NZ bytes (the type carries the layout, so that every check
    keyed on an argument's type tells the two apart).
    """

    worker: Worker
    address: int
    shape: tuple[int, ...]
    dtype: np.dtype

    layout = "ND"  # a class attribute, not a field: DeviceTensor(worker, address, shape, dtype)

    def __post_init__(self) -> None:
        # a hand-made handle: shape as a tuple of ints (hashable, comparable), dtype a np.dtype
        try:
            shape = tuple(operator.index(d) for d in self.shape)
        except TypeError:
            raise DispatchError(
                f"DeviceTensor shape must be a sequence of ints, got {self.shape!r}"
            ) from None
        if any(d < 0 for d in shape):
            raise DispatchError(f"DeviceTensor: negative dimension in shape {shape}")
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "dtype", np.dtype(self.dtype))
        object.__setattr__(self, "address", operator.index(self.address))

    @property
    def nbytes(self) -> int:
        """Size of the tensor's bytes in GM (``prod(shape) * itemsize``)."""
        return math.prod(self.shape) * self.dtype.itemsize

    @property
    def ndim(self) -> int:
        """Number of logical dimensions."""
        return len(self.shape)

    def memory_span(self) -> tuple[object, int, int]:
        """(the memory it lives in, first byte, end): two tensors share bytes exactly when their
        memories are the same object and the ranges overlap (the aliasing check). A tensor that
        lives elsewhere (a remote rank's) answers with its own memory and coordinates."""
        return self.worker, self.address, self.address + self.nbytes

    @property
    def freed(self) -> bool:
        """True once the worker's GM allocation behind ``address`` has been freed."""
        return not self.worker.gm.is_live(self.address)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(worker={self.worker.device_id}, address={self.address:#x}, "
            f"shape={self.shape}, dtype={self.dtype.name}{', freed' if self.freed else ''})"
        )


@dataclass(frozen=True, eq=False)
class NzDeviceTensor(DeviceTensor):
    """A DeviceTensor whose bytes are in NZ order (its shape is the logical one, NZ-32): what
    ``alloc_tensor(init=runtime.pack_nz(w))`` makes. Only an NZ parameter accepts it."""

    layout = "NZ"

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_nz_shape(self.shape, self.dtype, "NzDeviceTensor")


def _check_nz_shape(shape: tuple[int, ...], dt: np.dtype, what: str) -> None:
    try:
        nz_blocked_shape(shape, dt)
    except ValueError as e:
        raise DispatchError(f"{what}: {e}") from None


class Worker:
    """One simulated device: a GM of real bytes and the on-chip capacities of ``target``."""

    def __init__(self, device_id: int = 0, target: str = "A2A3", *, shared: bool = False) -> None:
        """``shared``: the GM's bytes live in shared memory (runtime/shared_gm.py), so that the
        worker's kernels can run in a forked rank process (a `Cluster`'s ranks have it)."""
        if isinstance(device_id, bool) or not isinstance(device_id, int | np.integer) or device_id < 0:
            raise DispatchError(f"Worker device_id must be a non-negative int, got {device_id!r}")
        self.device_id = int(device_id)
        self.target = target
        self.gm = GlobalMemory(shared=shared)
        self.onchip = OnChip(target)

    def __repr__(self) -> str:
        return f"Worker(device_id={self.device_id}, target={self.target!r})"

    def alloc_tensor(
        self,
        shape: Sequence[int],
        dtype: np.dtype | type,
        init: np.ndarray | None = None,
        layout: str | None = None,
    ) -> DeviceTensor:
        """Allocate a tensor; ``init`` (same shape, same dtype) is uploaded, else the memory holds
        the poison pattern of fresh device memory (`runtime.memory.POISON_BYTE` in every byte: NaN
        for floats, -1 for signed integers), so a read of bytes nobody wrote is visible.

        ``layout`` (``"ND"`` / ``"NZ"``) defaults to the layout of ``init`` (NZ for a
        ``pack_nz`` / ``as_nz`` array) or ND; an NZ tensor is an :class:`NzDeviceTensor`. A
        ``layout`` that contradicts ``init`` is refused (DispatchError)."""
        dt = np.dtype(dtype)
        try:
            shape = tuple(operator.index(d) for d in shape)
        except TypeError:
            raise DispatchError(f"alloc_tensor: shape must be a sequence of ints, got {shape!r}") from None
        if any(d < 0 for d in shape):
            raise DispatchError(f"alloc_tensor: negative dimension in shape {shape}")
        given = None if init is None else layout_of(init)
        if layout is None:
            layout = given or "ND"
        if layout not in ("ND", "NZ"):
            raise DispatchError(f"alloc_tensor: layout must be 'ND' or 'NZ', got {layout!r}")
        if given is not None and given != layout:
            raise DispatchError(
                f"alloc_tensor: layout={layout!r} but init is {'an NZ-marked' if given == 'NZ' else 'a plain (ND)'} "
                f"array; {_LAYOUT_HELP}"
                if layout == "NZ"
                else "alloc_tensor: layout='ND' but init is NZ-marked (pack_nz / as_nz output); "
                "pass the logical array, or runtime.unpack_nz(init)"
            )
        cls = NzDeviceTensor if layout == "NZ" else DeviceTensor
        if layout == "NZ":
            _check_nz_shape(shape, dt, "alloc_tensor")
        if init is None:
            return cls(self, self.gm.alloc(math.prod(shape) * dt.itemsize), shape, dt)
        host = self._host_array(init, shape, dt, "alloc_tensor init")
        return cls(self, self.gm.upload(host), shape, dt)

    def write_tensor(self, t: DeviceTensor, data: np.ndarray) -> None:
        """Upload host ``data`` (same shape, dtype and layout, bytes as given) over resident ``t``."""
        self.check_tensor(t)
        if layout_of(data) != t.layout:
            raise DispatchError(
                f"write_tensor: {t!r} is {t.layout}, the data is {layout_of(data)}; "
                + (
                    _LAYOUT_HELP
                    if t.layout == "NZ"
                    else "pass the logical array (runtime.unpack_nz of NZ bytes)"
                )
            )
        self.gm.write(t.address, self._host_array(data, t.shape, t.dtype, "write_tensor"))

    def copy_from(self, t: DeviceTensor) -> np.ndarray:
        """Download ``t``: a new host array of its logical shape holding the bytes as stored
        (marked NZ for an NZ tensor, so that it can be passed on to an NZ parameter)."""
        self.check_tensor(t)
        a = self.gm.read(t.address, t.nbytes).view(t.dtype).reshape(t.shape)
        return mark_nz(a) if t.layout == "NZ" else a

    def free_tensor(self, t: DeviceTensor) -> None:
        """Free ``t``; its address range is never reused, later use raises DispatchError."""
        self.check_tensor(t)
        self.gm.free(t.address)

    def check_tensor(self, t: object, what: str = "tensor") -> DeviceTensor:
        """Refuse anything but a live DeviceTensor of this worker (DispatchError)."""
        if not isinstance(t, DeviceTensor):
            raise DispatchError(f"{what}: expected a DeviceTensor, got {type(t).__name__}")
        if t.worker is not self:
            raise DispatchError(
                f"{what} {t!r} lives on worker {t.worker.device_id}, "
                f"not on worker {self.device_id}; copy it over first"
            )
        if t.freed:
            raise DispatchError(f"{what} {t!r} was freed (use after free)")
        return t

    @staticmethod
    def _host_array(data: object, shape: tuple[int, ...], dt: np.dtype, what: str) -> np.ndarray:
        if isinstance(data, np.ndarray) and data.dtype != dt:
            if data.dtype.newbyteorder("=") == dt and data.dtype.byteorder not in ("=", "|"):
                raise DispatchError(
                    f"{what}: dtype {data.dtype.str} is a byte-swapped {dt.name}; the device is "
                    f"little-endian: pass a.astype(np.{dt.name})"
                )
            raise DispatchError(
                f"{what}: dtype {data.dtype.name} does not match {dt.name} "
                "(no implicit casts: the bytes are uploaded as they are)"
            )
        arr = np.asarray(data, dtype=dt)
        if arr.shape != shape:
            raise DispatchError(f"{what}: shape {arr.shape} does not match {shape}")
        return arr


class StackedDeviceTensor:
    """Shards of one ``full_shape`` tensor, shard i on worker ``worker_ids[i]`` (NZ-29).

    Validated on construction; ``obj[i]`` (an int) is shard i.  Slicing is refused: a kernel
    receives one rank's shard, never a sub-stack spanning devices.
    """

    def __init__(
        self, shards: Sequence[DeviceTensor], full_shape: Sequence[int], worker_ids: Sequence[int]
    ) -> None:
        shards, worker_ids = tuple(shards), tuple(int(w) for w in worker_ids)
        full_shape = tuple(int(d) for d in full_shape)
        if not full_shape:
            raise DispatchError("StackedDeviceTensor: full_shape must have a leading rank axis")
        if not (len(shards) == full_shape[0] == len(worker_ids)):
            raise DispatchError(
                f"StackedDeviceTensor: {len(shards)} shards, full_shape[0] = {full_shape[0]} and "
                f"{len(worker_ids)} worker ids must all be equal"
            )
        for i, (s, w) in enumerate(zip(shards, worker_ids)):
            if not isinstance(s, DeviceTensor):
                raise DispatchError(
                    f"StackedDeviceTensor: shard {i} is a {type(s).__name__}, expected a DeviceTensor"
                )
            if s.shape != full_shape[1:]:
                raise DispatchError(
                    f"StackedDeviceTensor: shard {i} has shape {s.shape}, "
                    f"expected full_shape[1:] = {full_shape[1:]}"
                )
            if s.dtype != shards[0].dtype:
                raise DispatchError(
                    f"StackedDeviceTensor: shard {i} has dtype {s.dtype.name}, "
                    f"shard 0 has {shards[0].dtype.name}"
                )
            if s.worker.device_id != w:
                raise DispatchError(
                    f"StackedDeviceTensor: shard {i} lives on worker "
                    f"{s.worker.device_id}, worker_ids[{i}] says {w}"
                )
            if s.freed:
                raise DispatchError(f"StackedDeviceTensor: shard {i} was freed")
            if s.layout != shards[0].layout:
                raise DispatchError(
                    f"StackedDeviceTensor: shard {i} is {s.layout}, shard 0 is {shards[0].layout}"
                )
        self.shards = shards
        self.full_shape = full_shape
        self.worker_ids = worker_ids

    @property
    def shape(self) -> tuple[int, ...]:
        """The full logical shape (leading axis = one shard per rank)."""
        return self.full_shape

    @property
    def dtype(self) -> np.dtype:
        """The shards' common dtype (``uint8`` for an empty stack)."""
        return self.shards[0].dtype if self.shards else np.dtype(np.uint8)

    @property
    def ndim(self) -> int:
        """Number of dimensions of ``full_shape``."""
        return len(self.full_shape)

    @property
    def layout(self) -> str:
        """The shards' common layout, ``"ND"`` or ``"NZ"`` (``"ND"`` for an empty stack)."""
        return self.shards[0].layout if self.shards else "ND"

    def __len__(self) -> int:
        return len(self.shards)

    def __getitem__(self, i: object) -> DeviceTensor:
        if isinstance(i, bool) or not isinstance(i, int | np.integer):
            raise DispatchError(
                f"StackedDeviceTensor index must be an int (one rank's shard), got {type(i).__name__} {i!r}"
            )
        n = len(self.shards)
        j = int(i) + n if int(i) < 0 else int(i)
        if not 0 <= j < n:
            raise DispatchError(f"StackedDeviceTensor index {i} out of range for {n} shards")
        return self.shards[j]

    def __repr__(self) -> str:
        return (
            f"StackedDeviceTensor(full_shape={self.full_shape}, dtype={self.dtype.name}, "
            f"worker_ids={self.worker_ids})"
        )


class Cluster:
    """``n_ranks`` workers, rank r = ``workers[r]`` with device id r."""

    def __init__(self, n_ranks: int, target: str = "A2A3") -> None:
        if int(n_ranks) < 1:
            raise DispatchError(f"Cluster needs at least one rank, got {n_ranks}")
        self.target = target
        # shared GM: the compiler may run groups of ranks in processes of their own, one per core
        # (nzjit/backend/rank_processes.py), each reaching its ranks' bytes in place
        self.workers = [Worker(r, target, shared=True) for r in range(int(n_ranks))]

    @property
    def n_ranks(self) -> int:
        """Number of ranks (workers) in the cluster."""
        return len(self.workers)

    def alloc_stacked_tensor(self, host_array: np.ndarray) -> StackedDeviceTensor:
        """Upload ``host_array[r]`` to rank r; ``host_array.shape[0]`` must equal ``n_ranks``.
        A ``pack_nz`` / ``as_nz`` array gives NZ shards."""
        a = host_array if is_nz(host_array) else np.asarray(host_array)
        if a.ndim < 1 or a.shape[0] != self.n_ranks:
            raise DispatchError(
                f"alloc_stacked_tensor: leading axis of shape {a.shape} must be the rank count {self.n_ranks}"
            )
        shards = [w.alloc_tensor(a.shape[1:], a.dtype, init=a[r]) for r, w in enumerate(self.workers)]
        return StackedDeviceTensor(shards, a.shape, range(self.n_ranks))

    def copy_stacked_from(self, t: StackedDeviceTensor) -> np.ndarray:
        """Download every shard and stack them back into ``full_shape``."""
        self._check_stacked(t)
        out = np.empty(t.full_shape, dtype=t.dtype)
        for i, s in enumerate(t.shards):
            out[i] = s.worker.copy_from(s)
        return mark_nz(out) if t.layout == "NZ" else out

    def free_stacked(self, t: StackedDeviceTensor) -> None:
        """Free every shard of ``t`` on its own worker."""
        self._check_stacked(t)
        for s in t.shards:
            s.worker.free_tensor(s)

    def _check_stacked(self, t: object) -> None:
        if not isinstance(t, StackedDeviceTensor):
            raise DispatchError(f"expected a StackedDeviceTensor, got {type(t).__name__}")
        for i, (s, w) in enumerate(zip(t.shards, t.worker_ids)):
            if not 0 <= w < self.n_ranks or s.worker is not self.workers[w]:
                raise DispatchError(f"shard {i} of {t!r} does not live on this cluster's rank {w}")
