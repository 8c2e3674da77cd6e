"""BlockNzTensorViews, accepted cases (issue 3): the exact IR facts of nz-layout.md §2-§4, §9.

Each test reads the graph after the pass (or the final graph for strides) and checks parameter
types, the blocked load's offsets (Literal values or the floordiv equation) and its `shape`
param. Run with NZJIT_VERIFY=1 (the IR verifier after every pass). No `from __future__ import
annotations`: kernel annotations use closure values.
"""

import pytest

import nzjit
from nzjit import pl
from nzjit.core import dtypes as D
from nzjit.core.ir import Graph, Literal
from nzjit.core.types import DynDim, Layout, Mem, TensorType, TileType
from nzjit.core.verifier import verify
from nzjit.passes.block_nz import MARK, block_nz_tensor_views
from nzjit.passes.strides import materialize_tensor_strides


def _loads(g, src=None):
    return [
        e for e in g.walk() if e.primitive.name == "tile.load" and (src is None or e.inputs[0].hint == src)
    ]


def _eqns(g, prim):
    return [e for e in g.walk() if e.primitive.name == prim]


def _vals(atoms):
    return [a.value if isinstance(a, Literal) else a for a in atoms]


def _param(g, name):
    return next(v for v in g.params if v.hint == name)


def _mm_kernel(wshape, woffs, wwin, dtype=pl.INT8, M=32):
    """x[M, K] @ load(w, woffs, wwin)^T: one NZ weight load feeding a matmul."""
    N, K = wwin[-2], wwin[-1]
    out_dt = {pl.INT8: pl.INT32}.get(dtype, pl.FP32)

    @pl.kernel
    def k(
        x: pl.Tensor[[M, K], dtype],
        w: pl.Tensor[list(wshape), dtype, pl.NZ],
        out: pl.Out[pl.Tensor[[M, N], out_dt]],
    ):
        wt = pl.load(w, list(woffs), list(wwin), target_memory=pl.Mem.Mat)
        xt = pl.load(x, [0, 0], [M, K], target_memory=pl.Mem.Mat)
        pl.store(pl.matmul(xt, wt, b_trans=True), [0, 0], out)

    return k


# ------------------------------------------------------------------------ NZ-5..7, NZ-11: phase 1
def test_rank2_int8_blocks_to_rank5_with_batch_1():  # NZ-6, NZ-11, NZ-12, NZ-13
    low = _mm_kernel([256, 512], [0, 0], [256, 512]).lower()
    g = low.ir(after="BlockNzTensorViews")
    w = _param(g, "w")
    assert w.type.shape == (1, 16, 16, 16, 32) and w.type.layout is Layout.NZ and w.type.dtype is D.INT8
    (ld,) = _loads(g, "w")
    assert _vals(ld.operands("offsets")) == [0, 0, 0, 0, 0]
    assert ld.params["shape"] == (1, 16, 16, 16, 32)
    # NZ-13: the destination tile keeps its logical 2-D type; only the GM window is rank 5
    assert ld.outputs[0].type == TileType((256, 512), D.INT8, Mem.Mat)


def test_rank2_int8_strides_are_row_major_over_the_blocked_shape():  # NZ-5, NZ-7
    g = _mm_kernel([256, 512], [0, 0], [256, 512]).lower().ir()
    w = _param(g, "w")
    assert w.type.shape == (1, 16, 16, 16, 32)
    assert w.type.strides == (131072, 8192, 512, 32, 1)  # [C*R, R*c0, 16*c0, c0, 1]


def test_rank3_leading_axis_is_the_batch():  # NZ-5, NZ-11 ("logical rank 3" row)
    g = _mm_kernel([4, 256, 512], [2, 0, 0], [1, 256, 512]).lower().ir(after="BlockNzTensorViews")
    assert _param(g, "w").type.shape == (4, 16, 16, 16, 32)
    (ld,) = _loads(g, "w")
    assert _vals(ld.operands("offsets")) == [2, 0, 0, 0, 0]
    assert ld.params["shape"] == (1, 16, 16, 16, 32)
    assert ld.outputs[0].type == TileType((256, 512), D.INT8, Mem.Mat)


