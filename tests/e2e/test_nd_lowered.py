"""Looking inside (api.md): `kernel.lower(...)`, `low.passes`, `low.ir(after=...)`,
`low.run(..., after=...)` for per-pass bisection, and the compile cache."""

from __future__ import annotations

import numpy as np
import pytest

import nzjit
from nzjit import pl
from nzjit.core.ir import Graph

PASSES = [
    "ConvertTensorToTileOps",
    "LowerCompositeOps",
    "FlattenTileNdTo2D",
    "BlockNzTensorViews",
    "LegalizeTileCast",
    "AutoTileMatmulL0",
    "MaterializeTensorStrides",
]
M, K, N = 64, 256, 128
RNG = np.random.default_rng(11)
XI = RNG.integers(-128, 128, (M, K), dtype=np.int8)
WI = RNG.integers(-128, 128, (N, K), dtype=np.int8)
REF = XI.astype(np.int32) @ WI.astype(np.int32).T


@pl.kernel
def tensor_mm(
    x: pl.Tensor[[M, K], pl.INT8], w: pl.Tensor[[N, K], pl.INT8], out: pl.Out[pl.Tensor[[M, N], pl.INT32]]
):
    for nb in pl.spmd(2):
        n0 = nb * 64
        acc = pl.matmul(x[:, 0:128], w[n0 : n0 + 64, 0:128], b_trans=True)
        for k0 in pl.pipeline(128, K, 128):
            acc = pl.matmul_acc(acc, x[:, k0 : k0 + 128], w[n0 : n0 + 64, k0 : k0 + 128], b_trans=True)
        out[:, n0 : n0 + 64] = acc


@pl.kernel
def vec_kernel(x: pl.Tensor[[32, 64], pl.FP16], out: pl.Out[pl.Tensor[[32, 64], pl.FP32]]):
    for i in pl.range(2):
        t = pl.cast(pl.load(x, [i * 16, 0], [16, 64]), pl.FP32)
        pl.store(pl.maximum(t, t * t), [i * 16, 0], out)


def test_passes_are_the_seven_names_in_order():
    assert tensor_mm.lower().passes == PASSES


@pytest.mark.parametrize("after", ["trace", *PASSES])
def test_ir_after_every_stage_is_a_graph_with_the_parameters(after):
    g = tensor_mm.lower().ir(after=after)
    assert isinstance(g, Graph)
    assert [p.hint for p in g.params] == ["x", "w", "out"]
    assert g.params[0].type.shape == (M, K) and g.params[0].type.dtype is pl.INT8
    assert g.params[0].type.layout is pl.ND
    strides = g.params[0].type.strides
    assert strides == ((K, 1) if after == "MaterializeTensorStrides" else None)


def test_the_trace_is_tensor_level_and_the_final_graph_is_cube_instructions():
    low = tensor_mm.lower()
    trace = {e.primitive.name for e in low.ir("trace").walk()}
    final = {e.primitive.name for e in low.ir().walk()}
    assert {"tensor.matmul", "tensor.matmul_acc", "tensor.assign"} <= trace
    assert {"tile.mad", "tile.mad_acc", "tile.extract", "tile.store"} <= final
    assert not {"tensor.matmul", "tile.matmul", "tensor.assign"} & final


def test_an_unknown_stage_lists_the_names():
    with pytest.raises(ValueError, match="ConvertTensorToTileOps"):
        tensor_mm.lower().ir(after="NoSuchPass")


@pytest.mark.parametrize("after", ["trace", *PASSES])
def test_run_after_every_pass_gives_the_same_numbers(after):  # per-pass bisection
    low = tensor_mm.lower()
    np.testing.assert_array_equal(low.run(XI, WI, after=after), REF)


@pytest.mark.parametrize("after", ["trace", *PASSES])
def test_run_after_every_pass_vec(after):
    x = RNG.standard_normal((32, 64)).astype(np.float16)
    t = x.astype(np.float32)
    out = vec_kernel.lower().run(x, after=after)
    np.testing.assert_array_equal(out, np.maximum(t, t * t))  # one fp32 op per element, like numpy


