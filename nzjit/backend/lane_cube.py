"""The lane-batched mad (rules/cube.py): one stacked np.matmul over the lanes, `MAD_CHUNK` lanes at
a time, operands converted once per distinct image (on a helper thread for the next chunk)."""

from __future__ import annotations

import functools

import numpy as np

from runtime import threads
from runtime.cube import F32_EXACT_K
from runtime.dma import ceil16
from runtime.threads import Ahead

from .lane_state import LaneState
from .lane_values import LaneWindow


def mad_lanes(
    s: LaneState,
    left: LaneWindow,
    right: LaneWindow,
    m: int,
    k: int,
    n: int,
    data: np.ndarray,
    accumulate: bool,
    is_int: bool,
) -> None:
    """Every lane's ``data[lane] (+)= A @ B``: `runtime.cube.tmatmul` of each lane, `MAD_CHUNK`
    lanes at a time. Each lane's product is its own BLAS call on the same operand layouts as the
    per-lane path (the same bits; pinned by the per-lane comparison tests); a stacked np.matmul
    makes those calls. Operands are converted once per distinct image: a side with at most
    `MAD_CHUNK` images all at once (on one thread), a side with more (a large lane group, a lane
    per image) chunk by chunk, so its converted operands are still in cache when BLAS reads them
    and the scratch stays bounded however large the group. int8 products are exact integers in
    float32 (float64 when deeper than float32 holds them exactly), then added mod 2**32.

    With a helper thread (`runtime.threads.Ahead`), the next chunk's operands (both sides, chunk
    by chunk) are converted, and the last chunk's products added into the accumulator, while
    BLAS multiplies this chunk - as the device's MTE moves the next tiles while its Cube
    computes - and the helper then multiplies part of this chunk's lanes (`_multiply_shared`):
    the per-lane BLAS calls alone take 1.1x numpy's one large matmul per expert, so converting
    on the side cannot bring the call below it. The two chunks in flight use two sets of
    buffers; every byte is the same as on one thread."""
    ft = np.float64 if is_int and k > F32_EXACT_K else np.float32
    L = s.L
    threaded = (
        L > FIRST_CHUNK
        and ceil16(m) * k * n * MAD_CHUNK >= OVERLAP_MACS
        and threads.helper_available()
        and s.ctx.options.threads != 1
    )
    chunks = _chunks(L, threaded)
    # a decode batch's m < 16 valid rows are the first rows of whole Left fractals
    sides = (_Side(s, left, ceil16(m), k, ft, "left", threaded), _Side(s, right, k, n, ft, "right", threaded))
    sets = 2 if threaded else 1  # buffers in flight at once

    def operands(i: int) -> tuple[np.ndarray, np.ndarray]:
        l0, l1 = chunks[i]
        a, b = (side.chunk(l0, l1, i % sets) for side in sides)
        return a, b

    direct = not accumulate and not is_int  # a float mad that starts the accumulator: in place
    with Ahead(operands, len(chunks), threaded) as items:
        for i, (a, b) in enumerate(items):
            l0, l1 = chunks[i]
            if m % 16:
                a = a[..., :m, :]
            out = data[l0:l1] if direct else s.scratch((l1 - l0, m, n), ft, _in_set("products", i % sets))
            if a.ndim == b.ndim == 2:  # every lane of the chunk multiplies the same pair of images
                np.matmul(a, b.T, out=out[0])
                out[1:] = out[0]
            elif threaded:
                _multiply_shared(a, b, out)
            else:
                np.matmul(a, b.swapaxes(-1, -2), out=out)
            if not direct:
                items.defer(functools.partial(_add_products, s, data[l0:l1], out, accumulate))


