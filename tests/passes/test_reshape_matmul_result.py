"""`out[...] = pl.reshape(acc, shape)` of a matmul result (issue 23 item 4): ConvertTensorToTileOps
stores the Acc tile into the whole output viewed with the tile's shape (the same row-major
elements); any other use of a reshaped matmul result, or a destination that is not a whole static
ND tensor, is refused with the fix."""

from __future__ import annotations

import numpy as np
import pytest

from nzjit import CompileError, pl

rng = np.random.default_rng(4)
A = rng.integers(-3, 4, (16, 64)).astype(np.float16)
B = rng.integers(-3, 4, (64, 64)).astype(np.float16)
REF = A.astype(np.float32) @ B.astype(np.float32)


@pl.kernel
def to_rank3(
    a: pl.Tensor[[16, 64], pl.FP16],
    b: pl.Tensor[[64, 64], pl.FP16],
    c: pl.Out[pl.Tensor[[2, 16, 32], pl.FP32]],
):
    c[:, :, :] = pl.reshape(pl.matmul(a, b), [2, 16, 32])


@pl.kernel
def to_flat(
    a: pl.Tensor[[16, 64], pl.FP16], b: pl.Tensor[[64, 64], pl.FP16], c: pl.Out[pl.Tensor[[1024], pl.FP32]]
):
    c[:] = pl.reshape(pl.matmul(a, b), [1024])


def test_a_reshaped_matmul_result_is_stored_through_a_view_of_the_output():
    low = to_rank3.lower(A, B, np.zeros((2, 16, 32), np.float32))
    g = low.ir()
    names = [e.primitive.name for e in g.eqns]
    assert names[-2:] == ["tensor.reshape", "tile.store"]
    view, store = g.eqns[-2:]
    assert view.params["shape"] == (16, 64) and view.inputs[0] is g.params[2]
    assert store.inputs[0].type.memory is pl.Mem.Acc and store.inputs[-1] is view.outputs[0]
    low.pto()
    assert np.array_equal(to_rank3(A, B), REF.reshape(2, 16, 32))
    assert np.array_equal(to_flat(A, B), REF.reshape(-1))


def test_refusals():
    @pl.kernel
    def part(
        a: pl.Tensor[[16, 64], pl.FP16],
        b: pl.Tensor[[64, 64], pl.FP16],
        c: pl.Out[pl.Tensor[[2, 1024], pl.FP32]],
    ):
        c[0:1, :] = pl.reshape(pl.matmul(a, b), [1, 1024])

    with pytest.raises(
        CompileError,
        match=r"a reshaped matmul result is stored by viewing the destination with the "
        r"result's shape \[16, 64\]: the destination must be a whole static ND "
        r"tensor, got a window \[1, 1024\] of f32\[2,1024\]",
    ) as ei:
        part.lower(A, B, np.zeros((2, 1024), np.float32))
    assert "help: assign it to the whole output" in str(ei.value)

    @pl.kernel
    def other_use(
        a: pl.Tensor[[16, 64], pl.FP16],
        b: pl.Tensor[[64, 64], pl.FP16],
        c: pl.Out[pl.Tensor[[16, 64], pl.FP32]],
    ):
        r = pl.reshape(pl.matmul(a, b), [16, 64])
        c[:, :] = pl.matmul_acc(r, a, b)

    with pytest.raises(
        CompileError, match=r"a reshaped matmul result can only be assigned to a tensor"
    ) as ei:
        other_use.lower(A, B, np.zeros((16, 64), np.float32))
    assert "help: pl.move it to pl.Mem.Vec first" in str(ei.value)
