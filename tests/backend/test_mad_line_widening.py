"""The batched mad's int8 / fp16 operands converted in one compiled pass from their C0 lines
(runtime.widen.widen_lines_f32, called by lane_values.gather_cast; issue 22 item 10): the bytes
of the lanes run one by one (Options(batch=False)) for int8 and fp16, b_trans and a_trans, K in
partial steps; an fp16 operand holding NaNs (F16C would quiet a signalling one) falls back to
numpy's cast with the same bytes."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from gmm_kernels import gmm_operands, grouped

import runtime
import runtime.widen as widen
from nzjit import pl
from nzjit.backend import lane_values
from nzjit.backend.options import current, using

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))

pytestmark = pytest.mark.skipif(not widen.COMPILED, reason="runtime/_lines.c not built")


@pytest.fixture
def widened(monkeypatch):
    """(source dtype, done) of every compiled widening the batched mads asked for."""
    seen: list[tuple[np.dtype, bool]] = []
    real = lane_values.widen_lines_f32

    def spy(out, src):
        done = real(out, src)
        seen.append((src.dtype, done))
        return done

    monkeypatch.setattr(lane_values, "widen_lines_f32", spy)
    return seen


def _bytes(kernel, args, batch: bool) -> list[bytes]:
    with using(current().with_(batch=batch)):
        w = runtime.Worker(0)
        devs = [w.alloc_tensor(a.shape, a.dtype, init=a) for a in args]
        kernel(*devs)
        return [w.copy_from(d).tobytes() for d in devs]


@pytest.mark.parametrize(
    "dtype,np_dtype,out_dtype,np_out",
    [
        (pl.FP16, np.float16, pl.FP32, np.float32),
        (pl.INT8, np.int8, pl.INT32, np.int32),
    ],
)
@pytest.mark.parametrize("K,KT", [(256, 128), (96, 32)])  # K in steps: windows at column offsets
def test_grouped_mad_widens_its_lines_with_the_per_lane_bytes(
    widened, dtype, np_dtype, out_dtype, np_out, K, KT
):
    E, T, N, NT = 2, 32, 128, 64
    x, w = gmm_operands(np.random.default_rng(K), np_dtype, E, T, N, K)
    args = (x, runtime.pack_nz(w), np.full((E, T, N), 7, np_out))
    kernel = grouped(dtype, out_dtype, E, T, N, K, NT, KT)
    assert _bytes(kernel, args, True) == _bytes(kernel, args, False)
    assert (np.dtype(np_dtype), True) in widened  # the compiled pass ran


def test_fp16_nans_fall_back_with_the_per_lane_bytes(widened):
    E, T, N, K, NT, KT = 2, 32, 64, 64, 32, 32
    x, w = gmm_operands(np.random.default_rng(3), np.float16, E, T, N, K)
    wb = w.view(np.uint16)
    wb[0, 5, 7], wb[1, 40, 3], wb[1, 2, 60] = 0x7C01, 0xFE00, 0x7C00  # signalling, quiet NaN, inf
    x.view(np.uint16)[1, 3, 9] = 0x7D55
    args = (x, runtime.pack_nz(w), np.zeros((E, T, N), np.float32))
    kernel = grouped(pl.FP16, pl.FP32, E, T, N, K, NT, KT)
    assert _bytes(kernel, args, True) == _bytes(kernel, args, False)
    assert (np.dtype(np.float16), False) in widened  # a NaN: numpy's cast


def test_a_trans_mad_with_the_per_lane_bytes(widened):
    L, K, M, N = 4, 64, 32, 64

    @pl.kernel
    def at(
        a: pl.Tensor[[L, K, M], pl.FP16],
        b: pl.Tensor[[L, K, N], pl.FP16],
        c: pl.Out[pl.Tensor[[L, M, N], pl.FP32]],
    ):
        for lane in pl.spmd(L):
            ta = pl.load(a[lane], [0, 0], [K, M], target_memory=pl.Mem.Mat)
            tb = pl.load(b[lane], [0, 0], [K, N], target_memory=pl.Mem.Mat)
            pl.store(pl.matmul(ta, tb, a_trans=True), [0, 0], c[lane])

    rng = np.random.default_rng(9)
    a = rng.standard_normal((L, K, M)).astype(np.float16)
    b = rng.standard_normal((L, K, N)).astype(np.float16)
    args = (a, b, np.zeros((L, M, N), np.float32))
    got = _bytes(at, args, True)
    assert got == _bytes(at, args, False)
    ref = np.einsum("lkm,lkn->lmn", a.astype(np.float64), b.astype(np.float64))
    np.testing.assert_allclose(np.frombuffer(got[2], np.float32).reshape(L, M, N), ref, rtol=1e-3, atol=1e-2)


def test_fused_expert_widens_every_mad_operand_compiled(widened):
    import fused_moe_expert as fm

    x, wg, wu, sg, su, wd, xs = fm.data()
    args = (
        x,
        runtime.pack_nz(wg),
        runtime.pack_nz(wu),
        sg,
        su,
        runtime.pack_nz(wd),
        np.zeros((fm.E, fm.T, fm.H), np.float32),
    )

    def k(*devs):
        fm.moe_expert(*devs[:6], float(xs), devs[6])

    assert _bytes(k, args, True) == _bytes(k, args, False)
    assert {d for d, done in widened if done} == {np.dtype(np.int8), np.dtype(np.float16)}
