"""Ranks side by side (issue 25 item 4): 4 ranks of examples/tp_moe.py on the local Cluster against
the bound the cores allow, and the same program on a RayCluster against the local Cluster.

    python benchmarks/bench_ranks.py [--no-ray]

- bound: the ranks' total CPU time (each rank run alone, one after another, `time.process_time`
  of the process, BLAS on the calling thread: their cheapest CPU time) divided by the cores this
  process may use; the 4-rank call should finish within 1.1x of it (wall / bound) and never
  slower than running the ranks one after another (wall / one after another). Both are measured
  alternately, best of 21 (this VM's speed moves by a third between phases of a few seconds: the
  fewer the rounds, the likelier the call and the bound are each timed in another phase). By
  default the 4 ranks run each call as rank-batched launches in the mode their first calls found
  fastest (nzjit/backend/rank_batch.py `MODES`: one group of ranks
  per core on threads or in rank processes, or one group with or without the helper threads; a
  row per mode, forced); the row "ranks as threads" is the same call with one thread per rank. On a shared machine the wall-time rows say more about the load
  than about nzjit: read the CPU-time row, the cores the call got (with the load average) and the
  quiet-machine floor there (the busiest thread's CPU time, from Linux schedstat, or the CPU time
  over the cores: the wall time cannot be lower on any machine; lock waits come on top,
  docs/performance.md). Those rows are the fastest run's; the per-round medians pair the two
  calls of each round instead (steadier under load), and the split row says how evenly the
  work is spread over the cores (the busiest thread's CPU over the CPU time per core);
- ceiling: the ranks split over one forked process per core, each running its ranks one after
  another on memory of its own, nothing shared: the slower process's wall time over the same
  bound, the most ranks as processes could reach on this host (docs/performance.md, session 15);
- numpy: the 4-rank call against the plain numpy of the same expert FFNs on the same fp16 data
  (float32 matmuls of every rank's experts, the fp16 rounding of the activation), interleaved;
- BLAS threads: the 4-rank call with numpy's default BLAS threads against one (ranks side by side
  run BLAS on their own threads, runtime/blas.py);
- Ray overhead: the 4-rank call on `nzjit.distributed.RayCluster(4)` (a local Ray, one actor per
  rank) over the same call on `runtime.Cluster(4)`, both with resident weights.

No timed assertion anywhere.
"""
# isort: skip_file

from __future__ import annotations

import harness  # first: pins BLAS threads before numpy loads

import os  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))

import runtime  # noqa: E402
import tp_moe as m  # noqa: E402
from runtime import blas  # noqa: E402
from runtime.blas import one_thread  # noqa: E402
from nzjit import pl  # noqa: E402
from nzjit.backend import rank_batch, rank_processes  # noqa: E402
from nzjit.backend.options import Options, using  # noqa: E402

CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def one_rank(r: int):
    """The example's program for rank r alone."""

    @pl.orchestration
    def rank_r(
        xe: pl.Tensor[[m.RANKS, m.E_LOCAL, m.CAP, m.H], pl.FP16],
        wg: pl.Tensor[[m.RANKS, m.E_LOCAL, m.F, m.H], pl.FP16, pl.NZ],
        wu: pl.Tensor[[m.RANKS, m.E_LOCAL, m.F, m.H], pl.FP16, pl.NZ],
        wd: pl.Tensor[[m.RANKS, m.E_LOCAL, m.H, m.F], pl.FP16, pl.NZ],
        ye: pl.InOut[pl.Tensor[[m.RANKS, m.E_LOCAL, m.CAP, m.H], pl.FP32]],
    ):
        g, u = m.gate_up(xe[r], wg[r], wu[r], device=r)
        h = m.act(g, u, device=r)
        m.down(h, wd[r], ye[r], device=r)

    return rank_r


def in_turn(singles: list[Any], xe: np.ndarray, ws: list[Any], ye: np.ndarray) -> None:
    """The single-rank programs `singles`, one after another, BLAS on this thread: the run whose
    CPU time the bound counts."""
    with one_thread():
        for p in singles:
            p(xe, *ws, ye)


