"""Views of orchestration arguments: `x[r, e]`, `x[r][e]`, `w[r, 0:2]`, `pl.slice(w[r], shape, offsets)`.

An orchestration body indexes its arguments before they reach a kernel. Every view must be a dense
block of its argument: ints on the outer axes, then at most one window, then whole axes, so that it
is one contiguous range of bytes — a host array's view is uploaded as it is, a resident tensor's
view is the same bytes at an offset (no copy). For an NZ argument the trailing `[R, C]` plane must
stay whole (NZ-30: a window on the plane is not contiguous in NZ order); a view of its leading axes
is a sequence of whole planes, exactly the bytes `pack_nz` gives the sub-tensor (packing is plane
by plane), so the kernel's entry blocks it once (NZ-32) like the argument it came from.

A StackedDeviceTensor's leading axis is the rank: it takes one int (rank r's shard) or a window of
one rank; the rest of the index applies to that shard.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from runtime import DeviceTensor

from ..backend import refs as C
from ..errors import CompileError, user_source


class Axis(NamedTuple):
    """One axis of a view: the window [start, stop) of the source axis; `drop`: an int index.
    (A tuple: a body makes a few of them per view on every call, issue 25 item 4.)"""

    start: int
    stop: int
    drop: bool = False

    def text(self, n: int) -> str:
        """How this axis reads in a view's name, for a source axis of extent `n` (`2`, `:`, `0:4`)."""
        if self.drop:
            return str(self.start)
        if (self.start, self.stop) == (0, n):
            return ":"
        return f"{self.start}:{self.stop}"


def _refuse(msg: str, rule: str | None = None, help: str | None = None) -> CompileError:  # noqa: A002
    return CompileError(msg, user_source(), rule=rule, help=help)


def index_axes(name: str, shape: Sequence[int], key: Any) -> list[Axis]:
    """`key` (an int, a slice, or a tuple of them) as one Axis per axis of `shape`, numpy's rules:
    negative ints count from the end, slices clamp, missing trailing axes are whole."""
    items = key if isinstance(key, tuple) else (key,)
    if len(items) > len(shape):
        raise _refuse(
            f"{name}[{_key_text(items)}]: {len(items)} indices for the {len(shape)} axes of "
            f"{name} {list(shape)}"
        )
    axes: list[Axis] = []
    for i, (k, n) in enumerate(zip(items, shape)):
        if isinstance(k, int | np.integer) and not isinstance(k, bool):
            j = int(k) + n if int(k) < 0 else int(k)
            if not 0 <= j < n:
                what = "the leading axis" if i == 0 else f"axis {i}"
                raise _refuse(
                    f"{name}[{_key_text(items)}] is out of range for {what} {n} of {name} {list(shape)}"
                )
            axes.append(Axis(j, j + 1, drop=True))
        elif isinstance(k, slice):
            start, stop, step = k.indices(n)
            if step != 1:
                raise _refuse(
                    f"{name}[{_key_text(items)}]: a step of {step} on axis {i} is not a dense window",
                    help="take every element of the window (step 1); stride inside the kernel",
                )
            if stop <= start:
                raise _refuse(f"{name}[{_key_text(items)}]: the window on axis {i} is empty")
            axes.append(Axis(start, stop))
        else:
            raise _refuse(
                f"{name}[{_key_text(items)}]: an orchestration argument is indexed by ints and slices "
                f"of its axes, got {type(k).__name__} {k!r}",
                help="index with Python ints (e.g. the rank r) and slices a:b",
            )
    axes += [Axis(0, n) for n in shape[len(axes) :]]
    return axes


def window_axes(
    name: str, shape: Sequence[int], sizes: Sequence[int], offsets: Sequence[Any], valid_shape: Any
) -> list[Axis]:
    """`pl.slice(t, shape, offsets)` of an orchestration argument as Axes (no axis dropped)."""
    if valid_shape is not None:
        raise _refuse(
            f"pl.slice({name}, ...): valid_shape narrows what a kernel reads of a tile; an "
            "orchestration argument is passed whole",
            help="give valid_shape to the kernel's pl.load",
        )
    if len(sizes) != len(shape) or len(offsets) != len(shape):
        raise _refuse(
            f"pl.slice({name}, {list(sizes)}, {list(offsets)}): shape and offsets need one entry per "
            f"axis of {name} {list(shape)}"
        )
    axes = []
    for i, (s, o, n) in enumerate(zip(sizes, offsets, shape)):
        if not all(isinstance(v, int | np.integer) and not isinstance(v, bool) for v in (s, o)):
            raise _refuse(
                f"pl.slice({name}, ...): shape and offsets of an orchestration argument are Python "
                f"ints, got {s!r} and {o!r} on axis {i}"
            )
        if not (0 <= int(o) and 0 < int(s) and int(o) + int(s) <= n):
            raise _refuse(
                f"pl.slice({name}, {list(sizes)}, {list(offsets)}): the window [{o}, {int(o) + int(s)}) "
                f"on axis {i} is out of bounds for {n}",
                help="offsets and sizes must be non-negative",
            )
        axes.append(Axis(int(o), int(o) + int(s)))
    return axes


def _key_text(items: Sequence[Any]) -> str:
    def one(k: Any) -> str:
        if isinstance(k, slice):
            return f"{'' if k.start is None else k.start}:{'' if k.stop is None else k.stop}" + (
                "" if k.step is None else f":{k.step}"
            )
        return repr(k) if not isinstance(k, int | np.integer) else str(int(k))

    return ", ".join(one(k) for k in items)


