"""Property: a lane-batched load that reads its tile images in place from GM
(`lane_gm.gm_images`) sees exactly the bytes the load instruction copies, lane by lane, for
random ND -> Vec, ND -> NZ Mat and NZ -> NZ Mat windows and random lane address patterns (runs
of equal steps, shared windows, jumps). A geometry it cannot view in place gives None (the
batched run then copies as the instruction does); it never gives other bytes."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import runtime
from nzjit.backend import lane_gm
from runtime import GmView, TileBuf

DTYPES = [np.int8, np.float16, np.float32]


@st.composite
def loads(draw):
    """(worker, plan, tile geometry, valid rows / cols, sorted distinct lane addresses)."""
    dtype = np.dtype(draw(st.sampled_from(DTYPES)))
    E = dtype.itemsize
    c0 = 32 // E
    kind = draw(st.sampled_from(["nd_vec", "nd2nz", "nz"]))
    R = 16 * draw(st.integers(2, 6))
    C = c0 * draw(st.integers(2, 6))
    w = runtime.Worker()
    data = np.random.default_rng(draw(st.integers(0, 2**16))).integers(-100, 100, (R, C)).astype(dtype)
    if kind == "nz":
        t = w.alloc_tensor((R, C), dtype, init=runtime.pack_nz(data))
        parent = GmView.dense(t.address, (R, C), dtype, "NZ")
        kb = draw(st.integers(1, C // c0))  # column blocks of the window
        rb = draw(st.integers(1, R // 16))  # row fractals of the window
        sizes = (1, kb, rb, 16, c0)
        tile = TileBuf("Mat", dtype, 16 * rb, kb * c0)

        def offsets(r, c):
            return (0, c, r, 0, 0)

        max_r, max_c, unit_r, unit_c = R // 16 - rb, C // c0 - kb, 1, 1
    else:
        t = w.alloc_tensor((R, C), dtype, init=data)
        parent = GmView.dense(t.address, (R, C), dtype)
        rows = draw(st.integers(1, R // 2))
        cols = c0 * draw(st.integers(1, C // c0))
        sizes = (rows, cols)
        if kind == "nd_vec":
            tile = TileBuf("Vec", dtype, rows, cols)
        else:
            tile = TileBuf("Mat", dtype, -(-rows // 16) * 16, cols)

        def offsets(r, c):
            return (r, c)

        max_r, max_c, unit_r, unit_c = R - rows, C - cols, 1, c0
    # lane windows: a few runs of equal steps along rows / columns (as lanes index experts / blocks)
    n_lanes = draw(st.integers(1, 10))
    r = draw(st.integers(0, max_r))
    c = draw(st.integers(0, max_c // unit_c)) * unit_c
    views = []
    for _ in range(n_lanes):
        views.append(parent.partition(offsets(r, c), sizes))
        dr = draw(st.sampled_from([0, 1, 2, 5]))
        r = min(max_r, r + dr * unit_r)
        c = min(max_c, c + draw(st.sampled_from([0, 0, 1])) * unit_c)
    addrs = np.unique(np.array([v.addr for v in views], np.int64))
    plan = runtime.load.load_plan(w.gm, views[0], tile)
    return w, plan, tile, addrs


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(loads())
def test_in_place_images_are_the_loaded_bytes(case):
    w, plan, tile, addrs = case
    g = tile._g
    chunks = lane_gm.gm_images(plan, w.gm, addrs, g)
    if chunks is None:
        assert (
            plan.copies is None
            or not plan.fills(g.nbytes)
            or plan.warns
            or len(plan.copies) != 1
            or lane_gm.image_strides(plan, g) is None
        )
        return
    assert [u0 for u0, _ in chunks] == list(np.cumsum([0] + [len(v) for _, v in chunks])[:-1])
    lazy = np.concatenate([v for _, v in chunks])
    assert len(lazy) == len(addrs)
    assert not any(v.flags.writeable for _, v in chunks)  # GM's own bytes: read only
    for u, a in enumerate(addrs.tolist()):
        img = np.full(g.nbytes, 0xA5, np.uint8)
        plan.run(w.gm, a, TileBuf._from_geometry(g, tile.valid_row, tile.valid_col, img))
        assert lazy[u].tobytes() == img.view(g.dtype).reshape(g.phys).tobytes()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 6), min_size=0, max_size=20), st.booleans())
def test_distinct_lane_addresses_match_np_unique(addrs, in_order):
    # A batched load shares one image among lanes with the same address; the shortcut for lanes
    # already in address order must give np.unique's images and lane -> image map exactly.
    from nzjit.backend.lane_state import distinct as _distinct

    addr = np.array(sorted(addrs) if in_order else addrs, dtype=np.int64) * 512
    uniq, row = _distinct(addr)
    want_uniq, want_row = np.unique(addr, return_inverse=True)
    np.testing.assert_array_equal(uniq, want_uniq)
    np.testing.assert_array_equal(row.reshape(-1), want_row.reshape(-1))
    np.testing.assert_array_equal(uniq[row.reshape(-1)], addr)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rows=st.integers(1, 4),
    width=st.integers(1, 48),
    pitch=st.integers(1, 96),
    gaps=st.lists(st.integers(1, 160), min_size=1, max_size=7),
)
def test_disjoint_run_views_cover_each_lane_once(rows, width, pitch, gaps):
    # Lanes at increasing addresses store a rows x width byte window with a row pitch: the views
    # of `run_views(disjoint=True)` either cover exactly each lane's bytes (then no byte belongs to two
    # lanes) or are None; they are never None when the lanes' byte ranges are apart and no window
    # writes a byte twice itself.
    w = runtime.Worker()
    t = w.alloc_tensor((4096,), np.uint8, init=np.zeros(4096, np.uint8))
    offs = np.cumsum([0, *gaps])
    addrs = (t.address + offs).astype(np.int64)
    lane_bytes = [{int(o) + r * pitch + c for r in range(rows) for c in range(width)} for o in offs]
    views = lane_gm.run_views(w.gm, addrs, (rows, width), (pitch, 1), disjoint=True)
    ranges_apart = all(min(b) >= max(a) + 1 for a, b in zip(lane_bytes, lane_bytes[1:]))
    ranges_apart = ranges_apart and (rows == 1 or pitch >= width)
    if views is None:
        assert not ranges_apart
        return
    assert all(not (a & b) for i, a in enumerate(lane_bytes) for b in lane_bytes[i + 1 :])
    for u0, u1, v in views:
        assert v.shape == (u1 - u0, rows, width)
        for i in range(u1 - u0):
            v[i] = u0 + i + 1
    want = np.zeros(4096, np.uint8)
    for lane, bytes_ in enumerate(lane_bytes):
        want[sorted(bytes_)] = lane + 1
    np.testing.assert_array_equal(w.copy_from(t), want)


@st.composite
def span_lists(draw):
    """Entries (lane addresses, lo, hi) of a few accesses: near each other, so that some meet."""
    n = draw(st.integers(1, 5))
    out = []
    for _ in range(n):
        lanes = draw(st.integers(1, 6))
        base, step = draw(st.integers(0, 4096)), draw(st.integers(0, 512))
        addrs = np.sort(
            base
            + step * np.arange(lanes)
            + np.asarray(draw(st.lists(st.integers(0, 64), min_size=lanes, max_size=lanes)))
        )
        lo = draw(st.integers(0, 64))
        out.append((addrs.astype(np.int64), lo, lo + draw(st.integers(1, 256))))
    return out


@settings(max_examples=400, deadline=None)
@given(a=span_lists(), b=span_lists())
def test_overlap_is_exactly_whether_any_two_ranges_meet(a, b):
    # the hull prefilter (distinct tensors) must never hide a meeting pair
    want = any(
        x + lo1 < y + hi2 and y + lo2 < x + hi1
        for xs, lo1, hi1 in a
        for ys, lo2, hi2 in b
        for x in xs.tolist()
        for y in ys.tolist()
    )
    assert lane_gm.overlap(a, b) == want
