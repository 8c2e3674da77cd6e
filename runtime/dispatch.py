"""Compiler-agnostic argument checking and per-rank execution.

Everything here happens on the host before anything is dispatched, so every refusal is a
:class:`DispatchError` naming the parameter, what was expected and what was got; a refused call
leaves every output untouched.  The compiler describes its parameters with :class:`ParamSpec`
(shapes may use names for dynamic dims: same name = same extent) and gets the dynamic bindings
back from :func:`check_args`.
"""

from __future__ import annotations

import concurrent.futures as cf
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import threads
from .device import DeviceTensor, StackedDeviceTensor, Worker
from .dtypes import c0_of
from .errors import DispatchError, SimulatorLimitError
from .layout_marks import layout_of
from .nz import nz_blocked_shape

__all__ = [
    "ParamSpec",
    "check_args",
    "check_arg",
    "check_aliasing",
    "find_alias",
    "check_device",
    "check_trips",
    "check_rank_flow",
    "MAX_TRIPS",
    "blocked_view_shape",
    "raise_for_rank",
    "run_ranks",
]

#: The most trips one loop (or lanes one pl.spmd) may run on the simulator: ~1 us per trip at
#: best, so a longer loop would not finish, and its lane table alone would not fit in memory.
MAX_TRIPS = 1 << 31

Dim = int | str


@dataclass(frozen=True)
class ParamSpec:
    """One tensor parameter: logical ``shape`` (ints, or names for dynamic dims), ``dtype``,
    ``layout`` (``"ND"`` / ``"NZ"``) and whether the kernel writes it."""

    name: str
    shape: tuple[Dim, ...]
    dtype: np.dtype
    layout: str = "ND"
    is_output: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "dtype", np.dtype(self.dtype))
        object.__setattr__(self, "shape", tuple(d if isinstance(d, str) else int(d) for d in self.shape))
        if self.layout not in ("ND", "NZ"):
            raise ValueError(f"ParamSpec {self.name!r}: layout must be 'ND' or 'NZ'")

    def describe(self) -> str:
        """The shape as it appears in error messages, e.g. ``[M, 64]``."""
        return "[" + ", ".join(str(d) for d in self.shape) + "]"


def blocked_view_shape(logical_shape: Sequence[int], dtype: np.dtype | type) -> tuple[int, ...]:
    """Rank-5 blocked shape of an NZ argument (NZ-32): a metadata-only reshape of the same bytes."""
    return nz_blocked_shape(logical_shape, dtype)


def _rank_note(spec: ParamSpec) -> str:
    if spec.layout == "NZ" and spec.shape and isinstance(spec.shape[0], str) and len(spec.shape) == 3:
        return " (NZ-29: a dynamic-batch NZ parameter takes a rank-3 argument)"
    if spec.layout == "NZ":
        return " (NZ-29: an NZ argument has the parameter's logical rank)"
    return ""


def _arg_facts(spec: ParamSpec, arg: object, worker: Worker | None) -> tuple[tuple[int, ...], np.dtype]:
    """Shape and dtype of an argument, after the checks that depend on its kind."""
    who = f"parameter {spec.name!r}"
    if isinstance(arg, np.ndarray):
        if not arg.flags.c_contiguous:
            raise DispatchError(
                f"{who} expects a C-contiguous array, got strides {arg.strides} "
                "(pass np.ascontiguousarray(x))"
            )
        if spec.is_output and not arg.flags.writeable:
            raise DispatchError(f"{who} is an output and needs a writable array")
        return arg.shape, arg.dtype
    if isinstance(arg, DeviceTensor):
        if arg.freed:
            raise DispatchError(f"{who} got a freed DeviceTensor {arg!r} (use after free)")
        if worker is not None and arg.worker is not worker:
            raise DispatchError(
                f"{who} got a DeviceTensor of worker {arg.worker.device_id}, the "
                f"call runs on worker {worker.device_id}"
            )
        return arg.shape, arg.dtype
    if isinstance(arg, StackedDeviceTensor):
        for i, s in enumerate(arg.shards):
            if s.freed:
                raise DispatchError(f"{who}: shard {i} of {arg!r} was freed (use after free)")
        return arg.full_shape, arg.dtype
    raise DispatchError(
        f"{who} expects a numpy array, DeviceTensor or StackedDeviceTensor, got {type(arg).__name__}"
    )


