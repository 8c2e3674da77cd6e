"""Freeing memory in use (issue 24 item 6): GM buffers of freed tensors are reused for later
allocations (the pool), but never while any view of them is live - an in-flight call on another
thread, or a failed call's rollback snapshot, would otherwise write into an unrelated tensor."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import runtime
from nzjit import pl
from runtime import DeviceError, Worker
from runtime.memory import GlobalMemory

N = 1 << 17  # poolable (>= 64 KiB)


def test_a_buffer_without_views_is_reused_one_with_a_live_view_is_not():
    gm = GlobalMemory()
    a = gm.alloc(N)
    gm.free(a)
    assert gm._pool_bytes == N  # reused by the next allocation of that size
    b = gm.alloc(N)
    assert gm._pool_bytes == 0
    view = gm.view(b, (N,), (1,))  # what an in-flight instruction or a rollback snapshot holds
    gm.free(b)
    assert gm._pool_bytes == 0  # not handed out again while `view` lives
    c = gm.upload(np.full(N, 5, np.uint8))
    view[...] = 9  # a late write through the stale view
    assert (gm.read(c, N) == 5).all()
    with pytest.raises(DeviceError, match="freed"):
        gm.view(b, (16,), (1,))  # and the freed address stays refused
    del view


@pl.kernel
def scale(x: pl.Tensor[[256, 128], pl.FP32], out: pl.Out[pl.Tensor[[256, 128], pl.FP32]]):
    for r in pl.range(16):
        t = pl.load(x, [r * 16, 0], [16, 128])
        pl.store(t + t, [r * 16, 0], out)


def test_freeing_an_output_of_an_in_flight_call_never_corrupts_the_next_tensor(monkeypatch):
    """Thread B frees the call's output while the call runs and allocates a tensor of the same
    size; the call then fails and restores its output snapshot: the new tensor keeps its bytes."""
    dev = Worker(0)
    x = np.arange(256 * 128, dtype=np.float32).reshape(256, 128)
    xt = dev.alloc_tensor(x.shape, x.dtype, init=x)
    out = dev.alloc_tensor(x.shape, x.dtype, init=np.full(x.shape, 3, np.float32))
    victim_init = np.full(x.shape, 11, np.float32)
    made: list = []
    gm = dev.gm
    real = gm._checked

    def during_the_call(lo, hi):
        if not made and xt.address <= lo < xt.address + xt.nbytes:  # the kernel reads x

            def other_thread():
                dev.free_tensor(out)
                made.append(dev.alloc_tensor(x.shape, x.dtype, init=victim_init))

            t = threading.Thread(target=other_thread)
            t.start()
            t.join()
            raise DeviceError("injected device fault")
        return real(lo, hi)

    monkeypatch.setattr(gm, "_checked", during_the_call)
    with pytest.raises(DeviceError, match="injected device fault|use after free"):
        scale(xt, out)  # the fault, or (a path that retries) the freed output
    monkeypatch.undo()
    (victim,) = made
    np.testing.assert_array_equal(dev.copy_from(victim), victim_init)
    np.testing.assert_array_equal(dev.copy_from(xt), x)
    with pytest.raises(runtime.DispatchError, match="freed"):
        dev.copy_from(out)
