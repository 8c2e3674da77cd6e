"""The cached direct call (backend/direct_call.py `CallPlan`, a cached LaunchPlan of backend/convention.py): a call with the signature of an earlier
successful one skips the checks that signature already passed, but every per-call fact is still
checked, and a refused call gets exactly the message (and the untouched outputs) it gets cold."""

from __future__ import annotations

import numpy as np
import pytest

import runtime
from nzjit import pl

X = np.arange(16 * 32, dtype=np.int32).reshape(16, 32)


def make():
    """A fresh kernel (own caches): copies row `n` of x to the first row of o, the rest of x too."""

    @pl.kernel
    def k(x: pl.Tensor[[16, 32], pl.INT32], n: pl.Scalar[pl.INT32], o: pl.Out[pl.Tensor[[16, 32], pl.INT32]]):
        pl.store(pl.load(x, [0, 0], [16, 32]), [0, 0], o)
        pl.store(pl.load(x, [n, 0], [1, 32]), [0, 0], o)  # n = -1: a negative offset, refused while running

    return k


def expected(n: int) -> np.ndarray:
    e = X.copy()
    e[0] = X[n]
    return e


def refusal(k, *args, **kw) -> str:
    with pytest.raises(Exception) as ei:
        k(*args, **kw)
    return f"{type(ei.value).__name__}: {ei.value}"


def test_a_repeated_call_takes_the_cached_plan_and_runs_each_time():
    k = make()
    w = runtime.Worker(0)
    x, o = w.alloc_tensor((16, 32), np.int32, init=X), w.alloc_tensor((16, 32), np.int32)
    assert k(x, 3, o) is o
    assert len(k._direct_plans) == 1
    for n in (5, 7):
        x2, o2 = w.alloc_tensor((16, 32), np.int32, init=X), w.alloc_tensor((16, 32), np.int32)
        assert k(x2, n, o2) is o2  # other tensors, other scalar: the same plan
        np.testing.assert_array_equal(w.copy_from(o2), expected(n))
    assert len(k._direct_plans) == 1 and k.trace_count == 1


def test_host_arrays_on_the_cached_path():
    k = make()
    outs = [k(X, n) for n in (1, 2)]  # omitted Out: a new array each call
    assert outs[0] is not outs[1]
    np.testing.assert_array_equal(outs[1], expected(2))
    o = np.full((16, 32), 9, np.int32)
    assert k(X, 4, o) is o
    np.testing.assert_array_equal(o, expected(4))
    inout = X.copy()
    # one array as input and output (not pl.InOut): refused on the cached path too (issue 24)
    with pytest.raises(runtime.DispatchError, match="'x' and 'o' share memory"):
        k(inout, 2, inout)
    np.testing.assert_array_equal(inout, X)
    assert k.trace_count == 1


def test_cached_host_calls_free_their_device_temporaries():
    from nzjit.backend.launch import default_worker

    k = make()
    k(X, 1)
    gm = default_worker("A2A3", 0).gm
    live = gm.live_bytes
    k(X, 2)
    k(X, 2, np.zeros((16, 32), np.int32))
    with pytest.raises(runtime.DispatchError, match="negative"):
        k(X, -1)  # fails while running, after the uploads
    assert gm.live_bytes == live


def test_a_failure_while_running_restores_resident_outputs():
    k = make()
    w = runtime.Worker(0)
    x, o = w.alloc_tensor((16, 32), np.int32, init=X), w.alloc_tensor((16, 32), np.int32, init=X + 1)
    k(x, 0, w.alloc_tensor((16, 32), np.int32))  # the signature is cached
    cold = refusal(make(), x, -1, o)
    assert "negative" in cold
    assert refusal(k, x, -1, o) == cold
    np.testing.assert_array_equal(w.copy_from(o), X + 1)  # the first store was undone


def _bad_cases(w: runtime.Worker) -> dict:
    """Arguments that share the cached signature (or not) but must be refused."""
    other = runtime.Worker(1)
    x = w.alloc_tensor((16, 32), np.int32, init=X)
    freed = w.alloc_tensor((16, 32), np.int32)
    w.free_tensor(freed)
    readonly = np.zeros((16, 32), np.int32)
    readonly.flags.writeable = False
    # two fresh workers hand out the same first address: the output's address is live on both
    a, b = runtime.Worker(0), runtime.Worker(1)
    xa, ob = a.alloc_tensor((16, 32), np.int32, init=X), b.alloc_tensor((16, 32), np.int32)
    r1 = runtime.Worker(1)
    a5 = runtime.Worker(0, "A5")
    return {
        "tensors of two workers, one address": ((xa, 0, ob), {}),
        "device=0 for tensors of worker 1": (
            (r1.alloc_tensor((16, 32), np.int32), 0, r1.alloc_tensor((16, 32), np.int32)),
            {"device": 0},
        ),
        "worker of another target": (
            (a5.alloc_tensor((16, 32), np.int32), 0, a5.alloc_tensor((16, 32), np.int32)),
            {},
        ),
        "freed input": ((freed, 0, w.alloc_tensor((16, 32), np.int32)), {}),
        "freed output": ((x, 0, freed), {}),
        "input of another worker": (
            (other.alloc_tensor((16, 32), np.int32), 0, w.alloc_tensor((16, 32), np.int32)),
            {},
        ),
        "device= of another rank": ((x, 0, w.alloc_tensor((16, 32), np.int32)), {"device": 1}),
        "scalar outside INT32": ((x, 2**31, w.alloc_tensor((16, 32), np.int32)), {}),
        "scalar of another type": ((x, 1.0, w.alloc_tensor((16, 32), np.int32)), {}),
        "bool scalar": ((x, True, w.alloc_tensor((16, 32), np.int32)), {}),
        "non-contiguous host array": ((np.zeros((32, 32), np.int32)[::2], 0), {}),
        "read-only host output": ((X, 0, readonly), {}),
        "other shape": ((np.zeros((16, 33), np.int32), 0), {}),
        "other dtype": ((X.astype(np.int64), 0), {}),
        "missing argument": ((X,), {}),
    }


