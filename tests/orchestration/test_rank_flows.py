"""Cross-rank data flow in an orchestration (issue 24 item 5): ranks run in parallel, each on
the host arrays as uploaded when it starts, so a call on one rank reading a host array (or plane)
that an earlier call on another rank writes would read stale bytes. Refused before dispatch,
every output untouched; on one rank the flow is ordered and right."""

from __future__ import annotations

import numpy as np
import pytest

import runtime
from nzjit import pl
from runtime import DispatchError


@pl.kernel
def double(x: pl.Tensor[[16, 64], pl.FP32], out: pl.Out[pl.Tensor[[16, 64], pl.FP32]]):
    t = pl.load(x, [0, 0], [16, 64])
    pl.store(t + t, [0, 0], out)


X = np.arange(2 * 16 * 64, dtype=np.float32).reshape(2, 16, 64)


def test_a_rank_reading_what_another_rank_wrote_is_refused():
    @pl.orchestration
    def prog(
        x: pl.Tensor[[2, 16, 64], pl.FP32],
        tmp: pl.Out[pl.Tensor[[2, 16, 64], pl.FP32]],
        out: pl.Out[pl.Tensor[[2, 16, 64], pl.FP32]],
    ):
        double(x[0], tmp[0], device=0)
        double(tmp[0], out[1], device=1)  # rank 1 would read the tmp[0] uploaded at the start

    tmp, out = np.full_like(X, 7), np.full_like(X, 7)
    with pytest.raises(
        DispatchError,
        match=r"rank 1: .*parameter 'x': rank 1 reads tmp\[0\], which rank 0 writes "
        r"\(tmp\[0\]\) earlier in this orchestration.*stale",
    ):
        prog(X, tmp, out, cluster=runtime.Cluster(2))
    assert (tmp == 7).all() and (out == 7).all()


def test_the_same_flow_on_one_rank_and_other_planes_are_right():
    @pl.orchestration
    def prog(
        x: pl.Tensor[[2, 16, 64], pl.FP32],
        tmp: pl.Out[pl.Tensor[[2, 16, 64], pl.FP32]],
        out: pl.Out[pl.Tensor[[2, 16, 64], pl.FP32]],
    ):
        double(x[0], tmp[0], device=0)
        double(tmp[0], out[0], device=0)  # ordered on one rank: reads the bytes just written
        double(x[1], tmp[1], device=1)
        double(x[0], out[1], device=1)  # x is only read: no flow between ranks

    tmp, out = np.zeros_like(X), np.zeros_like(X)
    prog(X, tmp, out, cluster=runtime.Cluster(2))
    np.testing.assert_array_equal(tmp, 2 * X)
    np.testing.assert_array_equal(out[0], 4 * X[0])
    np.testing.assert_array_equal(out[1], 2 * X[0])
