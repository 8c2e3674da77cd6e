"""The calling convention (api.md "Calling a kernel"): omitted Out parameters are allocated and
returned, given ones are written in place and returned; bad arguments raise runtime.DispatchError
before anything runs, and a refused call leaves every output byte-identical."""

from __future__ import annotations

import numpy as np
import pytest

import runtime
from nzjit import pl

X = np.arange(16 * 32, dtype=np.int32).reshape(16, 32)


def make():
    """A fresh kernel (own cache) with two Out parameters."""

    @pl.kernel
    def twice(
        x: pl.Tensor[[16, 32], pl.INT32],
        o1: pl.Out[pl.Tensor[[16, 32], pl.INT32]],
        o2: pl.Out[pl.Tensor[[16, 32], pl.INT32]],
    ):
        t = pl.load(x, [0, 0], [16, 32])
        pl.store(t, [0, 0], o1)
        pl.store(t + t, [0, 0], o2)

    return twice


def test_omitted_outs_are_allocated_and_returned_as_a_tuple_in_parameter_order():
    o1, o2 = make()(X)
    assert o1.dtype == np.int32 and o1.shape == (16, 32)
    np.testing.assert_array_equal(o1, X)
    np.testing.assert_array_equal(o2, 2 * X)


def test_one_out_is_returned_alone():
    @pl.kernel
    def copy(x: pl.Tensor[[16, 32], pl.INT32], o: pl.Out[pl.Tensor[[16, 32], pl.INT32]]):
        pl.store(pl.load(x, [0, 0], [16, 32]), [0, 0], o)

    out = copy(X)
    assert isinstance(out, np.ndarray)
    np.testing.assert_array_equal(out, X)


def test_given_outs_are_written_in_place_and_returned():
    a = np.full((16, 32), 7, np.int32)
    b = np.full((16, 32), 9, np.int32)
    r = make()(X, a, b)
    assert r[0] is a and r[1] is b
    np.testing.assert_array_equal(a, X)
    np.testing.assert_array_equal(b, 2 * X)


def test_inout_is_read_and_written():
    @pl.kernel
    def bump(x: pl.Tensor[[16, 32], pl.INT32], acc: pl.InOut[pl.Tensor[[16, 32], pl.INT32]]):
        pl.store(pl.add(pl.load(acc, [0, 0], [16, 32]), pl.load(x, [0, 0], [16, 32])), [0, 0], acc)

    acc = np.ones((16, 32), np.int32)
    assert bump(X, acc) is acc
    np.testing.assert_array_equal(acc, X + 1)


def test_device_tensors_are_arguments_too():
    k = make()
    w = runtime.Worker(0)
    x = w.alloc_tensor((16, 32), np.int32, init=X)
    o1 = w.alloc_tensor((16, 32), np.int32)
    o2 = w.alloc_tensor((16, 32), np.int32)
    r = k(x, o1, o2)
    assert r[0] is o1 and r[1] is o2
    np.testing.assert_array_equal(w.copy_from(o2), 2 * X)


BAD = {
    "rank": np.zeros((16,), np.int32),
    "shape": np.zeros((16, 33), np.int32),
    "dtype": np.zeros((16, 32), np.int64),
    "non-contiguous": np.zeros((32, 32), np.int32)[::2],
    "fortran-order": np.asfortranarray(np.zeros((16, 32), np.int32)),
}


@pytest.mark.parametrize("position", [0, 1, 2])
@pytest.mark.parametrize("what", list(BAD))
def test_bad_arguments_are_refused_before_anything_runs(what, position):
    k = make()
    a = np.full((16, 32), 7, np.int32)
    b = np.full((16, 32), 9, np.int32)
    before = (a.tobytes(), b.tobytes())
    args = [X, a, b]
    args[position] = BAD[what]
    bad_before = BAD[what].tobytes()
    with pytest.raises(runtime.DispatchError) as ei:
        k(*args)
    assert isinstance(ei.value, TypeError)  # api.md: DispatchError is a TypeError
    assert ("x", "o1", "o2")[position] in str(ei.value)  # names the parameter
    assert (a.tobytes(), b.tobytes()) == before  # every output byte-identical
    assert BAD[what].tobytes() == bad_before
    assert k.trace_count == 0  # refused before it was even compiled


def test_a_refused_call_after_a_good_one_leaves_outputs_untouched():
    k = make()
    k(X)
    a = np.full((16, 32), 7, np.int32)
    b = np.full((16, 32), 9, np.int32)
    with pytest.raises(runtime.DispatchError):
        k(X.astype(np.float32), a, b)
    assert (a == 7).all() and (b == 9).all()


def test_wrong_argument_count_and_scalar_types():
    k = make()
    with pytest.raises(runtime.DispatchError, match="takes 3 arguments"):
        k(X, X)

    @pl.kernel
    def s(x: pl.Tensor[[16, 32], pl.INT32], n: pl.Scalar[pl.INT32], o: pl.Out[pl.Tensor[[16, 32], pl.INT32]]):
        pl.store(pl.load(x, [n, 0], [1, 32]), [0, 0], o)

    o = np.full((16, 32), 5, np.int32)
    with pytest.raises(runtime.DispatchError, match="'n'"):
        s(X, 1.5, o)
    assert (o == 5).all()
    np.testing.assert_array_equal(s(X, np.int64(3))[0], X[3])


def test_a_failure_while_running_leaves_given_outputs_untouched():
    @pl.kernel
    def k(x: pl.Tensor[[16, 32], pl.INT32], n: pl.Scalar[pl.INT32], o: pl.Out[pl.Tensor[[16, 32], pl.INT32]]):
        pl.store(pl.load(x, [0, 0], [16, 32]), [0, 0], o)
        pl.store(pl.load(x, [n, 0], [1, 32]), [0, 0], o)  # n = -1: a negative offset (NZ-18)

    o = np.full((16, 32), 5, np.int32)
    with pytest.raises(runtime.DispatchError, match="negative"):
        k(X, -1, o)
    assert (o == 5).all()


def test_scalar_argument_outside_its_width_is_refused():
    from nzjit import pl

    @pl.kernel
    def shift(
        x: pl.Tensor[[16, 32], pl.FP32], s: pl.Scalar[pl.INT32], out: pl.Out[pl.Tensor[[16, 32], pl.FP32]]
    ):
        t = pl.load(x, [0, 0], [16, 32])
        pl.store(t, [0, 0], out)

    x = np.zeros((16, 32), np.float32)
    out = np.full((16, 32), 7, np.float32)
    with pytest.raises(
        runtime.DispatchError, match=r"INT32: 4294967299 is outside \[-2147483648, 2147483647\]"
    ):
        shift(x, 2**32 + 3, out)
    assert (out == 7).all()
    shift(x, -(2**31), out)  # the bounds themselves fit
    assert (out == 0).all()
