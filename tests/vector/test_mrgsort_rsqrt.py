"""Issue 22 item 3's last pieces: TMRGSORT format 2 (`pl.mrgsort(src0, src1[, src2[, src3]], tmp=)`,
2-4 separate sorted lists merged) and `pl.rsqrt(x, high_precision=True)` computed as pto-isa
documents its high-precision form (TSQRT then TDIV, each rounded to the tile dtype)."""

from __future__ import annotations

import numpy as np
import pytest

import nzjit
from nzjit import pl
from nzjit.backend.options import Options, using
from runtime import DeviceError, TileBuf
from runtime import vector as V
from runtime import vector_sort as VS

rng = np.random.default_rng(17)
PATHS = (Options(strict=True), Options(batch=False), Options(fast=False))


def vec(a):
    t = TileBuf("Vec", a.dtype, *a.shape)
    t.data.view(a.dtype).reshape(a.shape)[...] = a
    return t


def pairs(values, index):
    w = np.zeros((1, len(values)), np.uint64)
    w.view(np.float32).reshape(1, -1, 2)[..., 0] = values
    w.view(np.uint32).reshape(1, -1, 2)[..., 1] = index
    return w.view(np.float32)


def test_tmrgsort_lists_merge_descending_ties_in_list_order():
    a = np.sort(rng.integers(0, 6, 16).astype(np.float32))[::-1]
    b = np.sort(rng.integers(0, 6, 32).astype(np.float32))[::-1]
    c = np.sort(rng.integers(0, 6, 16).astype(np.float32))[::-1]
    srcs = [
        vec(pairs(a, np.arange(16))),
        vec(pairs(b, 100 + np.arange(32))),
        vec(pairs(c, 200 + np.arange(16))),
    ]
    dst = vec(np.zeros((1, 128), np.float32))
    VS.tmrgsort_lists(dst, srcs, vec(np.zeros((1, 128), np.float32)))
    w = dst.data.view(np.uint32).reshape(64, 2)
    vals, idx = w[:, 0].view(np.float32), w[:, 1]
    allv = np.concatenate([a, b, c])
    alli = np.concatenate([np.arange(16), 100 + np.arange(32), 200 + np.arange(16)])
    order = np.argsort(-allv, kind="stable")  # equal values: list 0's first, then list 1's ...
    assert np.array_equal(vals, allv[order]) and np.array_equal(idx, alli[order])


def test_tmrgsort_lists_refusals():
    one = vec(np.zeros((1, 32), np.float32))
    with pytest.raises(DeviceError, match="merges 2 to 4 lists, got 1"):
        VS.tmrgsort_lists(vec(np.zeros((1, 32), np.float32)), [one], one)
    with pytest.raises(DeviceError, match="tmp has 32 columns, the lists 64"):
        VS.tmrgsort_lists(vec(np.zeros((1, 64), np.float32)), [one, one], one)
    with pytest.raises(DeviceError, match="one dtype"):
        VS.tmrgsort_lists(vec(np.zeros((1, 64), np.float32)), [one, vec(np.zeros((1, 64), np.float16))], one)


def test_two_way_merge_of_sorted_halves_is_a_row_top_k_every_path():
    # two 128-expert halves sorted (sort32 + format 1), then merged with format 2: the top 16 of 256
    @pl.kernel
    def k(
        s: pl.Tensor[[4, 256], pl.FP32],
        v: pl.Out[pl.Tensor[[4, 16], pl.FP32]],
        ix: pl.Out[pl.Tensor[[4, 16], pl.INT32]],
    ):
        for t in pl.spmd(4):
            halves = []
            for h in range(2):
                x = pl.load(s, [t, 128 * h], [1, 128])
                p = pl.sort32(x, pl.arange(128 * h, [1, 128], dtype=pl.INT32))
                halves.append(pl.mrgsort(p, block_len=64))
            m = pl.mrgsort(halves[0], halves[1], tmp=pl.create_tile([1, 512], dtype=pl.FP32))
            top = m[:, 0:32]
            pl.store(pl.gather(top, mask_pattern=pl.tile.MaskPattern.P0101), [t, 0], v)
            pl.store(
                pl.gather(top, mask_pattern=pl.tile.MaskPattern.P1010, output_dtype=pl.INT32), [t, 0], ix
            )

    s = rng.standard_normal((4, 256)).astype(np.float32)
    s[1, 200] = s[1, 3] = 5.0  # a tie across the halves: the first list's (smaller index) first
    low = k.lower(s, np.zeros((4, 16), np.float32), np.zeros((4, 16), np.int32))
    assert str(low.ir()).count("tile.mrgsort_format2[exhausted=False]") == 1
    order = np.argsort(-s, axis=1, kind="stable")[:, :16]
    outs = []
    for o in PATHS:
        with using(o):
            v, ix = np.zeros((4, 16), np.float32), np.zeros((4, 16), np.int32)
            k(s, v, ix)
        assert np.array_equal(v, np.take_along_axis(s, order, 1)) and np.array_equal(ix, order)
        outs.append(v.tobytes() + ix.tobytes())
    assert outs[0] == outs[1] == outs[2]
    pto = low.pto()
    assert "= arith.constant dense<0> : vector<4xi16>" in pto
    line = next(x for x in pto.splitlines() if "pto.tmrgsort ins(" in x and "exhausted" in x)
    assert line.count("!pto.tile_buf<loc=vec, dtype=f32, rows=1, cols=256") == 2  # the two lists
    assert "{exhausted = false}" in line and ", vector<4xi16>)" in line and "cols=512" in line