def _multiply_shared(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """``out = a @ b^T`` of a chunk's lanes, the first half of them on this thread and the rest on
    the helper, at the same time (`runtime.threads.run`; after the conversion already handed to
    it) - as the device's cube cores run lanes side by side. Each lane's product is the same BLAS
    call as in one stacked np.matmul (a slice of the stack keeps its strides), into its own rows
    of `out`: the same bytes on any number of threads."""
    L = len(out)
    if L < 2:
        np.matmul(a, b.swapaxes(-1, -2), out=out)
        return

    def part(lo: int, hi: int) -> None:
        np.matmul(
            a if a.ndim == 2 else a[lo:hi], (b if b.ndim == 2 else b[lo:hi]).swapaxes(-1, -2), out=out[lo:hi]
        )

    # the caller's share, 9 of 16 lanes: the helper also converts the next chunk and accumulates
    # the last (the bf16 prefill measured 60 ms of caller CPU against 71 ms on the helper at 8 / 8)
    mid = max(1, min(L - 1, (9 * L + 15) // 16))
    threads.run([functools.partial(part, 0, mid), functools.partial(part, mid, L)])


def _add_products(s: LaneState, acc: np.ndarray, products: np.ndarray, accumulate: bool) -> None:
    """``acc (+)= products`` of one chunk. Integer products (exact integers in a float type) are
    converted exactly, then added mod 2**32 like the accumulator. Deferred work runs one item at
    a time (`Ahead`), so one conversion buffer serves every chunk."""
    if acc.dtype == np.int32:
        if not accumulate:  # the cast straight into the accumulator: the same values, one pass
            np.copyto(acc, products, casting="unsafe")
            return
        ints = s.scratch(products.shape, np.int32, "int products")
        np.copyto(ints, products, casting="unsafe")
        products = ints
    if accumulate:
        np.add(acc, products, out=acc)
    else:
        np.copyto(acc, products)


def _in_set(tag: str, buffers: int) -> str:
    """The scratch tag of buffer `tag` in buffer set `buffers` (0 or 1: two chunks in flight)."""
    return tag + "'" * buffers


def _chunks(L: int, threaded: bool) -> list[tuple[int, int]]:
    """The lane ranges a mad runs at once: `MAD_CHUNK` lanes. When a helper thread converts the
    next chunk, the first is cut at `FIRST_CHUNK`: the caller converts that part alone, before
    anything overlaps. The later chunks keep their bounds, so lanes that share an image (one
    expert's lanes, say) still fall in one chunk."""
    chunks = [(l0, min(L, l0 + MAD_CHUNK)) for l0 in range(0, L, MAD_CHUNK)]
    if threaded and chunks[0][1] > FIRST_CHUNK:
        chunks[0:1] = [(0, FIRST_CHUNK), (FIRST_CHUNK, chunks[0][1])]
    return chunks


class _Side:
    """One operand side of a batched mad: the converted operand of each lane, chunk by chunk."""

    def __init__(
        self, s: LaneState, win: LaneWindow, r: int, c: int, ft: type, tag: str, threaded: bool
    ) -> None:
        self.win, self.r, self.c, self.ft = win, r, c, ft
        self.alloc = lambda sh, dt: s.scratch(sh, dt, tag)
        self.allocs = (self.alloc, lambda sh, dt: s.scratch(sh, dt, _in_set(tag, 1)))  # two buffer sets
        self.rows = win.src.row.tolist()
        n = win.src.n_images
        # Few images: all converted at once on this thread (None when not aligned). With a helper
        # thread, chunk by chunk like many: each chunk converts the range of images its lanes
        # read, on the helper while BLAS multiplies (an image is r x c elements, a chunk's BLAS
        # up to MAD_CHUNK x m x k x n multiply-adds).
        once = n <= MAD_CHUNK and not threaded
        self.all = win.operands(r, c, ft, self.alloc) if once else None
        self.aligned = self.all is not None or not once

    def chunk(self, l0: int, l1: int, buffers: int = 0) -> np.ndarray:
        """The operands of lanes l0..l1-1, (lanes, r, c) - Right ones transposed, (lanes, c, r) - or
        one 2-D operand when every lane of the chunk reads the same image; converted into buffer
        set `buffers` (0 or 1: two chunks may be in flight at once)."""
        rows = self.rows[l0:l1]
        lo, hi = min(rows), max(rows) + 1
        images: np.ndarray | None
        if self.all is not None:
            images, base = self.all, 0
        elif self.aligned and hi - lo <= 2 * MAD_CHUNK:
            images, base = self.win.operands(self.r, self.c, self.ft, self.allocs[buffers], (lo, hi)), lo
            if images is None:  # alignment does not depend on the images: the first chunk tells
                self.aligned = False
        else:
            images = None
        if images is None:  # an unaligned window, or scattered images: one image at a time
            ops = {u: self.win.operand(u, self.r, self.c, self.ft) for u in set(rows)}
            return ops[lo] if hi - lo == 1 else np.stack([ops[u] for u in rows])
        if hi - lo == 1:
            return images[lo - base]
        if rows == list(range(lo, hi)):
            return images[lo - base : hi - base]
        return images[np.asarray(rows) - base]


#: Lanes per chunk of a batched mad (`_mad_lanes`).
MAD_CHUNK = 16
#: The first chunk when a helper converts the next ones: short, since nothing overlaps it.
FIRST_CHUNK = 4
#: A batched mad overlaps its chunks' operand conversion with BLAS from this many multiply-adds
#: per chunk (~0.5 ms of BLAS here, several thread hand-offs of ~50-100 us): below, the hand-off
#: costs what the overlap saves.
OVERLAP_MACS = 1 << 24