def _check_layout(spec: ParamSpec, arg: object) -> None:
    """The argument's bytes are in the parameter's layout: NZ bytes only for an NZ parameter."""
    got = layout_of(arg)
    if got == spec.layout:
        return
    if spec.layout == "NZ":
        try:
            nz_blocked_shape(_arg_facts(spec, arg, None)[0], spec.dtype)
        except ValueError:
            return  # no NZ form at all (NZ-5/6/33): the compiler refuses the annotation by its rule
    who = f"parameter {spec.name!r}"
    kind = "array" if isinstance(arg, np.ndarray) else type(arg).__name__
    if spec.layout == "NZ":
        fix = (
            "upload runtime.pack_nz(a) (alloc_tensor(..., init=runtime.pack_nz(a)))"
            if not isinstance(arg, np.ndarray)
            else "pass runtime.pack_nz(a) of the logical array, or runtime.as_nz(a) if its bytes are already NZ"
        )
        raise DispatchError(
            f"{who} is NZ (pl.NZ) and got a plain (ND) {kind}, whose bytes are row-major: {fix}"
        )
    raise DispatchError(
        f"{who} is ND and got an NZ {kind} (pack_nz / as_nz bytes): pass the logical array "
        "(runtime.unpack_nz(a) of NZ bytes), or annotate the parameter pl.NZ"
    )


def _dtype_name(dt: np.dtype) -> str:
    """`int32`, or `int32 (byte-swapped, '>i4')`: a name that tells two different dtypes apart."""
    if dt.byteorder not in ("=", "|") and dt.newbyteorder("=") != dt:
        return f"{dt.name} (byte-swapped, {dt.str!r})"
    return dt.name


def check_arg(spec: ParamSpec, arg: object, bindings: dict[str, int], worker: Worker | None = None) -> None:
    """Check one argument against ``spec``, extending ``bindings`` of named dynamic dims."""
    shape, dtype = _arg_facts(spec, arg, worker)
    who = f"parameter {spec.name!r}"
    if dtype != spec.dtype:
        fix = ""
        if dtype.newbyteorder("=") == spec.dtype:
            fix = f"; the device is little-endian: pass a.astype(np.{spec.dtype.name})"
        raise DispatchError(f"{who} expects dtype {_dtype_name(spec.dtype)}, got {_dtype_name(dtype)}{fix}")
    if spec.layout == "NZ":
        try:
            c0_of(dtype)
        except ValueError as e:
            raise DispatchError(f"{who}: {e}") from None
    if len(shape) != len(spec.shape):
        raise DispatchError(
            f"{who} expects rank {len(spec.shape)} {spec.describe()}"
            f"{_rank_note(spec)}, got rank {len(shape)} {tuple(shape)}"
        )
    for axis, (want, got) in enumerate(zip(spec.shape, shape)):
        if isinstance(want, str):
            bound = bindings.setdefault(want, int(got))
            if bound != got:
                raise DispatchError(
                    f"{who} axis {axis} is the dynamic dim {want!r} = {bound} "
                    f"(bound by an earlier argument), got {got} in {tuple(shape)}"
                )
        elif want != got:
            raise DispatchError(
                f"{who} expects shape {spec.describe()}, got {tuple(shape)} (axis {axis}: {got} != {want})"
            )
    _check_layout(spec, arg)  # last: a wrong shape or dtype is named first, as before marks existed


def check_args(
    specs: Sequence[ParamSpec], args: Sequence[object] | Mapping[str, object], worker: Worker | None = None
) -> dict[str, int]:
    """Validate every argument before dispatch; return the dynamic-dim bindings.

    ``args`` is positional (one per spec) or a mapping by parameter name.  With ``worker``,
    DeviceTensors must live on it.
    """
    if isinstance(args, Mapping):
        missing = [s.name for s in specs if s.name not in args]
        extra = sorted(set(args) - {s.name for s in specs})
        if missing or extra:
            raise DispatchError(f"arguments: missing {missing}, unexpected {extra}")
        args = [args[s.name] for s in specs]
    if len(args) != len(specs):
        raise DispatchError(
            f"expects {len(specs)} arguments ({', '.join(s.name for s in specs)}), got {len(args)}"
        )
    bindings: dict[str, int] = {}
    for spec, arg in zip(specs, args):
        check_arg(spec, arg, bindings, worker)
    check_aliasing([(s.name, a, s.is_output) for s, a in zip(specs, args)])
    return bindings


def _spans(arg: object) -> list[tuple[object, int, int]]:
    """(memory, first byte, end) of each piece of memory an argument occupies: a host array's
    buffer (C-contiguous, so its bytes are one range), a DeviceTensor's GM range on its worker,
    every shard of a StackedDeviceTensor."""
    if isinstance(arg, np.ndarray):
        if arg.size == 0:
            return []
        lo = arg.__array_interface__["data"][0]
        return [(None, lo, lo + arg.nbytes)]
    if isinstance(arg, DeviceTensor):
        return [arg.memory_span()] if arg.nbytes else []
    if isinstance(arg, StackedDeviceTensor):
        return [x for sh in arg.shards for x in _spans(sh)]
    return []