def test_rank3_reference_shape_of_the_seed():  # NZ-11: [32, 2048, 4096] -> [32, 128, 128, 16, 32]
    @pl.kernel
    def k(w: pl.Tensor[[32, 2048, 4096], pl.INT8, pl.NZ]):
        pl.load(w, [31, 2048 - 256, 4096 - 512], [1, 256, 512], target_memory=pl.Mem.Mat)

    g = k.lower().ir()
    w = _param(g, "w")
    assert w.type.shape == (32, 128, 128, 16, 32)
    assert w.type.strides == (2048 * 4096, 2048 * 32, 512, 32, 1)
    (ld,) = _loads(g, "w")
    assert _vals(ld.operands("offsets")) == [31, 112, 112, 0, 0]


def test_rank4_folds_leading_axes_into_the_batch():  # NZ-28
    g = _mm_kernel([2, 4, 256, 512], [1, 3, 0, 0], [1, 1, 256, 512]).lower().ir(after="BlockNzTensorViews")
    assert _param(g, "w").type.shape == (8, 16, 16, 16, 32)
    (ld,) = _loads(g, "w")
    assert _vals(ld.operands("offsets")) == [7, 0, 0, 0, 0]  # batch g*E + e = 1*4 + 3
    assert ld.params["shape"] == (1, 16, 16, 16, 32)


def test_rank4_fold_of_a_symbolic_leading_offset_is_exact_arithmetic():  # NZ-28: no division
    @pl.kernel
    def k(w: pl.Tensor[[2, 4, 64, 64], pl.INT8, pl.NZ]):
        for gi in pl.range(2):
            for e in pl.range(4):
                pl.load(w, [gi, e, 0, 0], [1, 1, 64, 64], target_memory=pl.Mem.Mat)

    g = k.lower().ir(after="BlockNzTensorViews")
    (ld,) = _loads(g)
    batch = ld.operands("offsets")[0]
    add = next(e for e in _eqns(g, "add") if e.outputs[0] is batch)
    mul = next(e for e in _eqns(g, "mul") if e.outputs[0] in add.inputs)
    assert [a.value for a in mul.inputs if isinstance(a, Literal)] == [4]  # g * E, then + e
    assert not _eqns(g, "floordiv")


