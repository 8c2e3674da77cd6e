"""The lane-batched mad (rules/cube.py): one stacked np.matmul over the lanes, `MAD_CHUNK` lanes at
a time, operands converted once per distinct image; with a helper thread, the chunks shared
between the two threads, each converting and multiplying its own."""

from __future__ import annotations

import functools
import threading

import numpy as np

from runtime import threads
from runtime.cube import F32_EXACT_K
from runtime.dma import ceil16

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

    With a helper thread (a mad of at least `OVERLAP_MACS` multiply-adds), the caller
    and the helper take the chunks in turn from one counter, each converting, multiplying and
    accumulating the chunks it took, in its own set of buffers - as the device's cube cores run
    lanes side by side. Each chunk's bytes are the same whichever thread computes it. The
    session-13 pipeline (the helper converting the next chunk for the caller, then multiplying
    part of this one) left the caller waiting for the helper 27 of 154 ms of a grouped bf16
    prefill call; taking whole chunks, each thread works until none is left, the operands it
    multiplies are the ones it just converted (its core's cache), and a helper that gets no
    core on a loaded machine leaves its chunks to the caller instead of stalling it at every
    hand-off. (Side by side, both threads' conversions and BLAS calls take longer than on one
    thread either way - 2x and 1.3x here: the two cores share the memory the weights stream from.)
    """
    ft = np.float64 if is_int and k > F32_EXACT_K else np.float32
    L = len(data)  # the group's lanes (not `s.L`: a replay repeats this call after later groups)
    threaded = (
        L > 1
        and ceil16(m) * k * n * L >= OVERLAP_MACS
        and threads.helper_available()
        and s.ctx.options.threads != 1
    )
    # a decode batch's m < 16 valid rows are the first rows of whole Left fractals
    sides = (_Side(s, left, ceil16(m), k, ft, "left", threaded), _Side(s, right, k, n, ft, "right", threaded))
    direct = not accumulate and not is_int  # a float mad that starts the accumulator: in place

    def chunk(l0: int, l1: int, buffers: int) -> None:
        a, b = (side.chunk(l0, l1, buffers) for side in sides)
        if m % 16:
            a = a[..., :m, :]
        out = data[l0:l1] if direct else s.scratch((l1 - l0, m, n), ft, _in_set("products", buffers))
        if a.ndim == b.ndim == 2:  # every lane of the chunk multiplies the same pair of images
            np.matmul(a, b.T, out=out[0])
            out[1:] = out[0]
        else:
            np.matmul(a, b.swapaxes(-1, -2), out=out)
        if not direct:
            _add_products(s, data[l0:l1], out, accumulate, buffers)

    chunks = _chunks(L, threaded)
    if not threaded:
        for l0, l1 in chunks:
            chunk(l0, l1, 0)
        return
    taken = iter(chunks)
    lock = threading.Lock()

    def take(buffers: int) -> None:  # the chunks this thread takes, until none is left
        while True:
            with lock:
                bounds = next(taken, None)
            if bounds is None:
                return
            chunk(*bounds, buffers)

    threads.run([functools.partial(take, 0), functools.partial(take, 1)])


def _add_products(
    s: LaneState, acc: np.ndarray, products: np.ndarray, accumulate: bool, buffers: int = 0
) -> None:
    """``acc (+)= products`` of one chunk. Integer products (exact integers in a float type) are
    converted exactly, then added mod 2**32 like the accumulator, through the conversion buffer
    of buffer set `buffers` (one per thread)."""
    if acc.dtype == np.int32:
        if not accumulate:  # the cast straight into the accumulator: the same values, one pass
            np.copyto(acc, products, casting="unsafe")
            return
        ints = s.scratch(products.shape, np.int32, _in_set("int products", buffers))
        np.copyto(ints, products, casting="unsafe")
        products = ints
    if accumulate:
        np.add(acc, products, out=acc)
    else:
        np.copyto(acc, products)


def _in_set(tag: str, buffers: int) -> str:
    """The scratch tag of buffer `tag` in buffer set `buffers` (0 or 1: one set per thread)."""
    return tag + "'" * buffers


def _chunks(L: int, threaded: bool) -> list[tuple[int, int]]:
    """The lane ranges a mad runs at once: `MAD_CHUNK` lanes, so lanes that share an image (one
    expert's lanes, say) fall in one chunk. Shared by two threads, `SHARED_CHUNK` lanes, and a
    group of fewer than twice that is cut in two halves, one for each thread."""
    chunk = SHARED_CHUNK if threaded else MAD_CHUNK
    size = chunk if not threaded or L >= 2 * chunk else (L + 1) // 2
    return [(l0, min(L, l0 + size)) for l0 in range(0, L, size)]


class _Side:
    """One operand side of a batched mad: the converted operand of each lane, chunk by chunk."""

    def __init__(
        self, s: LaneState, win: LaneWindow, r: int, c: int, ft: type, tag: str, threaded: bool
    ) -> None:
        self.win, self.r, self.c, self.ft = win, r, c, ft
        self.alloc = lambda sh, dt: s.scratch(sh, dt, tag)
        self.allocs = (self.alloc, lambda sh, dt: s.scratch(sh, dt, _in_set(tag, 1)))  # two buffer sets
        self.rows = win.src.row.tolist()
        # per buffer set: the image range converted last, kept while a thread's next chunk reads
        # the same (the lanes of one image in two chunks: converted once)
        self.last: list[tuple[int, int, np.ndarray] | None] = [None, None]
        n = win.src.n_images
        # Few images: all converted at once on this thread (None when not aligned). With a helper
        # thread, chunk by chunk like many: each thread converts the range of images its chunk's
        # lanes read, into its own buffers (an image is r x c elements, a chunk's BLAS up to
        # MAD_CHUNK x m x k x n multiply-adds).
        once = n <= MAD_CHUNK and not threaded
        self.all = win.operands(r, c, ft, self.alloc) if once else None
        self.aligned = self.all is not None or not once

    def chunk(self, l0: int, l1: int, buffers: int = 0) -> np.ndarray:
        """The operands of lanes l0..l1-1, (lanes, r, c) - Right ones transposed, (lanes, c, r) - or
        one 2-D operand when every lane of the chunk reads the same image; converted into buffer
        set `buffers` (0 or 1: the calling thread's)."""
        rows = self.rows[l0:l1]
        lo, hi = min(rows), max(rows) + 1
        images: np.ndarray | None
        last = self.last[buffers]
        if self.all is not None:
            images, base = self.all, 0
        elif last is not None and last[0] == lo and last[1] == hi:
            images, base = last[2], lo
        elif self.aligned and hi - lo <= 2 * MAD_CHUNK:
            images, base = self.win.operands(self.r, self.c, self.ft, self.allocs[buffers], (lo, hi)), lo
            if images is None:  # alignment does not depend on the images: the first chunk tells
                self.aligned = False
            else:
                self.last[buffers] = (lo, hi, images)
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


#: Lanes per chunk of a batched mad (`mad_lanes`).
MAD_CHUNK = 16
#: Lanes per chunk of a mad shared with the helper thread: the chunk a thread still holds when
#: the other has none left is what the other waits for. The grouped bf16 prefill, interleaved
#: in one process: 8 lanes 0.79x / 0.89x numpy against 16 lanes 0.92x / 0.93x (load < 1), and
#: faster in 4 of 6 rounds at load 1-2 (4 lanes between them). An image the lanes of two chunks
#: read (an expert's Left, 16 lanes) is converted by each thread that takes one (~5 us each).
SHARED_CHUNK = 8
#: A batched mad shares its chunks with a helper thread from this many multiply-adds (~0.5 ms
#: of BLAS here, against a hand-off of ~50-100 us): below, the hand-off costs what the second
#: core saves. A decode batch's mads (16 lanes of 16 x 256 @ 256 x 256) are just at it.
OVERLAP_MACS = 1 << 24
