"""Compiled execution plans (specialised step closures, TEXTRACT windows fused into the mad)
give byte-identical results, and identical on-chip accounting, to the generic per-equation
path (every equation through its `impl_rules` entry, every TEXTRACT moving bytes)."""

from __future__ import annotations

import warnings
from contextlib import contextmanager

import ml_dtypes
import numpy as np
import pytest
from gmm_kernels import check_gmm, gmm_operands, grouped

import runtime
from nzjit import pl
from nzjit.backend.executor import Ctx, run_graph
from nzjit.backend.launch import tensor_value
from nzjit.backend.options import current, using
from nzjit.passes import nd_pitch_guard


@contextmanager
def _resident(args, fast: bool, batch: bool):
    """The executor's options switched to `fast` / `batch`, and fresh resident copies of `args` on
    a new worker: yields (worker, device tensors, the options)."""
    with using(current().with_(fast=fast, batch=batch)) as options:
        w = runtime.Worker(0)
        yield w, [w.alloc_tensor(a.shape, a.dtype, init=a) for a in args], options


def _run(kernel, args, fast: bool, batch: bool = True):
    """Run `kernel` on fresh resident copies of `args`; return (output bytes, on-chip peaks)."""
    with _resident(args, fast, batch) as (w, devs, options):
        low = kernel.lower(*devs)
        graph = low.final
        blocked = bool(graph.attrs.get("nz_tensor_views_blocked"))
        vals = [tensor_value(p.type, d, {}, blocked) for p, d in zip(kernel.params, devs)]
        onchip = runtime.OnChip(w.target)
        run_graph(Ctx(w.gm, onchip, {}, options), graph, vals)
        return [w.copy_from(d).tobytes() for d in devs], dict(onchip.peak), dict(onchip.live)


def _same(kernel, *args):
    slow = _run(kernel, args, False)
    for batch in (False, True):  # specialised steps trip by trip, then with batched trips / lanes
        fast = _run(kernel, args, True, batch)
        assert fast[0] == slow[0]
        assert fast[1] == slow[1]  # peak bytes per on-chip space
        assert fast[2] == slow[2] and all(v == 0 for v in fast[2].values())  # everything freed
    return fast[0]


@pytest.mark.parametrize(
    "dtype,np_dtype,out_dtype,np_out",
    [
        (pl.BF16, ml_dtypes.bfloat16, pl.FP32, np.float32),
        (pl.FP16, np.float16, pl.FP32, np.float32),
        (pl.INT8, np.int8, pl.INT32, np.int32),
    ],
)
def test_grouped_nz_matmul_plans_equal_generic(dtype, np_dtype, out_dtype, np_out):
    E, T, N, K, NT, KT = 2, 32, 256, 512, 128, 256
    x, w = gmm_operands(np.random.default_rng(0), np_dtype, E, T, N, K)
    out = np.zeros((E, T, N), np_out)
    got = _same(grouped(dtype, out_dtype, E, T, N, K, NT, KT), x, runtime.pack_nz(w), out)
    check_gmm(np.frombuffer(got[2], np_out).reshape(E, T, N), x, w, np_dtype)


@pytest.mark.parametrize("T", [1, 4, 15, 17])
@pytest.mark.parametrize(
    "dtype,np_dtype,out_dtype,np_out",
    [
        (pl.BF16, ml_dtypes.bfloat16, pl.FP32, np.float32),
        (pl.INT8, np.int8, pl.INT32, np.int32),
    ],
)
def test_decode_batch_plans_equal_generic(T, dtype, np_dtype, out_dtype, np_out):
    """A decode batch of T tokens (T not a multiple of 16): 16-row Mat / Left / Acc tiles with T valid
    rows (hardware-model.md §3, §6). The compiled steps carry the valid rows into the TEXTRACT window
    and the accumulator, the lane-batched path falls back to the per-lane one: the same bytes."""
    E, N, K, NT, KT = 2, 64, 128, 32, 64
    rng = np.random.default_rng(T)
    x = rng.integers(-100, 100, (E, T, K)).astype(np_dtype)
    w = rng.integers(-100, 100, (E, N, K)).astype(np_dtype)
    out = np.zeros((E, T, N), np_out)
    got = _same(grouped(dtype, out_dtype, E, T, N, K, NT, KT), x, runtime.pack_nz(w), out)
    res = np.frombuffer(got[2], np_out).reshape(E, T, N)
    ref = np.einsum("etk,enk->etn", x.astype(np.float64), w.astype(np.float64))
    np.testing.assert_allclose(res, ref, rtol=1e-3, atol=1e-2)


