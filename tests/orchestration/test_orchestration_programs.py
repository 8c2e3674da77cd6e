"""Programs, not single calls (issue 25 item 2): several kernels per rank, intermediates made by
`pl.create_tensor` or by an omitted Out resident on their rank and freed when the program ends,
cross-rank use refused before dispatch, and the program as `nzjit ir` prints it."""

from __future__ import annotations

import numpy as np
import pytest
from view_kernels import RANKS, E, K, N, T, double, mm_nd

import nzjit
import runtime
from nzjit import pl
from nzjit.driver.program_text import program_text
from runtime import DispatchError

XF = pl.Tensor[[RANKS, E, T, K], pl.FP32]
WF = pl.Tensor[[RANKS, E, N, K], pl.FP32]
YF = pl.Out[pl.Tensor[[RANKS, T, N], pl.FP32]]


def _data(seed):
    rng = np.random.default_rng(seed)
    return (
        rng.integers(-3, 4, (RANKS, E, T, K)).astype(np.float32),
        rng.integers(-3, 4, (RANKS, E, N, K)).astype(np.float32),
    )


@pl.orchestration
def chain(x: XF, w: WF, y: YF):
    for r in range(RANKS):
        t = pl.create_tensor([T, N], pl.FP32)  # rank r's, from its first use on
        mm_nd(x[r, 0], w[r, 0], t, device=r)
        h = double(t, device=r)  # an omitted Out: another intermediate of rank r
        double(h, y[r], device=r)


def test_created_intermediates_chain_on_two_ranks_and_are_freed():
    x, w = _data(1)
    cluster = runtime.Cluster(RANKS)
    xd, wd = cluster.alloc_stacked_tensor(x), cluster.alloc_stacked_tensor(w)
    live = [wk.gm.live_bytes for wk in cluster.workers]
    y = chain(xd, wd)
    np.testing.assert_array_equal(y, 4 * np.einsum("rtk,rnk->rtn", x[:, 0], w[:, 0]))
    assert [wk.gm.live_bytes for wk in cluster.workers] == live  # t, h and the host y[r] freed


def test_the_program_as_text(line_of):
    x, w = _data(2)
    text = program_text(chain.record(x, w, np.zeros((RANKS, T, N), np.float32)))
    f = "test_orchestration_programs.py"
    # the lines of chain's statements, from its source (they move when the file is reformatted)
    create, mm, dbl, dbl_y = (
        line_of(chain, m) for m in ("pl.create_tensor(", "mm_nd(", "h = double(", "double(h,")
    )
    lines = text.splitlines()
    assert lines[:8] == [
        "# orchestration chain: 6 kernel calls on 2 ranks",
        "orchestration chain(x: FP32[2, 3, 16, 64], w: FP32[2, 3, 64, 64], y: Out FP32[2, 16, 64])",
        "4 intermediates, each on its rank and freed when the program ends; ranks run in parallel, each its "
        "calls in order",
        "rank 0:",
        f"  mm_nd(x[0, 0], w[0, 0]) -> create_tensor@{f}:{create}@rank0  # {f}:{mm}",
        f"  double(create_tensor@{f}:{create}@rank0) -> double.y@rank0  # {f}:{dbl}",
        f"  double(double.y@rank0) -> y[0]  # {f}:{dbl_y}",
        f"  intermediates: create_tensor@{f}:{create}@rank0 FP32[16, 64], double.y@rank0 FP32[16, 64]",
    ]
    assert lines[8] == "rank 1:" and lines[11] == f"  double(double.y@rank1) -> y[1]  # {f}:{dbl_y}"
    assert len(lines) == 13


def test_created_tensor_used_on_a_second_rank_refused():
    x, w = _data(3)

    @pl.orchestration
    def shared(x: XF, w: WF, y: YF):
        t = pl.create_tensor([T, N], pl.FP32)
        mm_nd(x[0, 0], w[0, 0], t, device=0)
        double(t, y[1], device=1)

    y = np.full((RANKS, T, N), 5, np.float32)
    with pytest.raises(
        DispatchError,
        match=r"^rank 1: double .*: parameter 'x' got create_tensor@"
        r"test_orchestration_programs.py:\d+@rank0, an intermediate of rank 0; "
        r"the call runs on rank 1, and ranks do not share memory",
    ):
        shared(x, w, y)
    assert (y == 5).all()


def test_create_tensor_refusals():
    with pytest.raises(nzjit.CompileError, match="pl.create_tensor is used in an orchestration body here"):
        pl.create_tensor([T, N], pl.FP32)

    def orch(body):
        @pl.orchestration
        def o(x: XF, w: WF, y: YF):
            body()

        return o

    x, w = _data(4)
    with pytest.raises(nzjit.CompileError, match=r"shape must be positive Python ints, got \[0, 64\]"):
        orch(lambda: pl.create_tensor([0, N], pl.FP32))(x, w)
    with pytest.raises(nzjit.CompileError, match="dtype must be a pl dtype such as pl.FP32"):
        orch(lambda: pl.create_tensor([T, N], np.float32))(x, w)
