"""Top-k pieces: pl.arange (TCI), pl.sort32 (TSORT32), pl.mrgsort (TMRGSORT format 1), pl.gather
(mask and index forms): runtime semantics, IR, numbers, PTO, refusals."""

from __future__ import annotations

import numpy as np
import pytest

import nzjit
from nzjit import pl
from runtime import DeviceError, TileBuf
from runtime import vector_sort as VS

rng = np.random.default_rng(13)


def vec(a):
    t = TileBuf("Vec", a.dtype, *a.shape)
    t.data.view(a.dtype).reshape(a.shape)[...] = a
    return t


def arr(t):
    return t.data.view(t.dtype).reshape(t.rows, t.cols)


def test_tsort32_blocks_descending_ties_by_index():
    v = rng.integers(0, 5, (2, 64)).astype(np.float32)  # many ties
    idx = np.tile(np.arange(64, dtype=np.int32), (2, 1))
    dst = vec(np.zeros((2, 128), np.float32))
    VS.tsort32(dst, vec(v), vec(idx))
    pairs = arr(dst).view(np.uint32).reshape(2, 64, 2)
    got_v, got_i = pairs[..., 0].view(np.float32), pairs[..., 1]
    for b in range(2):
        blk = slice(32 * b, 32 * b + 32)
        order = np.argsort(-v[:, blk], axis=1, kind="stable")
        assert np.array_equal(got_v[:, blk], np.take_along_axis(v[:, blk], order, 1))
        assert np.array_equal(got_i[:, blk], order + 32 * b)


def test_tsort32_fp16_pairs_are_four_halves():
    v = rng.standard_normal((1, 32)).astype(np.float16)
    dst = vec(np.zeros((1, 128), np.float16))
    VS.tsort32(dst, vec(v), vec(np.arange(32, dtype=np.int32).reshape(1, 32)))
    words = arr(dst).reshape(1, 32, 4)
    assert np.array_equal(words[0, :, 0], np.sort(v[0])[::-1])
    assert np.array_equal(words[0, :, 2:].copy().view(np.uint32)[:, 0], np.argsort(-v[0], kind="stable"))


def test_tmrgsort_merges_runs_and_refuses_bad_block_len():
    v = rng.standard_normal((1, 128)).astype(np.float32)
    s = vec(np.zeros((1, 256), np.float32))
    VS.tsort32(s, vec(v), vec(np.arange(128, dtype=np.int32).reshape(1, 128)))
    m = vec(np.zeros((1, 256), np.float32))
    VS.tmrgsort(m, s, 64)
    assert np.array_equal(arr(m).view(np.uint32).reshape(128, 2)[:, 0].view(np.float32), np.sort(v[0])[::-1])
    with pytest.raises(DeviceError, match="block_len 32 must be a positive multiple of 64"):
        VS.tmrgsort(m, s, 32)
    with pytest.raises(DeviceError, match="not 1..255 runs"):
        VS.tmrgsort(m, s, 128)


def test_gather_forms():
    src = np.arange(32, dtype=np.float32).reshape(1, 32)
    for pattern, (start, stride) in VS.MASK_PATTERNS.items():
        sel = src[:, start::stride]
        dst = vec(np.zeros(sel.shape, np.float32))
        VS.gather_mask(dst, vec(src), pattern)
        assert np.array_equal(arr(dst), sel)
    idx = np.array([[31, 0, 5, 5, 1, 2, 3, 4]], np.int32)
    dst = vec(np.zeros((1, 8), np.float32))
    VS.gather(dst, vec(src), vec(idx))
    assert np.array_equal(arr(dst)[0], src[0, idx[0]])
    with pytest.raises(DeviceError, match="index 32 is outside the source's 32 valid elements"):
        VS.gather(dst, vec(src), vec(np.full((1, 8), 32, np.int32)))


