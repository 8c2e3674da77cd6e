"""Dynamic extents inside kernels (issue 23 item 7): `pl.tensor.dim(x, axis)` / `pl.dim` and
`x.shape[axis]` of a `pl.dynamic` dimension are kernel values (`tensor.dim`, the call's extent:
the backend's dims, the PTO function's `index` argument), and `x[:, :]` / `x[0 : x.shape[0], :]`
is a window of the whole dynamic axis. A slice that needs a static extent is refused with the fix."""

from __future__ import annotations

import numpy as np
import pytest

from nzjit import CompileError, pl
from nzjit.backend.options import Options, using

B = pl.dynamic("B")
rng = np.random.default_rng(7)


@pl.kernel
def scale_rows(x: pl.Tensor[[B, 64], pl.FP32], y: pl.Out[pl.Tensor[[B, 64], pl.FP32]]):
    xv = x[:, :]
    yv = y[0 : x.shape[0], :]
    for i in pl.range(pl.tensor.dim(x, 0) // 16):
        t = pl.load(xv, [i * 16, 0], [16, 64])
        pl.store(pl.mul(t, 3.0), [i * 16, 0], yv)


def test_dim_and_whole_dynamic_windows():
    x = rng.standard_normal((48, 64)).astype(np.float32)
    low = scale_rows.lower(x, np.zeros_like(x))
    g = low.ir()
    dims = [e for e in g.eqns if e.primitive.name == "tensor.dim"]
    assert [(e.params["axis"], e.params["name"]) for e in dims] == [(0, "B")]
    slices = [e for e in g.eqns if e.primitive.name == "tensor.slice"]
    assert [str(e.outputs[0].type.shape) for e in slices] == ["(B, 64)", "(B, 64)"]
    text = low.pto()
    assert "%B: index" in text and "arith.floordivsi %B, %c16" in text
    for n in (48, 32, 16):  # one compiled kernel, the extent of each call
        xs = rng.standard_normal((n, 64)).astype(np.float32)
        for o in (Options(), Options(fast=False)):
            with using(o):
                assert np.array_equal(scale_rows(xs), xs * np.float32(3))


def test_shape_arithmetic_and_a_static_dim():
    @pl.kernel
    def k(x: pl.Tensor[[B, 64], pl.INT32], y: pl.Out[pl.Tensor[[1, 64], pl.INT32]]):
        assert pl.dim(x, 1) == 64 and pl.tensor.dim(x, -1) == 64  # static: a Python int
        n = x.shape[0] * 2 - 1  # B * 2 - 1, traced
        t = pl.load(x, [0, 0], [1, 64])
        pl.store(pl.add(t, pl.cast(n, pl.INT32)), [0, 0], y)

    x = rng.integers(-9, 9, (5, 64)).astype(np.int32)
    assert np.array_equal(k(x), x[:1] + 9)


def test_refusals():
    def lower(body):
        @pl.kernel
        def k(x: pl.Tensor[[B, 64], pl.FP32], y: pl.Out[pl.Tensor[[B, 64], pl.FP32]]):
            body(x, y)

        return k.lower(np.zeros((32, 64), np.float32), np.zeros((32, 64), np.float32))

    with pytest.raises(
        CompileError,
        match=r"the extent of the slice on axis 0 of the pl.dynamic dimension B must "
        r"be static or the whole axis",
    ) as ei:
        lower(lambda x, y: x[16:, :])
    assert "help: slice the whole axis (x[:, ...]) or a constant extent" in str(ei.value)
    with pytest.raises(CompileError, match=r"pl.tensor.dim: axis 2 is not an axis of the rank-2 tensor"):
        lower(lambda x, y: pl.tensor.dim(x, 2))
    with pytest.raises(CompileError, match=r"pl.tensor.dim reads a tensor's dimension, got 3"):
        lower(lambda x, y: pl.tensor.dim(3, 0))
