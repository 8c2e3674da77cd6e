"""Input/output aliasing (issue 24 item 3): an argument that shares memory with an output is
refused before dispatch (DispatchError), unless it is the one pl.InOut parameter; nothing is
written. Host arrays passed twice are uploaded once, so such a call would read what it writes."""

from __future__ import annotations

import numpy as np
import pytest

import runtime
from nzjit import pl
from runtime import DeviceTensor, DispatchError, Worker
from runtime.dispatch import ParamSpec, check_args, find_alias


@pl.kernel
def swap_halves(x: pl.Tensor[[32, 64], pl.FP32], out: pl.Out[pl.Tensor[[32, 64], pl.FP32]]):
    a = pl.load(x, [16, 0], [16, 64])
    pl.store(a + a, [0, 0], out)
    b = pl.load(x, [0, 0], [16, 64])
    pl.store(b + b, [16, 0], out)


@pl.kernel
def two_outs(
    x: pl.Tensor[[16, 64], pl.FP32],
    o1: pl.Out[pl.Tensor[[16, 64], pl.FP32]],
    o2: pl.Out[pl.Tensor[[16, 64], pl.FP32]],
):
    a = pl.load(x, [0, 0], [16, 64])
    pl.store(a + a, [0, 0], o1)
    pl.store(a * a, [0, 0], o2)


@pl.kernel
def double_in_place(x: pl.InOut[pl.Tensor[[32, 64], pl.FP32]]):
    a = pl.load(x, [0, 0], [32, 64])
    pl.store(a + a, [0, 0], x)


@pl.kernel
def add_inputs(
    x: pl.Tensor[[32, 64], pl.FP32],
    y: pl.Tensor[[32, 64], pl.FP32],
    out: pl.Out[pl.Tensor[[32, 64], pl.FP32]],
):
    pl.store(pl.load(x, [0, 0], [32, 64]) + pl.load(y, [0, 0], [32, 64]), [0, 0], out)


def _swap_ref(x):
    return np.concatenate([2 * x[16:], 2 * x[:16]])


X = np.arange(32 * 64, dtype=np.float32).reshape(32, 64)
MSG = r"parameters 'x' and 'out' share memory .*an input and an output must not alias.*pl.InOut"


def test_the_same_host_array_as_input_and_output_is_refused_every_time():
    out = np.zeros_like(X)
    swap_halves(X, out)  # a good call first: its signature is cached, the aliased one must not use it
    np.testing.assert_array_equal(out, _swap_ref(X))
    a = X.copy()
    for _ in range(2):
        with pytest.raises(DispatchError, match=MSG):
            swap_halves(a, a)
        np.testing.assert_array_equal(a, X)  # nothing written


def test_overlapping_views_are_refused():
    big = np.concatenate([X, X])
    before = big.tobytes()
    with pytest.raises(DispatchError, match=r"share memory \(4096 bytes overlap\)"):
        swap_halves(big[0:32], big[16:48])
    assert big.tobytes() == before
    swap_halves(big[0:32], big[32:64])  # adjacent, not overlapping: fine
    np.testing.assert_array_equal(big[32:64], _swap_ref(X))


def test_the_same_or_overlapping_device_tensors_are_refused():
    dev = Worker(0)
    t = dev.alloc_tensor(X.shape, X.dtype, init=X)
    other = dev.alloc_tensor((16,), np.float32, init=np.arange(16, dtype=np.float32))
    out = dev.alloc_tensor(X.shape, X.dtype, init=np.zeros_like(X))
    swap_halves(t, out)
    for _ in range(2):
        with pytest.raises(DispatchError, match=MSG):
            swap_halves(t, t)
    big = dev.alloc_tensor((64, 64), np.float32, init=np.concatenate([X, X]))
    lo = DeviceTensor(dev, big.address, (32, 64), np.dtype(np.float32))  # hand-made views into `big`
    mid = DeviceTensor(dev, big.address + 16 * 64 * 4, (32, 64), np.dtype(np.float32))
    with pytest.raises(DispatchError, match=MSG):
        swap_halves(lo, mid)
    np.testing.assert_array_equal(dev.copy_from(t), X)
    np.testing.assert_array_equal(dev.copy_from(big), np.concatenate([X, X]))
    np.testing.assert_array_equal(dev.copy_from(other), np.arange(16, dtype=np.float32))


def test_two_aliased_outputs_are_refused_two_aliased_inputs_are_fine():
    x = X[:16].copy()
    o = np.full((16, 64), 3, np.float32)
    with pytest.raises(
        DispatchError, match=r"parameters 'o1' and 'o2' share memory .*outputs must not alias"
    ):
        two_outs(x, o, o)
    assert (o == 3).all()
    out = np.zeros_like(X)
    add_inputs(X, X, out)  # both only read
    np.testing.assert_array_equal(out, 2 * X)


def test_inout_is_the_way_to_update_in_place():
    a = X.copy()
    double_in_place(a)
    np.testing.assert_array_equal(a, 2 * X)


