"""Worker, DeviceTensor, StackedDeviceTensor, Cluster (api.md "runtime", NZ-29)."""

from __future__ import annotations

import numpy as np
import pytest

import runtime
from runtime import Cluster, DeviceTensor, DispatchError, StackedDeviceTensor, Worker
from runtime.memory import POISON_BYTE


def test_alloc_copy_free():
    w = Worker(3)
    a = np.arange(12, dtype=np.int16).reshape(3, 4)
    t = w.alloc_tensor((3, 4), np.int16, init=a)
    assert isinstance(t, DeviceTensor) and t.worker is w and t.shape == (3, 4)
    assert t.nbytes == 24 and t.dtype == np.int16 and not t.freed and t.address % 512 == 0
    got = w.copy_from(t)
    np.testing.assert_array_equal(got, a)
    got[0, 0] = 99  # a copy, not a window into device memory
    assert w.copy_from(t)[0, 0] == 0
    z = w.alloc_tensor((2, 2), np.float32)  # fresh device memory: the poison pattern (NaN)
    assert np.isnan(w.copy_from(z)).all() and (w.copy_from(z).view(np.uint8) == POISON_BYTE).all()
    w.free_tensor(t)
    assert t.freed


def test_copy_from_returns_bytes_as_stored():  # NZ-1: the annotation never converts bytes
    w = Worker()
    a = np.arange(32 * 32, dtype=np.int8).reshape(32, 32)
    packed = runtime.pack_nz(a)
    t = w.alloc_tensor(a.shape, a.dtype, init=packed)
    np.testing.assert_array_equal(w.copy_from(t), packed)


def test_use_after_free_and_foreign_tensor_refused():
    w, other = Worker(0), Worker(1)
    t = w.alloc_tensor((4,), np.float32)
    with pytest.raises(DispatchError, match="worker 0, not on worker 1"):
        other.copy_from(t)
    with pytest.raises(DispatchError, match="worker 0, not on worker 1"):
        other.free_tensor(t)
    w.free_tensor(t)
    with pytest.raises(DispatchError, match="use after free"):
        w.copy_from(t)
    with pytest.raises(DispatchError, match="use after free"):
        w.free_tensor(t)
    with pytest.raises(DispatchError, match="use after free"):
        w.write_tensor(t, np.zeros(4, np.float32))
    with pytest.raises(DispatchError, match="expected a DeviceTensor"):
        w.copy_from(np.zeros(4))


def test_init_must_match_shape_and_dtype():
    w = Worker()
    with pytest.raises(DispatchError, match="dtype float64 does not match float32"):
        w.alloc_tensor((4,), np.float32, init=np.zeros(4))
    with pytest.raises(DispatchError, match="shape"):
        w.alloc_tensor((4,), np.float32, init=np.zeros(5, np.float32))
    t = w.alloc_tensor((2,), np.float32, init=[1, 2])  # a list is converted
    np.testing.assert_array_equal(w.copy_from(t), [1, 2])


def test_uploads_are_counted():  # resident tensors are not re-uploaded
    w = Worker()
    t = w.alloc_tensor((8,), np.int32, init=np.arange(8, dtype=np.int32))
    w.alloc_tensor((8,), np.int32)  # zeros: a device memset, not an upload
    assert w.gm.uploads == 1
    for _ in range(3):
        w.copy_from(t)
        runtime.dispatch.check_args([runtime.dispatch.ParamSpec("x", (8,), np.int32)], [t], w)
    assert w.gm.uploads == 1
    w.write_tensor(t, np.ones(8, np.int32))
    assert w.gm.uploads == 2 and (w.copy_from(t) == 1).all()


def test_stacked_validation():
    c = Cluster(2)
    s0 = c.workers[0].alloc_tensor((4, 8), np.float16)
    s1 = c.workers[1].alloc_tensor((4, 8), np.float16)
    st = StackedDeviceTensor([s0, s1], (2, 4, 8), [0, 1])
    assert st[0] is s0 and st[1] is s1 and st[-1] is s1 and st[np.int64(1)] is s1
    assert st.dtype == np.float16 and st.shape == (2, 4, 8) and len(st) == 2
    with pytest.raises(DispatchError, match="must all be equal"):
        StackedDeviceTensor([s0, s1], (3, 4, 8), [0, 1])
    with pytest.raises(DispatchError, match="must all be equal"):
        StackedDeviceTensor([s0, s1], (2, 4, 8), [0])
    with pytest.raises(DispatchError, match="expected full_shape"):
        StackedDeviceTensor([s0, s1], (2, 8, 4), [0, 1])
    with pytest.raises(DispatchError, match="lives on worker 1, worker_ids\\[1\\] says 0"):
        StackedDeviceTensor([s0, s1], (2, 4, 8), [0, 0])
    s2 = c.workers[1].alloc_tensor((4, 8), np.float32)
    with pytest.raises(DispatchError, match="dtype"):
        StackedDeviceTensor([s0, s2], (2, 4, 8), [0, 1])
    with pytest.raises(DispatchError, match="expected a DeviceTensor"):
        StackedDeviceTensor([s0, np.zeros((4, 8))], (2, 4, 8), [0, 1])
    c.workers[1].free_tensor(s1)
    with pytest.raises(DispatchError, match="freed"):
        StackedDeviceTensor([s0, s1], (2, 4, 8), [0, 1])


def test_stacked_indexing_refusals():
    c = Cluster(2)
    st = c.alloc_stacked_tensor(np.zeros((2, 16), np.float32))
    for bad in (slice(0, 1), True, 1.0, (0,), [0]):
        with pytest.raises(DispatchError, match="must be an int"):
            st[bad]
    with pytest.raises(DispatchError, match="out of range"):
        st[2]


def test_cluster_round_trip():
    c = Cluster(3)
    assert [w.device_id for w in c.workers] == [0, 1, 2]
    host = np.arange(3 * 32 * 16, dtype=np.float32).reshape(3, 32, 16)
    st = c.alloc_stacked_tensor(host)
    assert st.full_shape == (3, 32, 16) and st.worker_ids == (0, 1, 2)
    for r in range(3):
        assert st[r].worker is c.workers[r]
        np.testing.assert_array_equal(c.workers[r].copy_from(st[r]), host[r])
    np.testing.assert_array_equal(c.copy_stacked_from(st), host)
    with pytest.raises(DispatchError, match="rank count 3"):
        c.alloc_stacked_tensor(np.zeros((2, 4), np.float32))
    other = Cluster(3)
    with pytest.raises(DispatchError, match="does not live on this cluster"):
        other.copy_stacked_from(st)
    c.free_stacked(st)
    assert all(s.freed for s in st.shards)
    with pytest.raises(DispatchError):
        Cluster(0)
