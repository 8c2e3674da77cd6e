"""pl.Scalar[pl.FP32 / FP16 / BF16] kernel parameters as vector operands; pl.tile.fillpad outside the
valid region; tiles as values: windows, assignment into a window, pl.reshape of a tile."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

import nzjit
import runtime
from nzjit import pl

rng = np.random.default_rng(11)


def stages(low, *args, outs_n=1):
    outs = []
    for after in ["trace", *low.passes]:
        copies = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
        low.run(*copies, after=after)
        outs.append([c for c in copies if isinstance(c, np.ndarray)])
    for o in outs[1:]:
        assert all(np.array_equal(a, b) for a, b in zip(o, outs[0]))
    return outs[-1][-outs_n:]


def test_float_scalar_parameters_round_to_their_dtype():
    @pl.kernel
    def k(
        x: pl.Tensor[[16, 64], pl.FP32],
        s: pl.Scalar[pl.FP32],
        h: pl.Scalar[pl.FP16],
        b: pl.Scalar[pl.BF16],
        y: pl.Out[pl.Tensor[[16, 64], pl.FP32]],
    ):
        t = pl.load(x, [0, 0], [16, 64])
        pl.store(pl.sub(pl.add(pl.mul(t, s), h), b), [0, 0], y)

    x = rng.standard_normal((16, 64)).astype(np.float32)
    y = np.zeros_like(x)
    low = k.lower(x, 0.1, 0.1, 0.1, y)
    (mul,) = [e for e in low.ir().eqns if e.primitive.name == "tile.muls"]
    assert str(mul.inputs[1].type) == "f32"
    (got,) = stages(low, x, 0.1, 0.1, 0.1, y)
    f32 = np.float32
    want = (x * f32(0.1) + f32(np.float16(0.1))) - f32(ml_dtypes.bfloat16(0.1))
    assert np.array_equal(got, want)
    k(x, 0.3, 0.1, 0.1, y)  # another value, same compiled kernel
    assert np.array_equal(y, (x * f32(0.3) + f32(np.float16(0.1))) - f32(ml_dtypes.bfloat16(0.1)))
    assert "%s: f32" in low.pto() or ": f32" in low.pto().splitlines()[0]


def test_float_scalar_refusals():
    @pl.kernel
    def k(x: pl.Tensor[[16, 64], pl.FP32], h: pl.Scalar[pl.FP16]):
        pl.add(pl.load(x, [0, 0], [16, 64]), h)

    x = np.zeros((16, 64), np.float32)
    with pytest.raises(runtime.DispatchError, match="'h' is FP16: 1000000.0 is outside its range"):
        k(x, 1e6)
    with pytest.raises(runtime.DispatchError, match="'h' expects a real number, got str"):
        k(x, "1")
    with pytest.raises(TypeError, match="takes an integer dtype or pl.FP32"):
        pl.Scalar[pl.FP8E4M3]


@pytest.mark.parametrize(
    "pad,fill",
    [
        (pl.PadValue.zero, 0.0),
        (pl.PadValue.max, math.inf),
        (pl.PadValue.min, -math.inf),
        (-math.inf, -math.inf),
    ],
)
def test_fillpad_then_row_max_ignores_the_padding(pad, fill):
    @pl.kernel
    def k(x: pl.Tensor[[16, 64], pl.FP32], y: pl.Out[pl.Tensor[[16, 64], pl.FP32]]):
        t = pl.load(x, [0, 0], [16, 64], valid_shape=[16, 40])
        pl.store(pl.tile.fillpad(t, pad_value=pad), [0, 0], y)

    x = rng.standard_normal((16, 64)).astype(np.float32)
    y = np.zeros((16, 64), np.float32)
    low = k.lower(x, y)
    (fp,) = [e for e in low.ir().eqns if e.primitive.name == "tile.fillpad"]
    assert str(fp.outputs[0].type) == "f32[16,64]@Vec"  # fully valid after the padding
    (got,) = stages(low, x, y)
    assert np.array_equal(got[:, :40], x[:, :40]) and (got[:, 40:] == fill).all()
    assert "pto.tfillpad" in low.pto()


def test_softmax_of_a_partial_row_with_min_padding():
    @pl.kernel
    def k(x: pl.Tensor[[8, 64], pl.FP32], y: pl.Out[pl.Tensor[[8, 64], pl.FP32]]):
        t = pl.tile.fillpad(pl.load(x, [0, 0], [8, 64], valid_shape=[8, 50]), pad_value=pl.PadValue.min)
        e = pl.exp(pl.sub(t, pl.row_max(t)))  # exp(-inf) = 0: padding adds nothing to the sum
        pl.store(pl.div(e, pl.row_sum(e)), [0, 0], y)

    x = rng.standard_normal((8, 64)).astype(np.float32)
    y = np.zeros((8, 64), np.float32)
    k(x, y)
    x = x[:, :50]
    ref = np.exp(x - x.max(1, keepdims=True))
    ref /= ref.sum(1, keepdims=True)
    np.testing.assert_allclose(y[:, :50], ref, rtol=1e-6, atol=1e-7)
    assert (y[:, 50:] == 0).all()


def test_fillpad_refuses_other_values():
    @pl.kernel
    def k(x: pl.Tensor[[8, 64], pl.FP32]):
        pl.tile.fillpad(pl.load(x, [0, 0], [8, 64]), pad_value=1.5)

    with pytest.raises(nzjit.CompileError, match="pad_value 1.5 is not one the hardware has"):
        k.lower(np.zeros((8, 64), np.float32))


def test_tile_windows_assignment_and_reshape():
    @pl.kernel
    def k(
        x: pl.Tensor[[16, 128], pl.FP32],
        y: pl.Out[pl.Tensor[[16, 64], pl.FP32]],
        z: pl.Out[pl.Tensor[[1, 16], pl.FP32]],
    ):
        s = pl.load(x, [0, 0], [16, 128])
        t = pl.add(s[:, 0:64], s[:, 64:128])
        t[0:1, :] = pl.full([1, 64], dtype=pl.FP32, value=7.0)
        t[8] = s[3, 64:128]  # an int index keeps the rank: a [1, C] row
        pl.store(t, [0, 0], y)
        pl.store(pl.reshape(pl.row_max(s), [1, 16]), [0, 0], z)

    x = rng.standard_normal((16, 128)).astype(np.float32)
    y, z = np.zeros((16, 64), np.float32), np.zeros((1, 16), np.float32)
    low = k.lower(x, y, z)
    names = [e.primitive.name for e in low.ir().eqns]
    assert names.count("tile.slice") == 3 and names.count("tile.assemble") == 2 and "tile.reshape" in names
    gy, gz = stages(low, x, y, z, outs_n=2)
    want = x[:, :64] + x[:, 64:]
    want[0], want[8] = 7, x[3, 64:]
    assert np.array_equal(gy, want) and np.array_equal(gz[0], x.max(1))
    pto = low.pto()
    assert "pto.textract" in pto and "pto.tinsert" in pto and "pto.treshape" in pto


def test_tile_value_refusals():
    def trace(body):
        @pl.kernel
        def k(x: pl.Tensor[[16, 128], pl.FP32]):
            body(pl.load(x, [0, 0], [16, 128]))

        return k.lower(np.zeros((16, 128), np.float32))

    with pytest.raises(nzjit.CompileError, match="starts and ends on 32-byte blocks"):
        trace(lambda s: s[:, 4:68])
    with pytest.raises(nzjit.CompileError, match="must be static and inside"):
        trace(lambda s: s[:, 0:256])
    with pytest.raises(nzjit.CompileError, match="changes the element count"):
        trace(lambda s: pl.reshape(s, [16, 64]))
    with pytest.raises(nzjit.CompileError, match="cannot assign a tile of shape"):

        def assign(s):
            s[0:2, :] = pl.full([1, 128], dtype=pl.FP32, value=1.0)

        trace(assign)


def test_tile_assignment_in_a_staged_loop():
    @pl.kernel
    def refused(x: pl.Tensor[[8, 64], pl.FP32]):
        t = pl.load(x, [0, 0], [8, 64])
        for _i in pl.range(4):
            t[0:1, :] = pl.add(t[0:1, :], 1.0)

    with pytest.raises(nzjit.CompileError, match="would not be carried") as ei:
        refused.lower(np.zeros((8, 64), np.float32))
    assert "t = pl.tile.assemble(t, value, [0, 0])" in str(ei.value)

    @pl.kernel
    def carried(x: pl.Tensor[[8, 64], pl.FP32], y: pl.Out[pl.Tensor[[8, 64], pl.FP32]]):
        t = pl.load(x, [0, 0], [8, 64])
        for _i in pl.range(4):
            t = pl.tile.assemble(t, pl.add(t[2:3, :], 1.0), [2, 0])
        pl.store(t, [0, 0], y)

    x = rng.integers(-50, 50, (8, 64)).astype(np.float32)  # exact sums
    y = carried(x)
    want = x.copy()
    want[2] += 4
    assert np.array_equal(y, want)


def test_storing_a_column_tile_is_refused_with_the_reshape_fix(line_of):
    @pl.kernel
    def k(x: pl.Tensor[[16, 64], pl.FP32], y: pl.Out[pl.Tensor[[16, 1], pl.FP32]]):
        pl.store(pl.row_max(pl.load(x, [0, 0], [16, 64])), [0, 0], y)  # the store

    with pytest.raises(nzjit.CompileError, match=r"TSTORE writes no Vec DN tile into an ND tensor") as ei:
        k.lower(np.zeros((16, 64), np.float32), np.zeros((16, 1), np.float32))
    assert f":{line_of(k, '# the store')}:" in str(ei.value)
    assert "pl.reshape(t, [1, 16])" in str(ei.value)
