"""Compare and select on Vec tiles (issue 23 item 3): PyPTO's pl.cmp / pl.cmps make a packed UINT8
predicate mask (pto-isa TCMP / TCMPS), pl.sel / pl.sels choose with it (TSEL / TSELS). The IR each
op stages, the numbers against numpy at every stage and on every execution path (lane-batched
included), the PTO instruction, the memory plan's scratch, and every refusal with its message."""

from __future__ import annotations

import numpy as np
import pytest

import nzjit
from nzjit import pl
from nzjit.backend import batched
from nzjit.backend.options import Options, using
from tests.vector.test_vector_ops import run_all_stages

rng = np.random.default_rng(23)
R, C = 16, 64
OPS = [np.equal, np.not_equal, np.less, np.less_equal, np.greater, np.greater_equal]


def prims(low):
    return [e.primitive.name for e in low.ir().eqns]


@pytest.mark.parametrize("code", range(6))
def test_cmp_sel_tile_tile_is_numpy_where(code):
    @pl.kernel
    def k(
        a: pl.Tensor[[R, C], pl.FP32], b: pl.Tensor[[R, C], pl.FP32], y: pl.Out[pl.Tensor[[R, C], pl.FP32]]
    ):
        ta = pl.load(a, [0, 0], [R, C])
        tb = pl.load(b, [0, 0], [R, C])
        mask = pl.cmp(ta, tb, cmp_type=code)
        tmp = pl.create_tile([1, 32], dtype=pl.UINT8)
        pl.store(pl.sel(mask, ta, tb, tmp), [0, 0], y)

    a = rng.standard_normal((R, C)).astype(np.float32)
    b = rng.standard_normal((R, C)).astype(np.float32)
    b[::3] = a[::3]  # equal elements too
    low, y = run_all_stages(k, a, b, np.zeros_like(a))
    assert np.array_equal(y, np.where(OPS[code](a, b), a, b))
    ir = low.ir()
    (cmp,) = [e for e in ir.eqns if e.primitive.name == "tile.cmp"]
    assert cmp.params["mode"] == ("eq", "ne", "lt", "le", "gt", "ge")[code]
    assert str(cmp.outputs[0].type) == "ui8[16,32]@Vec<valid 16,8>"  # 64 bits = 8 bytes a row, 32-byte rows
    text = low.pto()
    assert "pto.tcmp ins(" in text and f"{{cmpMode = #pto<cmp {cmp.params['mode']}>}}" in text
    assert "pto.tsel ins(" in text


def test_mask_bits_are_packed_little_endian_per_row():
    # the layout is target-defined in pto-isa; ours (runtime/vector_select.py): bit j % 8 of byte j // 8
    @pl.kernel
    def k(a: pl.Tensor[[R, 256], pl.FP16], m: pl.Out[pl.Tensor[[R, 32], pl.UINT8]]):
        pl.store(pl.cmp(pl.load(a, [0, 0], [R, 256]), 0.0, cmp_type=4), [0, 0], m)

    a = rng.standard_normal((R, 256)).astype(np.float16)
    low, m = run_all_stages(k, a, np.zeros((R, 32), np.uint8))
    assert np.array_equal(m, np.packbits(a > 0, axis=1, bitorder="little"))
    assert prims(low).count("tile.cmps") == 1 and "pto.tcmps ins(" in low.pto()


def test_sels_without_tmp_gets_the_compilers_scratch_and_the_plan_charges_it():
    @pl.kernel
    def k(a: pl.Tensor[[R, C], pl.FP32], y: pl.Out[pl.Tensor[[R, C], pl.FP32]]):
        t = pl.load(a, [0, 0], [R, C])
        pl.store(pl.sels(pl.cmp(t, 0.0, cmp_type=5), t, scalar=-1.0), [0, 0], y)  # relu-like: x >= 0 ? x : -1

    a = rng.standard_normal((R, C)).astype(np.float32)
    low, y = run_all_stages(k, a, np.zeros_like(a))
    assert np.array_equal(y, np.where(a >= 0, a, np.float32(-1.0)))
    text = low.pto()
    assert "pto.tsels ins(" in text and "!pto.tile_buf<loc=vec, dtype=ui8, rows=1, cols=32" in text
    # the plan (item 8) charges the scratch while the select runs, as the simulator allocates it:
    # source 4 KiB + mask 512 B + result 4 KiB + scratch 32 B
    from tests.backend.test_memory_plan import planned, runtime_peak

    assert (
        planned(k, (a, np.zeros_like(a)))
        == runtime_peak(k, (a, np.zeros_like(a)))
        == {"Vec": 2 * R * C * 4 + R * 32 + 32}
    )


def test_where_with_a_tensor_window_and_a_scalar_pl_scalar():
    @pl.kernel
    def k(a: pl.Tensor[[R, 128], pl.FP32], s: pl.Scalar[pl.FP32], y: pl.Out[pl.Tensor[[R, C], pl.FP32]]):
        left = pl.load(a, [0, 0], [R, C])
        y[:, :] = pl.sel(pl.cmp(a[:, 64:128], s, cmp_type=2), left, pl.mul(left, s))

    a = rng.standard_normal((R, 128)).astype(np.float32)
    y = k(a, 0.5)
    x = a[:, :64]
    assert np.array_equal(y, np.where(a[:, 64:] < np.float32(0.5), x, x * np.float32(0.5)))