def test_format_2_refusals():
    def lower(body):
        @pl.kernel
        def k(s: pl.Tensor[[1, 128], pl.FP32]):
            a = pl.load(s, [0, 0], [1, 64])
            body(a)

        return k.lower(np.zeros((1, 128), np.float32))

    tmp = lambda n: pl.create_tile([1, n], dtype=pl.FP32)  # noqa: E731
    with pytest.raises(nzjit.CompileError, match="tmp has 64 columns, the lists 128") as ei:
        lower(lambda a: pl.mrgsort(a, a, tmp=tmp(64)))
    assert "GETMRGSORTTMPSIZE" in str(ei.value)
    lower(
        lambda a: pl.mrgsort(a, a, tmp=tmp(128), exhausted=True)
    )  # modelled: tests/vector/test_mrgsort_exhausted.py
    with pytest.raises(nzjit.CompileError, match="format 1 .* and format 2 .* are exclusive"):
        lower(lambda a: pl.mrgsort(a, a, block_len=64))
    with pytest.raises(nzjit.CompileError, match="takes block_len= .* or src0, src1"):
        lower(lambda a: pl.mrgsort(a, a))
    lower(lambda a: pl.mrgsort(a, a, a, a, tmp(256)))  # four lists, PyPTO's positional tmp


@pytest.mark.parametrize("dtype,pd", [(np.float16, pl.FP16), (np.float32, pl.FP32)])
def test_rsqrt_high_precision_is_sqrt_then_divide_each_rounded(dtype, pd):
    @pl.kernel
    def k(x: pl.Tensor[[16, 64], pd], y: pl.Out[pl.Tensor[[16, 64], pd]], z: pl.Out[pl.Tensor[[16, 64], pd]]):
        t = pl.load(x, [0, 0], [16, 64])
        pl.store(pl.rsqrt(t, high_precision=True), [0, 0], y)
        pl.store(pl.rsqrt(t), [0, 0], z)

    x = (rng.random((16, 64)) * 100 + 0.01).astype(dtype)
    root = np.sqrt(x.astype(np.float32)).astype(dtype)  # TSQRT, rounded to the tile dtype
    want = (np.float32(1) / root.astype(np.float32)).astype(dtype)  # TDIV of 1 by it, rounded
    low = k.lower(x, np.zeros_like(x), np.zeros_like(x))
    (hp, _) = [e for e in low.ir().eqns if e.primitive.name == "tile.rsqrt"]
    assert hp.params["high_precision"] is True
    for o in PATHS:
        with using(o):
            y, z = np.zeros_like(x), np.zeros_like(x)
            k(x, y, z)
        assert np.array_equal(y, want)
        np.testing.assert_allclose(
            z, 1 / np.sqrt(x.astype(np.float64)), rtol=1e-3 if dtype is np.float16 else 1e-6
        )
    if dtype is np.float16:  # two fp16 roundings differ from one on some elements
        assert (y != z).any()
    pto = low.pto()
    assert "%tmp = pto.alloc_tile : !pto.tile_buf<loc=vec, dtype=" in pto
    assert pto.count("pto.trsqrt ins(%t, %tmp : ") == 1 and pto.count("pto.trsqrt ins(%t : ") == 1


def test_runtime_rsqrt_high_precision_on_the_valid_region():
    x = (rng.random((8, 32)) + 0.5).astype(np.float16)
    src, dst = vec(x), TileBuf("Vec", np.float16, 8, 32, valid_row=8, valid_col=16)
    src.valid_col = 16
    V.unary("rsqrt", dst, src, high_precision=True)
    got = dst.data.view(np.float16).reshape(8, 32)
    root = np.sqrt(x[:, :16].astype(np.float32)).astype(np.float16)
    assert np.array_equal(got[:, :16], (1 / root.astype(np.float32)).astype(np.float16))
    assert not got[:, 16:].any()
