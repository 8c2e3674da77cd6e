"""The GM side of lane-batched loads and stores (see batched.py): a decoded instruction that is one
burst copy, replayed for every lane's address as one strided assignment; tile images read in
place as views of GM; the byte-range overlap test of loads against stores."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from runtime.cluster_memory import RANK_SHIFT
from runtime.convert import fixpipe_convert
from runtime.errors import DeviceError
from runtime.spans import byte_span, overlaps_itself


def lane_copy(
    plan: Any,
    gm: Any,
    addrs: np.ndarray,
    images: np.ndarray,
    load: bool,
    before: Callable[[int], None] | None = None,
    assign: Callable[..., Any] | None = None,
) -> bool:
    """Replay `plan` (one burst copy, no warnings) for the increasing lane GM addresses `addrs` and
    tile images `images[i]`: one strided assignment per arithmetic run of addresses.  False, with
    nothing copied, when it is not that simple (the caller replays lane by lane) - for a store,
    also when a byte could be written twice (lane order decides then). `before(n)` is called with
    the number of assignments once every view is made, before the first one. `assign` runs each
    assignment (``assign(np.copyto, dst, src)``: a lane attempt's `LaneState.do`, which a replay records)."""
    copies = plan.copies
    if copies is None or len(copies) != 1 or plan.warns or len(addrs) < 2:
        return False
    cp, src_is_gm, so, do = copies[0]
    if cp.ordered or cp.add_dtype is not None or src_is_gm != load:
        return False
    U, nbytes = images.shape
    g_strides, t_strides = (cp.s_strides, cp.d_strides) if load else (cp.d_strides, cp.s_strides)
    g_off, t_off = (so, do) if load else (do, so)
    t_lo, t_hi = cp.d_span if load else cp.s_span
    if t_hi <= t_lo or t_off + t_lo < 0 or t_off + t_hi > nbytes:
        return False  # empty, or outside the tile: the lane-by-lane replay raises as the model does
    views = run_views(gm, addrs + g_off, cp.shape, g_strides, disjoint=not load)
    if views is None:
        return False
    if before is not None:
        before(len(views))
    for u0, u1, g in views:
        t = np.ndarray((u1 - u0, *cp.shape), np.uint8, images, t_off + u0 * nbytes, (nbytes, *t_strides))
        dst, src = (t, g) if load else (g, t)
        if assign is not None:
            assign(np.copyto, dst, src)
        else:
            dst[...] = src
    return True


def lane_acc_store(
    plan: Any, gm: Any, addrs: np.ndarray, acc: np.ndarray, before: Callable[[int], None] | None = None
) -> bool:
    """Replay an Acc -> ND store `plan` (``runtime.store.AccNdTransfer``, warning nothing) for every
    lane at once: lane i writes its logical accumulator ``acc[i]`` at GM address ``addrs[i]``.
    One strided assignment per arithmetic run of the (increasing) addresses; False, with nothing
    written, when a byte could be written twice (the in-order replay decides then), a view is
    refused, or the fixpipe does not read the logical matrix. `before` as for `lane_copy`."""
    op = plan.single
    spec = getattr(op, "acc_nd", None)
    if spec is None or not spec.logical or len(addrs) < 2:
        return False
    E = spec.out.itemsize
    views = run_views(gm, addrs, (spec.m, spec.n * E), (spec.row_pitch, 1), disjoint=True)
    if views is None:
        return False
    vals = fixpipe_convert(acc[:, : spec.m, : spec.n], spec.out, spec.relu)
    if before is not None:
        before(len(views))
    for u0, u1, v in views:
        v = v.view(spec.out)
        if spec.atomic_add:
            v[...] = v + vals[u0:u1]
        else:
            v[...] = vals[u0:u1]
    return True


def run_views(
    gm: Any, addrs: np.ndarray, shape: tuple[int, ...], strides: tuple[int, ...], disjoint: bool
) -> list[tuple[int, int, np.ndarray]] | None:
    """Writable GM views ``(u0, u1, (u1 - u0, *shape))`` of a byte view of `shape` / `strides` at
    each of the `addrs`, one per arithmetic run; None when the addresses do not increase, a view is
    refused or, with `disjoint`, unless no byte belongs to two lanes (within a run: the strides say
    so; across runs: their byte ranges are apart) nor twice to one lane. The runs and those tests
    depend on the addresses, shape and strides only: remembered for the last few (a kernel's
    steps replay the same lanes' addresses on every call); the views are made, and GM checks
    them, on every call."""
    key = (addrs.dtype.char, addrs.tobytes(), shape, strides, disjoint)
    runs = _RUNS.get(key, _MISSING)
    if runs is _MISSING:
        runs = _runs_of(addrs, shape, strides, disjoint)
        if len(_RUNS) > 256:
            _RUNS.clear()
        _RUNS[key] = runs
    if runs is None:
        return None
    try:
        return [(u0, u1, gm.view_span(start, rs, rst, lo, span)) for u0, u1, start, rs, rst, lo, span in runs]
    except DeviceError:
        return None


_MISSING = object()
#: `_runs_of` per (addresses, shape, strides, disjoint), bounded
_RUNS: dict[tuple[Any, ...], Any] = {}


def _runs_of(
    addrs: np.ndarray, shape: tuple[int, ...], strides: tuple[int, ...], disjoint: bool
) -> list[tuple[int, int, int, tuple[int, ...], tuple[int, ...], int, int]] | None:
    """The runs of `run_views` as ``(u0, u1, address, shape, strides, lo, span)`` (view_span's
    arguments), or None (`run_views`'s refusals but GM's own)."""
    lo, hi = byte_span(0, shape, strides)
    if hi <= lo or not (addrs[1:] > addrs[:-1]).all():
        return None
    runs, end = [], None
    for u0, u1, step in arithmetic_runs(addrs):
        run_shape, run_strides = (u1 - u0, *shape), (step, *strides)
        start = int(addrs[u0])
        if disjoint and (
            overlaps_itself(run_shape, run_strides, 1) or (end is not None and start + lo < end)
        ):
            return None
        end = start + hi + (u1 - u0 - 1) * step
        runs.append((u0, u1, start, run_shape, run_strides, lo, end - start))
    return runs


def arithmetic_runs(addrs: np.ndarray) -> list[tuple[int, int, int]]:
    """Split increasing `addrs` into maximal arithmetic runs ``(start, stop, step)``, greedily
    from the first address (lanes of one expert, say, form one run). A run never joins the
    addresses of two ranks (a launch over several ranks' memory, runtime.cluster_memory): one
    view reaches one rank's GM."""
    U = len(addrs)
    if U == 1:
        return [(0, 1, 0)]
    if (int(addrs[0]) ^ int(addrs[-1])) >> RANK_SHIFT:
        return _runs_per_rank(addrs)
    if U <= 64:  # a few lanes: one comparison per lane on a list beats numpy's calls
        a = addrs.tolist()
        step0 = a[1] - a[0]
        if all(y - x == step0 for x, y in zip(a[1:], a[2:])):
            return [(0, U, step0)]
    elif (addrs[2:] - addrs[1:-1] == addrs[1] - addrs[0]).all():
        return [(0, U, int(addrs[1] - addrs[0]))]
    a = addrs.tolist()  # several runs: one comparison per lane on a list is cheaper than numpy here
    runs, i = [], 0
    while i < U:
        if i == U - 1:
            runs.append((i, U, 0))
            break
        step, j = a[i + 1] - a[i], i + 1
        while j + 1 < U and a[j + 1] - a[j] == step:
            j += 1
        runs.append((i, j + 1, step))
        i = j + 1
    return runs


def _runs_per_rank(addrs: np.ndarray) -> list[tuple[int, int, int]]:
    """`arithmetic_runs` of each rank's addresses (increasing: each rank's form one block)."""
    ranks = addrs >> RANK_SHIFT
    cuts = [0, *(np.flatnonzero(ranks[1:] != ranks[:-1]) + 1).tolist(), len(addrs)]
    return [
        (u0 + a, u0 + b, step)
        for u0, u1 in zip(cuts, cuts[1:])
        for a, b, step in arithmetic_runs(addrs[u0:u1])
    ]


def image_strides(plan: Any, g: Any) -> tuple[Any, tuple[int, ...], tuple[int, ...]] | None:
    """For a load `plan` that is one GM -> tile burst copy writing every byte of a `g` tile (no
    warnings): the copy, the image's bytes as a C-contiguous shape ``(*g.phys[:-1], g.phys[-1] *
    itemsize)`` and their GM byte strides (relative to the lane's address); None when the copy is
    not that simple.  Cached per plan (plans are cached per geometry)."""
    return _per_plan(_IMAGE_STRIDES, plan, g, _image_strides_of)


#: keyed by the plan object itself (identity; the entry holds it, so a key never stands for a
#: dead plan), bounded
_IMAGE_STRIDES: dict[Any, tuple[Any, Any]] = {}


def _per_plan(
    cache: dict[Any, tuple[Any, Any]], plan: Any, arg: Any, compute: Callable[[Any, Any], Any]
) -> Any:
    """``compute(plan, arg)``, remembered per plan for its last `arg` (at most 4096 plans)."""
    hit = cache.get(plan)
    if hit is not None and (hit[0] is arg or hit[0] == arg):
        return hit[1]
    res = compute(plan, arg)
    if len(cache) > 4096:
        cache.clear()
    cache[plan] = (arg, res)
    return res


def _image_strides_of(plan: Any, g: Any) -> tuple[Any, tuple[int, ...], tuple[int, ...]] | None:
    copies = plan.copies
    if copies is None or len(copies) != 1 or plan.warns or not plan.fills(g.nbytes):
        return None
    cp, src_is_gm, _, _ = copies[0]  # fills(): do == 0, the copy is a bijection onto the image
    if not src_is_gm or cp.add_dtype is not None:
        return None
    axes = sorted(
        ((n, ts, gs) for n, ts, gs in zip(cp.shape, cp.d_strides, cp.s_strides) if n > 1), key=lambda a: -a[1]
    )
    inner = 1
    for n, ts, _ in reversed(axes):  # the copy's axes, by tile stride, must tile the image densely
        if ts != inner:
            return None
        inner *= n
    shape = (*g.phys[:-1], g.phys[-1] * g.dtype.itemsize)
    strides: list[int] = []
    f = 1
    for n in reversed(shape):  # each image axis lies inside one copy axis: its GM stride follows
        if n > 1:
            hit = next(((size, ts, gs) for size, ts, gs in axes if ts <= f < ts * size), None)
            if hit is None or f % hit[1] or (f // hit[1]) * n > hit[0]:
                return None
            strides.append((f // hit[1]) * hit[2])
        else:
            strides.append(0)
        f *= n
    if shape[-1] > 1 and strides[0] != 1:
        return None  # the innermost bytes must be contiguous in GM to be read as elements
    return copies[0], shape, tuple(reversed(strides))


def unwritten(plan: Any, nbytes: int) -> tuple[tuple[int, tuple[int, ...], tuple[int, ...]], ...] | None:
    """For a load `plan` that is one GM -> tile burst copy (no warnings) into an `nbytes` image: the
    image bytes it does not write, as byte views ``(offset, shape, strides)`` of the image - what
    a fresh tile's zeros must cover when the copy itself writes the rest (a partial valid region:
    each row's tail). None when the copy is not that simple or the gaps are not a few regular
    runs (the caller zeroes the whole image). Cached per plan."""
    return _per_plan(_GAPS, plan, nbytes, _gaps_of)


_GAPS: dict[Any, tuple[int, Any]] = {}  # keyed by the plan itself, as _IMAGE_STRIDES
#: At most this many separate gap views (else the whole image is zeroed).
MAX_GAP_VIEWS = 4


def _gaps_of(plan: Any, nbytes: int) -> tuple[tuple[int, tuple[int, ...], tuple[int, ...]], ...] | None:
    copies = plan.copies
    if copies is None or len(copies) != 1 or plan.warns:
        return None
    cp, src_is_gm, _, do = copies[0]
    lo, hi = cp.d_span
    if not src_is_gm or cp.add_dtype is not None or hi <= lo or do + lo < 0 or do + hi > nbytes:
        return None
    written = np.zeros(nbytes, bool)
    np.ndarray(cp.shape, bool, written, do, cp.d_strides)[...] = True
    edges = np.flatnonzero(np.diff(np.concatenate(([True], written, [True])).astype(np.int8)))
    starts, stops = edges[0::2], edges[1::2]  # the runs of unwritten bytes
    if len(starts) == 0:
        return ()
    lengths = stops - starts
    out: list[tuple[int, tuple[int, ...], tuple[int, ...]]] = []
    if (
        len(starts) > 1
        and (lengths[:-1] == lengths[0]).all()
        and len(set(np.diff(starts[:-1]).tolist())) <= 1
    ):
        # equal runs at a constant pitch (each row's tail), perhaps then a different last one
        n = len(starts) - 1 if lengths[-1] != lengths[0] else len(starts)
        pitch = int(starts[1] - starts[0])
        out.append((int(starts[0]), (n, int(lengths[0])), (pitch, 1)))
        starts, lengths = starts[n:], lengths[n:]
    out += [(int(a), (int(m),), (1,)) for a, m in zip(starts, lengths)]
    return tuple(out) if len(out) <= MAX_GAP_VIEWS else None


def zero_gaps(images: np.ndarray, gaps: tuple[tuple[int, tuple[int, ...], tuple[int, ...]], ...]) -> None:
    """Zero the `gaps` (from `unwritten`) of every image of the (U, nbytes) uint8 `images`."""
    U, nbytes = images.shape
    for off, shape, strides in gaps:
        np.ndarray((U, *shape), np.uint8, images, off, (nbytes, *strides))[...] = 0


def gm_images(plan: Any, gm: Any, addrs: np.ndarray, g: Any) -> list[tuple[int, np.ndarray]] | None:
    """The images that `plan` would load for the increasing lane GM addresses `addrs`, as
    read-only element views of GM, ``(u0, (n, *g.phys))`` per arithmetic run of addresses; None
    when the load is not one burst copy filling the tile (see `image_strides`)."""
    found = image_strides(plan, g)
    if found is None:
        return None
    (cp, _, so, _), shape, strides = found
    lo, hi = cp.s_span  # the bytes one lane's copy reads (the same as its image's view)
    chunks = []
    for u0, u1, step in arithmetic_runs(addrs):
        n = u1 - u0
        v = gm.view_span(int(addrs[u0]) + so, (n, *shape), (step, *strides), lo, hi + (n - 1) * step)
        v.flags.writeable = False  # GM's bytes, read in place: nothing may write through them
        chunks.append((u0, v.view(g.dtype)))
    return chunks


def overlap(a: list[tuple[np.ndarray, int, int]], b: list[tuple[np.ndarray, int, int]]) -> bool:
    """Does any byte range of `a` meet one of `b`? Each entry is (lane addresses, lo, hi): the
    ranges [address + lo, address + hi) of every lane. Vectorised: sort `b`, search `a` in it."""
    if not a or not b:
        return False
    # most accesses are of distinct tensors: when no entry's hull meets one of the other side's,
    # nothing does (a few entries of a few lanes: Python on lists beats the vectorised test)
    if len(a) * len(b) <= 64:
        hulls_b = [_hull(x, lo, hi) for x, lo, hi in b]
        if not any(
            h_lo < b_hi and b_lo < h_hi
            for h_lo, h_hi in (_hull(x, lo, hi) for x, lo, hi in a)
            for b_lo, b_hi in hulls_b
        ):
            return False
    lo1 = np.concatenate([x + lo for x, lo, _ in a])
    hi1 = np.concatenate([x + hi for x, _, hi in a])
    lo2 = np.concatenate([x + lo for x, lo, _ in b])
    hi2 = np.concatenate([x + hi for x, _, hi in b])
    order = np.argsort(lo2)
    lo2, hi2 = lo2[order], hi2[order]
    # for each range of a, the b ranges starting before its end: does any of them end after its start?
    idx = np.searchsorted(lo2, hi1, side="left")
    run_max = np.maximum.accumulate(hi2)
    has = idx > 0
    return bool((run_max[np.maximum(idx - 1, 0)][has] > lo1[has]).any())


def _hull(addrs: np.ndarray, lo: int, hi: int) -> tuple[int, int]:
    """The byte range ``[min address + lo, max address + hi)`` every lane's range lies in."""
    a = addrs.tolist() if len(addrs) <= 64 else (int(addrs.min()), int(addrs.max()))
    return min(a) + lo, max(a) + hi