def inputs(cluster):
    rng = np.random.default_rng(7)
    small = lambda *shape: rng.choice(np.array([-1, 0, 1], np.float16), size=shape, p=[0.25, 0.5, 0.25])
    x = small(m.TOKENS, m.H)
    w_router = rng.standard_normal((m.H, m.E)).astype(np.float32)
    ws = [
        small(m.RANKS, m.E_LOCAL, m.F, m.H),
        small(m.RANKS, m.E_LOCAL, m.F, m.H),
        small(m.RANKS, m.E_LOCAL, m.H, m.F),
    ]
    experts, _ = m.route(x, w_router)
    xe, _ = m.dispatch(x, experts)
    return (
        xe,
        [cluster.alloc_stacked_tensor(runtime.pack_nz(w)) for w in ws],
        m.reference_experts(xe, *ws),
        ws,
    )


def _thread_cpu() -> dict[str, float]:
    """Each thread's CPU seconds so far (Linux schedstat) - this process's, by thread id, and its
    rank processes' (nzjit/backend/rank_processes.py), by "pid/tid" - {} elsewhere."""
    out = {}
    where = [("/proc/self/task", "")] + [(f"/proc/{pid}/task", f"{pid}/") for pid in rank_processes.pids()]
    for tasks, prefix in where:
        try:
            tids = os.listdir(tasks)
        except OSError:
            continue  # the process ended meanwhile
        for tid in tids:
            try:
                with open(f"{tasks}/{tid}/schedstat") as f:
                    out[prefix + tid] = int(f.read().split()[0]) / 1e9
            except (OSError, IndexError, ValueError):
                continue  # the thread ended meanwhile
    return out


def timed(
    fns: dict[str, object], repeat: int = 5, rounds: list[dict[str, tuple[float, float, float]]] | None = None
) -> dict[str, tuple[float, float, float]]:
    """Per function, (wall, CPU - of its rank processes too -, busiest thread's CPU) of its fastest run: `repeat` rounds after
    one warm-up, the functions alternating within each round (a busy machine slows them alike).
    The busiest thread's CPU time is what the run needs at least on any number of cores (a
    thread that ends inside the run is not seen: then 0). Each round's figures are appended to
    `rounds` if given (`paired`)."""
    for fn in fns.values():
        fn()
    best = {name: (float("inf"), 0.0, 0.0) for name in fns}
    for _ in range(repeat):
        this = {}
        for name, fn in fns.items():
            s0, c0, t0 = _thread_cpu(), time.process_time(), time.perf_counter()
            fn()
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            s1 = _thread_cpu()
            cpu += sum(v - s0.get(t, 0.0) for t, v in s1.items() if "/" in t)  # rank processes' CPU
            busiest = max((v - s0.get(t, 0.0) for t, v in s1.items()), default=0.0)
            this[name] = (wall, cpu, busiest)
            if wall < best[name][0]:
                best[name] = (wall, cpu, busiest)
        if rounds is not None:
            rounds.append(this)
    return best


