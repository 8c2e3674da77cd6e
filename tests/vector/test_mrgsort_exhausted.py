"""TMRGSORT format 2's suspending mode, `pl.mrgsort(src0, src1[, ...], tmp=, exhausted=True)`
(issue 22 item 5): the merge stops right after the pick that empties a list (pto-isa
docs/isa/TMRGSORT.md "exhausted = true: when any input list is exhausted, the hardware suspends";
the CPU model's ReachExhausted is checked after each pick), the executed-count list reports the
pairs taken from each list, and dst is MovUb2Ub's copy of the workspace: past the merged pairs it
holds what tmp held. A row top-k only needs its first k pairs, which are exact when every list
has at least k."""

from __future__ import annotations

import numpy as np
import pytest

from nzjit import pl
from nzjit.backend.options import Options, using
from runtime import TileBuf
from runtime import vector_sort as VS
from tests.vector.test_mrgsort_rsqrt import pairs, vec
from tests.vector.test_vector_ops import run_all_stages

rng = np.random.default_rng(29)
PATHS = (Options(strict=True), Options(batch=False), Options(fast=False))


def _words(t: TileBuf) -> np.ndarray:
    return t.data.view(np.uint64).reshape(-1)[: t.cols // 2]


def test_exhausted_merge_stops_after_the_pick_that_empties_a_list():
    a = np.array([9, 7, 5, 3], np.float32)  # list 0 runs out after its 3 (the 7th pick)
    b = np.array([8, 6, 4, 2.5, 2, 1, 0.5, 0.25], np.float32)
    tmp = vec(np.full((1, 24), -1.0, np.float32))  # the workspace's old bytes
    dst = vec(np.zeros((1, 24), np.float32))
    executed = VS.tmrgsort_lists(
        dst, [vec(pairs(a, np.arange(4))), vec(pairs(b, 10 + np.arange(8)))], tmp, True
    )
    assert executed == (4, 3, 0, 0)  # MrgSortExecutedNumList: pairs taken per list
    w = dst.data.view(np.uint32).reshape(12, 2)
    assert list(w[:7, 0].view(np.float32)) == [9, 8, 7, 6, 5, 4, 3]
    assert list(w[:7, 1]) == [0, 10, 1, 11, 2, 12, 3]
    assert np.all(w[7:].view(np.float32) == -1.0)  # tmp's bytes, copied by MovUb2Ub
    full = vec(np.zeros((1, 24), np.float32))
    assert VS.tmrgsort_lists(full, [vec(pairs(a, np.arange(4))), vec(pairs(b, 10 + np.arange(8)))], tmp) == (
        4,
        8,
        0,
        0,
    )
    assert np.array_equal(_words(full)[:7], _words(dst)[:7])


@pytest.mark.parametrize("n_lists", [2, 3, 4])
def test_exhausted_merge_of_random_lists_matches_a_reference_merge(n_lists):
    lens = rng.integers(1, 6, n_lists) * 4  # fp32 rows of whole 32-byte blocks: 4 pairs each
    lists = [np.sort(rng.integers(0, 8, n).astype(np.float32))[::-1] for n in lens]  # many ties
    srcs = [vec(pairs(v, 100 * i + np.arange(len(v)))) for i, v in enumerate(lists)]
    total = 2 * int(lens.sum())
    tmp, dst = vec(np.full((1, total), 7.5, np.float32)), vec(np.zeros((1, total), np.float32))
    executed = VS.tmrgsort_lists(dst, srcs, tmp, exhausted=True)
    heads, out = [0] * n_lists, []  # the merge, pick by pick: the largest head, ties to the earlier list
    while all(h < len(v) for h, v in zip(heads, lists)):
        i = max(range(n_lists), key=lambda j: (lists[j][heads[j]], -j))
        out.append((lists[i][heads[i]], 100 * i + heads[i]))
        heads[i] += 1
    assert executed == (*heads, *[0] * (4 - n_lists))
    w = dst.data.view(np.uint32).reshape(-1, 2)
    assert [(float(v), int(i)) for v, i in zip(w[: len(out), 0].view(np.float32), w[: len(out), 1])] == [
        (float(v), int(i)) for v, i in out
    ]
    assert np.all(w[len(out) :].view(np.float32) == 7.5)


def test_row_top16_of_512_through_the_exhausted_tail_merge():
    """sort32 -> mrgsort(block_len=64): 4 sorted runs of 128 experts; each run's best 16 pairs, merged
    by the suspending 4-way merge, hold the row's top 16 in their first 16 pairs (each list has 16,
    so at least 16 pairs are merged before one runs out). Exact values and indices on every path."""

    @pl.kernel
    def k(
        s: pl.Tensor[[4, 512], pl.FP32],
        v: pl.Out[pl.Tensor[[4, 16], pl.FP32]],
        ix: pl.Out[pl.Tensor[[4, 16], pl.INT32]],
    ):
        for t in pl.spmd(4):
            x = pl.load(s, [t, 0], [1, 512])
            runs = pl.mrgsort(pl.sort32(x, pl.arange(0, [1, 512], dtype=pl.INT32)), block_len=64)
            heads = [runs[:, 256 * r : 256 * r + 32] for r in range(4)]  # 16 pairs of each run
            m = pl.mrgsort(*heads, pl.create_tile([1, 128], dtype=pl.FP32), exhausted=True)
            top = m[:, 0:32]
            pl.store(pl.gather(top, mask_pattern=pl.tile.MaskPattern.P0101), [t, 0], v)
            pl.store(
                pl.gather(top, mask_pattern=pl.tile.MaskPattern.P1010, output_dtype=pl.INT32), [t, 0], ix
            )

    s = rng.standard_normal((4, 512)).astype(np.float32)
    s[2, 5] = s[2, 300] = 9.0  # a tie: the smaller index first
    s[3, :16] = 8 + np.arange(16)  # the whole top 16 in one run: its list is the one exhausted
    order = np.argsort(-s, axis=1, kind="stable")[:, :16]
    low, _ = run_all_stages(k, s, np.zeros((4, 16), np.float32), np.zeros((4, 16), np.int32))
    assert str(low.ir()).count("tile.mrgsort_format2[exhausted=True]") == 1
    line = next(x for x in low.pto().splitlines() if "pto.tmrgsort ins(" in x and "exhausted" in x)
    assert "{exhausted = true}" in line and line.count("cols=32") == 4
    for o in PATHS:
        with using(o):
            v, ix = np.zeros((4, 16), np.float32), np.zeros((4, 16), np.int32)
            k(s, v, ix)
        assert np.array_equal(v, np.take_along_axis(s, order, 1)) and np.array_equal(ix, order)