def test_topk_kernel_ir_pto_and_numbers():
    @pl.kernel
    def k(
        s: pl.Tensor[[1, 256], pl.FP32],
        v: pl.Out[pl.Tensor[[1, 8], pl.FP32]],
        i: pl.Out[pl.Tensor[[1, 8], pl.INT32]],
    ):
        t = pl.load(s, [0, 0], [1, 256])
        p = pl.mrgsort(pl.mrgsort(pl.sort32(t, pl.arange(0, [1, 256])), block_len=64), block_len=128)
        top = p[:, 0:16]
        pl.store(pl.gather(top, mask_pattern=pl.tile.MaskPattern.P0101), [0, 0], v)
        pl.store(pl.gather(top, mask_pattern=pl.tile.MaskPattern.P1010, output_dtype=pl.INT32), [0, 0], i)

    s = rng.standard_normal((1, 256)).astype(np.float32)
    v, i = np.zeros((1, 8), np.float32), np.zeros((1, 8), np.int32)
    low = k.lower(s, v, i)
    names = [e.primitive.name for e in low.ir().eqns]
    assert names[:5] == ["tile.load", "tile.ci", "tile.sort32", "tile.mrgsort", "tile.mrgsort"]
    (srt,) = [e for e in low.ir().eqns if e.primitive.name == "tile.sort32"]
    assert str(srt.outputs[0].type) == "f32[1,512]@Vec"
    for after in ["trace", *low.passes]:
        vv, ii = v.copy(), i.copy()
        low.run(s, vv, ii, after=after)
        order = np.argsort(-s[0], kind="stable")[:8]
        assert np.array_equal(vv[0], s[0, order]) and np.array_equal(ii[0], order)
    pto = low.pto()
    for instr in ("pto.tci", "pto.tsort32", "pto.tmrgsort", "pto.tgather"):
        assert instr in pto


def test_gather_index_form_in_a_kernel():
    @pl.kernel
    def k(
        s: pl.Tensor[[8, 64], pl.FP32],
        ix: pl.Tensor[[8, 16], pl.INT32],
        y: pl.Out[pl.Tensor[[8, 16], pl.FP32]],
    ):
        pl.store(pl.gather(pl.load(s, [0, 0], [8, 64]), -1, pl.load(ix, [0, 0], [8, 16])), [0, 0], y)

    s = rng.standard_normal((8, 64)).astype(np.float32)
    ix = rng.integers(0, 64, (8, 16)).astype(np.int32)
    y = np.zeros((8, 16), np.float32)
    k(s, ix, y)
    assert np.array_equal(y, np.take_along_axis(s, ix, 1))


def test_topk_refusals():
    def trace(body):
        @pl.kernel
        def k(s: pl.Tensor[[2, 96], pl.FP32]):
            body(pl.load(s, [0, 0], [2, 96]))

        return k.lower(np.zeros((2, 96), np.float32))

    with pytest.raises(nzjit.CompileError, match=r"pl.arange fills one row \(TCI\)"):
        trace(lambda t: pl.arange(0, [2, 96]))
    with pytest.raises(nzjit.CompileError, match="sorts whole 32-element blocks; 80 columns"):
        trace(lambda t: pl.sort32(t[0:1, 0:80], pl.arange(0, [1, 80])))
    with pytest.raises(nzjit.CompileError, match="merges one row"):
        trace(lambda t: pl.mrgsort(t, block_len=64))
    with pytest.raises(
        nzjit.CompileError,
        match=r"takes block_len= \(format 1\) or src0, src1\[, src2\[, src3\]\] and tmp= \(format 2\)",
    ):
        trace(lambda t: pl.mrgsort(t, t))
    with pytest.raises(nzjit.CompileError, match="mask_pattern 9 is not a pl.tile.MaskPattern"):
        trace(lambda t: pl.gather(t, mask_pattern=9))
    with pytest.raises(nzjit.CompileError, match="output_dtype pl.INT16 is not the size"):
        trace(lambda t: pl.gather(t, mask_pattern=1, output_dtype=pl.INT16))
