"""@pl.orchestration: a host-side entry whose body calls kernels on the ranks of a cluster.

The body is plain Python, run once per call with *handles* for its tensor arguments:

    @pl.orchestration
    def tp(x: pl.Tensor[[RANKS, T, K], pl.INT8], w: pl.Tensor[[RANKS, E, N, K], pl.INT8, pl.NZ],
           out: pl.Out[pl.Tensor[[RANKS, E, T, N], pl.INT32]]):
        for r in range(RANKS):
            expert(x[r], w[r], out[r], device=r)

`x[r]` is rank r's plane of a host array (uploaded to worker r) or rank r's shard of a
StackedDeviceTensor (already resident there, NZ-29: a rank-4 `[RANKS, E, R, C]` NZ argument is
sliced per rank before dispatch, leaving the kernel its logical rank-3 `[E, R, C]`). `x[r, e]`,
`x[r][e]`, `w[r, 0:2]` and `pl.slice(w[r], shape, offsets)` are dense views of leading axes
(views.py: the bytes at an offset, never a copy; an NZ plane stays whole, NZ-30), and
`pl.create_tensor(shape, dtype)` makes an intermediate (intermediates.py). A kernel
call in the body records (kernel, arguments, device) and returns handles of its outputs; an Out
left out of such a call is an intermediate on that rank, to be passed to later calls on it.
Nothing runs while the body runs: afterwards the whole program is validated (a program with the
signature of an earlier one reuses its checked plans, backend/program_cache.py), then ranks run
in parallel, then outputs are copied back (backend/call.py: `run_program`). The decorator is
`@pl.orchestration` (language/kernel.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

from runtime import DeviceTensor, DispatchError, StackedDeviceTensor

from ..backend import call as C
from ..backend import comm_run
from ..backend.options import current
from ..core.types import DynDim, Layout, ScalarType, TensorType
from ..errors import CompileError, Source, api_boundary, user_source
from . import intermediates as T
from . import views as V
from .calls import active_program, recording
from .params import Param, entry_params

_state = recording  # the thread-local a direct call consults (calls.py)


class Handle:
    """A tensor seen by an orchestration body: its shape and dtype, indexable by rank.

    Its data cannot be read on the host: kernels run after the body has recorded them."""

    def __init__(self, ref: Any, nz: bool = False) -> None:
        self._ref = ref
        self.nz = nz  # an NZ argument (or a view of one): only its leading axes may be narrowed (NZ-30)

    @property
    def name(self) -> str:
        """The argument's name (in error messages)."""
        return self._ref.name

    @property
    def shape(self) -> tuple[int, ...]:
        """The tensor's shape."""
        return tuple(self._ref.shape)

    @property
    def dtype(self) -> np.dtype:
        """The tensor's numpy dtype."""
        return np.dtype(self._ref.dtype)

    @property
    def ndim(self) -> int:
        """Number of axes."""
        return len(self.shape)

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, key: Any) -> Handle:
        """`x[r]`, `x[r, e]`, `x[r][e]`, `w[r, 0:2]`: a dense view of the argument's leading axes
        (views.py; issue 25). Of a stacked tensor, the first index is the rank."""
        return self._view(V.index_axes(self.name, self.shape, key))

    def orchestration_slice(self, shape: Any, offsets: Any, valid_shape: Any = None) -> Handle:
        """`pl.slice(x, shape, offsets)` in an orchestration body (language/ops.py hands it here)."""
        return self._view(V.window_axes(self.name, self.shape, list(shape), list(offsets), valid_shape))

    def _view(self, axes: list[Any]) -> Handle:
        return Handle(V.view_ref(self._ref, self.shape, axes, self.name, self.nz), nz=self.nz)

    def __array__(self, *args: Any, **kwargs: Any) -> Any:
        raise CompileError(
            f"{self._ref.name} is an orchestration handle: its data exists only once the "
            "recorded kernels run, after the body",
            user_source(),
            help="write results to an Out parameter of the orchestration",
        )

    def __repr__(self) -> str:
        return f"<orchestration handle {self.name}: {np.dtype(self.dtype).name}{list(self.shape)}>"


def _as_ref(a: Any, name: str) -> Any:
    if isinstance(a, Handle):
        return a._ref
    if isinstance(a, np.ndarray | DeviceTensor | StackedDeviceTensor):
        return C.as_ref(a, name)
    return a


def _pending_dims(kernel: Any, refs: Sequence[Any]) -> dict[str, int]:
    """Dynamic dims bound by the given arguments, to size omitted Outs (checked again later)."""
    dims: dict[str, int] = {}
    for p, a in zip(kernel.params, refs):
        shape = getattr(a, "shape", None)
        if shape is None or isinstance(p.type, ScalarType) or len(shape) != len(p.type.shape):
            continue
        for d, n in zip(p.type.shape, shape):
            if isinstance(d, DynDim):
                dims.setdefault(d.name, int(n))
    return dims


