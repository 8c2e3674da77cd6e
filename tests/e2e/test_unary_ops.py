"""`pl.neg` and `pl.abs` (api.md, second round: unary vector ALU ops on Vec tiles), added as issue
21's proof that a primitive lives in one place per layer: the type rule, the backend rule, the
PTO emitter and a fuzz generator entry. Results equal numpy's exactly (negation and absolute
value are exact); every execution path (generic impl, specialised step, lane-batched) gives the
same bytes; refusals name the rule and the fix."""

from __future__ import annotations

import numpy as np
import pytest

import nzjit
from nzjit import pl
from nzjit import prims as P
from nzjit.backend.options import Options, using
from nzjit.fuzz.gen import generate
from nzjit.fuzz.gen_unary import unary_ops

RNG = np.random.default_rng(21)
OPS = {"neg": (pl.neg, np.negative), "abs": (pl.abs, np.abs)}


def _kernel(op, dtype, rows=32, cols=64):
    f = OPS[op][0]

    @pl.kernel
    def k(x: pl.Tensor[[rows, cols], dtype], o: pl.Out[pl.Tensor[[rows, cols], dtype]]):
        for lane in pl.spmd(rows // 16):
            t = pl.load(x, [lane * 16, 0], [16, cols], target_memory=pl.Mem.Vec)
            pl.store(f(t), [lane * 16, 0], o)

    return k


def _data(np_dtype, shape=(32, 64)):
    if np.issubdtype(np_dtype, np.integer):
        return RNG.integers(-1000, 1000, shape).astype(np_dtype)
    x = RNG.standard_normal(shape).astype(np_dtype)
    x[0, :4] = [0.0, -0.0, np.inf, -np.inf]  # signed zeros and infinities too
    return x


@pytest.mark.parametrize(
    "op,dtype,np_dtype",
    [
        ("neg", pl.FP32, np.float32),
        ("neg", pl.FP16, np.float16),
        ("neg", pl.INT32, np.int32),
        ("abs", pl.FP32, np.float32),
        ("abs", pl.FP16, np.float16),
    ],
)
def test_unary_equals_numpy_on_every_path(op, dtype, np_dtype):
    k = _kernel(op, dtype)
    x = _data(np_dtype)
    ref = OPS[op][1](x)
    outs = []
    for options in (Options(), Options(batch=False), Options(fast=False)):  # batched, per lane, generic
        with using(options):
            outs.append(k(x))
    for o in outs:
        assert o.dtype == np_dtype
        assert o.tobytes() == ref.tobytes()  # bit for bit: -0.0 and the infinities included


def test_neg_wraps_the_most_negative_int32():  # two's complement, as numpy and the vector unit
    k = _kernel("neg", pl.INT32)
    x = np.full((32, 64), np.iinfo(np.int32).min, np.int32)
    np.testing.assert_array_equal(k(x), x)


@pytest.mark.parametrize("op", ["neg", "abs"])
def test_ir_and_pto(op):
    k = _kernel(op, pl.FP32)
    low = k.lower(np.zeros((32, 64), np.float32), np.zeros((32, 64), np.float32))
    eqns = [e for e in low.final.eqns[0].params["body"].eqns if e.primitive is P.ELEMENTWISE[op]]
    assert len(eqns) == 1
    (e,) = eqns
    assert e.primitive.name == f"tile.{op}"
    assert e.outputs[0].type == e.inputs[0].type  # same shape, dtype, Vec memory
    assert e.outputs[0].type.memory is pl.Mem.Vec
    assert f"pto.t{op}" in low.pto()
    nzjit.check_ptoas(low.pto())


def test_abs_refuses_integer_tiles():  # TABS takes float / half only on the device
    with pytest.raises(
        nzjit.CompileError, match=r"pl\.abs works on FP32 / FP16 tiles \(TABS on the device\)"
    ) as ei:
        _kernel("abs", pl.INT32).lower(np.zeros((32, 64), np.int32), np.zeros((32, 64), np.int32))
    assert "pl.cast the tile to FP32" in str(ei.value)


@pytest.mark.parametrize("op", ["neg", "abs"])
def test_unary_refuses_a_mat_tile(op):
    f = OPS[op][0]

    @pl.kernel
    def k(x: pl.Tensor[[32, 64], pl.FP16], o: pl.Out[pl.Tensor[[32, 64], pl.FP16]]):
        pl.store(f(pl.load(x, [0, 0], [32, 64], target_memory=pl.Mem.Mat)), [0, 0], o)

    with pytest.raises(nzjit.CompileError, match=rf"pl\.{op} works on Vec tiles.*target_memory=pl\.Mem\.Vec"):
        k.lower(np.zeros((32, 64), np.float16), np.zeros((32, 64), np.float16))


@pytest.mark.parametrize("op", ["neg", "abs"])
def test_unary_of_a_tensor_window_loads_it_into_vec(op):
    # issue 22 (docs/vector-ops.md): every vector op also takes a static 2-D tensor window, loaded
    # into Vec first (PyPTO's tensor-level form); the elementwise equation is the same tile.<op>
    f, ref = OPS[op]

    @pl.kernel
    def k(x: pl.Tensor[[32, 64], pl.FP32], o: pl.Out[pl.Tensor[[32, 64], pl.FP32]]):
        pl.store(f(x), [0, 0], o)

    x = _data(np.float32)
    assert k(x).tobytes() == ref(x).tobytes()
    low = k.lower(x, np.zeros((32, 64), np.float32))
    assert [e.primitive for e in low.final.eqns if e.primitive is P.ELEMENTWISE[op]] == [P.ELEMENTWISE[op]]


@pytest.mark.parametrize("op", ["neg", "abs"])
def test_unary_refuses_a_tensor_that_is_no_2d_window(op):
    f = OPS[op][0]

    @pl.kernel
    def k(x: pl.Tensor[[2, 32, 64], pl.FP32], o: pl.Out[pl.Tensor[[32, 64], pl.FP32]]):
        pl.store(f(x), [0, 0], o)

    with pytest.raises(nzjit.CompileError, match=rf"pl\.{op} on a tensor needs a static 2-D window"):
        k.lower(np.zeros((2, 32, 64), np.float32), np.zeros((32, 64), np.float32))


@pytest.mark.parametrize("op", ["neg", "abs"])
def test_unary_refuses_a_python_value(op):
    with pytest.raises(nzjit.CompileError, match=rf"pl\.{op} takes Vec tiles"):

        @pl.kernel
        def k(x: pl.Tensor[[32, 64], pl.FP32], o: pl.Out[pl.Tensor[[32, 64], pl.FP32]]):
            pl.store(OPS[op][0](1.5), [0, 0], o)

        k.lower(np.zeros((32, 64), np.float32), np.zeros((32, 64), np.float32))


def test_the_fuzzer_draws_neg_and_abs():
    assert unary_ops("FP32") == ["neg", "abs"] and unary_ops("INT16") == []
    tags = {t for i in range(60) for t in generate(20261129, i, "vec_ew").tags}
    assert {"ew:neg", "ew:abs"} <= tags