def view_name(name: str, shape: Sequence[int], axes: Sequence[Axis]) -> str:
    """How the view reads in messages: `w[1, 0:2]` (trailing whole axes left out)."""
    texts = [a.text(n) for a, n in zip(axes, shape)]
    while len(texts) > 1 and texts[-1] == ":":
        texts.pop()
    return f"{name}[{', '.join(texts)}]" if texts else name


def check_dense(name: str, shape: Sequence[int], axes: Sequence[Axis], nz: bool, seen: str) -> None:
    """Refuse a view that is not one contiguous range of the argument's bytes (NZ-30, NZ-28);
    `seen` is the view's name (`view_name`), as the refusal calls it."""
    full = [(a.start, a.stop) == (0, n) for a, n in zip(axes, shape)]
    if nz and len(shape) >= 2 and not all(full[-2:]):
        raise _refuse(
            f"{seen}: a window on the [R, C] plane of the NZ argument {name} {list(shape)} is not "
            "contiguous in NZ order; NZ supports slicing the leading axes only",
            rule="NZ-30",
            help="pass the whole [R, C] plane and pl.load the window inside the kernel",
        )
    point = [a.drop or a.stop - a.start == 1 for a in axes]
    first = next((i for i, p in enumerate(point) if not p), len(axes))
    if not all(full[first + 1 :]):
        if nz:
            raise _refuse(
                f"{seen}: a window of the leading axes of the NZ argument {name} {list(shape)} that is "
                "not contiguous once folded into the batch slot; take a window on one leading axis only",
                rule="NZ-28",
                help="index the outer axes, window the innermost",
            )
        raise _refuse(
            f"{seen}: a window that is not one dense block of {name} {list(shape)}; a kernel argument "
            "is contiguous: index the outer axes, take a window on one axis, keep the inner axes whole",
            help="pass the whole tensor and slice it inside the kernel",
        )


def _offset_elems(shape: Sequence[int], axes: Sequence[Axis]) -> int:
    offset, stride = 0, 1
    for a, n in zip(reversed(axes), reversed(shape)):  # row-major: the last axis is innermost
        offset += a.start * stride
        stride *= int(n)
    return offset


def _kept(axes: Sequence[Axis]) -> tuple[int, ...]:
    return tuple(a.stop - a.start for a in axes if not a.drop)


def device_view(t: DeviceTensor, axes: Sequence[Axis]) -> DeviceTensor:
    """The dense block `axes` of resident `t`: the same bytes at an offset, no copy. A worker that is
    not a local one (a RayCluster rank) makes its own kind of view (`view_of`)."""
    shape = _kept(axes)
    offset = _offset_elems(t.shape, axes) * t.dtype.itemsize
    if offset == 0 and shape == tuple(t.shape):
        return t
    make = getattr(t.worker, "view_of", None)
    if make is not None:
        return make(t, offset, shape)
    # the same class: an NZ tensor's leading-axis block is NZ bytes too (planes are packed one by one)
    return type(t)(t.worker, t.address + offset, shape, t.dtype)  # inside t's allocation: GM checks it


def host_index(ref: C.HostRef, axes: Sequence[Axis]) -> tuple[Any, ...]:
    """The numpy index of the view `axes` of `ref.array`, in the coordinates of `ref.root`."""
    old = ref.index if isinstance(ref.index, tuple) else (() if ref.index is None else (ref.index,))
    new = [a.start if a.drop else slice(a.start, a.stop) for a in axes]
    out: list[Any] = []
    it = iter(new)
    for k in old:  # the axes the old index kept are the ones the new index addresses
        if isinstance(k, slice):
            n = next(it)
            out.append(k.start + n if isinstance(n, int) else slice(k.start + n.start, k.start + n.stop))
        else:
            out.append(k)
    out.extend(it)
    while (
        out
        and isinstance(out[-1], slice)
        and (out[-1].start, out[-1].stop) == (0, ref.root.shape[len(out) - 1])
    ):
        out.pop()  # one spelling per view: x[0] and x[0, :] upload once
    return tuple(out)


def _reshaped(t: DeviceTensor, shape: tuple[int, ...]) -> DeviceTensor:
    make = getattr(t.worker, "view_of", None)
    if make is not None:
        return make(t, 0, shape)
    return type(t)(t.worker, t.address, shape, t.dtype)


def view_ref(ref: Any, shape: Sequence[int], axes: Sequence[Axis], name: str, nz: bool) -> Any:
    """The ref of view `axes` of `ref` (a HostRef, DeviceRef or StackedRef), checked dense."""
    seen = view_name(name, shape, axes)
    if isinstance(ref, C.StackedRef):
        lead = axes[0]
        if lead.stop - lead.start != 1:
            raise _refuse(
                f"{seen}: a window of {lead.stop - lead.start} ranks of the StackedDeviceTensor {name}; "
                "a kernel receives one rank's shard",
                help=f"index the rank axis with one int, {name}[r, ...]",
            )
        check_dense(name, shape, axes, nz, seen)
        t = device_view(ref.tensor.shards[lead.start], axes[1:])
        return C.DeviceRef(
            t if lead.drop else _reshaped(t, (1, *t.shape)), seen
        )  # a window of one rank keeps its axis
    if isinstance(ref, C.PendingRef):
        raise _refuse(
            f"{seen}: {name} is an intermediate, whose bytes exist only on its rank once the program "
            "runs; an orchestration cannot take a view of it",
            help="write the part you need to its own Out in the kernel that makes it, or slice inside "
            "the kernel that reads it",
        )
    check_dense(name, shape, axes, nz, seen)
    if isinstance(ref, C.HostRef):
        return C.HostRef(ref.root, host_index(ref, axes), seen, ref.fresh)
    return C.DeviceRef(device_view(ref.tensor, axes), seen)
