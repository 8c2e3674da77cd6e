"""The cached program plan (nzjit/backend/program_cache.py, issue 25 item 4): an orchestration
whose body records a program of the signature of an earlier one reuses that program's checked
launch plans. Each test pins one fact of the key or one per-call re-check: a cached program equals
numpy on new data, and whatever the general path would refuse is refused with its message,
nothing written."""

from __future__ import annotations

import numpy as np
import pytest

import runtime
from nzjit import pl
from nzjit.backend import call as C
from nzjit.backend import program_cache
from nzjit.backend.options import Options, current, using

R, P, T, W = 2, 2, 16, 32  # ranks, planes per rank, rows, columns


@pl.kernel
def double(x: pl.Tensor[[P, T, W], pl.FP32], y: pl.Out[pl.Tensor[[P, T, W], pl.FP32]]):
    for e in pl.spmd(P):
        t = pl.load(x, [e, 0, 0], [1, T, W])
        pl.store(pl.add(t, t), [e, 0, 0], y)


@pl.orchestration
def chain(x: pl.Tensor[[R, P, T, W], pl.FP32], out: pl.Out[pl.Tensor[[R, P, T, W], pl.FP32]]):
    for r in range(R):
        h = double(x[r], device=r)  # an intermediate on rank r
        double(h, out[r], device=r)


