"""Views of orchestration arguments (issue 25 item 1; NZ-28, NZ-29, NZ-30, NZ-32): `w[r, e]`,
`w[r][e]`, windows of leading axes and `pl.slice` on ND and NZ arguments, exact against numpy;
the refusals with their messages; host data flow across ranks refused before dispatch (item 2)."""

from __future__ import annotations

import numpy as np
import pytest
from view_kernels import RANKS, E, K, N, T, copy_i32, data, double, mm_nd, mm_pair, mm_plane, ref

import nzjit
import runtime
from nzjit import pl
from runtime import DispatchError

pack = runtime.pack_nz
X = pl.Tensor[[RANKS, E, T, K], pl.INT8]
W = pl.Tensor[[RANKS, E, N, K], pl.INT8, pl.NZ]


def test_int_views_of_a_stacked_nz_weight(line_of):
    # NZ-29/NZ-32: w[r, e] is plane e of rank r's shard: whole NZ planes, so its bytes are
    # pack_nz(w[r, e]) and the kernel's entry blocks it as it blocks any NZ argument
    x, w = data(1)

    @pl.orchestration
    def per_plane(x: X, w: W, out: pl.Out[pl.Tensor[[RANKS, E, T, N], pl.INT32]]):
        for r in range(RANKS):
            for e in range(E):
                mm_plane(x[r, e], w[r, e] if e % 2 else w[r][e], out[r, e], device=r)

    cluster = runtime.Cluster(RANKS)
    wd = cluster.alloc_stacked_tensor(pack(w))
    np.testing.assert_array_equal(per_plane(x, wd), ref(x, w))
    np.testing.assert_array_equal(per_plane(x, pack(w)), ref(x, w))  # host NZ arrays: the same views
    prog = per_plane.record(x, wd, np.zeros((RANKS, E, T, N), np.int32))
    views = [c.args[1] for c in prog.calls]
    assert [v.name for v in views[:3]] == ["w[0][0]", "w[0, 1]", "w[0][2]"]
    plane = N * K  # int8: one [N, K] plane in bytes
    assert [v.tensor.address - wd[0].address for v in views[:3]] == [0, plane, 2 * plane]  # no copy
    assert all(v.tensor.shape == (N, K) for v in views)


def test_windows_of_leading_axes_and_pl_slice_on_nz_and_nd():
    x, w = data(2)

    @pl.orchestration
    def pairs(
        x: X,
        w: W,
        out: pl.Out[pl.Tensor[[RANKS, E, T, N], pl.INT32]],
        out2: pl.Out[pl.Tensor[[RANKS, E, T, N], pl.INT32]],
    ):
        for r in range(RANKS):
            mm_pair(x[r, 0:2], w[r, 0:2], out[r, 0:2], device=r)  # NZ: a window of the leading axis
            mm_pair(
                pl.slice(x[r], [2, T, K], [1, 0, 0]),
                pl.slice(w[r], [2, N, K], [1, 0, 0]),
                pl.slice(out2, [1, 2, T, N], [r, 1, 0, 0])[0],
                device=r,
            )

    cluster = runtime.Cluster(RANKS)
    out, out2 = pairs(x, cluster.alloc_stacked_tensor(pack(w)))
    want = ref(x, w)
    np.testing.assert_array_equal(out[:, 0:2], want[:, 0:2])
    np.testing.assert_array_equal(out[:, 2], 0)
    np.testing.assert_array_equal(out2[:, 1:], want[:, 1:])
    np.testing.assert_array_equal(out2[:, 0], 0)


def test_views_of_resident_nd_tensors_and_of_outputs():
    rng = np.random.default_rng(3)
    x = rng.integers(-3, 4, (RANKS, E, T, K)).astype(np.float32)
    w = rng.integers(-3, 4, (RANKS, E, N, K)).astype(np.float32)

    @pl.orchestration
    def nd(
        x: pl.Tensor[[RANKS, E, T, K], pl.FP32],
        w: pl.Tensor[[RANKS, E, N, K], pl.FP32],
        out: pl.InOut[pl.Tensor[[RANKS, E, T, N], pl.FP32]],
    ):
        for r in range(RANKS):
            mm_nd(x[r][1], pl.slice(w, [1, 1, N, K], [r, 1, 0, 0])[0][0], out[r, 1], device=r)
            double(out[r, 1], out[r][2], device=r)  # reads what the call before wrote, on its rank

    cluster = runtime.Cluster(RANKS)
    xd, wd = cluster.alloc_stacked_tensor(x), cluster.alloc_stacked_tensor(w)
    od = cluster.alloc_stacked_tensor(np.full((RANKS, E, T, N), 9, np.float32))
    nd(xd, wd, od)
    got = cluster.copy_stacked_from(od)
    one = np.einsum("rtk,rnk->rtn", x[:, 1], w[:, 1])
    np.testing.assert_array_equal(got[:, 0], 9)  # untouched plane
    np.testing.assert_array_equal(got[:, 1], one)
    np.testing.assert_array_equal(got[:, 2], 2 * one)


