"""Each kernel-language op stages one primitive whose type rule runs at bind time (api.md "Tile-level
ops", "Tensor-level ops"). IR facts here; the numbers are in tests/e2e/test_nd_*.py."""

from __future__ import annotations

import pytest

import nzjit
from nzjit import pl
from nzjit import prims as P
from nzjit.core import dtypes as D
from nzjit.core.types import Layout, Mem, TensorType, TileType


def traced(kernel):
    return kernel.lower().ir("trace")


def eqns(g, prim):
    return [e for e in g.walk() if e.primitive is prim]


def refused(kernel, match):
    with pytest.raises(nzjit.CompileError, match=match) as ei:
        kernel.lower()
    return ei.value


# ------------------------------------------------------------------------------------ tile level
def test_load_defaults_to_vec_and_store_returns_an_alias_with_its_attrs():
    @pl.kernel
    def k(x: pl.Tensor[[32, 64], pl.FP32], out: pl.Out[pl.Tensor[[32, 64], pl.FP32]]):
        t = pl.load(x, [16, 0], [16, 64])
        m = pl.tile.load(x, [0, 0], [16, 64], target_memory=pl.Mem.Mat)
        o = pl.store(t, [0, 0], out, st_phase="Final")
        pl.store(t, [16, 0], o)
        assert m.type == TileType((16, 64), D.FP32, Mem.Mat)

    g = traced(k)
    ld = eqns(g, P.tile_load_p)[0]
    assert ld.outputs[0].type == TileType((16, 64), D.FP32, Mem.Vec)
    st1, st2 = eqns(g, P.tile_store_p)
    assert st1.outputs[0].type == g.params[1].type  # alias of `out`
    assert st1.params["attrs"] == {"st_phase": "Final"} and "st_phase=Final" in str(g)
    assert st2.inputs[-1] is st1.outputs[0]


def test_tile_matmul_types_b_trans_and_matmul_acc():
    @pl.kernel
    def k(
        a: pl.Tensor[[32, 64], pl.BF16],
        b: pl.Tensor[[48, 64], pl.BF16],
        out: pl.Out[pl.Tensor[[32, 48], pl.FP32]],
    ):
        at = pl.load(a, [0, 0], [32, 64], target_memory=pl.Mem.Mat)
        bt = pl.load(b, [0, 0], [48, 64], target_memory=pl.Mem.Mat)
        c = pl.matmul(at, bt, b_trans=True, out_dtype=pl.FP32)
        c = pl.matmul_acc(c, at, pl.tile.transpose_view(bt))
        pl.store(c, [0, 0], out)

    g = traced(k)
    (mm,) = eqns(g, P.tile_matmul_p)
    (mma,) = eqns(g, P.tile_matmul_acc_p)
    (tv,) = eqns(g, P.tile_transpose_view_p)
    assert mm.outputs[0].type == TileType((32, 48), D.FP32, Mem.Acc) and mm.params["b_trans"]
    assert tv.outputs[0].type == TileType((64, 48), D.BF16, Mem.Mat)
    assert mma.outputs[0].type == mm.outputs[0].type and not mma.params["b_trans"]


def test_matmul_refusals_name_the_fix():
    @pl.kernel
    def vec_operands(a: pl.Tensor[[32, 64], pl.FP16], out: pl.Out[pl.Tensor[[32, 32], pl.FP32]]):
        t = pl.load(a, [0, 0], [32, 64])
        pl.store(pl.matmul(t, t, b_trans=True), [0, 0], out)

    refused(vec_operands, "target_memory=pl.Mem.Mat")

    @pl.kernel
    def wrong_out_dtype(a: pl.Tensor[[32, 64], pl.INT8], out: pl.Out[pl.Tensor[[32, 32], pl.INT32]]):
        t = pl.load(a, [0, 0], [32, 64], target_memory=pl.Mem.Mat)
        pl.store(pl.matmul(t, t, b_trans=True, out_dtype=pl.FP32), [0, 0], out)

    refused(wrong_out_dtype, "accumulate in pl.INT32")

    @pl.kernel
    def mixed(
        a: pl.Tensor[[32, 64], pl.INT8],
        b: pl.Tensor[[32, 64], pl.FP16],
        out: pl.Out[pl.Tensor[[32, 32], pl.FP32]],
    ):
        at = pl.load(a, [0, 0], [32, 64], target_memory=pl.Mem.Mat)
        bt = pl.load(b, [0, 0], [32, 64], target_memory=pl.Mem.Mat)
        pl.store(pl.matmul(at, bt, b_trans=True), [0, 0], out)

    refused(mixed, "unsupported operand dtypes")


