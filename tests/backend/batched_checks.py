"""Helpers of the lane-batched SPMD tests (test_batched_spmd*.py): a call recorder, and one kernel run
on resident tensors with and without batching, compared byte for byte (outputs and refusal text)."""

from __future__ import annotations

import runtime
from nzjit.backend.options import current, using


def record(monkeypatch, owner, name: str, when=lambda kwargs: True) -> list:
    """Replace `owner.name` by a wrapper that appends each call's result (when `when(kwargs)`)."""
    seen: list = []
    real = getattr(owner, name)

    def wrapped(*a, **k):
        r = real(*a, **k)
        if when(k):
            seen.append(r)
        return r

    monkeypatch.setattr(owner, name, wrapped)
    return seen


def run(kernel, args, batch: bool):
    with using(current().with_(batch=batch)):
        w = runtime.Worker(0)
        devs = [w.alloc_tensor(a.shape, a.dtype, init=a) for a in args]
        err = None
        try:
            kernel(*devs)
        except (runtime.DeviceError, runtime.DispatchError) as e:  # a device fault or a refused window
            err = str(e)
        return [w.copy_from(d).tobytes() for d in devs], err


def compare(kernel, *args):
    got, ref = run(kernel, args, True), run(kernel, args, False)
    assert got[0] == ref[0]
    assert got[1] == ref[1]
    return got