def test_an_orchestration_refuses_aliased_arguments_before_any_rank_runs():
    @pl.orchestration
    def prog(x: pl.Tensor[[2, 32, 64], pl.FP32], out: pl.Out[pl.Tensor[[2, 32, 64], pl.FP32]]):
        for r in range(2):
            swap_halves(x[r], out[r], device=r)

    a = np.stack([X, X + 1])
    before = a.tobytes()
    with pytest.raises(DispatchError, match=MSG):
        prog(a, a, cluster=runtime.Cluster(2))
    assert a.tobytes() == before

    @pl.orchestration
    def crossed(x: pl.Tensor[[2, 32, 64], pl.FP32], out: pl.Out[pl.Tensor[[2, 32, 64], pl.FP32]]):
        swap_halves(x[0], out[0], device=0)
        swap_halves(out[0], out[1], device=0)  # reads what the first call wrote: ordered, one rank

    out = np.zeros((2, 32, 64), np.float32)
    crossed(a, out, cluster=runtime.Cluster(1))
    np.testing.assert_array_equal(out[0], _swap_ref(X))
    np.testing.assert_array_equal(out[1], _swap_ref(_swap_ref(X)))


def test_find_alias_is_exact_on_byte_ranges():
    buf = np.zeros(64, np.int8)
    specs = [ParamSpec("a", (16,), np.int8), ParamSpec("b", (16,), np.int8, is_output=True)]
    assert find_alias([("a", buf[0:16], False), ("b", buf[16:32], True)]) is None
    assert "1 bytes overlap" in find_alias([("a", buf[0:16], False), ("b", buf[15:31], True)])
    assert find_alias([("a", buf[0:16], False), ("b", buf[0:16], False)]) is None  # two inputs
    assert find_alias([("a", buf[0:0], False), ("b", buf[0:0], True)]) is None  # empty
    with pytest.raises(DispatchError, match="'a' and 'b' share memory"):
        check_args(specs, [buf[0:16], buf[8:24]])


def _no_alias_search(monkeypatch):
    """Make the general path's alias search fail loudly: a call it serves is not the cached one."""

    def searched(items):
        raise AssertionError("the general path's alias search ran")

    monkeypatch.setattr(runtime.dispatch, "find_alias", searched)


def test_the_cached_call_compares_byte_ranges_of_resident_tensors(monkeypatch):
    # issue 21 item 7: a cached call compares the ranges of its written tensor pairs, with the
    # signature's byte counts, instead of the general search; its boundary is the same as
    # find_alias's (test_find_alias_is_exact_on_byte_ranges): touching is fine, one byte is not
    dev = Worker(0)
    t = dev.alloc_tensor(X.shape, X.dtype, init=X)
    swap_halves(t, dev.alloc_tensor(X.shape, X.dtype))  # the signatures' plans
    add_inputs(t, t, dev.alloc_tensor(X.shape, X.dtype))
    nbytes = X.nbytes
    big = dev.alloc_tensor((96, 64), np.float32, init=np.concatenate([X, X, X]))

    def view(offset):  # hand-made (32, 64) tensors into `big`
        return DeviceTensor(dev, big.address + offset, (32, 64), np.dtype(np.float32))

    with monkeypatch.context() as m:
        _no_alias_search(m)
        swap_halves(view(0), view(nbytes))  # out starts where x ends
        swap_halves(view(2 * nbytes), view(nbytes))  # x starts where out ends
        add_inputs(t, t, view(2 * nbytes))  # two inputs may share memory
    got = dev.copy_from(big)
    np.testing.assert_array_equal(got[32:64], _swap_ref(X))
    np.testing.assert_array_equal(got[64:], 2 * X)
    before = dev.copy_from(big)
    for x, out in ((view(0), view(nbytes - 4)), (view(nbytes - 4), view(0))):  # 4 bytes in common
        with pytest.raises(
            DispatchError, match=MSG.replace("share memory ", r"share memory \(4 bytes overlap\)")
        ):
            swap_halves(x, out)
    np.testing.assert_array_equal(dev.copy_from(big), before)  # nothing written


def test_the_cached_call_compares_byte_ranges_of_host_arrays(monkeypatch):
    out = np.zeros_like(X)
    swap_halves(X, out)  # the signatures' plans
    two_outs(X[:16], out[:16], out[16:])
    big = np.concatenate([X, X])
    with monkeypatch.context() as m:
        _no_alias_search(m)
        swap_halves(big[0:32], big[32:64])  # adjacent
        two_outs(X[:16], big[0:16], big[16:32])  # two outputs side by side
    np.testing.assert_array_equal(big[0:16], 2 * X[:16])
    flat = np.concatenate([X, X]).reshape(-1)
    before = flat.copy()
    with pytest.raises(DispatchError, match=r"share memory \(4 bytes overlap\)"):
        swap_halves(flat[: 32 * 64].reshape(32, 64), flat[32 * 64 - 1 : 64 * 64 - 1].reshape(32, 64))
    with pytest.raises(DispatchError, match=r"'o1' and 'o2' share memory \(4 bytes overlap\)"):
        two_outs(X[:16], flat[: 16 * 64].reshape(16, 64), flat[16 * 64 - 1 : 32 * 64 - 1].reshape(16, 64))
    np.testing.assert_array_equal(flat, before)
