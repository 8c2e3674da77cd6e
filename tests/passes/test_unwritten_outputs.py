"""Unwritten outputs (issue 24 item 7): a pl.Out that no store writes is reported when the kernel
is lowered (UnwrittenOutputWarning naming it); fresh device memory (an omitted Out, alloc_tensor
without init) holds the poison pattern (every byte 0xFF: NaN / -1), so reading it is visible."""

from __future__ import annotations

import warnings

import numpy as np

import runtime
from nzjit import pl
from nzjit.passes.unwritten_outputs import UnwrittenOutputWarning
from runtime.memory import POISON_BYTE, poison_array


def _lowering_warnings(kernel):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kernel.lower()
    return [w for w in caught if issubclass(w.category, UnwrittenOutputWarning)]


def test_an_out_no_store_writes_is_reported_when_lowered():
    @pl.kernel
    def k(
        x: pl.Tensor[[16, 64], pl.FP32],
        o1: pl.Out[pl.Tensor[[16, 64], pl.FP32]],
        o2: pl.Out[pl.Tensor[[16, 64], pl.FP32]],
    ):
        pl.store(pl.load(x, [0, 0], [16, 64]), [0, 0], o1)

    (w,) = _lowering_warnings(k)
    assert "Out parameter 'o2' of kernel k is never written by any store" in str(w.message)
    assert w.filename == __file__  # at the kernel's def line
    x = np.ones((16, 64), np.float32)
    o1, o2 = k(x)  # compiled (and reported) once, by the lower() above
    np.testing.assert_array_equal(o1, x)
    assert np.isnan(o2).all() and (o2.view(np.uint8) == POISON_BYTE).all()  # fresh memory, not zeros


def test_outputs_written_through_views_and_loops_are_not_reported():
    @pl.kernel
    def k(
        x: pl.Tensor[[2, 16, 64], pl.FP32],
        out: pl.Out[pl.Tensor[[2, 16, 64], pl.FP32]],
        acc: pl.Out[pl.Tensor[[16, 64], pl.FP32]],
    ):
        for lane in pl.spmd(2):
            o = out[lane]
            o[:, :] = pl.load(x[lane], [0, 0], [16, 64])
        for r in pl.range(1):
            pl.store(pl.load(x[r], [0, 0], [16, 64]), [0, 0], acc)

    assert _lowering_warnings(k) == []


def test_alloc_tensor_without_init_and_an_unwritten_window_show_the_poison():
    dev = runtime.Worker(0)
    t = dev.alloc_tensor((4, 8), np.int32)
    np.testing.assert_array_equal(dev.copy_from(t), np.full((4, 8), -1, np.int32))
    np.testing.assert_array_equal(poison_array((2,), np.int8), [-1, -1])
    assert np.isnan(poison_array((3,), np.float16)).all()

    @pl.kernel
    def half(x: pl.Tensor[[32, 64], pl.INT32], out: pl.Out[pl.Tensor[[32, 64], pl.INT32]]):
        pl.store(pl.load(x, [0, 0], [16, 64]), [0, 0], out)  # rows 16..31 never written

    x = np.arange(32 * 64, dtype=np.int32).reshape(32, 64)
    o = half(x)
    np.testing.assert_array_equal(o[:16], x[:16])
    assert (o[16:] == -1).all()
    given = np.zeros((32, 64), np.int32)
    half(x, given)  # a given output keeps the bytes it held where nothing is written
    assert (given[16:] == 0).all()