def find_alias(items: Sequence[tuple[str, object, bool]]) -> str | None:
    """The refusal text for the first pair of tensor arguments that share memory where one of
    them is written (``items``: (parameter name, argument, is_output)), else None.

    Two inputs may share memory (both only read). An output that overlaps another argument
    would be read (or written) through two names, and the host uploads an array passed twice
    once: the kernel would read the bytes it is writing."""
    spans = [(name, is_out, _spans(arg)) for name, arg, is_out in items]
    for i, (n1, out1, s1) in enumerate(spans):
        for n2, out2, s2 in spans[i + 1 :]:
            if not (out1 or out2) or not s1 or not s2:
                continue
            for m1, lo1, hi1 in s1:
                for m2, lo2, hi2 in s2:
                    if m1 == m2 and lo1 < hi2 and lo2 < hi1:  # memories compare as values (memory_span)
                        lo, hi = max(lo1, lo2), min(hi1, hi2)
                        both = "outputs" if out1 and out2 else "an input and an output"
                        return (
                            f"parameters {n1!r} and {n2!r} share memory ({hi - lo} bytes overlap): {both} "
                            "must not alias (the kernel would read bytes it is writing); pass separate "
                            "arrays / tensors, or make the parameter pl.InOut and pass the tensor once"
                        )
    return None


def check_aliasing(items: Sequence[tuple[str, object, bool]]) -> None:
    """Refuse (DispatchError) arguments that alias where one of them is written (`find_alias`)."""
    msg = find_alias(items)
    if msg is not None:
        raise DispatchError(msg)


def check_rank_flow(
    writes: Sequence[tuple[int | None, int, str]], index: int | None, rank: int, pname: str, name: str
) -> None:
    """Refuse (DispatchError) a read on `rank` of a host array (plane `index`, None = all of it)
    that an earlier call of the same orchestration on another rank writes (`writes`: (plane,
    rank, name) of each earlier write, in call order). Ranks run in parallel, each on the copy of
    the host array uploaded when it starts: the reading rank would get the stale bytes."""
    for idx, r, what in writes:
        if r != rank and (idx is None or index is None or idx == index):
            raise DispatchError(
                f"parameter {pname!r}: rank {rank} reads {name}, which rank {r} writes ({what}) earlier in this "
                "orchestration; ranks run in parallel on the host arrays as they were uploaded, so rank "
                f"{rank} would read the stale bytes. help: run both calls on rank {r}, or split the "
                "orchestration in two (the second one sees the first one's results)"
            )


def check_device(device: object) -> int:
    """``device=`` of a direct call: a non-negative int rank (not a bool, str or float); DispatchError."""
    if isinstance(device, bool) or not isinstance(device, int | np.integer) or int(device) < 0:
        raise DispatchError(
            f"device= must be a non-negative int rank, got {device!r} ({type(device).__name__})"
        )
    return int(device)


def check_trips(n: int, where: object = None) -> None:
    """Refuse (SimulatorLimitError) a loop of more than `MAX_TRIPS` trips before it starts."""
    if n > MAX_TRIPS:
        at = f"{where}: " if where else ""
        raise SimulatorLimitError(
            f"{at}this loop runs {n} trips; the simulator runs at most {MAX_TRIPS} per loop (it would not "
            "finish); help: shorten the loop, or check its bounds"
        )


def raise_for_rank(rank: int, e: BaseException) -> None:
    """Raise ``e``, rank `rank`'s error, as `run_ranks` raises it: the same type, its message
    prefixed ``"rank r: "`` (for ranks run otherwise than on `run_ranks`' threads)."""
    _reraise(rank, e)


def _reraise(rank: int, e: BaseException) -> None:
    """Raise ``e`` again as the same type with its message prefixed by the rank.

    Falls back to re-raising ``e`` itself with a note when its constructor takes other args.
    """
    try:
        new = type(e)(f"rank {rank}: {e}")
    except Exception:  # exotic constructor signature
        e.add_note(f"rank {rank}")
        raise e from None
    new.__dict__.update(e.__dict__)  # its fields too (a LaneRaceError's lanes, tensor, windows)
    raise new from e


def run_ranks(fns: Mapping[int, Callable[[], Any]]) -> dict[int, Any]:
    """Run one callable per rank in parallel threads (numpy releases the GIL); return results.
    (Ranks that run the same program may run as one launch instead: runtime.cluster_memory.)

    Every rank runs to completion; if any failed, the error of the lowest failing rank is
    re-raised with its message prefixed ``"rank r: "``.
    """
    if len(fns) == 1:
        ((rank, fn),) = fns.items()
        try:
            return {rank: fn()}
        except Exception as e:
            _reraise(rank, e)
    with threads.ranks_running(len(fns)), cf.ThreadPoolExecutor(max_workers=max(1, len(fns))) as pool:
        futures = {r: pool.submit(fn) for r, fn in fns.items()}  # helpers only for idle cores (issue 25)
        cf.wait(futures.values())
    for r in sorted(futures):
        err = futures[r].exception()
        if err is not None:
            _reraise(r, err)
    return {r: futures[r].result() for r in fns}