class Program:
    """The kernel calls an orchestration body records, in order."""

    def __init__(self, entry: Orchestration) -> None:
        self.entry = entry
        self.calls: list[C.KernelCall] = []

    @contextmanager
    def recording(self) -> Iterator[Program]:
        """Context manager: this program records the kernel calls the body makes on this thread; an
        orchestration called inside another is refused."""
        if active_program() is not None:
            raise CompileError(
                f"orchestration {self.entry.__name__} was called inside another orchestration "
                "body; call its kernels directly instead",
                user_source(),
            )
        _state.program = self
        try:
            yield self
        finally:
            _state.program = None

    def create_tensor(self, shape: Sequence[int], dtype: Any) -> Handle:
        """`pl.create_tensor(shape, dtype)` in the body: a new intermediate (intermediates.py)."""
        return Handle(T.created_tensor(shape, dtype))

    def record(
        self, kernel: Any, args: Sequence[Any], device: int | None, low: Any = None, graph: Any = None
    ) -> Any:
        """Record `kernel(*args, device=)`; return handles of its outputs (as a kernel call returns)."""
        src = user_source()
        if device is not None and (
            isinstance(device, bool) or not isinstance(device, int | np.integer) or device < 0
        ):
            raise CompileError(f"device= must be a non-negative int rank, got {device!r}", src)
        try:
            full, _ = C.split_args(kernel, args)
        except DispatchError as e:
            raise DispatchError(f"{src}: {e}") from None
        refs = [_as_ref(a, p.name) for p, a in zip(kernel.params, full)]
        rank = int(device) if device is not None else C.default_device([a for a in refs if not T.unbound(a)])
        T.bind_created(refs, rank)  # pl.create_tensor: the first call that uses it decides its rank
        dims = _pending_dims(kernel, refs) if any(a is None for a in refs) else {}
        for i, (p, a) in enumerate(zip(kernel.params, refs)):
            if a is None:
                try:
                    shape = C.out_shape(p, dims)
                except DispatchError as e:
                    raise DispatchError(f"{src}: {kernel.__name__}: {e}") from None
                refs[i] = C.PendingRef(
                    shape, p.type.dtype.np_dtype, rank, f"{kernel.__name__}.{p.name}@rank{rank}"
                )
        self.calls.append(C.KernelCall(kernel, refs, rank, src, graph=graph, low=low))
        outs = [
            a if isinstance(a, Handle) else Handle(r, nz=p.type.layout is Layout.NZ)
            for p, a, r in zip(kernel.params, full, refs)
            if p.is_output
        ]
        if not outs:
            return None
        return outs[0] if len(outs) == 1 else tuple(outs)


class Orchestration:
    """A host-side entry: checks its arguments against its annotations, runs its body to record
    kernel calls, then validates and runs them on a cluster (api.md "Calling a kernel")."""

    @api_boundary
    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        self.__name__ = fn.__name__
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn
        code = fn.__code__
        self.source = Source(code.co_filename, code.co_firstlineno)
        self.params: list[Param] = entry_params(fn, "orchestration", self.source)

    def __repr__(self) -> str:
        return f"<pl.orchestration {self.__name__}>"

    @api_boundary
    def record(self, *args: Any) -> Program:
        """Check the arguments and run the body; return the recorded program (nothing runs)."""
        return self._record(args)[0]

    def _record(self, args: Sequence[Any]) -> tuple[Program, list[Any], list[Any]]:
        full, _ = C.split_args(self, args)
        dims = C.check_entry(self, full, allow_stacked=True)
        refs: list[Any] = []
        for i, (p, a) in enumerate(zip(self.params, full)):
            if a is None:
                full[i] = np.zeros(C.out_shape(p, dims), p.type.dtype.np_dtype)
                refs.append(C.HostRef(full[i], None, p.name, fresh=True))
            else:
                refs.append(C.as_ref(a, p.name))
        prog = Program(self)
        with prog.recording():
            ret = self.fn(
                *[
                    r
                    if isinstance(p.type, ScalarType)
                    else Handle(r, nz=isinstance(p.type, TensorType) and p.type.layout is Layout.NZ)
                    for p, r in zip(self.params, refs)
                ]
            )
        if ret is not None:
            raise CompileError(
                f"orchestration {self.__name__} returned {type(ret).__name__}; an orchestration "
                "returns its results through its Out parameters",
                self.source,
            )
        return prog, full, refs

    @api_boundary
    def __call__(self, *args: Any, cluster: Any = None) -> Any:
        """Run on `cluster` (a runtime.Cluster or nzjit.distributed.RayCluster), else the cluster the
        resident arguments live on, else one default worker per rank the body dispatches to; return
        the Out arguments."""
        with comm_run.sizing(cluster, args):  # comm hook (issue 28): pld.world_size() in the body
            prog, full, refs = self._record(args)
        residents = [r for r in refs if isinstance(r, C.DeviceRef | C.StackedRef)]
        C.run_program(prog.calls, cluster=cluster, residents=residents, rank_prefix=True, options=current())
        return C.results(self, full)


__all__ = ["Orchestration", "Handle", "Program", "active_program"]