def _orch(body):
    @pl.orchestration
    def o(x: X, w: W, out: pl.Out[pl.Tensor[[RANKS, E, T, N], pl.INT32]]):
        body(x, w, out)

    return o


@pytest.mark.parametrize(
    "body, rule, match",
    [
        # NZ-30: the [R, C] plane of an NZ argument stays whole
        (
            lambda x, w, out: w[0, 1, 0:32],
            "NZ-30",
            r"w\[0, 1, 0:32\]: a window on the \[R, C\] plane of the NZ "
            r"argument w \[2, 3, 64, 64\] is not contiguous in NZ order; NZ supports slicing the leading axes only",
        ),
        (lambda x, w, out: pl.slice(w[0], [1, N, 32], [0, 0, 32]), "NZ-30", r"slicing the leading axes only"),
        (
            lambda x, w, out: w[1][2][:, 0:16],
            "NZ-30",
            r"w\[1\]\[2\]\[:, 0:16\]: a window on the \[R, C\] plane",
        ),
        # NZ-28: a leading window that is not contiguous once folded
        (lambda x, w, out: w[0:1, 0:2], "NZ-28", None),
    ],
    ids=["index", "pl.slice", "chained", "folded"],
)
def test_nz_plane_windows_refused(body, rule, match):
    x, w = data()
    if match is None:

        @pl.orchestration
        def o(x: X, w: pl.Tensor[[3, 2, N, K], pl.INT8, pl.NZ]):
            w[0:2, 1]

        with pytest.raises(
            nzjit.CompileError,
            match=r"w\[0:2, 1\]: a window of the leading axes of the NZ "
            r"argument w .*take a window on one leading axis only",
        ) as e:
            o(x, pack(np.zeros((3, 2, N, K), np.int8)))
    else:
        with pytest.raises(nzjit.CompileError, match=match) as e:
            _orch(body)(x, pack(w))
    assert e.value.rule == rule and "test_orchestration_views.py:" in str(e.value)


@pytest.mark.parametrize(
    "body, match",
    [
        (lambda x, w, out: x[0][:, 0:8], r"x\[0\]\[:, 0:8\]: a window that is not one dense block of x\[0\]"),
        (lambda x, w, out: x[0, 0, 0:2, 0:8], r"x\[0, 0, 0:2, 0:8\]: a window that is not one dense block"),
        (
            lambda x, w, out: pl.slice(x, [1, 1, T, K], [0, 0, 0, 0], valid_shape=[1, 1, 8, K]),
            r"valid_shape narrows what a kernel reads",
        ),
        (
            lambda x, w, out: pl.slice(x[0], [2, T, K], [2, 0, 0]),
            r"the window \[2, 4\) on axis 0 is out of bounds for 3",
        ),
        (lambda x, w, out: pl.slice(x[0], [2, T], [0, 0]), r"shape and offsets need one entry per axis"),
        (lambda x, w, out: x[0, 0, 0, 0, 0], r"5 indices for the 4 axes of x"),
        (lambda x, w, out: x[0, -4], r"x\[0, -4\] is out of range for axis 1 3 of x"),
    ],
    ids=["nd-inner", "nd-two-windows", "valid", "bounds", "rank", "too-many", "negative"],
)
def test_other_views_refused(body, match):
    x, w = data()
    with pytest.raises(nzjit.CompileError, match=match):
        _orch(body)(x, pack(w))


def test_stacked_rank_axis_and_intermediates_refused():
    x, w = data()
    cluster = runtime.Cluster(RANKS)
    wd = cluster.alloc_stacked_tensor(pack(w))
    with pytest.raises(
        nzjit.CompileError,
        match=r"w\[:\]: a window of 2 ranks of the StackedDeviceTensor w; "
        r"a kernel receives one rank's shard",
    ):
        _orch(lambda x, w, out: w[0:2])(x, wd)
    one = _orch(lambda x, w, out: mm_pair(x[0, 0:2], w[0:1, 0:2][0], out[0, 0:2], device=0))(x, wd)
    np.testing.assert_array_equal(one[0, 0:2], ref(x, w)[0, 0:2])  # a window of one rank is that rank's shard

    def view_of_intermediate(x, w, out):
        g = mm_plane(x[0, 0], w[0, 0], device=0)
        g[0:8]

    with pytest.raises(
        nzjit.CompileError,
        match=r"g\[0:8\]: mm_plane.out@rank0 is an intermediate|"
        r"is an intermediate, whose bytes exist only on its rank",
    ):
        _orch(view_of_intermediate)(x, wd)


# ----------------------------------------------------------------- data flow across ranks (item 2)
OUT = pl.InOut[pl.Tensor[[RANKS, E, T, N], pl.INT32]]
Y = pl.Out[pl.Tensor[[RANKS, T, N], pl.INT32]]