@pytest.mark.parametrize(
    "dtype,c0",
    [
        (pl.INT8, 32),
        (pl.UINT8, 32),
        (pl.FP8E4M3, 32),
        (pl.FP8E5M2, 32),
        (pl.FP16, 16),
        (pl.BF16, 16),
        (pl.INT16, 16),
        (pl.UINT16, 16),
        (pl.FP32, 8),
        (pl.INT32, 8),
        (pl.UINT32, 8),
    ],
)
def test_c0_per_dtype(dtype, c0):  # NZ-4, NZ-5
    @pl.kernel
    def k(w: pl.Tensor[[256, 512], dtype, pl.NZ]):
        pl.load(w, [0, 0], [32, 64], target_memory=pl.Mem.Mat)

    w = _param(k.lower().ir(), "w")
    assert w.type.shape == (1, 512 // c0, 16, 16, c0)
    assert w.type.strides == (256 * 512, 256 * c0, 16 * c0, c0, 1)


def test_fp16_rank2():  # NZ-4, NZ-11: FP16 [256, 512] -> [1, 32, 16, 16, 16]
    low = _mm_kernel([256, 512], [0, 0], [256, 512], dtype=pl.FP16).lower()
    w = _param(low.ir(), "w")
    assert w.type.shape == (1, 32, 16, 16, 16)
    assert w.type.strides == (131072, 4096, 256, 16, 1)
    (ld,) = _loads(low.ir(after="BlockNzTensorViews"), "w")
    assert ld.params["shape"] == (1, 32, 16, 16, 16)
    assert ld.outputs[0].type == TileType((256, 512), D.FP16, Mem.Mat)


def test_fp32_c0_is_8():  # NZ-4
    low = _mm_kernel([64, 128], [16, 64], [32, 64], dtype=pl.FP32).lower()
    assert _param(low.ir(), "w").type.shape == (1, 16, 4, 16, 8)
    (ld,) = _loads(low.ir(after="BlockNzTensorViews"), "w")
    assert _vals(ld.operands("offsets")) == [0, 8, 1, 0, 0]  # [b, k0/8, n0/16, 0, 0]
    assert ld.params["shape"] == (1, 8, 2, 16, 8)


# ------------------------------------------------------------------------------ NZ-12: phase 2
def test_window_offsets_become_column_block_and_row_fractal():  # NZ-12
    g = _mm_kernel([512, 1024], [256, 512], [256, 512]).lower().ir(after="BlockNzTensorViews")
    assert _param(g, "w").type.shape == (1, 32, 32, 16, 32)
    (ld,) = _loads(g, "w")
    assert _vals(ld.operands("offsets")) == [0, 16, 16, 0, 0]  # [b, k0/c0, n0/16, 0, 0]
    assert ld.params["shape"] == (1, 16, 16, 16, 32)


def test_seed_example_slice_of_a_3d_weight():  # NZ-12: w[1:2, 256:512, 512:1024] of [E, N, K]
    @pl.kernel
    def k(
        x: pl.Tensor[[64, 512], pl.INT8],
        w: pl.Tensor[[4, 512, 1024], pl.INT8, pl.NZ],
        out: pl.Out[pl.Tensor[[64, 256], pl.INT32]],
    ):
        out[:, :] = pl.matmul(x, w[1:2, 256:512, 512:1024], b_trans=True)

    low = k.lower()
    (before,) = _loads(low.ir(after="FlattenTileNdTo2D"), "w")
    assert _vals(before.operands("offsets")) == [1, 256, 512] and before.params["shape"] == (1, 256, 512)
    g = low.ir(after="BlockNzTensorViews")
    assert _param(g, "w").type.shape == (4, 32, 32, 16, 32)
    (ld,) = _loads(g, "w")
    assert _vals(ld.operands("offsets")) == [1, 16, 16, 0, 0]
    assert ld.params["shape"] == (1, 16, 16, 16, 32)
    assert ld.outputs[0].type == TileType((256, 512), D.INT8, Mem.Mat)  # NZ-13


def test_nd_weights_are_untouched():  # NZ-1: only pl.NZ tensors are blocked
    @pl.kernel
    def k(
        x: pl.Tensor[[32, 512], pl.INT8],
        w: pl.Tensor[[256, 512], pl.INT8],
        out: pl.Out[pl.Tensor[[32, 128], pl.INT32]],
    ):
        wt = pl.load(w, [128, 0], [128, 512], target_memory=pl.Mem.Mat)
        xt = pl.load(x, [0, 0], [32, 512], target_memory=pl.Mem.Mat)
        pl.store(pl.matmul(xt, wt, b_trans=True), [0, 0], out)

    low = k.lower()
    before, after = (_loads(low.ir(after=p), "w")[0] for p in ("FlattenTileNdTo2D", "BlockNzTensorViews"))
    assert after.params == before.params and "blocked" not in after.params
    assert _vals(after.operands("offsets")) == [128, 0]
    assert _param(low.ir(after="BlockNzTensorViews"), "w").type == TensorType((256, 512), D.INT8)
    assert _param(low.ir(), "w").type == TensorType((256, 512), D.INT8, Layout.ND, (512, 1))


def test_no_logical_nz_type_survives():  # NZ-14: every NZ TensorType downstream has rank 5
    @pl.kernel
    def k(
        x: pl.Tensor[[32, 512], pl.INT8],
        w: pl.Tensor[[3, 256, 512], pl.INT8, pl.NZ],
        out: pl.Out[pl.Tensor[[32, 256], pl.INT32]],
    ):
        for layer in pl.range(3):
            wl = w[layer]
            wt = pl.load(wl, [0, 0], [256, 512], target_memory=pl.Mem.Mat)
            xt = pl.load(x, [0, 0], [32, 512], target_memory=pl.Mem.Mat)
            pl.store(pl.matmul(xt, wt, b_trans=True), [0, 0], out)

    g = k.lower().ir()
    types = [v.type for v in g.params]
    for e in g.walk():
        types += [a.type for a in e.inputs] + [v.type for v in e.outputs]
        body = e.params.get("body")
        if isinstance(body, Graph):
            types += [v.type for v in body.params]
    nz = [t for t in types if isinstance(t, TensorType) and t.layout is Layout.NZ]
    assert nz and all(t.rank == 5 and t.strides is not None for t in nz)


# ---------------------------------------------------------------------- NZ-10: window kept whole
def test_flatten_keeps_the_nz_source_window_whole():  # NZ-10
    low = _mm_kernel([4, 256, 512], [2, 0, 0], [1, 256, 512]).lower()
    g = low.ir(after="FlattenTileNdTo2D")
    (nz_ld,) = _loads(g, "w")
    assert nz_ld.params["shape"] == (1, 256, 512) and len(nz_ld.operands("offsets")) == 3
    assert "window_2d" not in nz_ld.params
    assert nz_ld.outputs[0].type == TileType((256, 512), D.INT8, Mem.Mat)  # the tile is 2-D already
    (nd_ld,) = _loads(g, "x")  # ND -> NZ into Mat: its window is collapsed to 2-D
    assert nd_ld.params.get("window_2d") is True


# ----------------------------------------------------------------------- NZ-15: idempotence
def test_second_run_returns_the_same_graph():  # NZ-15
    low = _mm_kernel([512, 1024], [256, 512], [256, 512]).lower()
    g1 = low.ir(after="BlockNzTensorViews")
    assert g1.attrs[MARK] is True
    g2 = block_nz_tensor_views(g1)
    assert g2 is g1 and str(g2) == str(g1)
    assert _param(g2, "w").type.shape == (1, 32, 32, 16, 32)  # not blocked twice


def test_blocking_an_unmarked_blocked_graph_would_be_wrong():  # NZ-15: why the mark exists
    @pl.kernel
    def k(w: pl.Tensor[[512, 1024], pl.INT8, pl.NZ]):
        pass

    g1 = k.lower().ir(after="BlockNzTensorViews")
    assert _param(g1, "w").type.shape == (1, 32, 32, 16, 32)
    # the blocked shape "ends in [16, c0]" like a logical one: blocking it again is accepted
    # structurally and gives a wrong shape -- only the mark tells the two apart
    again = block_nz_tensor_views(Graph(g1.params, g1.eqns, g1.outputs, {}, g1.name))
    assert _param(again, "w").type.shape == (1024, 1, 1, 16, 32)
    assert block_nz_tensor_views(g1) is g1


# -------------------------------------------------------------------- NZ-34: internal invariant
def test_unblocked_nz_view_reaching_strides_is_an_internal_error():  # NZ-9, NZ-34
    g = _mm_kernel([256, 512], [0, 0], [256, 512]).lower().ir(after="FlattenTileNdTo2D")
    with pytest.raises(nzjit.InternalError, match="not blocked"):
        materialize_tensor_strides(g)
    with pytest.raises(nzjit.InternalError, match="not blocked"):  # even if marked, rank != 5
        materialize_tensor_strides(Graph(g.params, g.eqns, g.outputs, {MARK: True}, g.name))


def test_verifier_reports_an_unblocked_nz_view():  # NZ-34
    g = _mm_kernel([256, 512], [0, 0], [256, 512]).lower().ir(after="FlattenTileNdTo2D")
    verify(g, "FlattenTileNdTo2D")  # before the pass an NZ view is logical: fine
    with pytest.raises(nzjit.InternalError, match="not blocked"):
        verify(Graph(g.params, g.eqns, g.outputs, {MARK: True}, g.name), "BlockNzTensorViews")
    assert not isinstance(nzjit.InternalError("x"), ValueError)  # distinct from user-facing errors


# ----------------------------------------------------------------- NZ-30, NZ-31: slices, flatten
def test_layer_slice_blocks_like_a_load():  # NZ-30
    @pl.kernel
    def k(
        x: pl.Tensor[[32, 512], pl.INT8],
        w: pl.Tensor[[3, 256, 512], pl.INT8, pl.NZ],
        out: pl.Out[pl.Tensor[[32, 128], pl.INT32]],
    ):
        wl = w[2]
        wt = pl.load(wl, [128, 64], [128, 256], target_memory=pl.Mem.Mat)
        xt = pl.load(x, [0, 0], [32, 256], target_memory=pl.Mem.Mat)
        pl.store(pl.matmul(xt, wt, b_trans=True), [0, 0], out)

    g = k.lower().ir(after="BlockNzTensorViews")
    (sl,) = _eqns(g, "tensor.slice")
    assert _vals(sl.operands("offsets")) == [2, 0, 0, 0, 0]
    assert sl.params["shape"] == (1, 16, 16, 16, 32) and sl.params["drop"] == ()
    assert sl.outputs[0].type.shape == (1, 16, 16, 16, 32) and sl.outputs[0].type.layout is Layout.NZ
    (ld,) = [e for e in _loads(g) if e.inputs[0] is sl.outputs[0]]
    assert _vals(ld.operands("offsets")) == [0, 2, 8, 0, 0]
    assert ld.params["shape"] == (1, 8, 8, 16, 32)


def test_leading_window_slice_of_a_4d_weight():  # NZ-28, NZ-30: w[1] then a window on one axis
    @pl.kernel
    def k(w: pl.Tensor[[2, 4, 64, 64], pl.INT8, pl.NZ]):
        s = w[1, 1:3]
        pl.load(s, [1, 0, 0], [1, 64, 64], target_memory=pl.Mem.Mat)

    g = k.lower().ir(after="BlockNzTensorViews")
    (sl,) = _eqns(g, "tensor.slice")
    assert _vals(sl.operands("offsets")) == [5, 0, 0, 0, 0] and sl.params["shape"] == (2, 2, 4, 16, 32)
    (ld,) = _loads(g)
    assert _vals(ld.operands("offsets")) == [1, 0, 0, 0, 0]


def test_whole_tensor_flatten_is_kept_with_an_nd_result():  # NZ-31
    @pl.kernel
    def k(w: pl.Tensor[[64, 128], pl.INT8, pl.NZ], out: pl.Out[pl.Tensor[[4, 2048], pl.INT8]]):
        flat = pl.reshape(w, [64 * 128])
        t = pl.load(flat, [2048], [2048])
        pl.store(t, [1, 0], out)

    g = k.lower().ir(after="BlockNzTensorViews")
    (rs,) = _eqns(g, "tensor.reshape")
    assert rs.inputs[0] is _param(g, "w") and _param(g, "w").type.shape == (1, 4, 4, 16, 32)
    assert rs.params["shape"] == (8192,)
    assert rs.outputs[0].type == TensorType((8192,), D.INT8, Layout.ND)
    (ld,) = _loads(g)
    assert ld.inputs[0] is rs.outputs[0] and "blocked" not in ld.params  # read as ND


def test_dynamic_batch_of_a_rank3_weight():  # NZ-29: a rank-3 [B, R, C] parameter, B dynamic
    @pl.kernel
    def k(w: pl.Tensor[[pl.dynamic("B"), 64, 64], pl.INT8, pl.NZ]):
        pl.load(w, [1, 0, 0], [1, 64, 64], target_memory=pl.Mem.Mat)

    g = k.lower().ir()
    w = _param(g, "w")
    assert w.type.shape == (DynDim("B"), 2, 4, 16, 32)
    assert w.type.strides[1:] == (2048, 512, 32, 1)


def test_blocked_load_keeps_its_keyword_params():  # NZ-13: rebuilt with the explicit tile type
    g = _mm_kernel([256, 512], [0, 0], [256, 512]).lower().ir(after="BlockNzTensorViews")
    (ld,) = _loads(g, "w")
    assert ld.params["memory"] is Mem.Mat and ld.params["blocked"] is True
    assert ld.params["out_type"] == TileType((256, 512), D.INT8, Mem.Mat)