def test_nd_matmul_with_live_accumulator_plans_equal_generic():
    """The accumulator is read after the mad_acc (no in-place update), the left operand is reused
    by two mads (not fused), a loop carries the accumulator."""
    M, K, N = 32, 128, 64

    @pl.kernel
    def k(
        x: pl.Tensor[[M, K], pl.FP16],
        w: pl.Tensor[[N, K], pl.FP16],
        o1: pl.Tensor[[M, N], pl.FP32],
        o2: pl.Tensor[[M, N], pl.FP32],
    ):
        acc = pl.matmul(x[:, 0:64], w[:, 0:64], b_trans=True)
        acc2 = pl.matmul_acc(acc, x[:, 64:128], w[:, 64:128], b_trans=True)
        o1[:, :] = acc
        o2[:, :] = acc2

    rng = np.random.default_rng(1)
    x = rng.integers(-4, 4, (M, K)).astype(np.float16)
    w = rng.integers(-4, 4, (N, K)).astype(np.float16)
    got = _same(k, x, w, np.zeros((M, N), np.float32), np.zeros((M, N), np.float32))
    xf, wf = x.astype(np.float32), w.astype(np.float32)
    np.testing.assert_array_equal(np.frombuffer(got[2], np.float32).reshape(M, N), xf[:, :64] @ wf[:, :64].T)
    np.testing.assert_array_equal(np.frombuffer(got[3], np.float32).reshape(M, N), xf @ wf.T)


def test_vec_loop_plans_equal_generic():
    R, C, NIT = 16, 32, 8

    @pl.kernel
    def k(
        a: pl.Tensor[[NIT * R, C], pl.FP32],
        b: pl.Tensor[[NIT * R, C], pl.FP32],
        out: pl.Tensor[[NIT * R, C], pl.FP32],
    ):
        for i in pl.range(NIT):
            r0 = (i * 3 + 1) % NIT * R
            ta = pl.load(a, [r0, 0], [R, C])
            tb = pl.load(b, [r0, 0], [R, C])
            pl.store(pl.exp(pl.maximum(pl.mul(pl.add(ta, tb), ta), tb)), [r0, 0], out)

    rng = np.random.default_rng(2)
    a = rng.standard_normal((NIT * R, C)).astype(np.float32) * 50
    b = rng.standard_normal((NIT * R, C)).astype(np.float32)
    got = _same(k, a, b, np.zeros_like(a))
    with np.errstate(over="ignore"):
        ref = np.exp(np.maximum((a + b) * a, b))
    np.testing.assert_array_equal(np.frombuffer(got[2], np.float32).reshape(a.shape), ref)


def _outcome(kernel, args, fast: bool, scalars=()):
    """Run `kernel` trip by trip on fresh resident copies of `args` (and the ints `scalars`), on an
    on-chip accounting of its own: (output bytes, the refusal or fault text, on-chip peaks)."""
    with _resident(args, fast, False) as (w, devs, options):
        graph = kernel.lower(*devs, *scalars).final
        blocked = bool(graph.attrs.get("nz_tensor_views_blocked"))
        vals = [
            tensor_value(p.type, a, {}, blocked)
            if isinstance(a, runtime.DeviceTensor)
            else p.type.dtype.wrap(int(a))
            for p, a in zip(kernel.params, [*devs, *scalars])
        ]
        onchip = runtime.OnChip(w.target)
        err = None
        try:
            run_graph(Ctx(w.gm, onchip, {}, options), graph, vals)
        except (runtime.DeviceError, runtime.DispatchError) as e:
            err = f"{type(e).__name__}: {e}"
        return [w.copy_from(d).tobytes() for d in devs], err, dict(onchip.peak)


@pytest.mark.parametrize("shift", [0, 1, -1])
def test_repeated_windows_refuse_like_generic(shift):
    """The load / store steps replay the previous trip's decoded instruction and check only the
    offsets; a trip whose window leaves the tensor (shift 1: the last trip) or starts before it
    (shift -1: the first) is refused with the generic path's text. The windows are the right
    halves of wide rows (a strided GM side) and whole rows (a dense one)."""
    R, C, NIT = 16, 64, 6

    @pl.kernel
    def k(
        a: pl.Tensor[[NIT * R, 2 * C], pl.FP32],
        out: pl.Tensor[[NIT * R, 2 * C], pl.FP32],
        shift: pl.Scalar[pl.INDEX],
    ):
        for i in pl.range(NIT):
            r0 = (i + shift) * R
            ta = pl.load(a, [r0, C], [R, C])
            tb = pl.load(out, [r0, 0], [R, 2 * C])
            pl.store(pl.add(ta, ta), [r0, 0], out)
            pl.store(pl.mul(tb, tb), [r0, 0], a)

    rng = np.random.default_rng(3)
    a = rng.standard_normal((NIT * R, 2 * C)).astype(np.float32)
    o = rng.standard_normal((NIT * R, 2 * C)).astype(np.float32)
    fast, slow = _outcome(k, (a, o), True, (shift,)), _outcome(k, (a, o), False, (shift,))
    assert fast == slow
    assert (fast[1] is None) == (shift == 0)
    assert (fast[2]["Vec"] > 0) == (shift != -1)  # the run's own peaks (shift -1 fails before any tile)


