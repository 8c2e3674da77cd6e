"""Every refusal row of nz-layout.md §7 that nzjit can meet (issue 3), each with the message
phrase of api.md "Errors" and the kernel line it names (`file:line: ` of the offending line).

Symbolic-offset refusals (NZ-16..18) are in test_nz_proofs.py, the GM-gap guard (NZ-25) in
test_nz_gap_guard.py, valid_shape rows in test_nz_valid_shape.py. The "distributed (remote)
tensor" row has no kernel-language form (there is no remote load) and is not tested.
No `from __future__ import annotations`: kernel annotations use closure values.
"""

import inspect

import pytest

import nzjit
from nzjit import pl
from nzjit import prims as P
from nzjit.core import dtypes as D
from nzjit.core.ir import Eqn, Graph, Literal, Var
from nzjit.core.types import Layout, Mem, ScalarType, TensorType, TileType
from nzjit.errors import Source
from nzjit.passes.block_nz import block_nz_tensor_views


def _line(kernel, text):
    """The file line of the first kernel source line containing `text`."""
    lines, start = inspect.getsourcelines(kernel.__wrapped__)
    return start + next(i for i, s in enumerate(lines) if text in s)


def _refused(kernel, text, *phrases, rule=None, need_help=True):
    """Lowering raises a CompileError at the kernel line containing `text` whose message holds
    every phrase; returns the message."""
    with pytest.raises(nzjit.CompileError) as ei:
        kernel.lower()
    err = ei.value
    where = f"{kernel.__wrapped__.__code__.co_filename}:{_line(kernel, text)}: "
    msg = str(err)
    assert msg.startswith(where), (msg, where)
    for p in phrases:
        assert p in msg, (p, msg)
    if rule is not None:
        assert err.rule == rule, msg
    assert isinstance(err, ValueError)
    assert err.help or not need_help, "a refusal of BlockNzTensorViews says how to fix it"
    return msg


def _load_kernel(shape, dtype=pl.INT8, offs=None, win=None, **kw):
    offs = [0] * len(shape) if offs is None else offs
    win = [1] * (len(shape) - 2) + [16, 32] if win is None else win

    @pl.kernel
    def k(w: pl.Tensor[list(shape), dtype, pl.NZ]):
        pl.load(w, list(offs), list(win), **kw)  # the load

    return k


MAT = {"target_memory": pl.Mem.Mat}


# ---------------------------------------------------------------------- shapes (NZ-4, NZ-5, NZ-11)
@pytest.mark.parametrize("rows", [40, 8, 250])
def test_rows_not_a_multiple_of_16(rows):  # §7 `shape[-2] % 16 != 0`
    k = _load_kernel([rows, 64], win=[min(rows, 16), 32], **MAT)
    _refused(k, "# the load", "multiple of 16", f"rows {rows}")


@pytest.mark.parametrize(
    "dtype,cols,c0",
    [
        (pl.INT8, 48, 32),
        (pl.UINT8, 16, 32),
        (pl.FP16, 40, 16),
        (pl.BF16, 8, 16),
        (pl.FP32, 12, 8),
        (pl.INT32, 4, 8),
    ],
)
def test_cols_not_a_multiple_of_c0(dtype, cols, c0):  # §7 `shape[-1] % c0 != 0`
    k = _load_kernel([32, cols], dtype, win=[16, cols], **MAT)
    _refused(k, "# the load", f"multiple of c0 = {c0}", f"columns {cols}")


def test_window_rows_and_columns_must_be_whole_fractals():  # NZ-12: a partial fractal / C0 line
    _refused(_load_kernel([64, 64], win=[24, 64], **MAT), "# the load", "multiple of 16")
    _refused(_load_kernel([64, 64], win=[16, 48], **MAT), "# the load", "multiple of c0 = 32")
    _refused(_load_kernel([64, 64], pl.FP16, win=[16, 24], **MAT), "# the load", "multiple of c0 = 16")


@pytest.mark.parametrize("shape", [[pl.dynamic("R"), 64], [32, pl.dynamic("C")], [4, pl.dynamic("R"), 64]])
def test_dynamic_trailing_axis(shape):  # §7 `shape[-2]` or `shape[-1]` dynamic
    win = [1] * (len(shape) - 2) + [16, 32]
    _refused(_load_kernel(shape, win=win, **MAT), "# the load", "is dynamic", "cannot be proven")


def test_rank_below_2():  # §7 logical rank < 2
    _refused(_load_kernel([64], offs=[0], win=[64], **MAT), "# the load", "rank >= 2")


@pytest.mark.parametrize("dtype", [pl.INT4, pl.UINT4, pl.FP4, pl.BOOL])
def test_sub_byte_dtypes(dtype):  # NZ-33
    _refused(_load_kernel([32, 64], dtype, **MAT), "# the load", "sub-byte dtype", dtype.name, rule="NZ-33")


def test_64_bit_dtype_has_no_nz_layout():  # hardware-model.md §1.1 (TLOAD b64 is ND only)
    _refused(_load_kernel([32, 64], pl.INT64, **MAT), "# the load", "64-bit")


