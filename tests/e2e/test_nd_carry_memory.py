"""A loop carry the body never reads dies on entry to each trip: a 128 KiB Vec tile reloaded
under its old name 256 times fits the 192 KiB vector buffer (one tile live, not one per trip)."""

from __future__ import annotations

import numpy as np

from nzjit import pl


def test_unread_carry_is_freed_each_trip():
    @pl.kernel
    def k(x: pl.Tensor[[16, 2048], pl.FP32], out: pl.Out[pl.Tensor[[16, 2048], pl.FP32]]):
        t = pl.load(x, [0, 0], [16, 2048])
        for _trip in pl.range(256):
            t = pl.load(x, [0, 0], [16, 2048])
        pl.store(t, [0, 0], out)

    x = np.arange(16 * 2048, dtype=np.float32).reshape(16, 2048)
    assert np.array_equal(k(x), x)