def test_int16_select_and_uint16_cmps_on_a2a3():
    @pl.kernel
    def k(
        a: pl.Tensor[[R, C], pl.INT16], b: pl.Tensor[[R, C], pl.INT16], y: pl.Out[pl.Tensor[[R, C], pl.INT16]]
    ):
        ta, tb = pl.load(a, [0, 0], [R, C]), pl.load(b, [0, 0], [R, C])
        pl.store(pl.sel(pl.cmp(ta, 7, cmp_type=3), ta, tb), [0, 0], y)

    a = rng.integers(-20, 20, (R, C)).astype(np.int16)
    b = rng.integers(-20, 20, (R, C)).astype(np.int16)
    assert np.array_equal(k(a, b), np.where(a <= 7, a, b))


def test_lane_batched_select_equals_per_lane_byte_for_byte(monkeypatch):
    seen = []
    real = batched.try_run_spmd
    monkeypatch.setattr(batched, "try_run_spmd", lambda *a, **kw: seen.append(real(*a, **kw)) or seen[-1])

    @pl.kernel
    def k(x: pl.Tensor[[64, C], pl.FP32], y: pl.Out[pl.Tensor[[64, C], pl.FP32]]):
        for lane in pl.spmd(4):
            t = pl.load(x, [lane * R, 0], [R, C])
            m = pl.cmp(t, pl.row_expand(t, pl.row_max(t)), cmp_type=0)  # the row maximum's position
            pl.store(pl.sels(m, t, pl.create_tile([1, 32], dtype=pl.UINT8), 0.0), [lane * R, 0], y)

    x = rng.standard_normal((64, C)).astype(np.float32)
    outs = []
    for o in (Options(strict=True), Options(batch=False), Options(fast=False)):
        with using(o):
            outs.append(k(x))
    for o in outs[1:]:
        assert o.tobytes() == outs[0].tobytes()
    assert seen and seen[0] is True  # the batched path ran
    assert np.array_equal(outs[0], np.where(x == x.max(axis=1, keepdims=True), x, 0))


def _trace(body, dtype=pl.FP32, target=pl.A2A3):
    @pl.kernel(target=target)
    def k(x: pl.Tensor[[R, C], dtype], y: pl.Out[pl.Tensor[[R, C], dtype]]):
        body(pl.load(x, [0, 0], [R, C]), y)

    return k.lower(np.zeros((R, C), dtype.np_dtype), np.zeros((R, C), dtype.np_dtype))


def test_refusals():
    with pytest.raises(nzjit.CompileError, match=r"pl.cmp: cmp_type must be an int code, got 'gt'") as ei:
        _trace(lambda t, y: pl.cmp(t, t, cmp_type="gt"))
    assert "help: cmp_type is 0=EQ, 1=NE, 2=LT, 3=LE, 4=GT, 5=GE" in str(ei.value)
    with pytest.raises(nzjit.CompileError, match="cmp_type must be an int code, got 6"):
        _trace(lambda t, y: pl.cmp(t, 0.0, cmp_type=6))
    # pto-isa TCMP: the A2/A3 int32 path runs EQ whatever the mode: refused, not computed wrong
    with pytest.raises(
        nzjit.CompileError, match=r"compares INT32 tiles for equality only .* cmp_type 4 \(GT\)"
    ):
        _trace(lambda t, y: pl.cmp(t, t, cmp_type=4), pl.INT32)
    _trace(lambda t, y: pl.cmp(t, t, cmp_type=0), pl.INT32)  # EQ is what it computes
    _trace(lambda t, y: pl.cmp(t, t, cmp_type=4), pl.INT32, pl.A5)  # A5 has every mode
    with pytest.raises(
        nzjit.CompileError, match=r"pl.cmp: the A2A3 vector unit compares or selects no pl.INT16"
    ):
        _trace(lambda t, y: pl.cmp(t, t, cmp_type=1), pl.INT16)
    with pytest.raises(
        nzjit.CompileError, match=r"pl.sel: the A2A3 vector unit compares or selects no pl.INT8"
    ):
        _trace(lambda t, y: pl.sel(None, t, t), pl.INT8)
    with pytest.raises(
        nzjit.CompileError, match=r"pl.sel: the mask must be the ui8\[16,32\]@Vec predicate tile"
    ):
        _trace(lambda t, y: pl.sel(pl.cmp(t[0:8, :], 0.0), t, t))
    with pytest.raises(nzjit.CompileError, match=r"pl.sel operands differ"):
        _trace(lambda t, y: pl.sel(pl.cmp(t, 0.0), t, pl.cast(t, pl.FP16)))
    with pytest.raises(nzjit.CompileError, match=r"pl.sels selects a scalar where the mask is clear"):
        _trace(lambda t, y: pl.sels(pl.cmp(t, 0.0), t))
    with pytest.raises(nzjit.CompileError, match=r"pl.cmps compares with a scalar"):
        _trace(lambda t, y: pl.cmps(t, t))
    with pytest.raises(nzjit.CompileError, match=r"pl.cmp operands differ"):
        _trace(lambda t, y: pl.cmp(t, t[:, 0:32]))
