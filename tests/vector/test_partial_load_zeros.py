"""A partial-valid TLOAD into a fresh Vec tile (issue 22 item 7): the valid region holds the GM
window, every other byte a fresh tile's zeros - on every path. The batched load zeroes only the
bytes its copy leaves (`lane_gm.unwritten`), in buffers an earlier launch left dirty, so the
tests make them dirty first (a fully valid load of nonzero data of the same image size), then
read every byte the next instruction (TFILLPAD) receives."""

from __future__ import annotations

import numpy as np
import pytest

from nzjit import pl
from nzjit.backend import lane_gm
from nzjit.backend.options import Options, using
from runtime import vector as V

PATHS = (Options(strict=True), Options(batch=False), Options(fast=False))
IDS = ("batched", "per-lane", "reference")
R, C, LANES = 16, 64, 8


def make(dtype):
    d = {np.float32: pl.FP32, np.float16: pl.FP16, np.int8: pl.INT8}[dtype]

    @pl.kernel
    def k(
        x: pl.Tensor[[LANES * R, C], d],
        n: pl.Scalar[pl.INDEX],
        m: pl.Scalar[pl.INDEX],
        y: pl.Out[pl.Tensor[[LANES * R, C], d]],
    ):
        for lane in pl.spmd(LANES):
            t = pl.load(x, [lane * R, 0], [R, C], valid_shape=[n, m])
            pl.store(pl.tile.fillpad(t, pad_value=pl.PadValue.zero), [lane * R, 0], y)

    return k


@pytest.fixture
def seen(monkeypatch):
    """The whole element matrix of every source tile TFILLPAD receives."""
    got: list[np.ndarray] = []
    real = V.fillpad

    def spy(dst, src, pad):
        got.append(src.data.view(src.dtype).reshape(src.rows, src.cols).copy())
        return real(dst, src, pad)

    monkeypatch.setattr(V, "fillpad", spy)
    return got


@pytest.mark.parametrize("options", PATHS, ids=IDS)
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int8])
@pytest.mark.parametrize("valid", [(10, 32), (16, 32), (3, 64), (16, 64), (1, 32)])
def test_bytes_outside_a_partial_load_are_zero_even_in_reused_buffers(seen, options, dtype, valid):
    k = make(dtype)
    rng = np.random.default_rng(3)
    x = (rng.integers(1, 100, (LANES * R, C))).astype(dtype)  # no zero anywhere
    with using(options):
        k(x, R, C, np.zeros_like(x))  # fully valid: its images go back to the spare buffers
        seen.clear()
        y = np.full_like(x, 5)
        k(x, *valid, y)
    vr, vc = valid
    tiles = np.concatenate([m.reshape(-1, R, C) for m in seen])
    want = np.zeros((LANES, R, C), dtype)
    want[:, :vr, :vc] = x.reshape(LANES, R, C)[:, :vr, :vc]
    assert tiles.tobytes() == want.tobytes()
    np.testing.assert_array_equal(y.reshape(LANES, R, C), want)  # fillpad(zero) stores the whole tile


class _Copy:
    def __init__(self, shape, strides, offset=0):
        self.shape, self.d_strides, self.add_dtype = shape, strides, None
        self.d_span = (0, sum((n - 1) * s for n, s in zip(shape, strides)) + 1)
        self.copies = None
        self.offset = offset


class _Plan:
    warns = ()

    def __init__(self, cp):
        self.copies = ((cp, True, 0, cp.offset),)


@pytest.mark.parametrize(
    "shape, strides, offset, nbytes, views",
    [
        ((16, 4000), (4096, 1), 0, 16 * 4096, 1),  # each row's tail: one strided view
        ((10, 128), (256, 1), 0, 16 * 256, 2),  # the row tails, then the rows past the valid ones
        ((4, 32), (512, 1), 32, 4 * 512, None),  # a lead, three gaps and a shorter last: zeroed whole
        ((4, 2, 32), (512, 64, 1), 32, 4 * 512, None),  # irregular runs: the whole image is zeroed
        ((64,), (1,), 0, 64, 0),  # writes everything: no gap
    ],
)
def test_unwritten_is_exactly_the_complement_of_the_copy(shape, strides, offset, nbytes, views):
    gaps = lane_gm._gaps_of(_Plan(_Copy(shape, strides, offset)), nbytes)
    if views is None:
        assert gaps is None
        return
    assert gaps is not None and len(gaps) == views
    written = np.zeros(nbytes, bool)
    np.ndarray(shape, bool, written, offset, strides)[...] = True
    covered = np.zeros(nbytes, np.int64)
    for off, sh, st in gaps:
        idx = off + sum(i * s for i, s in zip(np.indices(sh), st))
        np.add.at(covered, idx.reshape(-1), 1)
    assert (covered == ~written).all()  # every unwritten byte once, no written byte
    images = np.full((3, nbytes), 9, np.uint8)
    lane_gm.zero_gaps(images, gaps)
    assert ((images == 0) == ~written).all()