def test_rank_above_3_with_a_dynamic_leading_axis():  # §7, NZ-28: folding multiplies static extents
    k = _load_kernel([pl.dynamic("G"), 2, 32, 64], win=[1, 1, 16, 32], **MAT)
    _refused(k, "# the load", "is dynamic", "folding", rule="NZ-28")


def test_unused_parameter_is_refused_at_its_kernel():  # NZ-11: phase 1 blocks every NZ type
    @pl.kernel
    def k(w: pl.Tensor[[40, 64], pl.INT8, pl.NZ]):
        pass

    with pytest.raises(nzjit.CompileError, match="multiple of 16"):
        k.lower()


def test_parameter_refusal_names_the_first_use_inside_a_loop():  # file:line of the kernel line
    @pl.kernel
    def k(w: pl.Tensor[[40, 64], pl.INT8, pl.NZ]):
        for _i in pl.range(2):
            pl.load(w, [0, 0], [16, 32], target_memory=pl.Mem.Mat)  # first use

    _refused(k, "# first use", "parameter 'w'", "multiple of 16")


# ------------------------------------------------------------------------------ loads (NZ-12)
@pytest.mark.parametrize("kw,got", [({"target_memory": pl.Mem.Vec}, "pl.Mem.Vec"), ({}, "missing")])
def test_load_target_memory_must_be_mat(kw, got):  # §7 tile.load target_memory other than Mat, or missing
    _refused(_load_kernel([32, 64], **kw), "# the load", "target_memory=pl.Mem.Mat", got)


@pytest.mark.parametrize(
    "offs,phrase", [([8, 0], "multiple of 16"), ([0, 16], "multiple of 32"), ([24, 32], "multiple of 16")]
)
def test_constant_offset_off_the_fractal_grid(offs, phrase):  # §7 slice offset not on a fractal boundary
    k = _load_kernel([64, 64], offs=offs, **MAT)
    _refused(k, "# the load", phrase, "must be a non-negative multiple of")


def test_literal_negative_offset():  # NZ-18: a literal negative offset is refused when written
    @pl.kernel
    def k(w: pl.Tensor[[64, 64], pl.INT8, pl.NZ]):
        pl.load(w, [-16, 0], [16, 32], target_memory=pl.Mem.Mat)  # negative

    _refused_at_trace = pytest.raises(nzjit.CompileError, match="negative")
    with _refused_at_trace as ei:
        k.lower()
    assert str(ei.value).startswith(f"{__file__}:{_line(k, '# negative')}: ")


@pytest.mark.parametrize("offs,win", [([48, 0], [32, 64]), ([0, 32], [16, 64])])
def test_window_past_the_end(offs, win):  # NZ-12: an overhanging window reads another column block
    k = _load_kernel([64, 64], offs=offs, win=win, **MAT)
    _refused(k, "# the load", "out of bounds", need_help=False)  # refused when written (language)


def test_window_past_the_end_reaching_the_pass():  # NZ-12: the pass checks it again (hand-built IR)
    g = _hand_graph(TensorType((32, 64), D.INT8, Layout.NZ), offs=(16, 0))
    with pytest.raises(nzjit.CompileError, match="past the tensor's extent") as ei:
        block_nz_tensor_views(g)
    assert str(ei.value).startswith("hand_built.py:7: ")


def test_load_spanning_several_batches():  # NZ-12: sizes [1, TK/c0, TN/16, 16, c0]
    k = _load_kernel([4, 32, 64], win=[2, 32, 64], **MAT)
    _refused(k, "# the load", "several batches")


# --------------------------------------------------------------------- slices, reshapes (NZ-30/31)
def test_slice_windowing_the_plane():  # §7 tensor.slice windowing the trailing [R, C] plane
    @pl.kernel
    def k(w: pl.Tensor[[4, 32, 64], pl.INT8, pl.NZ]):
        s = w[1, 0:16, :]  # plane window
        pl.load(s, [0, 0], [16, 64], target_memory=pl.Mem.Mat)

    _refused(k, "# plane window", "slicing the leading axes only", rule="NZ-30")


def test_slice_of_a_column_window():  # §7: a column window is not contiguous either
    @pl.kernel
    def k(w: pl.Tensor[[4, 32, 64], pl.INT8, pl.NZ]):
        s = w[:, :, 32:64]  # column window
        pl.load(s, [0, 0, 0], [1, 32, 32], target_memory=pl.Mem.Mat)

    _refused(k, "# column window", "slicing the leading axes only")


def test_slice_with_windows_on_two_leading_axes():  # NZ-28: not contiguous once folded
    @pl.kernel
    def k(w: pl.Tensor[[2, 4, 32, 64], pl.INT8, pl.NZ]):
        s = w[0:2, 1:3]  # two windows
        pl.load(s, [0, 0, 0, 0], [1, 1, 32, 64], target_memory=pl.Mem.Mat)

    _refused(k, "# two windows", "a window on one leading axis only")