def paired(rounds: list[dict[str, tuple[float, float, float]]], ours: str, ref: str) -> dict[str, float]:
    """Medians over the rounds of the ratios of `ours` to `ref` in the same round: the wall time
    over the bound (`ref`'s CPU time over the cores), the CPU time,
    the quiet-machine floor over the bound, and the busiest thread over the CPU time per core
    (1.0: the work split evenly over the cores). A run that is the fastest in wall time on a
    shared machine is the one whose neighbours paused: the ratios of each round, paired, say
    more about the work than that run's alone."""

    def median(xs: list[float]) -> float:
        xs = sorted(xs)
        return (xs[(len(xs) - 1) // 2] + xs[len(xs) // 2]) / 2

    wall = [r[ours][0] / (r[ref][1] / CORES) for r in rounds]
    cpu = [r[ours][1] / r[ref][1] for r in rounds]
    floor = [max(r[ours][2], r[ours][1] / CORES) / (r[ref][1] / CORES) for r in rounds]
    split = [r[ours][2] / (r[ours][1] / CORES) for r in rounds]
    return {"wall": median(wall), "cpu": median(cpu), "floor": median(floor), "split": median(split)}


def numpy_experts(xe: np.ndarray, wg: np.ndarray, wu: np.ndarray, wd: np.ndarray) -> np.ndarray:
    """The expert FFNs as a user writes them in numpy: float32 matmuls from the fp16 arrays."""
    f32 = np.float32
    x = xe.astype(f32)
    g = x @ wg.astype(f32).swapaxes(-1, -2)
    u = x @ wu.astype(f32).swapaxes(-1, -2)
    h = (np.maximum(g, 0) * u).astype(np.float16)
    return h.astype(f32) @ wd.astype(f32).swapaxes(-1, -2)


def local_rows(repeat: int = 21) -> list[dict[str, str]]:
    """The 4-rank call against the cores bound and against the ranks one after another; the same
    call with ranks as threads (the design before rank-batched launches) for comparison. The
    bound counts each rank's cheapest CPU time: alone, with BLAS on its calling thread
    (runtime/blas.py; numpy's default BLAS threads only add CPU time that spins)."""
    cluster = runtime.Cluster(m.RANKS)
    xe, ws, ref, host = inputs(cluster)
    ye = np.zeros_like(ref)
    singles = [one_rank(r) for r in range(m.RANKS)]

    def serial() -> None:
        in_turn(singles, xe, ws, ye)

    def as_threads() -> None:
        with using(Options(rank_batch=False)):
            m.moe_experts(xe, *ws, ye)

    # the program's trial calls (and the first calls of its rank processes, which are not timed):
    # the rows below time the mode they chose (rank_batch.mode_for)
    for _ in range(len(rank_batch.MODES) * rank_batch.TRIALS + rank_processes.WARM_CALLS):
        m.moe_experts(xe, *ws, ye)
    rounds: list[dict[str, tuple[float, float, float]]] = []
    best = timed(
        {"serial": serial, "4 ranks": lambda: m.moe_experts(xe, *ws, ye), "threads": as_threads},
        repeat,
        rounds,
    )
    med = paired(rounds, "4 ranks", "serial")
    assert np.array_equal(ye, ref), "4 ranks: not numpy's numbers"
    assert np.array_equal(numpy_experts(xe, *host), ref), "numpy's experts: not the example's reference"
    vs = harness.interleaved(
        {"ours": lambda: m.moe_experts(xe, *ws, ye), "numpy": lambda: numpy_experts(xe, *host)}, repeat=3
    )
    (wall4, cpu4, busy4), (wall1, cpu1, _), (wallt, cput, busyt) = (
        best["4 ranks"],
        best["serial"],
        best["threads"],
    )
    bound = cpu1 / CORES
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    got = cpu4 / wall4  # cores the call got: CORES on a quiet machine if the ranks never wait
    return [
        harness.row(
            "4 ranks tp_moe vs numpy (the same expert FFNs)",
            harness.fmt_time(vs["ours"]),
            harness.fmt_time(vs["numpy"]),
            f"{vs['ours'] / vs['numpy']:.2f}x",
            "<= 1.5x",
        ),
        harness.row(
            f"4 ranks tp_moe: wall / bound ({CORES} cores, load {load:.1f})",
            harness.fmt_time(wall4),
            harness.fmt_time(bound),
            f"{wall4 / bound:.2f}x",
            f"<= 1.1x (mode chosen: {', '.join(sorted(set(rank_batch._chosen.values()))) or '-'})",
        ),
        harness.row(
            "4 ranks tp_moe: wall / one after another",
            harness.fmt_time(wall4),
            harness.fmt_time(wall1),
            f"{wall4 / wall1:.2f}x",
            "<= 1.0x",
        ),
        harness.row(
            "  quiet-machine floor: max(busiest thread, CPU / cores)",
            harness.fmt_time(max(busy4, cpu4 / CORES)),
            harness.fmt_time(bound),
            f"{max(busy4, cpu4 / CORES) / bound:.2f}x",
            "the wall time with no load and no lock waits",
        ),
        harness.row(
            "  CPU time: 4 ranks side by side / one after another",
            harness.fmt_time(cpu4),
            harness.fmt_time(cpu1),
            f"{cpu4 / cpu1:.2f}x",
            "<= 1.0x",
        ),
        harness.row(
            f"  wall / bound, per-round median ({len(rounds)} rounds)",
            f"{med['wall']:.2f}x",
            "1.00x",
            f"{med['wall']:.2f}x",
            "<= 1.1x: each round's call over the bound of the same round",
        ),
        harness.row(
            f"  per-round medians ({len(rounds)} rounds): CPU / one after another",
            f"{med['cpu']:.2f}x",
            f"floor {med['floor']:.2f}x",
            f"{med['cpu']:.2f}x",
            "<= 1.0x; the floor over the bound, each round's",
        ),
        harness.row(
            "  busiest thread / (CPU / cores), per-round median",
            f"{med['split']:.2f}",
            "1.00",
            f"{med['split']:.2f}x",
            "<= 1.05x: the work split evenly over the cores",
        ),
        harness.row(
            "  cores the 4 ranks got",
            f"{got:.2f}",
            f"{CORES}",
            f"{got / CORES:.2f}",
            "1.0 on a quiet machine",
        ),
        harness.row(
            "  ranks as threads (rank_batch=False): wall / bound",
            harness.fmt_time(wallt),
            harness.fmt_time(bound),
            f"{wallt / bound:.2f}x",
            f"CPU {cput / cpu1:.2f}x, floor {max(busyt, cput / CORES) / bound:.2f}x",
        ),
    ]


def mode_rows(repeat: int = 7) -> list[dict[str, str]]:
    """The 4-rank call in each of rank_batch's `MODES`, forced, against the same bound (the ranks
    one after another, measured alternately with them): what the default's choice chose from."""
    cluster = runtime.Cluster(m.RANKS)
    xe, ws, ref, _ = inputs(cluster)
    ye = np.zeros_like(ref)
    singles = [one_rank(r) for r in range(m.RANKS)]

    def forced(mode: str):
        def call() -> None:
            rank_batch.FORCE = mode
            try:
                m.moe_experts(xe, *ws, ye)
            finally:
                rank_batch.FORCE = None

        return call

    modes = rank_batch.modes(rank_processes.usable(cluster.workers))
    fns: dict[str, Any] = {"serial": lambda: in_turn(singles, xe, ws, ye)}
    fns.update({mode: forced(mode) for mode in modes})
    best = timed(fns, repeat)
    assert np.array_equal(ye, ref), "4 ranks: not numpy's numbers"
    bound = best["serial"][1] / CORES
    return [
        harness.row(
            f"  mode {mode!r} (forced): wall / bound",
            harness.fmt_time(best[mode][0]),
            harness.fmt_time(bound),
            f"{best[mode][0] / bound:.2f}x",
            f"CPU {best[mode][1] / best['serial'][1]:.2f}x of one after another",
        )
        for mode in modes
    ]


def caller_rows(repeat: int = 7) -> list[dict[str, str]]:
    """What the caller's thread does before any rank starts (recording the body, validating and
    planning all 12 calls: what a cache of the recording per call signature could save at most),
    against the whole call's CPU time; and the call with one rank group on this thread
    (`runtime.threads.THREADS = 1`) against one group per core: the second core's gain in wall
    time, and what the second group adds in CPU time (record + plan: thread CPU time, best of `repeat`)."""
    from nzjit.backend import call as C
    from nzjit.backend.options import current

    cluster = runtime.Cluster(m.RANKS)
    xe, ws, ref, _ = inputs(cluster)
    ye = np.zeros_like(ref)
    m.moe_experts(xe, *ws, ye)
    before_ranks = float("inf")
    for _ in range(repeat):
        t0 = time.thread_time()
        prog = m.moe_experts.record(xe, *ws, ye)
        plan = C.plan_program(prog.calls, dict(enumerate(cluster.workers)), True, current())
        before_ranks = min(before_ranks, time.thread_time() - t0)
        for rk in plan.values():
            rk.free()
        for p in C.pending_refs(prog.calls):
            if p.tensor is not None and not p.tensor.freed:
                p.tensor.worker.free_tensor(p.tensor)
    threads = runtime.threads.THREADS

    def groups(n: int):
        def call() -> None:
            runtime.threads.THREADS = n
            rank_batch.FORCE = "groups"  # one group per thread, not the mode the program chose
            try:
                m.moe_experts(xe, *ws, ye)
            finally:
                runtime.threads.THREADS = threads
                rank_batch.FORCE = None

        return call

    best = timed({"one group": groups(1), "per core": groups(threads)}, repeat)
    assert np.array_equal(ye, ref), "4 ranks: not numpy's numbers"
    (wall1, cpu1, _), (wall_n, cpu_n, _) = best["one group"], best["per core"]
    return [
        harness.row(
            "  caller before the ranks start: record + plan 12 calls",
            harness.fmt_time(before_ranks),
            harness.fmt_time(cpu_n),
            f"{before_ranks / cpu_n:.2f}x",
            "of the call's CPU: a plan cache's ceiling",
        ),
        harness.row(
            f"  {threads} rank groups vs 1 (THREADS=1): wall",
            harness.fmt_time(wall_n),
            harness.fmt_time(wall1),
            f"{wall_n / wall1:.2f}x",
            f"CPU {cpu_n / cpu1:.2f}x: what the second group costs",
        ),
    ]


def default_blas_rows(repeat: int = 3) -> list[dict[str, str]]:
    """The 4-rank call with numpy's default BLAS threads (one per core) against one BLAS thread:
    equal, as ranks side by side run BLAS on their own threads (runtime/blas.py)."""
    if blas.blas_threads() is None:
        return []
    cluster = runtime.Cluster(m.RANKS)
    xe, ws, ref, _ = inputs(cluster)
    ye = np.zeros_like(ref)
    before = blas.set_blas_threads(CORES)
    try:
        wide = timed({"4 ranks": lambda: m.moe_experts(xe, *ws, ye)}, repeat)["4 ranks"]
        blas.set_blas_threads(1)
        one = timed({"4 ranks": lambda: m.moe_experts(xe, *ws, ye)}, repeat)["4 ranks"]
    finally:
        blas.set_blas_threads(before or 1)
    assert np.array_equal(ye, ref), "4 ranks: not numpy's numbers"
    return [
        harness.row(
            f"  4 ranks with {CORES} BLAS threads vs 1",
            harness.fmt_time(wide[0]),
            harness.fmt_time(one[0]),
            f"{wide[0] / one[0]:.2f}x",
            "~1.0x",
        )
    ]


def _half_in_process(ranks: list[int], rounds: int, start: Any, done: Any, times: Any) -> None:
    """A forked process's share of `process_ceiling_rows`: the example's program for `ranks`, one
    after another, on a Cluster of its own; each round runs between the barriers `start` and
    `done` (the parent measures nothing meanwhile). A failure breaks the barriers (the parent
    stops waiting) and is sent to the parent instead of the times."""
    try:
        cluster = runtime.Cluster(m.RANKS)
        xe, ws, ref, _ = inputs(cluster)
        ye = np.zeros_like(ref)
        singles = [one_rank(r) for r in ranks]
        in_turn(singles, xe, ws, ye)
        in_turn(singles, xe, ws, ye)
        walls = []
        for _ in range(rounds):
            start.wait()
            t0 = time.perf_counter()
            in_turn(singles, xe, ws, ye)
            walls.append(time.perf_counter() - t0)
            done.wait()
        if not all(np.array_equal(ye[r], ref[r]) for r in ranks):
            raise AssertionError(f"ranks {ranks} in a process of their own: not numpy's numbers")
        times.put(walls)
    except BaseException as e:
        start.abort()
        done.abort()
        times.put(f"ranks {ranks}: {type(e).__name__}: {e}")
        raise


def process_ceiling_rows(rounds: int = 9) -> list[dict[str, str]]:
    """What ranks as processes could reach on this host at most: the ranks split over one process
    per core, each running its ranks one after another on memory of its own, with nothing sent
    between them (no dispatch, no shared memory, no result copied back), started together each
    round; the slower process's wall time against the same bound as the 4-rank call (the best
    round of each). Above 1.0x it is what the cores cost each other when both run (caches, memory
    bandwidth, a shared host): the part of the 1.1x target no design in one process or several
    removes. Linux only (fork)."""
    import multiprocessing as mp

    if CORES < 2 or "fork" not in mp.get_all_start_methods():
        return []
    ctx = mp.get_context("fork")
    halves = [list(range(m.RANKS))[i::CORES] for i in range(CORES)]
    start, done, times = ctx.Barrier(len(halves) + 1), ctx.Barrier(len(halves) + 1), ctx.Queue()
    procs = [ctx.Process(target=_half_in_process, args=(h, rounds, start, done, times)) for h in halves]
    for p in procs:
        p.start()
    cluster = runtime.Cluster(m.RANKS)
    xe, ws, ref, _ = inputs(cluster)
    ye = np.zeros_like(ref)
    singles = [one_rank(r) for r in range(m.RANKS)]
    cpu1 = float("inf")
    try:
        for _ in range(rounds):  # the bound while the processes wait; then they run, and we wait
            c0 = time.process_time()
            in_turn(singles, xe, ws, ye)
            cpu1 = min(cpu1, time.process_time() - c0)
            start.wait(timeout=600)
            done.wait(timeout=600)
    except threading.BrokenBarrierError:
        pass  # a process failed: its message is in `times`
    walls = [times.get(timeout=600) for _ in procs]
    for p in procs:
        p.join()
    failed = [w for w in walls if isinstance(w, str)]
    if failed or any(p.exitcode for p in procs):
        raise RuntimeError(f"a process of the ceiling measurement failed: {'; '.join(failed)}")
    wall = min(max(round_) for round_ in zip(*walls))
    bound = cpu1 / CORES
    return [
        harness.row(
            f"  ceiling: {m.RANKS} ranks in {len(halves)} processes, nothing shared: wall / bound",
            harness.fmt_time(wall),
            harness.fmt_time(bound),
            f"{wall / bound:.2f}x",
            "what the cores cost each other; ranks as processes could not do better",
        )
    ]


def ray_rows() -> list[dict[str, str]]:
    import ray

    from nzjit.distributed import RayCluster

    try:  # RayCluster starts the local Ray itself: its actors then import this checkout's nzjit
        remote = RayCluster(
            m.RANKS, num_cpus=CORES, include_dashboard=False, log_to_driver=False, configure_logging=False
        )
        local = runtime.Cluster(m.RANKS)
        (xe, ws_l, ref, _), (_, ws_r, _, _) = inputs(local), inputs(remote)
        y_l, y_r = np.zeros_like(ref), np.zeros_like(ref)
        best = harness.interleaved(
            {"local": lambda: m.moe_experts(xe, *ws_l, y_l), "ray": lambda: m.moe_experts(xe, *ws_r, y_r)},
            repeat=3,
        )
        assert np.array_equal(y_r, ref) and np.array_equal(y_l, ref), "RayCluster: not numpy's numbers"
        return [
            harness.row(
                "4 ranks tp_moe: RayCluster vs Cluster",
                harness.fmt_time(best["ray"]),
                harness.fmt_time(best["local"]),
                f"{best['ray'] / best['local']:.2f}x",
                "overhead",
            )
        ]
    finally:
        ray.shutdown()


def run(with_ray: bool = True) -> list[dict[str, str]]:
    rows = local_rows() + mode_rows() + process_ceiling_rows() + caller_rows() + default_blas_rows()
    try:
        import ray  # noqa: F401
    except ModuleNotFoundError:
        with_ray = False
    return rows + (ray_rows() if with_ray else [])


if __name__ == "__main__":
    run(with_ray="--no-ray" not in sys.argv)
