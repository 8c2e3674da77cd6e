"""Lane-batched vector steps run the prepared instruction (runtime.vector_prep, cached in the
step's _Layout) and give the bytes of the instruction call (`Options(prepared=False)`), of one
instruction per lane and of the reference impls; a refusal still falls back and refuses as the
reference does (a prepare refusal is a Fallback)."""

from __future__ import annotations

import numpy as np

import runtime
from nzjit import pl
from nzjit.backend.options import Options, using
from nzjit.backend.rules import vector_alu

RNG = np.random.default_rng(1212)
R, C = 16, 64


def _kernel():
    """A fresh kernel (compiled on its first call: its steps prepare then)."""

    @pl.kernel
    def k(
        x: pl.Tensor[[64, C], pl.FP32],
        w: pl.Tensor[[4, C], pl.FP32],
        s: pl.Scalar[pl.FP32],
        o: pl.Out[pl.Tensor[[64, C], pl.FP32]],
        q: pl.Out[pl.Tensor[[64, C], pl.FP16]],
    ):
        for lane in pl.spmd(4):
            t = pl.load(x, [lane * R, 0], [R, C], target_memory=pl.Mem.Vec)
            a = pl.mul(pl.add(t, 1.5), s)  # TADDS, TMULS
            b = pl.div(pl.minimum(a, pl.sqrt(pl.abs(t))), pl.add(pl.relu(a), 2.0))
            c = pl.row_expand_sub(b, pl.row_max(b))
            d = pl.row_expand_div(c, pl.row_sum(pl.recip(pl.add(pl.relu(c), 1.0))))
            e = pl.col_expand_mul(d, pl.load(w, [lane, 0], [1, C]))
            pl.store(e, [lane * R, 0], o)
            pl.store(pl.cast(e, pl.FP16, mode="rint"), [lane * R, 0], q)

    return k


def test_prepared_steps_give_the_bytes_of_the_instruction_calls(monkeypatch):
    calls: list[str] = []
    real = vector_alu.VR.prepare

    def spy(name, *a, **k):
        p = real(name, *a, **k)

        def counted(*xs):
            calls.append(name)
            p(*xs)

        return counted

    monkeypatch.setattr(vector_alu.VR, "prepare", spy)
    x = RNG.standard_normal((64, C)).astype(np.float32)
    w = RNG.standard_normal((4, C)).astype(np.float32)
    k = _kernel()
    runs = []
    for o in (Options(strict=True), Options(strict=True, prepared=False), Options(batch=False)):
        with using(o):
            runs.append(k(x, w, 0.75))
    for run in runs[1:]:
        for a, b in zip(run, runs[0], strict=True):
            assert a.tobytes() == b.tobytes()
    # every family ran prepared in the batched run
    assert {"binary", "binary_scalar", "unary", "row_reduce", "row_expand", "col_expand", "cvt"} <= set(calls)


def test_a_prepare_refusal_abandons_the_batched_attempt(monkeypatch, attempts):
    # a DeviceError from prepare (the instruction's checks) is a Fallback, as a refusing call is:
    # the lanes then run one by one, through the instruction call, with the same bytes
    x = RNG.standard_normal((64, C)).astype(np.float32)
    w = RNG.standard_normal((4, C)).astype(np.float32)
    with using(Options(batch=False)):
        want = _kernel()(x, w, 0.5)

    def refuse(name, *a, **k):
        raise runtime.DeviceError(f"{name}: refused")

    monkeypatch.setattr(vector_alu.VR, "prepare", refuse)
    got = _kernel()(x, w, 0.5)
    assert attempts and attempts[0] is False  # the batched attempt fell back
    for a, b in zip(got, want, strict=True):
        assert a.tobytes() == b.tobytes()