def test_host_data_written_by_one_rank_and_read_by_another_refused():
    x, w = data(4)
    wd = runtime.Cluster(RANKS).alloc_stacked_tensor(pack(w))

    @pl.orchestration
    def relay(x: X, w: W, out: OUT, y: Y):
        mm_plane(x[0, 0], w[0, 0], out[0, 0], device=0)
        copy_i32(out[0, 0], y[1], device=1)  # rank 1 would read the bytes of before the program

    out = np.full((RANKS, E, T, N), 5, np.int32)
    y = np.full((RANKS, T, N), 5, np.int32)
    with pytest.raises(
        DispatchError,
        match=r"^rank 1: copy_i32 .*: parameter 'x': rank 1 reads out\[0, 0\], "
        r"which rank 0 writes \(out\[0, 0\]\) earlier in this orchestration; "
        r"ranks run in parallel",
    ):
        relay(x, wd, out, y)
    assert (out == 5).all() and (y == 5).all()  # refused before dispatch

    @pl.orchestration
    def read_first(x: X, w: W, out: OUT, y: Y):
        copy_i32(out[0, 0], y[1], device=1)  # program order: rank 1 reads the bytes as they were
        mm_plane(x[0, 0], w[0, 0], out[0, 0], device=0)

    read_first(x, wd, out, y)
    np.testing.assert_array_equal(y[1], 5)
    np.testing.assert_array_equal(out[0, 0], ref(x, w)[0, 0])


def test_overlapping_views_on_one_rank_refused_the_same_view_chains():
    x, w = data(5)
    wd = runtime.Cluster(RANKS).alloc_stacked_tensor(pack(w))

    @pl.orchestration
    def overlap(x: X, w: W, out: OUT, y: Y):
        mm_pair(x[0, 0:2], w[0, 0:2], out[0, 0:2], device=0)
        copy_i32(out[0, 1], y[0], device=0)  # another view of bytes the call before wrote

    out = np.full((RANKS, E, T, N), 5, np.int32)
    y = np.full((RANKS, T, N), 5, np.int32)
    with pytest.raises(
        DispatchError,
        match=r"parameter 'x': out\[0, 1\] and out\[0, 0:2\] overlap in one host "
        r"array and one of them is written on rank 0",
    ):
        overlap(x, wd, out, y)
    assert (out == 5).all() and (y == 5).all()

    @pl.orchestration
    def same_view(x: X, w: W, out: OUT, y: Y):
        mm_plane(x[0, 1], w[0, 1], out[0, 1], device=0)
        copy_i32(out[0][1], y[0], device=0)  # the same view, however spelled: one upload, chained

    same_view(x, wd, out, y)
    np.testing.assert_array_equal(y[0], ref(x, w)[0, 1])


def test_intermediate_of_another_rank_refused():
    x, w = data(6)
    wd = runtime.Cluster(RANKS).alloc_stacked_tensor(pack(w))

    @pl.orchestration
    def hop(x: X, w: W, y: Y):
        g = mm_plane(x[0, 0], w[0, 0], device=0)
        copy_i32(g, y[1], device=1)

    y = np.full((RANKS, T, N), 5, np.int32)
    with pytest.raises(
        DispatchError,
        match=r"^rank 1: copy_i32 .*: parameter 'x' got mm_plane.out@rank0, an "
        r"intermediate of rank 0; the call runs on rank 1, and ranks do not "
        r"share memory",
    ):
        hop(x, wd, y)
    assert (y == 5).all()


def test_a_failing_rank_leaves_every_view_output_untouched():
    from orch_kernels import window

    offsets = [16, 1000]  # rank 1 reads past the end of its plane: refused on the device

    @pl.orchestration
    def planes(
        x: pl.Tensor[[RANKS, 2, 64, 32], pl.FP32], out: pl.InOut[pl.Tensor[[RANKS, 3, 16, 32], pl.FP32]]
    ):
        for r in range(RANKS):
            window(x[r, 1], offsets[r], out[r, 2], device=r)
            window(pl.slice(x[r], [1, 64, 32], [0, 0, 0])[0], 0, out[r][0], device=r)

    x = np.arange(RANKS * 2 * 64 * 32, dtype=np.float32).reshape(RANKS, 2, 64, 32)
    fill = np.full((RANKS, 3, 16, 32), 5, np.float32)
    cluster = runtime.Cluster(RANKS)
    host, resident = fill.copy(), cluster.alloc_stacked_tensor(fill)
    for out in (host, resident):
        with pytest.raises(DispatchError, match=r"^rank 1: window .*the window \[1000, 1016\) on axis 0"):
            planes(x, out, cluster=cluster)
    np.testing.assert_array_equal(host, fill)
    np.testing.assert_array_equal(cluster.copy_stacked_from(resident), fill)  # rank 0's views restored
    offsets[1] = 48
    planes(x, resident)
    got = cluster.copy_stacked_from(resident)
    for r, o in enumerate(offsets):
        np.testing.assert_array_equal(got[r, 2], x[r, 1, o : o + 16])
        np.testing.assert_array_equal(got[r, 0], x[r, 0, 0:16])
    np.testing.assert_array_equal(got[:, 1], 5)
