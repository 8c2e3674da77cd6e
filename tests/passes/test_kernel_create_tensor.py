"""`pl.create_tensor(shape, dtype)` inside a kernel (issue 23 item 4): PyPTO's own spelling of the
accumulator idiom (`acc = pl.create_tensor(...)`, then `if k0 == 0: acc = pl.matmul(...) else:
acc = pl.matmul_acc(acc, ...)`). ConvertTensorToTileOps makes the start value an Acc tile.create;
every stage computes the same; read as a tensor it is a GM scratch (test_kernel_scratch.py)."""

from __future__ import annotations

import numpy as np
import pytest

from nzjit import CompileError, pl

rng = np.random.default_rng(12)
A = rng.integers(-3, 4, (64, 256)).astype(np.float16)
B = rng.integers(-3, 4, (256, 128)).astype(np.float16)
REF = A.astype(np.float32) @ B.astype(np.float32)


@pl.kernel
def pypto_accumulator(
    a: pl.Tensor[[64, 256], pl.FP16],
    b: pl.Tensor[[256, 128], pl.FP16],
    c: pl.Out[pl.Tensor[[64, 128], pl.FP32]],
):
    acc = pl.create_tensor([64, 128], dtype=pl.FP32)
    for k0 in pl.range(0, 256, 64):
        if k0 == 0:
            acc = pl.matmul(a[:, k0 : k0 + 64], b[k0 : k0 + 64, :])
        else:
            acc = pl.matmul_acc(acc, a[:, k0 : k0 + 64], b[k0 : k0 + 64, :])
    c[:, :] = acc


def test_the_accumulator_idiom_with_create_tensor():
    low = pypto_accumulator.lower(A, B, np.zeros((64, 128), np.float32))
    traced = [e.primitive.name for e in low.ir("trace").eqns]
    assert traced[0] == "tensor.create"
    first = low.ir("ConvertTensorToTileOps").eqns[0]
    assert first.primitive.name == "tile.create" and str(first.outputs[0].type) == "f32[64,128]@Acc"
    for after in ["trace", *low.passes]:
        c = np.zeros((64, 128), np.float32)
        low.run(A, B, c, after=after)
        assert np.array_equal(c, REF), after
    assert "scf.if" in low.pto()
    assert np.array_equal(pypto_accumulator(A, B), REF)


# a GM scratch use (stored into, loaded from) is built since issue 23 item 4: test_kernel_scratch.py
def test_a_create_tensor_shape_is_static_and_positive():
    with pytest.raises(
        CompileError, match=r"pl.create_tensor in a kernel takes a static shape of positive ints"
    ):

        @pl.kernel
        def bad(y: pl.Out[pl.Tensor[[16, 64], pl.FP32]]):
            pl.create_tensor([0, 64], dtype=pl.FP32)

        bad.lower(np.zeros((16, 64), np.float32))