def test_cast_and_elementwise_on_vec_tiles():
    @pl.kernel
    def k(x: pl.Tensor[[16, 64], pl.FP16], out: pl.Out[pl.Tensor[[16, 64], pl.FP32]]):
        t = pl.cast(pl.load(x, [0, 0], [16, 64]), pl.FP32)
        u = pl.add(pl.exp(t), pl.maximum(t, pl.mul(t, pl.sub(t, t))))
        pl.store(u + t * t - t, [0, 0], out)

    g = traced(k)
    (cast,) = eqns(g, P.tile_cast_p)
    assert cast.outputs[0].type == TileType((16, 64), D.FP32, Mem.Vec)
    names = [e.primitive.name for e in g.eqns]
    for op in ("tile.add", "tile.sub", "tile.mul", "tile.maximum", "tile.exp"):
        assert op in names


def test_elementwise_refuses_non_vec_tiles_and_mismatched_operands():
    @pl.kernel
    def mat(x: pl.Tensor[[16, 64], pl.FP16], out: pl.Out[pl.Tensor[[16, 64], pl.FP16]]):
        t = pl.load(x, [0, 0], [16, 64], target_memory=pl.Mem.Mat)
        pl.store(pl.exp(t), [0, 0], out)

    refused(mat, "Vec tiles")

    @pl.kernel
    def shapes(x: pl.Tensor[[32, 64], pl.FP16], out: pl.Out[pl.Tensor[[16, 64], pl.FP16]]):
        pl.store(pl.add(pl.load(x, [0, 0], [16, 64]), pl.load(x, [0, 0], [32, 64])), [0, 0], out)

    refused(shapes, "operands differ")


def test_a_vec_tile_over_the_192_kib_ub_is_refused_at_its_line(where):
    @pl.kernel
    def k(x: pl.Tensor[[256, 256], pl.FP32], out: pl.Out[pl.Tensor[[256, 256], pl.FP32]]):
        t = pl.load(x, [0, 0], [256, 256])  # <- load
        pl.store(t, [0, 0], out)

    err = refused(k, "192 KiB")
    assert str(err).startswith(where(k, "# <- load")) and "Vec" in str(err) and "256 KiB" in str(err)


def test_a_vec_row_of_partial_32_byte_blocks_is_refused(where):
    @pl.kernel
    def k(x: pl.Tensor[[16, 64], pl.FP32], out: pl.Out[pl.Tensor[[16, 64], pl.FP32]]):
        pl.store(pl.load(x, [0, 0], [16, 4]), [0, 0], out)  # <- load

    err = refused(k, "32-byte blocks")
    assert str(err).startswith(where(k, "# <- load"))


# ---------------------------------------------------------------------------------- tensor level
def test_indexing_slices_full_axes_and_integers_that_drop_axes():
    @pl.kernel
    def k(w: pl.Tensor[[4, 256, 512], pl.INT8], out: pl.Out[pl.Tensor[[64, 512], pl.INT8]]):
        for e in pl.spmd(4):
            n0 = e * 16
            a = w[e, n0 : n0 + 128, :]  # traced integer + window + full axis
            b = w[1]  # plain integer
            c = w[:, 0:16, 32:64]
            d = b[n0]
            assert a.shape == (128, 512) and b.shape == (256, 512) and c.shape == (4, 16, 32)
            assert d.shape == (512,)
            pl.store(pl.load(a, [0, 0], [16, 512]), [n0, 0], out)  # each lane its own rows (no race)

    g = traced(k)
    sl = eqns(g, P.tensor_slice_p)[0]
    assert sl.params["shape"] == (1, 128, 512) and sl.params["drop"] == (0,)
    assert sl.outputs[0].type == TensorType((128, 512), D.INT8)


