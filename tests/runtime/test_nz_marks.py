"""NZ byte provenance (issue 24 item 1; api.md runtime additions; NZ-1: the annotation never
converts bytes, so the host must say which bytes are NZ): pack_nz / as_nz mark an array, an NZ
parameter refuses an unmarked one, an ND parameter a marked one, before anything is written."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

import runtime
from nzjit import pl
from runtime import DispatchError, NzArray, Worker, as_nz, pack_nz, unpack_nz
from runtime.device import NzDeviceTensor
from runtime.layout_marks import is_nz, layout_of


@pl.kernel
def mm_nz(
    x: pl.Tensor[[32, 64], pl.INT8],
    w: pl.Tensor[[32, 64], pl.INT8, pl.NZ],
    out: pl.Out[pl.Tensor[[32, 32], pl.INT32]],
):
    out[:, :] = pl.matmul(x[:, :], w[:, :], b_trans=True)


@pl.kernel
def mm_nd(
    x: pl.Tensor[[32, 64], pl.INT8],
    w: pl.Tensor[[32, 64], pl.INT8],
    out: pl.Out[pl.Tensor[[32, 32], pl.INT32]],
):
    out[:, :] = pl.matmul(x[:, :], w[:, :], b_trans=True)


def _operands(seed=0):
    rng = np.random.default_rng(seed)
    return rng.integers(-128, 128, (32, 64)).astype(np.int8), rng.integers(-128, 128, (32, 64)).astype(
        np.int8
    )


def _ref(x, w):
    return x.astype(np.int32) @ w.astype(np.int32).T


# ------------------------------------------------------------------ the mark itself
def test_pack_nz_marks_and_the_mark_survives_what_keeps_planes_whole():
    w = np.arange(3 * 32 * 64, dtype=np.int8).reshape(3, 32, 64)
    p = pack_nz(w)
    assert isinstance(p, NzArray) and is_nz(p) and layout_of(p) == "NZ"
    assert isinstance(p, np.ndarray) and p.shape == w.shape and p.dtype == w.dtype
    kept = {
        "p[1]": p[1],
        "p[1:3]": p[1:3],
        "p[::2]": p[::2],
        "p[-1]": p[-1],
        "copy": p.copy(),
        "np.copy": np.copy(p),
        "stack": np.stack([p[0], p[2]]),
        "concatenate": np.concatenate([p, p]),
        "pickle": pickle.loads(pickle.dumps(p)),
        "astype same": p.astype(np.int8),
    }
    for what, a in kept.items():
        assert is_nz(a), what
    np.testing.assert_array_equal(unpack_nz(np.stack([p[0], p[2]])), w[[0, 2]])
    np.testing.assert_array_equal(unpack_nz(pickle.loads(pickle.dumps(p))), w)
    dropped = {
        "p + 1": p + 1,
        "p * 2": p * 2,
        "astype": p.astype(np.int16),
        "reshape": p.reshape(-1),
        "T": p.T,
        "row window": p[:, 0:16],
        "column window": p[..., 0:32],
        "ellipsis": p[...],
        "stack on the plane": np.stack([p[0], p[1]], axis=-1),
        "concatenate on the plane": np.concatenate([p, p], axis=2),
        "stack with a plain": np.stack([p[0], w[0]]),
        "unpack": unpack_nz(p),
        "np.asarray (a base-class view)": np.asarray(p),
    }
    for what, a in dropped.items():
        assert not is_nz(a), what


def test_pack_nz_of_an_nz_array_is_refused():
    w = np.zeros((32, 64), np.int8)
    with pytest.raises(ValueError, match="already NZ"):
        pack_nz(pack_nz(w))
    with pytest.raises(ValueError, match="already NZ"):
        pack_nz(as_nz(w))


def test_as_nz_marks_without_copying_and_checks_the_shape():
    raw = pack_nz(np.arange(32 * 64, dtype=np.int8).reshape(32, 64)).view(np.ndarray).copy()  # "from a file"
    m = as_nz(raw)
    assert is_nz(m) and np.shares_memory(m, raw) and not is_nz(raw)
    assert as_nz(m) is m
    with pytest.raises(ValueError, match="multiple of 16"):  # NZ-8
        as_nz(np.zeros((24, 64), np.int8))
    with pytest.raises(ValueError, match="C-contiguous"):
        as_nz(np.zeros((64, 32), np.int8).T)
    with pytest.raises(TypeError, match="numpy array"):
        as_nz([[1, 2]])


# ------------------------------------------------------------------ kernel arguments
def test_plain_array_for_an_nz_parameter_is_refused_and_nothing_is_written():
    x, w = _operands()
    out = np.full((32, 32), 7, np.int32)
    with pytest.raises(
        DispatchError,
        match=r"parameter 'w' is NZ \(pl.NZ\) and got a plain \(ND\) array"
        r".*runtime.pack_nz\(a\).*runtime.as_nz\(a\)",
    ):
        mm_nz(x, w, out)
    assert (out == 7).all()
    mm_nz(x, pack_nz(w), out)
    np.testing.assert_array_equal(out, _ref(x, w))


def test_nz_array_for_an_nd_parameter_and_double_packing_are_refused():
    x, w = _operands(1)
    out = np.full((32, 32), 7, np.int32)
    with pytest.raises(DispatchError, match=r"parameter 'w' is ND and got an NZ array .*pack_nz / as_nz"):
        mm_nd(x, pack_nz(w), out)
    with pytest.raises(DispatchError, match=r"parameter 'x' is ND and got an NZ array"):
        mm_nz(pack_nz(x), pack_nz(w), out)
    assert (out == 7).all()
    mm_nd(x, w, out)
    np.testing.assert_array_equal(out, _ref(x, w))


def test_device_tensors_carry_the_layout():
    x, w = _operands(2)
    dev = Worker(0)
    xt = dev.alloc_tensor(x.shape, x.dtype, init=x)
    wnz = dev.alloc_tensor(w.shape, w.dtype, init=pack_nz(w))
    wnd = dev.alloc_tensor(w.shape, w.dtype, init=w)
    assert isinstance(wnz, NzDeviceTensor) and wnz.layout == "NZ" and wnd.layout == "ND"
    assert is_nz(dev.copy_from(wnz)) and not is_nz(dev.copy_from(wnd))
    out = dev.alloc_tensor((32, 32), np.int32, init=np.full((32, 32), 7, np.int32))
    other = dev.alloc_tensor((64,), np.int8, init=np.arange(64, dtype=np.int8))
    # the first call succeeds (and is cached); the same signature with the other layout is refused
    for _ in range(2):
        mm_nz(xt, wnz, out)
        np.testing.assert_array_equal(dev.copy_from(out), _ref(x, w))
        dev.write_tensor(out, np.full((32, 32), 7, np.int32))
        with pytest.raises(DispatchError, match=r"parameter 'w' is NZ .*plain \(ND\) DeviceTensor.*pack_nz"):
            mm_nz(xt, wnd, out)
        with pytest.raises(DispatchError, match=r"parameter 'w' is ND and got an NZ NzDeviceTensor"):
            mm_nd(xt, wnz, out)
        assert (dev.copy_from(out) == 7).all()
        np.testing.assert_array_equal(dev.copy_from(other), np.arange(64, dtype=np.int8))
        np.testing.assert_array_equal(unpack_nz(dev.copy_from(wnz)), w)


def test_alloc_and_write_tensor_check_the_layout():
    dev = Worker(0)
    w = np.zeros((32, 64), np.int8)
    with pytest.raises(DispatchError, match="layout='NZ' but init is a plain.*pack_nz"):
        dev.alloc_tensor(w.shape, w.dtype, init=w, layout="NZ")
    with pytest.raises(DispatchError, match="layout='ND' but init is NZ-marked"):
        dev.alloc_tensor(w.shape, w.dtype, init=pack_nz(w), layout="ND")
    with pytest.raises(DispatchError, match="multiple of 16"):
        dev.alloc_tensor((24, 64), np.int8, layout="NZ")
    t = dev.alloc_tensor(w.shape, w.dtype, layout="NZ")
    with pytest.raises(DispatchError, match="write_tensor: .* is NZ, the data is ND"):
        dev.write_tensor(t, w)
    dev.write_tensor(t, pack_nz(w + 1))
    np.testing.assert_array_equal(unpack_nz(dev.copy_from(t)), w + 1)


def test_stacked_tensors_carry_the_layout():
    cluster = runtime.Cluster(2)
    w = np.arange(2 * 32 * 64, dtype=np.int8).reshape(2, 32, 64)
    st = cluster.alloc_stacked_tensor(pack_nz(w))
    assert st.layout == "NZ" and all(s.layout == "NZ" for s in st.shards)
    back = cluster.copy_stacked_from(st)
    assert is_nz(back)
    np.testing.assert_array_equal(unpack_nz(back), w)
    assert cluster.alloc_stacked_tensor(w).layout == "ND"
    with pytest.raises(DispatchError, match="shard 1 is ND, shard 0 is NZ"):
        runtime.StackedDeviceTensor(
            [st[0], cluster.workers[1].alloc_tensor((32, 64), np.int8)], (2, 32, 64), [0, 1]
        )


def test_an_orchestration_refuses_a_plain_stacked_weight_for_an_nz_parameter():
    cluster = runtime.Cluster(2)
    x = np.random.default_rng(3).integers(-128, 128, (2, 32, 64)).astype(np.int8)
    w = np.random.default_rng(4).integers(-128, 128, (2, 32, 64)).astype(np.int8)

    @pl.orchestration
    def both(
        x: pl.Tensor[[2, 32, 64], pl.INT8],
        w: pl.Tensor[[2, 32, 64], pl.INT8, pl.NZ],
        out: pl.Out[pl.Tensor[[2, 32, 32], pl.INT32]],
    ):
        for r in range(2):
            mm_nz(x[r], w[r], out[r], device=r)

    out = np.full((2, 32, 32), 7, np.int32)
    with pytest.raises(DispatchError, match="parameter 'w' is NZ .*pack_nz"):
        both(x, cluster.alloc_stacked_tensor(w), out, cluster=cluster)
    with pytest.raises(DispatchError, match="parameter 'w' is NZ .*pack_nz"):
        both(x, w, out, cluster=cluster)
    assert (out == 7).all()
    both(x, cluster.alloc_stacked_tensor(pack_nz(w)), out, cluster=cluster)
    for r in range(2):
        np.testing.assert_array_equal(out[r], _ref(x[r], w[r]))
    both(x, pack_nz(w), out, cluster=cluster)  # a host NZ weight: its leading-axis planes stay NZ
    for r in range(2):
        np.testing.assert_array_equal(out[r], _ref(x[r], w[r]))
