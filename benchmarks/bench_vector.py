"""Issue 22 target: the row softmax and the fused MoE expert (examples/) against plain numpy on the
same data, ratios measured side by side in one run (interleaved best-of-N).

- softmax: examples/row_softmax.py, 256 x 1000 fp32 (16 SPMD lanes of 16 rows, -inf padding to
  1024 columns) on resident device tensors; numpy: the float32 softmax of the same rows.
- fused expert: examples/fused_moe_expert.py, E = 4 experts x 32 tokens, H = 256, F = 128 (int8 NZ
  gate / up with dequantisation, SwiGLU, fp16 down) on resident device tensors; numpy: the same
  math in float32 from the same int8 / fp16 arrays (int8 products are exact in float32 here).

The target is 1.5x of numpy; each row has its CPU-time twin and the same call stepping through its
plan (`Options(replay=False)`: the resident tensors make every timed call replay the attempt its
second call recorded, backend/lane_replay.py) (docs/performance.md, issue 22 item 10,
says what the gap is made of). The vector rules have batch forms (backend/rules/vector_lanes.py):
the softmax body runs once for all 16 lanes (each instruction on the lanes' stacked images, in
place over the images of the operand that dies there). The fused expert's cross-core moves
(tpush / tpop through the GM pipe) run batched too (backend/lane_pipe.py), so its four lanes run
as one; the ratios say how far each still is.

Run it from the repository root with the worktree first on the path (`PYTHONPATH=. python
benchmarks/bench_vector.py`): the script's own directory comes first otherwise, and an installed
nzjit would be the one measured.

    python benchmarks/bench_vector.py
"""
# isort: skip_file

from __future__ import annotations

from harness import fmt_time, interleaved_clocks, row  # first: pins BLAS threads

import sys  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

import runtime  # noqa: E402
from nzjit.backend import lane_replay  # noqa: E402
from nzjit.backend.options import Options, using  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))

import fused_moe_expert as fm  # noqa: E402
import row_softmax as sm  # noqa: E402

TARGET = "<= 1.5x"
STEPPING = Options(replay=False)
REPEAT = 21


def ratio_rows(name: str, ours: Callable[[], object], ref: Callable[[], object]) -> list[dict[str, str]]:
    """The target row (wall time), its CPU-time twin (the process's, every thread: on a shared
    machine the CPU time is the work done, the wall time also counts the neighbours) and the same
    call stepping through its plan (`Options(replay=False)`: no recorded attempt repeated,
    backend/lane_replay.py), all interleaved in one run."""

    def stepping() -> object:
        with using(STEPPING):
            return ours()

    ours(), ours()  # the second call of a signature records its attempt; later calls replay it
    before = lane_replay.stats()[1]
    both = interleaved_clocks({"nzjit": ours, "numpy": ref, "stepping": stepping}, repeat=REPEAT)
    replayed = lane_replay.stats()[1] > before
    (w0, c0), (w1, c1), (w2, _) = both["nzjit"], both["numpy"], both["stepping"]
    return [
        row(name, fmt_time(w0), fmt_time(w1), f"{w0 / w1:.2f}x", TARGET),
        row("  same in CPU time", fmt_time(c0), fmt_time(c1), f"{c0 / c1:.2f}x", "-"),
        row(
            "  stepping (Options(replay=False))",
            fmt_time(w2),
            fmt_time(w1),
            f"{w2 / w1:.2f}x",
            "the calls above replayed" if replayed else "NOT REPLAYED",
        ),
    ]


def numpy_softmax(x: np.ndarray) -> np.ndarray:
    v = x[:, : sm.COLS]
    e = np.exp(v - v.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def numpy_expert(x, wg, wu, sg, su, wd, xs) -> np.ndarray:
    out = np.empty((fm.E, fm.T, fm.H), np.float32)
    for e in range(fm.E):
        xf = x[e].astype(np.float32)
        g = (xf @ wg[e].T.astype(np.float32)) * sg[e] * np.float32(xs)
        u = (xf @ wu[e].T.astype(np.float32)) * su[e] * np.float32(xs)
        h = (g / (1 + np.exp(-g)) * u).astype(np.float16)
        out[e] = h.astype(np.float32) @ wd[e].T.astype(np.float32)
    return out


def run() -> list[dict[str, str]]:
    w = runtime.Worker(0)
    rows = []
    x = np.random.default_rng(1).standard_normal((sm.ROWS, sm.PADDED)).astype(np.float32)
    xd = w.alloc_tensor(x.shape, np.float32, init=x)
    yd = w.alloc_tensor(x.shape, np.float32)
    sm.row_softmax(xd, yd)
    np.testing.assert_allclose(w.copy_from(yd)[:, : sm.COLS], numpy_softmax(x), rtol=1e-5, atol=1e-9)
    rows += ratio_rows(
        f"row softmax {sm.ROWS}x{sm.COLS} fp32", lambda: sm.row_softmax(xd, yd), lambda: numpy_softmax(x)
    )

    x8, wg, wu, sg, su, wd, xs = fm.data()
    args = [x8, runtime.pack_nz(wg), runtime.pack_nz(wu), sg, su, runtime.pack_nz(wd)]
    devs = [w.alloc_tensor(a.shape, a.dtype, init=a) for a in args]
    out = w.alloc_tensor((fm.E, fm.T, fm.H), np.float32)
    fm.moe_expert(*devs, float(xs), out)
    ref = numpy_expert(x8, wg, wu, sg, su, wd, xs)
    assert np.abs(w.copy_from(out) - ref).max() <= 2e-3 * np.abs(ref).max()
    rows += ratio_rows(
        f"fused MoE expert E={fm.E} T={fm.T} H={fm.H} F={fm.F}",
        lambda: fm.moe_expert(*devs, float(xs), out),
        lambda: numpy_expert(x8, wg, wu, sg, su, wd, xs),
    )
    return rows


if __name__ == "__main__":
    run()
