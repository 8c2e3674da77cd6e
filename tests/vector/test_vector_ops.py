"""The vector ALU, conversions, reductions and broadcasts in the kernel language: the IR each op
stages, its numbers against numpy at every stage, its PTO instruction, and its refusals."""

from __future__ import annotations

import numpy as np
import pytest

import nzjit
from nzjit import pl
from nzjit.core.ir import Graph

rng = np.random.default_rng(7)
R, C = 16, 64


def prims(g: Graph) -> list[str]:
    return [e.primitive.name for e in g.eqns]


def run_all_stages(k, *args):
    """The kernel's result after every pass equals the final one (per-pass bisection)."""
    low = k.lower(*args)
    outs = []
    for after in ["trace", *low.passes]:
        copies = [a.copy() for a in args]
        low.run(*copies, after=after)
        outs.append(copies[-1])
    for o in outs[1:]:
        assert np.array_equal(o, outs[0])
    return low, outs[-1]


def unary_kernel(op, dtype=pl.FP32):
    @pl.kernel
    def k(x: pl.Tensor[[R, C], dtype], y: pl.Out[pl.Tensor[[R, C], dtype]]):
        t = pl.load(x, [0, 0], [R, C])
        pl.store(op(t), [0, 0], y)

    return k


@pytest.mark.parametrize(
    "name,ref",
    [
        ("exp", np.exp),
        ("log", np.log),
        ("sqrt", np.sqrt),
        ("rsqrt", lambda x: 1 / np.sqrt(x)),
        ("recip", lambda x: 1 / x),
        ("abs", np.abs),
        ("neg", np.negative),
        ("relu", lambda x: np.maximum(x, 0)),
    ],
)
def test_unary_ops_fp32(name, ref):
    x = (rng.random((R, C)) + 0.25).astype(np.float32)
    if name in ("abs", "neg", "relu"):
        x -= 0.75
    k = unary_kernel(getattr(pl, name))
    low, y = run_all_stages(k, x, np.zeros_like(x))
    assert f"tile.{name}" in prims(low.ir())
    np.testing.assert_allclose(y, ref(x.astype(np.float64)), rtol=1e-6)  # stated tolerance: fp32 1e-6
    assert f"pto.t{name}" in low.pto()


@pytest.mark.parametrize("name", ["add", "sub", "mul", "div", "maximum", "minimum"])
@pytest.mark.parametrize("dtype,np_dtype", [(pl.FP32, np.float32), (pl.FP16, np.float16)])
def test_binary_tile_tile(name, dtype, np_dtype):
    @pl.kernel
    def k(a: pl.Tensor[[R, C], dtype], b: pl.Tensor[[R, C], dtype], y: pl.Out[pl.Tensor[[R, C], dtype]]):
        ta = pl.load(a, [0, 0], [R, C])
        tb = pl.load(b, [0, 0], [R, C])
        pl.store(getattr(pl, name)(ta, tb), [0, 0], y)

    a = rng.standard_normal((R, C)).astype(np_dtype)
    b = (rng.standard_normal((R, C)) + 4).astype(np_dtype)
    low, y = run_all_stages(k, a, b, np.zeros_like(a))
    ufunc = {
        "add": np.add,
        "sub": np.subtract,
        "mul": np.multiply,
        "div": np.divide,
        "maximum": np.maximum,
        "minimum": np.minimum,
    }[name]
    # fp16: computed in fp32 and rounded once = the correctly rounded fp16 operation (exact bits)
    assert np.array_equal(y, ufunc(a.astype(np.float32), b.astype(np.float32)).astype(np_dtype))


@pytest.mark.parametrize(
    "name,prim,instr",
    [
        ("add", "tile.adds", "pto.tadds"),
        ("sub", "tile.subs", "pto.tsubs"),
        ("mul", "tile.muls", "pto.tmuls"),
        ("div", "tile.divs", "pto.tdivs"),
        ("maximum", "tile.maximums", "pto.tmaxs"),
        ("minimum", "tile.minimums", "pto.tmins"),
    ],
)
def test_binary_tile_scalar(name, prim, instr):
    @pl.kernel
    def k(a: pl.Tensor[[R, C], pl.FP32], y: pl.Out[pl.Tensor[[R, C], pl.FP32]]):
        pl.store(getattr(pl, name)(pl.load(a, [0, 0], [R, C]), 0.5), [0, 0], y)

    a = rng.standard_normal((R, C)).astype(np.float32)
    low, y = run_all_stages(k, a, np.zeros_like(a))
    (e,) = [e for e in low.ir().eqns if e.primitive.name == prim]
    assert e.inputs[1].value == 0.5 and str(e.inputs[1].type) == "f32"
    ufunc = {
        "add": np.add,
        "sub": np.subtract,
        "mul": np.multiply,
        "div": np.divide,
        "maximum": np.maximum,
        "minimum": np.minimum,
    }[name]
    assert np.array_equal(y, ufunc(a, np.float32(0.5)))
    assert instr in low.pto()


