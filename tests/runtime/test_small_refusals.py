"""Small refusals of issue 24 item 9: device= of a direct call, byte-swapped dtypes, a loop too
long to simulate, a hand-made DeviceTensor with a list shape. Each refused before anything is
written, with a message that tells the two sides apart."""

from __future__ import annotations

import numpy as np
import pytest

import runtime
from nzjit import pl
from runtime import DeviceTensor, DispatchError, SimulatorLimitError, Worker


@pl.kernel
def copy16(x: pl.Tensor[[16, 64], pl.INT32], out: pl.Out[pl.Tensor[[16, 64], pl.INT32]]):
    pl.store(pl.load(x, [0, 0], [16, 64]), [0, 0], out)


X = np.arange(16 * 64, dtype=np.int32).reshape(16, 64)


@pytest.mark.parametrize("device", [-1, "0", 1.0, True, [0]])
def test_device_must_be_a_non_negative_int(device):
    out = np.full_like(X, 7)
    copy16(X, out, device=0)  # the good call first (its plan is cached)
    np.testing.assert_array_equal(out, X)
    out[...] = 7
    with pytest.raises(DispatchError, match=r"device= must be a non-negative int rank, got "):
        copy16(X, out, device=device)
    assert (out == 7).all()
    copy16(X, out, device=np.int64(1))  # a numpy integer is an int
    np.testing.assert_array_equal(out, X)


def test_worker_device_ids_are_non_negative_ints():
    for bad in (-1, "0", 1.5, True):
        with pytest.raises(DispatchError, match="device_id must be a non-negative int"):
            Worker(bad)


def test_a_byte_swapped_dtype_is_named_as_such():
    swapped = X.astype(">i4")
    assert swapped.dtype.name == "int32"  # what made the old message read "expects int32, got int32"
    out = np.full_like(X, 7)
    with pytest.raises(
        DispatchError,
        match=r"expects dtype int32, got int32 \(byte-swapped, '>i4'\); the device "
        r"is little-endian: pass a.astype\(np.int32\)",
    ):
        copy16(swapped, out)
    assert (out == 7).all()
    with pytest.raises(DispatchError, match=r"byte-swapped int32.*a.astype\(np.int32\)"):
        Worker(0).alloc_tensor(X.shape, np.int32, init=swapped)
    copy16(swapped.astype(np.int32), out)
    np.testing.assert_array_equal(out, X)


def test_a_loop_too_long_to_simulate_is_refused_clearly():
    @pl.kernel
    def k(x: pl.Tensor[[16, 64], pl.INT32], out: pl.Out[pl.Tensor[[16, 64], pl.INT32]]):
        for _ in pl.range(2**40):
            pl.store(pl.load(x, [0, 0], [16, 64]), [0, 0], out)

    out = np.full_like(X, 7)
    with pytest.raises(
        SimulatorLimitError,
        match=r"test_small_refusals.py:\d+: this loop runs 1099511627776 "
        r"trips; the simulator runs at most 2147483648",
    ):
        k(X, out)
    assert (out == 7).all()
    assert issubclass(SimulatorLimitError, runtime.DeviceError)


def test_a_hand_made_device_tensor_with_a_list_shape_works():
    dev = Worker(0)
    real = dev.alloc_tensor(X.shape, X.dtype, init=X)
    t = DeviceTensor(dev, real.address, [16, 64], "int32")  # a list and a dtype name
    assert t.shape == (16, 64) and t.dtype == np.int32
    out = dev.alloc_tensor(X.shape, X.dtype)
    copy16(t, out)
    copy16(t, out)  # the cached path too
    np.testing.assert_array_equal(dev.copy_from(out), X)
    with pytest.raises(DispatchError, match="shape must be a sequence of ints"):
        DeviceTensor(dev, real.address, [16.5, 64], np.int32)
    with pytest.raises(DispatchError, match="negative dimension"):
        DeviceTensor(dev, real.address, (-1, 64), np.int32)


ROW = 0  # read by `pick` at trace time (docs/safety.md: a kernel is traced once)


@pl.kernel
def pick(x: pl.Tensor[[32, 64], pl.INT32], out: pl.Out[pl.Tensor[[16, 64], pl.INT32]]):
    pl.store(pl.load(x, [ROW, 0], [16, 64]), [0, 0], out)


def test_a_global_is_read_when_the_kernel_is_traced_as_documented():
    global ROW
    x = np.arange(32 * 64, dtype=np.int32).reshape(32, 64)
    try:
        np.testing.assert_array_equal(pick(x), x[:16])
        ROW = 16
        np.testing.assert_array_equal(pick(x), x[:16])  # same signature: the first trace's ROW
        pick.clear_cache()
        np.testing.assert_array_equal(pick(x), x[16:])  # traced again: the new ROW
    finally:
        ROW = 0
        pick.clear_cache()