def test_run_writes_given_outputs_and_the_final_graph_is_the_default():
    low = tensor_mm.lower()
    out = np.zeros((M, N), np.int32)
    assert low.run(XI, WI, out) is out
    np.testing.assert_array_equal(out, REF)


def test_lower_with_args_or_specs_selects_the_same_entry():
    low = tensor_mm.lower()
    assert tensor_mm.lower(XI, WI) is low
    assert tensor_mm.lower(nzjit.spec((M, K), pl.INT8), nzjit.spec((N, K), np.int8)) is low


def test_a_second_call_with_the_same_signature_does_not_retrace():
    traces = []

    @pl.kernel
    def k(x: pl.Tensor[[16, 64], pl.FP32], out: pl.Out[pl.Tensor[[16, 64], pl.FP32]]):
        traces.append(1)
        pl.store(pl.exp(pl.load(x, [0, 0], [16, 64])), [0, 0], out)

    x = RNG.standard_normal((16, 64)).astype(np.float32)
    first = k(x)
    second = k(x * 2)
    k(x, np.zeros((16, 64), np.float32))  # outputs given: the same signature
    k.lower()
    assert len(traces) == 1 and k.trace_count == 1
    np.testing.assert_array_equal(first, np.exp(x))
    np.testing.assert_array_equal(second, np.exp(x * 2))


def test_scalar_values_do_not_retrace():
    traces = []

    @pl.kernel
    def k(x: pl.Tensor[[64, 64], pl.FP32], r: pl.Scalar[pl.INT32], out: pl.Out[pl.Tensor[[16, 64], pl.FP32]]):
        traces.append(1)
        pl.store(pl.load(x, [r, 0], [16, 64]), [0, 0], out)

    x = RNG.standard_normal((64, 64)).astype(np.float32)
    for r in (0, 16, 48):
        np.testing.assert_array_equal(k(x, r), x[r : r + 16])
    assert len(traces) == 1


def test_a_vec_tile_over_capacity_is_a_clear_compile_error_on_call():
    @pl.kernel
    def k(x: pl.Tensor[[256, 256], pl.FP32], out: pl.Out[pl.Tensor[[256, 256], pl.FP32]]):
        pl.store(pl.load(x, [0, 0], [256, 256]), [0, 0], out)

    out = np.full((256, 256), 3, np.float32)
    with pytest.raises(nzjit.CompileError, match=r"Vec buffer \(UB\) holds 192 KiB") as ei:
        k(np.zeros((256, 256), np.float32), out)
    assert "256 KiB" in str(ei.value) and ei.value.help
    assert (out == 3).all()


def test_a_dynamic_dimension_is_compiled_once_for_every_extent():
    @pl.kernel
    def k(
        x: pl.Tensor[[pl.dynamic("M"), 64], pl.FP32],
        n: pl.Scalar[pl.INDEX],
        out: pl.Out[pl.Tensor[[pl.dynamic("M"), 64], pl.FP32]],
    ):
        for i in pl.range(n):
            pl.store(pl.exp(pl.load(x, [i * 16, 0], [16, 64])), [i * 16, 0], out)

    for rows in (48, 32):
        x = RNG.standard_normal((rows, 64)).astype(np.float32)
        np.testing.assert_array_equal(k(x, rows // 16), np.exp(x))
    assert k.trace_count == 1
    assert str(k.lower().ir("trace").params[0].type) == "f32[M,64]"


@pytest.mark.parametrize("was_on", [True, False])
def test_compiling_pauses_the_cyclic_collector_and_restores_it(was_on):
    """The collector is off while a kernel traces and lowers (no rescans of the IR being built),
    and afterwards as the caller had it."""
    import gc

    seen = []

    @pl.kernel
    def k(a: pl.Tensor[[16, 16], pl.FP32], out: pl.Out[pl.Tensor[[16, 16], pl.FP32]]):
        seen.append(gc.isenabled())
        pl.store(pl.load(a, [0, 0], [16, 16]), [0, 0], out)

    (gc.enable if was_on else gc.disable)()
    try:
        k.lower(np.zeros((16, 16), np.float32))
        assert seen == [False]
        assert gc.isenabled() == was_on
    finally:
        gc.enable()