def test_int32_add_wraps_and_scalar_int():
    @pl.kernel
    def k(a: pl.Tensor[[8, 8], pl.INT32], y: pl.Out[pl.Tensor[[8, 8], pl.INT32]]):
        pl.store(pl.add(pl.load(a, [0, 0], [8, 8]), 1), [0, 0], y)

    a = np.full((8, 8), 2**31 - 1, np.int32)
    y = np.zeros_like(a)
    k(a, y)
    assert (y == -(2**31)).all()


def test_broadcasts_by_shape_and_by_name():
    @pl.kernel
    def k(
        x: pl.Tensor[[R, C], pl.FP32], col: pl.Tensor[[1, C], pl.FP32], y: pl.Out[pl.Tensor[[R, C], pl.FP32]]
    ):
        t = pl.load(x, [0, 0], [R, C])
        c = pl.load(col, [0, 0], [1, C])
        m = pl.row_max(t)
        u = pl.sub(t, m)  # [R, 1] right operand: a row broadcast
        u = pl.mul(u, c)  # [1, C]: a column broadcast
        u = pl.col_expand_add(u, c)
        u = pl.row_expand_mul(u, pl.row_min(t))
        pl.store(u, [0, 0], y)

    x = rng.standard_normal((R, C)).astype(np.float32)
    col = rng.standard_normal((1, C)).astype(np.float32)
    low, y = run_all_stages(k, x, col, np.zeros_like(x))
    names = prims(low.ir())
    for p in (
        "tile.row_max",
        "tile.row_expand_sub",
        "tile.col_expand_mul",
        "tile.col_expand_add",
        "tile.row_min",
        "tile.row_expand_mul",
    ):
        assert p in names
    want = ((x - x.max(1, keepdims=True)) * col + col) * x.min(1, keepdims=True)
    assert np.array_equal(y, want)
    assert "pto.trowexpandsub" in low.pto() and "pto.tcolexpandmul" in low.pto()