WIDE = 65552  # an INT8 row pitch past 16 bits: the ND2NZ load warns (hardware-model.md §3)


def _wide_probe():
    """A fresh kernel (own caches): columns [c0, c0 + 32) of x through a Mat tile, an identity mad
    and an Acc store. Its loads replay decoded instructions that warn; c0 = WIDE - 16 leaves x."""

    @pl.kernel
    def k(
        x: pl.Tensor[[16, WIDE], pl.INT8],
        eye: pl.Tensor[[32, 32], pl.INT8],
        c0: pl.Scalar[pl.INDEX],
        out: pl.Out[pl.Tensor[[16, 32], pl.INT32]],
    ):
        xt = pl.load(x, [0, c0], [16, 32], target_memory=pl.Mem.Mat)
        et = pl.load(eye, [0, 0], [32, 32], target_memory=pl.Mem.Mat)
        pl.store(pl.matmul(xt, et), [0, 0], out)

    return k


def _fresh_calls(fast: bool, resident: bool, offsets, counted=None):
    """One call per offset, each with fresh tensors of one layout (new host arrays, or new resident
    tensors): per call (output bytes, the warnings, the refusal text). `counted`, a dict, receives
    the number of window checks each call ran (the general path of a load / store step runs one)."""
    from nzjit.backend.rules import memory as fast_mod

    scope = using(current().with_(fast=fast))
    scope.__enter__()
    checks = [0]
    check_window = fast_mod.check_window

    def counting(*a, **kw):
        checks[0] += 1
        return check_window(*a, **kw)

    fast_mod.check_window = counting
    bypass = nd_pitch_guard._bypass_for_tests()  # the wrapping load is the point: the device's bytes
    bypass.__enter__()
    try:
        k, w, out = _wide_probe(), runtime.Worker(0), []
        rng = np.random.default_rng(7)
        for i, c0 in enumerate(offsets):
            x = rng.integers(-100, 100, (16, WIDE), dtype=np.int8)
            args = (x, np.eye(32, dtype=np.int8), c0, np.zeros((16, 32), np.int32))
            if resident:
                args = tuple(
                    w.alloc_tensor(a.shape, a.dtype, init=a) if isinstance(a, np.ndarray) else a for a in args
                )
            checks[0], err = 0, None
            with warnings.catch_warnings(record=True) as ws:
                warnings.simplefilter("always")
                try:
                    k(*args)
                except (runtime.DeviceError, runtime.DispatchError) as e:
                    err = f"{type(e).__name__}: {e}"
            o = args[-1]
            got = (w.copy_from(o) if resident else o).tobytes()
            out.append((got, [f"{m.category.__name__}: {m.message}" for m in ws], err))
            if counted is not None:
                counted[i] = checks[0]
        return out
    finally:
        fast_mod.check_window = check_window
        bypass.__exit__(None, None, None)
        scope.__exit__(None, None, None)


@pytest.mark.parametrize("resident", [False, True])
def test_fresh_tensors_of_one_layout_keep_the_fast_path(resident):
    """Every host-array call uploads to new GM addresses (the device never reuses one), so the
    load / store steps match the remembered instruction on the layout, not on the TensorVal: after
    the first call none of them runs its general path again, yet bytes, the replayed warnings and
    the refusal of a window past the end of the *new* tensor are the generic path's."""
    offsets = (0, 32, WIDE - 32, WIDE - 16, 64)
    counted: dict[int, int] = {}
    fast = _fresh_calls(True, resident, offsets, counted)
    assert fast == _fresh_calls(False, resident, offsets)
    assert [f[2] is None for f in fast] == [True, True, True, False, True]
    assert "out of bounds" in fast[3][2]
    assert all(any("srcDValue wrapped" in m for m in f[1]) for f in fast if f[2] is None)
    assert counted[0] == 3  # two loads and the store decode and check their windows once ...
    assert counted[1] == counted[2] == counted[4] == 0  # ... then replay, call after call
    assert counted[3] == 1  # the window past the end: the load's general path refuses it
