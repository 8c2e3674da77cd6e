"""Issue 22 item 1 on both targets, pinned: `pl.move` of an Acc tile to Vec is the cross-core pair
through the GM FIFO on A2/A3 (pto-isa's a2a3 TMov has no Acc -> Vec path; PyPTO's Ascend910B
handler RequiresGMPipeBuffer) and the direct `pto.tmov` on A5 (tmov.a2v, AccToVecMode
SingleModeVec0), with each target's capacities (hardware-model.md section 7: UB 192 / 256 KiB,
L0C 128 / 256 KiB; TMRGSORT's UB_SIZE / PTO_UBUF_SIZE_BYTES; A5's fixpipe row of 4096 bytes)."""

from __future__ import annotations

import numpy as np
import pytest

import nzjit
from nzjit import pl
from runtime import DeviceError, TileBuf
from runtime import vector_sort as VS
from tests.vector.test_vector_ops import run_all_stages

rng = np.random.default_rng(5)


def _mixed(target, m, k, n, then=lambda v: pl.add(v, 1.0)):
    @pl.kernel(target=target)
    def k_mixed(
        a: pl.Tensor[[m, k], pl.FP16], b: pl.Tensor[[k, n], pl.FP16], y: pl.Out[pl.Tensor[[m, n], pl.FP32]]
    ):
        acc = pl.matmul(
            pl.load(a, [0, 0], [m, k], target_memory=pl.Mem.Mat),
            pl.load(b, [0, 0], [k, n], target_memory=pl.Mem.Mat),
        )
        pl.store(then(pl.move(acc, target_memory=pl.Mem.Vec)), [0, 0], y)

    return k_mixed


def _lines(text, what):
    return [ln.strip() for ln in text.splitlines() if what in ln]


ACC = "!pto.tile_buf<loc=acc, dtype=f32, rows=16, cols=64"
VEC = "!pto.tile_buf<loc=vec, dtype=f32, rows=16, cols=64"
ND = "blayout=row_major, slayout=none_box, fractal=512"


def test_both_targets_text_and_numbers():
    a = rng.standard_normal((16, 32)).astype(np.float16)
    b = rng.standard_normal((32, 64)).astype(np.float16)
    y = np.zeros((16, 64), np.float32)
    outs = {}
    for target in (pl.A2A3, pl.A5):
        low, outs[target] = run_all_stages(_mixed(target, 16, 32, 64), a, b, y)
        text = low.pto()
        if target is pl.A2A3:  # two functions, the pipe through GM, no Acc -> Vec TMOV
            assert _lines(text, "func.func @k_mixed_aic(") and _lines(text, "func.func @k_mixed_aiv(")
            (push,) = _lines(text, "pto.tpush_to_aiv ins(")
            assert (
                push.startswith("pto.tpush_to_aiv ins(%")
                and f": {ACC}" in push
                and push.endswith("{split = 0}")
            )
            (pop,) = _lines(text, "pto.tpop_from_aic")
            assert pop.endswith(f"= pto.tpop_from_aic {{split = 0}} -> {VEC}, {ND}, v_row=16, v_col=64>")
            assert _lines(text, "pto.tfree_from_aic {split = 0}") and "%__gm_pipe_buffer" in text
            assert not [ln for ln in _lines(text, "pto.tmov ins(") if "loc=acc" in ln]
        else:  # one function, the direct TMOV, no pipe
            assert text.count("func.func") == 1 and "tpush" not in text and "tpop" not in text
            assert "__gm_pipe_buffer" not in text and "initialize_pipe" not in text
            (mov,) = [ln for ln in _lines(text, "pto.tmov ins(") if "loc=acc" in ln]
            assert f": {ACC}" in mov and "outs(%" in mov and f": {VEC}" in mov
            assert mov.endswith("{acc_to_vec_mode = #pto<acc_to_vec_mode SingleModeVec0>}")
    want = a.astype(np.float32) @ b.astype(np.float32) + 1
    np.testing.assert_allclose(outs[pl.A2A3], want, rtol=1e-6, atol=1e-5)  # the cube's fp32 sum order
    assert outs[pl.A2A3].tobytes() == outs[pl.A5].tobytes()  # the same fixpipe conversion either way


def test_a5_acc_and_ub_capacities():
    """A 128 x 384 fp32 accumulator (192 KiB) is over A2/A3's 128 KiB L0C and within A5's 256 KiB;
    moved to Vec it fits A5's 256 KiB UB. Two of them in UB (384 KiB) do not."""
    m, k, n = 128, 32, 384
    a, b = np.ones((m, k), np.float16), np.ones((k, n), np.float16)
    y = np.zeros((m, n), np.float32)
    with pytest.raises(nzjit.CompileError, match="192 KiB of L0C \\(capacity 128 KiB\\)"):
        _mixed(pl.A2A3, m, k, n, then=lambda v: v).lower(a, b, y)
    _mixed(pl.A5, m, k, n, then=lambda v: v)(a, b, y)
    assert np.array_equal(y, np.full((m, n), 32, np.float32))
    with pytest.raises(
        nzjit.CompileError, match="Vec \\(UB\\) needs 393216 bytes at its peak but holds 262144 on A5"
    ):
        _mixed(pl.A5, m, k, n)(a, b, y)


@pytest.mark.parametrize("target,fits", [(pl.A2A3, False), (pl.A5, True)])
def test_vec_tile_between_the_two_ub_sizes(target, fits):
    """A [64, 832] fp32 Vec tile (212992 bytes): over A2/A3's 196608-byte UB, within A5's 262144."""

    @pl.kernel(target=target)
    def k(x: pl.Tensor[[64, 832], pl.FP32], y: pl.Out[pl.Tensor[[64, 832], pl.FP32]]):
        pl.store(pl.load(x, [0, 0], [64, 832]), [0, 0], y)

    x = rng.standard_normal((64, 832)).astype(np.float32)
    y = np.zeros_like(x)
    if fits:
        k(x, y)
        assert np.array_equal(x, y)
    else:
        with pytest.raises(
            nzjit.CompileError,
            match=r"f32\[64,832\]@Vec needs 212992 bytes \(208 KiB\) but the Vec buffer \(UB\) holds 192 KiB on A2A3",
        ):
            k.lower(x, y)


def test_tmrgsort_ub_limit_is_the_targets():
    """TMRGSORT format 2 checks its lists and tmp against UB_SIZE (A2/A3: 196608) or
    PTO_UBUF_SIZE_BYTES (A5): 2 x 12288 + 24576 fp32 columns = 196608 bytes is refused on A2/A3 only."""
    lists = [TileBuf("Vec", np.float32, 1, 12288) for _ in range(2)]
    tmp, dst = TileBuf("Vec", np.float32, 1, 24576), TileBuf("Vec", np.float32, 1, 24576)
    with pytest.raises(DeviceError, match="exceed the unified buffer \\(196608 bytes on A2A3\\)"):
        VS.tmrgsort_lists(dst, lists, tmp)
    VS.tmrgsort_lists(dst, lists, tmp, target="A5")