def test_slice_extent_must_be_static():
    @pl.kernel
    def k(w: pl.Tensor[[256, 512], pl.INT8], out: pl.Out[pl.Tensor[[128, 512], pl.INT8]]):
        for e in pl.spmd(2):
            a = w[e : e * 2, :]
            pl.store(pl.load(a, [0, 0], [16, 512]), [0, 0], out)

    refused(k, "must be static")


def test_pl_slice_reshape_and_tensor_matmul_types():
    @pl.kernel
    def k(
        x: pl.Tensor[[2, 64, 128], pl.FP16],
        w: pl.Tensor[[32, 128], pl.FP16],
        out: pl.Out[pl.Tensor[[2, 64, 32], pl.FP32]],
    ):
        s = pl.slice(x, [1, 64, 128], [1, 0, 0])
        r = pl.reshape(x, [128, 128])
        assert s.shape == (1, 64, 128) and r.shape == (128, 128)
        c = pl.matmul(s, w, b_trans=True)
        assert c.type == TensorType((64, 32), D.FP32)
        out[1, :, :] = c

    g = traced(k)
    (mm,) = eqns(g, P.tensor_matmul_p)
    (asg,) = eqns(g, P.tensor_assign_p)
    assert mm.params["b_trans"] and asg.inputs[1] is mm.outputs[0]


def test_reshape_and_assignment_shape_errors():
    @pl.kernel
    def bad_reshape(x: pl.Tensor[[64, 128], pl.FP16], out: pl.Out[pl.Tensor[[64, 128], pl.FP16]]):
        pl.reshape(x, [64, 64])

    refused(bad_reshape, "element count")

    @pl.kernel
    def bad_assign(
        x: pl.Tensor[[64, 128], pl.FP16],
        w: pl.Tensor[[32, 128], pl.FP16],
        out: pl.Out[pl.Tensor[[64, 64], pl.FP32]],
    ):
        out[:, 0:16] = pl.matmul(x, w, b_trans=True)

    refused(bad_assign, r"shape \[64, 32\] to a window of shape \[64, 16\]")


def test_tensor_view_and_reinterpret_view_on_nd():
    @pl.kernel
    def k(x: pl.Tensor[[64, 64], pl.INT8], out: pl.Out[pl.Tensor[[64, 64], pl.INT8]]):
        v = pl.tensor.view(x, [32, 128])
        u = pl.tensor.reinterpret_view(x, pl.INT32)
        assert v.type == TensorType((32, 128), D.INT8)
        assert u.type == TensorType((64, 16), D.INT32)  # same bytes
        pl.store(pl.load(v, [0, 0], [32, 128]), [0, 0], pl.tensor.view(out, [32, 128]))

    traced(k)

    @pl.kernel
    def bad(x: pl.Tensor[[64, 64], pl.INT8], out: pl.Out[pl.Tensor[[64, 64], pl.INT8]]):
        pl.tensor.reinterpret_view(x, pl.INT32, [64, 64])

    refused(bad, "byte count")


@pytest.mark.parametrize("op", ["view", "reinterpret_view"])
def test_tensor_views_refuse_an_nz_source_when_built(op, where):  # NZ-14
    @pl.kernel
    def k(w: pl.Tensor[[64, 64], pl.INT8, pl.NZ], out: pl.Out[pl.Tensor[[64, 64], pl.INT8]]):
        if op == "view":
            pl.tensor.view(w, [32, 128])  # <- view
        else:
            pl.tensor.reinterpret_view(w, pl.UINT8)  # <- reinterpret_view

    err = refused(k, "does not support an NZ source")
    assert str(err).startswith(where(k, f"# <- {op}"))
    assert err.help and "Mem.Mat" in err.help


def test_ops_outside_a_kernel_trace_are_refused():
    with pytest.raises(nzjit.CompileError, match="only available while tracing"):
        pl.get_block_idx()


def test_layout_is_part_of_type_equality():
    nd = TensorType((64, 64), D.INT8)
    assert nd != nd.with_(layout=Layout.NZ)
    assert TileType((16, 16), D.FP16, Mem.Mat) != TileType((16, 16), D.FP16, Mem.Vec)