def _data(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(-8, 9, (R, P, T, W)).astype(np.float32)


def _hits() -> int:
    return program_cache.HITS[0]


def test_a_second_call_on_new_arrays_plans_from_the_cache_and_equals_numpy():
    cluster = runtime.Cluster(R)
    x1, x2 = _data(1), _data(2)
    out1 = np.zeros_like(x1)
    chain(x1, out1, cluster=cluster)
    before = _hits()
    out2 = np.zeros_like(
        x2
    )  # new arrays of the same shapes: the key holds the roots' order, not their identity
    chain(x2, out2, cluster=cluster)
    assert _hits() == before + 1
    np.testing.assert_array_equal(out1, 4 * x1)
    np.testing.assert_array_equal(out2, 4 * x2)
    assert chain(x1, cluster=cluster).tobytes() == (4 * x1).tobytes()  # an omitted Out: fresh each call


def test_every_cached_call_gets_new_poisoned_intermediates_and_frees_them():
    cluster = runtime.Cluster(R)
    x = _data(3)
    chain(x, cluster=cluster)
    live = [w.gm.live_bytes for w in cluster.workers]
    seen: list[tuple[tuple[int, int], bytes]] = []
    real = C.plan_program

    def spy(calls, ranks, rank_prefix, options):
        plan = real(calls, ranks, rank_prefix, options)
        for p in C.pending_refs(calls):  # what a rank's first read would see: fresh device memory
            seen.append(
                ((p.device, p.tensor.address), p.tensor.worker.gm.read(p.tensor.address, 8).tobytes())
            )
        return plan

    before = _hits()
    C.plan_program = spy
    try:
        for _ in range(2):
            np.testing.assert_array_equal(chain(x, cluster=cluster), 4 * x)
    finally:
        C.plan_program = real
    assert _hits() == before + 2 and len(seen) == 2 * R  # both planned from the cache
    assert len({a for a, _ in seen}) == len(seen)  # never the addresses of an earlier call
    assert all(b == bytes([runtime.memory.POISON_BYTE]) * 8 for _, b in seen)
    assert [w.gm.live_bytes for w in cluster.workers] == live  # freed when each program ended


def test_a_resident_freed_between_record_and_plan_is_refused_as_by_the_general_path():
    cluster = runtime.Cluster(R)
    x = cluster.alloc_stacked_tensor(_data(4))
    out = cluster.alloc_stacked_tensor(np.zeros((R, P, T, W), np.float32))
    chain(x, out)  # planned by the general path, kept
    prog = chain.record(x, out)  # the same signature
    keep = cluster.copy_stacked_from(out).copy()
    cluster.workers[1].free_tensor(x.shards[1])
    with pytest.raises(runtime.DispatchError, match=r"rank 1: double .*use after free"):
        C.run_program(prog.calls, residents=[C.as_ref(x, "x"), C.as_ref(out, "out")], options=current())
    assert cluster.copy_stacked_from(out).tobytes() == keep.tobytes()  # nothing written


def test_a_read_only_output_after_a_cached_call_is_refused():
    cluster = runtime.Cluster(R)
    x, out = _data(5), np.zeros((R, P, T, W), np.float32)
    chain(x, out, cluster=cluster)
    chain(x, out, cluster=cluster)
    out[...] = 7
    out.flags.writeable = False
    with pytest.raises(runtime.DispatchError, match="'out' is an output and needs a writable array"):
        chain(x, out, cluster=cluster)
    assert (out == 7).all()


def test_a_kernel_traced_again_or_new_options_plan_by_the_general_path():
    cluster = runtime.Cluster(R)
    x = _data(6)
    chain(x, cluster=cluster)
    double.clear_cache()  # a new generation of the kernel's compiled forms: the old plans must not run
    traced = double.trace_count
    before = _hits()
    np.testing.assert_array_equal(chain(x, cluster=cluster), 4 * x)
    assert _hits() == before and double.trace_count == traced + 1
    with using(Options(rank_batch=False)):
        np.testing.assert_array_equal(chain(x, cluster=cluster), 4 * x)
    assert _hits() == before
    np.testing.assert_array_equal(chain(x, cluster=cluster), 4 * x)  # the first options again: kept
    assert _hits() == before + 1


def test_another_cluster_misses():
    x = _data(7)
    chain(x, cluster=runtime.Cluster(R))
    before = _hits()
    np.testing.assert_array_equal(chain(x, cluster=runtime.Cluster(R)), 4 * x)  # other GMs (serials)
    assert _hits() == before


FLOW = [False]


@pl.orchestration
def flows(x: pl.Tensor[[R, P, T, W], pl.FP32], out: pl.InOut[pl.Tensor[[R, P, T, W], pl.FP32]]):
    double(x[0], out[0], device=0)
    # with FLOW set, rank 1 reads the plane rank 0 writes in this program: refused before dispatch
    double(out[0] if FLOW[0] else x[1], out[1], device=1)


def test_a_body_that_records_another_program_is_checked_again():
    cluster = runtime.Cluster(R)
    x, out = _data(8), np.zeros((R, P, T, W), np.float32)
    flows(x, out, cluster=cluster)
    flows(x, out, cluster=cluster)
    FLOW[0] = True
    try:
        out[...] = 3
        with pytest.raises(runtime.DispatchError, match="rank 1 reads out\\[0\\], which rank 0 writes"):
            flows(x, out, cluster=cluster)
        assert (out == 3).all()
    finally:
        FLOW[0] = False


@pl.orchestration
def pair(
    a: pl.Tensor[[R, P, T, W], pl.FP32],
    b: pl.Tensor[[R, P, T, W], pl.FP32],
    out: pl.Out[pl.Tensor[[R, P, T, W], pl.FP32]],
):
    for r in range(R):
        double(a[r] if r == 0 else b[r], out[r], device=r)


def test_argument_arrays_that_share_memory_are_not_keyed():
    cluster = runtime.Cluster(R)
    base = _data(9)
    prog = pair.record(base, base.copy(), np.zeros_like(base))
    ranks = dict(enumerate(cluster.workers))
    assert program_cache.program_key(prog.calls, ranks, True, current()) is not None
    twice = pair.record(base, base, np.zeros_like(base))  # one array passed twice: one root
    assert program_cache.program_key(twice.calls, ranks, True, current()) is not None
    shared = pair.record(base, base.view(), np.zeros_like(base))  # two arrays, one memory
    assert program_cache.program_key(shared.calls, ranks, True, current()) is None
    for b in (base, base.view()):
        out = np.zeros_like(base)
        pair(base, b, out, cluster=cluster)
        np.testing.assert_array_equal(out, 2 * base)


def test_an_output_passed_as_an_input_too_is_refused_on_every_call():
    cluster = runtime.Cluster(R)
    x = _data(10)
    for _ in range(2):
        with pytest.raises(runtime.DispatchError, match="share memory"):
            pair(x, x, x, cluster=cluster)
    np.testing.assert_array_equal(x, _data(10))


def test_at_most_max_programs_are_kept(monkeypatch):
    monkeypatch.setattr(program_cache, "MAX_PROGRAMS", 2)
    program_cache.clear()
    for _ in range(3):
        chain(_data(11), cluster=runtime.Cluster(R))  # three clusters: three keys
    assert len(program_cache._cache) == 2


@pl.kernel
def scaled(x: pl.Tensor[[T, W], pl.FP32], k: pl.Scalar[pl.INT8], y: pl.Out[pl.Tensor[[T, W], pl.FP32]]):
    t = pl.load(x, [0, 0], [T, W])
    pl.store(pl.mul(t, pl.cast(k, pl.FP32)), [0, 0], y)


@pl.orchestration
def scale_all(
    x: pl.Tensor[[R, T, W], pl.FP32], k: pl.Scalar[pl.INT32], out: pl.Out[pl.Tensor[[R, T, W], pl.FP32]]
):
    for r in range(R):
        scaled(x[r], k, out[r], device=r)


def test_a_scalar_out_of_the_kernels_range_is_refused_after_cached_calls():
    """The orchestration takes an INT32, its kernel an INT8: 300 passes the entry and is refused
    by the call's own check, after two cached calls with k = 3 as on a first call."""
    cluster = runtime.Cluster(R)
    x = np.ascontiguousarray(_data(12)[:, 0])
    for _ in range(2):
        np.testing.assert_array_equal(scale_all(x, 3, cluster=cluster), 3 * x)
    out = np.full_like(x, 5)
    with pytest.raises(
        runtime.DispatchError, match=r"rank 0: scaled .*parameter 'k' is INT8: 300 is outside \[-128, 127\]"
    ):
        scale_all(x, 300, out, cluster=cluster)
    assert (out == 5).all()


def test_threads_calling_one_cached_program_at_once_each_get_their_own_numbers():
    """The launch plans of a cached program are shared by concurrent callers; each call has its
    own intermediates and arguments, so every result is its own input's."""
    import threading

    cluster = runtime.Cluster(R)
    chain(_data(13), cluster=cluster)
    before, wrong = _hits(), []

    def caller(seed: int) -> None:
        for i in range(10):
            x = _data(1000 * seed + i)
            try:
                if not np.array_equal(chain(x, cluster=cluster), 4 * x):
                    wrong.append((seed, i))
            except Exception as e:  # noqa: BLE001 - a thread's error is the test's failure
                wrong.append((seed, i, repr(e)))

    threads = [threading.Thread(target=caller, args=(s,)) for s in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert wrong == [] and _hits() == before + 30