@pytest.mark.parametrize("case", list(_bad_cases(runtime.Worker(0))))
def test_a_refusal_after_cached_calls_matches_the_cold_one(case):
    w = runtime.Worker(0)
    args, kw = _bad_cases(w)[case]
    cold = refusal(make(), *args, **kw)
    k = make()
    k(w.alloc_tensor((16, 32), np.int32, init=X), 0, w.alloc_tensor((16, 32), np.int32))  # resident signature
    k(w.alloc_tensor((16, 32), np.int32, init=X), 0, w.alloc_tensor((16, 32), np.int32), device=0)
    k(X, 0, np.zeros((16, 32), np.int32))  # host signature
    k(X, 0)  # omitted-Out signature
    outs = [a for a in args if isinstance(a, np.ndarray) and a.flags.writeable]
    before = [a.copy() for a in outs]
    assert refusal(k, *args, **kw) == cold
    for a, b in zip(outs, before):
        np.testing.assert_array_equal(a, b)


def test_dynamic_dims_cache_one_plan_per_extent():
    @pl.kernel
    def copy(
        x: pl.Tensor[[pl.dynamic("M"), 32], pl.INT32], o: pl.Out[pl.Tensor[[pl.dynamic("M"), 32], pl.INT32]]
    ):
        pl.store(pl.load(x, [0, 0], [16, 32]), [0, 0], o)

    for m in (16, 32, 16):
        x = np.arange(m * 32, dtype=np.int32).reshape(m, 32)
        out = copy(x)
        assert out.shape == (m, 32)
        np.testing.assert_array_equal(out[:16], x[:16])
    assert len(copy._direct_plans) == 2 and copy.trace_count == 1
    cold = refusal(copy, np.zeros((16, 32), np.int32), np.zeros((32, 32), np.int32))
    assert "dynamic dim 'M'" in cold


def test_clear_cache_drops_the_plans():
    k = make()
    k(X, 1)
    k.clear_cache()
    assert not k._direct_plans
    np.testing.assert_array_equal(k(X, 2), expected(2))
    assert k.trace_count == 2


def test_inside_an_orchestration_the_call_is_recorded_not_run():
    k = make()
    k(X, 1)  # a cached plan must not bypass the recording

    @pl.orchestration
    def twice(x: pl.Tensor[[16, 32], pl.INT32], o: pl.Out[pl.Tensor[[16, 32], pl.INT32]]):
        k(x, 1, o)
        k(x, 3, o)

    np.testing.assert_array_equal(twice(X), expected(3))


def test_a_launch_starts_with_empty_on_chip_accounting():
    """Launches reuse the OnChip of a finished one (its freed tile images): only one with nothing
    live is kept, and it comes back with no live bytes and no peak, like a new one."""
    from nzjit.backend import launch
    from nzjit.backend.launch import launch_onchip, recycle_onchip

    target = "A5"
    launch._IDLE_ONCHIPS.pop(target, None)  # what other tests left idle
    leaked = launch_onchip(target)
    leaked.alloc_tile("Vec", 16, 16, np.float32)  # a tile still accounted: not reused
    recycle_onchip(leaked)
    clean = launch_onchip(target)
    assert clean is not leaked
    clean.free_tile(clean.alloc_tile("Vec", 64, 64, np.float32))
    assert clean.peak["Vec"] > 0
    recycle_onchip(clean)
    again = launch_onchip(target)
    assert again is clean and again.target == target
    assert not any(again.live.values()) and not any(again.peak.values())