@pytest.mark.parametrize("target", [[64, 32], [2, 16, 64], [1, 2048]])
def test_reshape_to_anything_but_the_flat_whole(target):  # §7 tensor.reshape to any other shape
    @pl.kernel
    def k(w: pl.Tensor[[32, 64], pl.INT8, pl.NZ], out: pl.Out[pl.Tensor[[32, 64], pl.INT8]]):
        r = pl.reshape(w, target)  # reshape
        pl.load(r, [0] * len(target), [1] * (len(target) - 1) + [32], target_memory=pl.Mem.Mat)

    _refused(k, "# reshape", "whole-tensor 'tensor.reshape' flatten", rule="NZ-31")


def test_view_and_reinterpret_view_refuse_an_nz_source():  # §7: rejected when the op is built
    @pl.kernel
    def view(w: pl.Tensor[[32, 64], pl.INT8, pl.NZ]):
        pl.tensor.view(w, [64, 32])  # view

    @pl.kernel
    def reinterpret(w: pl.Tensor[[32, 64], pl.INT8, pl.NZ]):
        pl.tensor.reinterpret_view(w, pl.UINT8)  # reinterpret

    _refused(view, "# view", "does not support an NZ source", "'tensor.view'")
    _refused(reinterpret, "# reinterpret", "does not support an NZ source", "'tensor.reinterpret_view'")


# --------------------------------------------------------------------- any other consumer (§7)
def test_any_other_consumer_is_refused():  # §7: never pass NZ coordinates through
    @pl.kernel
    def k(
        x: pl.Tensor[[32, 64], pl.INT8],
        w: pl.Tensor[[32, 64], pl.INT8, pl.NZ],
        out: pl.Out[pl.Tensor[[32, 32], pl.INT32]],
    ):
        out[:, :] = pl.matmul(x, w, b_trans=True)  # tensor matmul

    # run BlockNzTensorViews on the traced graph: the tensor-level matmul is not a load
    with pytest.raises(nzjit.CompileError, match="cannot consume an NZ tensor") as ei:
        block_nz_tensor_views(k.lower().ir(after="trace"))
    assert str(ei.value).startswith(f"{__file__}:{_line(k, '# tensor matmul')}: ")


def test_assigning_an_nz_tensor_is_refused():  # §7: an NZ tensor as a value
    @pl.kernel
    def k(w: pl.Tensor[[32, 64], pl.INT8, pl.NZ], out: pl.Out[pl.Tensor[[32, 64], pl.INT8]]):
        out[:, :] = w  # copy

    with pytest.raises(nzjit.CompileError) as ei:
        k.lower()
    assert str(ei.value).startswith(f"{__file__}:{_line(k, '# copy')}: ")


_SRC = Source("hand_built.py", 7)


def _hand_graph(wtype, prim=P.tile_load_p, offs=(0, 0)):
    """`t = tile.load(w, offs, [32, 64], Mat)` (or a tensor.view) on a parameter of type `wtype`."""
    w = Var(wtype, "w")
    o = tuple(Literal(v, ScalarType(D.INDEX)) for v in offs)
    if prim is P.tile_load_p:
        out = Var(TileType((32, 64), D.INT8, Mem.Mat), "t")
        params = {
            "shape": (32, 64),
            "memory": Mem.Mat,
            "memory_given": True,
            "valid_static": None,
            "arity": (1, 2, 0),
        }
        e = Eqn(prim, (w, *o), (out,), params, _SRC)
    else:
        out = Var(TensorType((64, 32), D.INT8, Layout.NZ), "v")
        e = Eqn(prim, (w,), (out,), {"shape": (64, 32), "arity": (1,)}, _SRC)
    return Graph([w], [e], [], name="hand")


def test_a_view_reaching_the_pass_is_refused():  # §7 any other consumer (built without the op check)
    with pytest.raises(nzjit.CompileError, match="'tensor.view' cannot consume an NZ tensor") as ei:
        block_nz_tensor_views(_hand_graph(TensorType((32, 64), D.INT8, Layout.NZ), P.tensor_view_p))
    assert str(ei.value).startswith("hand_built.py:7: ")


@pytest.mark.parametrize(
    "wtype,phrase",
    [
        (TensorType((32, 64), D.INT8, Layout.NZ, strides=(64, 1)), "explicit strides"),
        (TensorType((32, 64), D.INT8, Layout.NZ, valid_shape=(16, 64)), "partial valid_shape"),
    ],
)
def test_explicit_strides_or_partial_tensor_valid_shape(wtype, phrase):  # §7
    with pytest.raises(nzjit.CompileError, match=phrase) as ei:
        block_nz_tensor_views(_hand_graph(wtype))
    assert str(ei.value).startswith("hand_built.py:7: ")  # the parameter's first use


def test_full_valid_shape_on_a_tensor_is_not_partial():  # §7: only a *partial* valid_shape is refused
    g = block_nz_tensor_views(_hand_graph(TensorType((32, 64), D.INT8, Layout.NZ, valid_shape=(32, 64))))
    assert g.params[0].type.shape == (1, 2, 2, 16, 32)