def test_reduction_types_and_sums():
    @pl.kernel
    def k(
        x: pl.Tensor[[R, C], pl.FP32],
        rows: pl.Out[pl.Tensor[[R, 8], pl.FP32]],
        cols: pl.Out[pl.Tensor[[1, C], pl.FP32]],
    ):
        t = pl.load(x, [0, 0], [R, C])
        s = pl.row_sum(t, pl.create_tile([R, C], dtype=pl.FP32))
        pl.store(pl.row_expand(pl.create_tile([R, 8], dtype=pl.FP32), s), [0, 0], rows)
        pl.store(pl.col_sum(t), [0, 0], cols)

    x = rng.standard_normal((R, C)).astype(np.float32)
    rows, cols = np.zeros((R, 8), np.float32), np.zeros((1, C), np.float32)
    k(x, rows, cols)
    np.testing.assert_allclose(rows, np.repeat(x.sum(1, keepdims=True), 8, axis=1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(cols, x.sum(0, keepdims=True), rtol=1e-5, atol=1e-5)
    g = k.lower(x, rows, cols)
    (rs,) = [e for e in g.ir().eqns if e.primitive.name == "tile.row_sum"]
    assert str(rs.outputs[0].type) == "f32[16,1]@Vec" and len(rs.inputs) == 2
    (cs,) = [e for e in g.ir().eqns if e.primitive.name == "tile.col_sum"]
    assert str(cs.outputs[0].type) == "f32[1,64]@Vec"


def test_row_sum_numbers_and_col_reductions():
    @pl.kernel
    def k(x: pl.Tensor[[R, C], pl.FP32], y: pl.Out[pl.Tensor[[R, C], pl.FP32]]):
        t = pl.load(x, [0, 0], [R, C])
        u = pl.row_expand_div(t, pl.row_sum(t))
        u = pl.col_expand_sub(u, pl.col_max(u))
        u = pl.col_expand_add(u, pl.col_min(t))
        u = pl.col_expand_mul(u, pl.col_sum(t))
        pl.store(u, [0, 0], y)

    x = (rng.random((R, C)) + 0.5).astype(np.float32)
    _, y = run_all_stages(k, x, np.zeros_like(x))
    u = x / x.sum(1, keepdims=True, dtype=np.float64)
    u = u - u.max(0, keepdims=True)
    u = (u + x.min(0, keepdims=True)) * x.sum(0, keepdims=True, dtype=np.float64)
    np.testing.assert_allclose(y, u, rtol=1e-5, atol=1e-6)  # tree sums: within 1e-5 of a float64 sum


def test_cast_modes_and_pairs():
    @pl.kernel
    def k(
        x: pl.Tensor[[8, 16], pl.FP32],
        y: pl.Out[pl.Tensor[[8, 16], pl.INT32]],
        z: pl.Out[pl.Tensor[[8, 16], pl.INT32]],
    ):
        t = pl.load(x, [0, 0], [8, 16])
        pl.store(pl.cast(t, target_type=pl.INT32, mode="round"), [0, 0], y)
        pl.store(pl.cast(t, pl.INT32, mode=5), [0, 0], z)  # 5 = trunc (pto::RoundMode code)

    x = (np.arange(128, dtype=np.float32).reshape(8, 16) - 64) / 2  # many exact .5 ties
    y, z = np.zeros((8, 16), np.int32), np.zeros((8, 16), np.int32)
    low = k.lower(x, y, z)
    assert [e.params["mode"] for e in low.ir().eqns if e.primitive.name == "tile.cvt"] == ["round", "trunc"]
    k(x, y, z)
    assert np.array_equal(y, (np.sign(x) * np.floor(np.abs(x) + 0.5)).astype(np.int32))
    assert np.array_equal(z, np.trunc(x).astype(np.int32))
    assert "round_mode CAST_ROUND" in low.pto() and "round_mode CAST_TRUNC" in low.pto()


def test_cast_fp32_fp16_bf16_int8_chain():
    @pl.kernel
    def k(
        x: pl.Tensor[[16, 32], pl.FP32],
        y: pl.Out[pl.Tensor[[16, 32], pl.INT8]],
        b: pl.Out[pl.Tensor[[16, 32], pl.BF16]],
    ):
        t = pl.load(x, [0, 0], [16, 32])
        h = pl.cast(t, pl.FP16, mode="rint")
        pl.store(pl.cast(h, pl.INT8, mode="rint"), [0, 0], y)
        pl.store(pl.cast(t, pl.BF16, mode="rint"), [0, 0], b)

    x = (rng.standard_normal((16, 32)) * 100).astype(np.float32)
    y = np.zeros((16, 32), np.int8)
    b = np.zeros((16, 32), pl.BF16.np_dtype)
    k(x, y, b)
    assert np.array_equal(
        y, np.clip(np.rint(x.astype(np.float16).astype(np.float64)), -128, 127).astype(np.int8)
    )
    assert np.array_equal(b, x.astype(pl.BF16.np_dtype))


def test_refusals(line_of):
    def trace(body, dtype=pl.FP32, target=pl.A2A3):
        @pl.kernel(target=target)
        def k(x: pl.Tensor[[R, C], dtype], y: pl.Out[pl.Tensor[[R, C], dtype]]):
            body(x, y)

        return k.lower(np.zeros((R, C), dtype.np_dtype), np.zeros((R, C), dtype.np_dtype))

    with pytest.raises(nzjit.CompileError, match="A2A3 vector unit has no pl.BF16 add") as ei:
        trace(lambda x, y: pl.add(pl.load(x, [0, 0], [R, C]), pl.load(x, [0, 0], [R, C])), pl.BF16)
    assert "help: pl.cast the tile to pl.FP32" in str(ei.value)
    trace(
        lambda x, y: pl.store(pl.add(pl.load(x, [0, 0], [R, C]), 1.0), [0, 0], y), pl.BF16, pl.A5
    )  # A5 has bf16
    with pytest.raises(nzjit.CompileError, match="has no pl.INT32 exp"):
        trace(lambda x, y: pl.exp(pl.load(x, [0, 0], [R, C])), pl.INT32)
    with pytest.raises(nzjit.CompileError, match="works on Vec tiles"):
        trace(lambda x, y: pl.exp(pl.load(x, [0, 0], [R, C], target_memory=pl.Mem.Mat)))
    with pytest.raises(nzjit.CompileError, match="operands differ"):
        trace(lambda x, y: pl.add(pl.load(x, [0, 0], [R, C]), pl.load(x, [0, 0], [R, 32])))
    with pytest.raises(nzjit.CompileError, match="per-row operand must be"):
        trace(lambda x, y: pl.row_expand_add(pl.load(x, [0, 0], [R, C]), pl.load(x, [0, 0], [1, C])))
    with pytest.raises(nzjit.CompileError, match="no pl.FP32 -> pl.INT8 conversion"):
        trace(lambda x, y: pl.cast(pl.load(x, [0, 0], [R, C]), pl.INT8, mode="rint"))
    with pytest.raises(nzjit.CompileError, match="unknown mode 'nearest'"):
        trace(lambda x, y: pl.cast(pl.load(x, [0, 0], [R, C]), pl.FP16, mode="nearest"))
    with pytest.raises(nzjit.CompileError, match="does not combine with a pl.FP32 tile"):

        @pl.kernel
        def k(x: pl.Tensor[[R, C], pl.FP32], n: pl.Scalar[pl.INT32]):
            pl.mul(pl.load(x, [0, 0], [R, C]), n)

        k.lower(np.zeros((R, C), np.float32), 3)
    with pytest.raises(nzjit.CompileError, match=r"a \[4, 1\] Vec tile is a DN column of 16 bytes"):
        trace(lambda x, y: pl.create_tile([4, 1], dtype=pl.FP32))
    with pytest.raises(nzjit.CompileError, match=r"the \[4, 1\] result is a DN column"):
        trace(lambda x, y: pl.row_sum(pl.load(x, [0, 0], [4, C])))


def test_refusal_names_the_kernel_line(line_of):
    @pl.kernel
    def k(x: pl.Tensor[[R, C], pl.INT16]):
        pl.sqrt(pl.load(x, [0, 0], [R, C]))  # the line

    with pytest.raises(nzjit.CompileError) as ei:
        k.lower(np.zeros((R, C), np.int16))
    assert f"test_vector_ops.py:{line_of(k, '# the line')}:" in str(ei.value)


def test_tensor_level_forms_load_the_window():
    @pl.kernel
    def k(
        x: pl.Tensor[[R, 128], pl.FP32],
        b: pl.Tensor[[R, 64], pl.FP32],
        y: pl.Out[pl.Tensor[[R, 64], pl.FP32]],
    ):
        y[:, :] = pl.add(x[:, 64:128], b[:, :])

    x = rng.standard_normal((R, 128)).astype(np.float32)
    b = rng.standard_normal((R, 64)).astype(np.float32)
    y = np.zeros((R, 64), np.float32)
    k(x, b, y)
    assert np.array_equal(y, x[:, 64:] + b)


def test_tensor_level_cast_with_and_without_mode():
    @pl.kernel
    def k(
        x: pl.Tensor[[R, C], pl.FP32],
        y: pl.Out[pl.Tensor[[R, C], pl.FP16]],
        z: pl.Out[pl.Tensor[[R, C], pl.INT32]],
    ):
        y[:, :] = pl.cast(x[:, :], pl.FP16)
        z[:, :] = pl.cast(x[:, :], pl.INT32, mode="floor")

    x = (rng.standard_normal((R, C)) * 10).astype(np.float32)
    y, z = k(x)
    assert np.array_equal(y, x.astype(np.float16)) and np.array_equal(z, np.floor(x).astype(np.int32))


def test_full_create_lrelu_and_valid_region():
    @pl.kernel
    def k(x: pl.Tensor[[R, C], pl.FP32], y: pl.Out[pl.Tensor[[R, C], pl.FP32]]):
        f = pl.full([R, C], dtype=pl.FP32, value=0.25)
        t = pl.load(x, [0, 0], [R, C])
        pl.store(pl.tile.lrelu(pl.add(t, f), 0.1), [0, 0], y)

    x = rng.standard_normal((R, C)).astype(np.float32)
    low, y = run_all_stages(k, x, np.zeros_like(x))
    u = x + np.float32(0.25)
    assert np.array_equal(y, np.maximum(u, u * np.float32(0.1)))
    assert "pto.texpands" in low.pto() and "pto.tlrelu" in low.pto()


def test_integer_constants_must_fit_the_tile():
    def trace(body):
        @pl.kernel
        def k(x: pl.Tensor[[8, 16], pl.INT16]):
            body(pl.load(x, [0, 0], [8, 16]))

        return k.lower(np.zeros((8, 16), np.int16))

    with pytest.raises(
        nzjit.CompileError, match=r"the constant 100000 does not fit the pl.INT16 tile \(-32768 .. 32767\)"
    ):
        trace(lambda t: pl.add(t, 100000))
    with pytest.raises(
        nzjit.CompileError, match="a float constant 0.5 does not combine with a pl.INT16 tile"
    ):
        trace(lambda t: pl.mul(t, 0.5))
    with pytest.raises(nzjit.CompileError, match="the constant 40000 does not fit"):
        trace(lambda t: pl.full([8, 16], dtype=pl.INT16, value=40000))
    trace(lambda t: pl.add(t, -32768))  # the range end is accepted