def test_a_window_past_a_smaller_tensor_of_the_same_kernel_is_refused():
    """A fresh tensor matches the remembered load / store only with the same shape: a window that
    fitted the last call's tensor is still checked against this call's (dynamic dims)."""

    def make_dyn():
        @pl.kernel
        def k(
            x: pl.Tensor[[pl.dynamic("M"), 32], pl.INT32],
            n: pl.Scalar[pl.INDEX],
            o: pl.Out[pl.Tensor[[16, 32], pl.INT32]],
        ):
            pl.store(pl.load(x, [n, 0], [16, 32]), [0, 0], o)

        return k

    k = make_dyn()
    big = np.arange(32 * 32, dtype=np.int32).reshape(32, 32)
    np.testing.assert_array_equal(k(big, 16), big[16:])
    cold = refusal(make_dyn(), big[:16].copy(), 16)
    assert "out of bounds" in cold
    assert refusal(k, big[:16].copy(), 16) == cold


def test_none_for_an_out_allocates_it_on_every_call():
    # api.md "Calling a kernel": an omitted Out is allocated and returned; None in its place means
    # the same, on the cold call and on the cached one (the second call crashed in worker_for)
    k = make()
    outs = [k(X, n, None) for n in (1, 2, 3)]
    assert len(k._direct_plans) == 1 and k.trace_count == 1
    assert outs[0] is not outs[1] and outs[1] is not outs[2]
    for n, o in zip((1, 2, 3), outs):
        np.testing.assert_array_equal(o, expected(n))
    o = np.full((16, 32), 9, np.int32)  # a given Out after None calls: written in place
    assert k(X, 4, o) is o
    np.testing.assert_array_equal(o, expected(4))
    np.testing.assert_array_equal(k(X, 5, None), expected(5))


def test_none_for_an_input_is_refused_before_anything_runs():
    k = make()
    o = np.full((16, 32), 9, np.int32)
    for _ in range(2):  # cold, then with a cached plan of the same kernel
        o.fill(9)
        assert refusal(k, None, 1, o) == (
            "DispatchError: parameter 'x' got None; only an Out parameter may be "
            "None (allocated and returned), an input needs its data"
        )
        np.testing.assert_array_equal(o, 9)
        k(X, 1, o)

    @pl.kernel
    def inout(x: pl.Tensor[[16, 32], pl.INT32], o: pl.InOut[pl.Tensor[[16, 32], pl.INT32]]):
        pl.store(pl.load(x, [0, 0], [16, 32]), [0, 0], o)

    assert refusal(inout, X, None) == (
        "DispatchError: parameter 'o' got None; only an Out parameter may be "
        "None (allocated and returned), an input needs its data"
    )


def test_float_scalars_and_nz_device_tensors_take_the_cached_plan():
    # a pl.Scalar[pl.FP32] argument is a Python float and an NZ weight an NzDeviceTensor: both are
    # in the signature (the float by its type, the tensor by its class), so repeated calls of the
    # fused expert reuse their plan instead of re-checking everything on the general path
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
    import fused_moe_expert as fm

    w = runtime.Worker(0)
    x8, wg, wu, sg, su, wd, xs = fm.data()
    devs = [
        w.alloc_tensor(a.shape, a.dtype, init=a)
        for a in (x8, runtime.pack_nz(wg), runtime.pack_nz(wu), sg, su, runtime.pack_nz(wd))
    ]
    outs = []
    for scale in (float(xs), 0.5 * float(xs)):
        out = w.alloc_tensor((fm.E, fm.T, fm.H), np.float32)
        fm.moe_expert(*devs, scale, out)
        outs.append(w.copy_from(out))
        ref = fm.reference(x8, wg, wu, sg, su, wd, scale)
        assert np.abs(outs[-1] - ref).max() <= 2e-3 * np.abs(ref).max()
    assert len(fm.moe_expert._direct_plans) == 1
    assert not np.array_equal(outs[0], outs[1])  # the scalar is read per call, not cached


def test_a_float_scalar_out_of_range_after_cached_calls_is_refused_as_cold():
    def make_scaled():
        @pl.kernel
        def k(
            x: pl.Tensor[[16, 32], pl.FP16], s: pl.Scalar[pl.FP16], o: pl.Out[pl.Tensor[[16, 32], pl.FP16]]
        ):
            pl.store(pl.mul(pl.load(x, [0, 0], [16, 32]), s), [0, 0], o)

        return k

    x = np.ones((16, 32), np.float16)
    k = make_scaled()
    np.testing.assert_array_equal(k(x, 2.0), np.full((16, 32), 2, np.float16))
    np.testing.assert_array_equal(k(x, 3), np.full((16, 32), 3, np.float16))  # an int: its own plan
    assert len(k._direct_plans) == 2
    cold = refusal(make_scaled(), x, 1e6)
    assert "outside its range" in cold
    o = np.full((16, 32), 7, np.float16)
    assert refusal(k, x, 1e6, o) == cold
    np.testing.assert_array_equal(o, 7)
    # fp16's largest value and the first one that rounds past it (65520 rounds to inf, RNE)
    np.testing.assert_array_equal(k(x, 65504.0), np.full((16, 32), 65504, np.float16))
    np.testing.assert_array_equal(k(x, 65519.0), np.full((16, 32), 65504, np.float16))
    assert refusal(k, x, 65520.0, o) == refusal(make_scaled(), x, 65520.0)
    np.testing.assert_array_equal(o, 7)
