"""Safety probes for the campaign (issue 24 item 10): random calls that a user gets wrong - an
unpacked weight for an NZ parameter, a packed array for an ND one, packing twice, an output
aliasing an input (the same array, overlapping views, one DeviceTensor), lanes of a pl.spmd that
all store one window, lanes whose windows depend on the lane and may overlap (offsets from a
scalar argument, pl.min / pl.max of the lane index), lanes reading another lane's block - each
classified as `refused` (the documented error class, every output and input byte-identical
afterwards) or `equal` (the numpy reference). Anything else is `wrong`. Whether lane windows
overlap is decided here by brute force over the lanes' column ranges, independently of the
compiler's proof and the simulator's log; the lane probes run on a random execution path
(batched, lane by lane, the reference interpreter; host arrays or DeviceTensors).

Standalone: `python -m nzjit.fuzz.gen_program_safety [SEED] [N]` prints the classes; the
campaign runs them with `--safety N` and the test suite pins them
(tests/fuzz/test_safety_campaign.py)."""

# no `from __future__ import annotations`: the kernels' annotations use local dtypes and must be
# evaluated where the kernel is defined
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

import runtime
from runtime.races import LaneRaceError

from .. import pl
from ..backend.options import Options, using
from ..errors import CompileError

__all__ = ["SafetyCase", "safety_cases", "run_case", "safety_campaign"]

_REFUSALS = (CompileError, runtime.DispatchError, runtime.DeviceError, ValueError)


@dataclass(frozen=True)
class SafetyCase:
    """One probe: `run()` returns the result arrays; `expect` is "refused" or "equal"; `ref()` the
    reference when equal; `watched` the arrays that must be byte-identical after a refusal."""

    name: str
    expect: str
    run: Callable[[], list[np.ndarray]]
    ref: Callable[[], list[np.ndarray]]
    watched: tuple[np.ndarray, ...]
    error: type[BaseException] | None = None  # the class a refusal must have (None: any of _REFUSALS)


def _mm(np_dtype: type, nz: bool) -> object:
    dt = pl.INT8 if np_dtype == np.int8 else pl.FP16
    out_t = pl.INT32 if np_dtype == np.int8 else pl.FP32
    layout = (pl.NZ,) if nz else ()

    @pl.kernel
    def mm(
        x: pl.Tensor[[32, 64], dt],
        w: pl.Tensor[[32, 64], dt, *layout],
        out: pl.Out[pl.Tensor[[32, 32], out_t]],
    ):
        out[:, :] = pl.matmul(x[:, :], w[:, :], b_trans=True)

    return mm


@pl.kernel
def _swap(x: pl.Tensor[[32, 64], pl.FP32], out: pl.Out[pl.Tensor[[32, 64], pl.FP32]]):
    a = pl.load(x, [16, 0], [16, 64])
    pl.store(a + a, [0, 0], out)
    b = pl.load(x, [0, 0], [16, 64])
    pl.store(b + b, [16, 0], out)


def _lanes(step: int) -> object:
    @pl.kernel
    def lanes(x: pl.Tensor[[16, 256], pl.FP32], out: pl.Out[pl.Tensor[[16, 256], pl.FP32]]):
        for lane in pl.spmd(4):
            t = pl.load(x, [0, lane * 64], [16, 64])
            pl.store(t + t, [0, lane * step], out)

    return lanes


_KERNELS: dict[tuple[object, ...], object] = {}


def _kernel(key: tuple[object, ...], make: Callable[[], object]) -> object:
    if key not in _KERNELS:
        _KERNELS[key] = make()
    return _KERNELS[key]


def _nz_case(rng: np.random.Generator, i: int) -> SafetyCase:
    np_dtype = [np.int8, np.float16][int(rng.integers(2))]
    x = rng.integers(-4, 4, (32, 64)).astype(np_dtype)
    w = rng.integers(-4, 4, (32, 64)).astype(np_dtype)
    out = np.full((32, 32), 7, np.int32 if np_dtype == np.int8 else np.float32)
    ref = (x.astype(np.float64) @ w.astype(np.float64).T).astype(out.dtype)
    variant = ["packed", "unpacked", "packed twice", "packed for ND", "device unpacked", "device packed"][
        int(rng.integers(6))
    ]
    nz_k, nd_k = (
        _kernel(("mm", np_dtype, True), lambda: _mm(np_dtype, True)),
        _kernel(("mm", np_dtype, False), lambda: _mm(np_dtype, False)),
    )

    def run() -> list[np.ndarray]:
        if variant == "packed":
            nz_k(x, runtime.pack_nz(w), out)  # type: ignore[operator]
        elif variant == "unpacked":
            nz_k(x, w, out)  # type: ignore[operator]
        elif variant == "packed twice":
            nz_k(x, runtime.pack_nz(runtime.pack_nz(w)), out)  # type: ignore[operator]
        elif variant == "packed for ND":
            nd_k(x, runtime.pack_nz(w), out)  # type: ignore[operator]
        else:
            dev = runtime.Worker(0)
            init = runtime.pack_nz(w) if variant == "device packed" else w
            nz_k(
                dev.alloc_tensor(x.shape, x.dtype, init=x),
                dev.alloc_tensor(w.shape, w.dtype, init=init),  # type: ignore[operator]
                res := dev.alloc_tensor(out.shape, out.dtype, init=out),
            )
            out[...] = dev.copy_from(res)
        return [out]

    expect = "equal" if variant in ("packed", "device packed") else "refused"
    return SafetyCase(
        f"{i}: NZ provenance, {variant}, {np.dtype(np_dtype).name}", expect, run, lambda: [ref], (out, x, w)
    )


def _alias_case(rng: np.random.Generator, i: int) -> SafetyCase:
    big = rng.standard_normal((96, 64)).astype(np.float32)
    a0, b0 = int(rng.integers(0, 65)), int(rng.integers(0, 65))
    same = bool(rng.integers(2))
    x, out = (big[a0 : a0 + 32], big[a0 : a0 + 32]) if same else (big[a0 : a0 + 32], big[b0 : b0 + 32])
    overlap = same or abs(a0 - b0) < 32
    src = x.copy()

    def run() -> list[np.ndarray]:
        _swap(x, out)
        return [out]

    def ref() -> list[np.ndarray]:
        return [np.concatenate([2 * src[16:], 2 * src[:16]])]

    return SafetyCase(f"{i}: aliasing, rows {a0} / {b0}", "refused" if overlap else "equal", run, ref, (big,))


def _lane_case(rng: np.random.Generator, i: int) -> SafetyCase:
    step = [0, 64][int(rng.integers(2))]  # every lane one window, or each its own
    x = rng.standard_normal((16, 256)).astype(np.float32)
    out = np.full((16, 256), 7, np.float32)
    k = _kernel(("lanes", step), lambda: _lanes(step))

    def run() -> list[np.ndarray]:
        k(x, out)  # type: ignore[operator]
        return [out]

    return SafetyCase(
        f"{i}: lane windows, step {step}", "refused" if step == 0 else "equal", run, lambda: [2 * x], (out, x)
    )


#: the windows of the lane-dependent probes: lane -> first column of its 64 (`arg` a scalar)
_OFFSETS: dict[str, Callable[[int, int], int]] = {
    "lane * step": lambda lane, arg: lane * arg,
    "min(lane, c) * 64": lambda lane, arg: min(lane, arg) * 64,
    "max(lane - c, 0) * 64": lambda lane, arg: max(lane - arg, 0) * 64,
}
_LANES, _COLS = 4, 320  # 4 lanes of 64 columns, room for steps up to 80


def _moving(form: str) -> object:
    @pl.kernel
    def moving(
        x: pl.Tensor[[16, 256], pl.FP32], out: pl.Out[pl.Tensor[[16, 320], pl.FP32]], arg: pl.Scalar[pl.INDEX]
    ):
        for lane in pl.spmd(4):
            t = pl.load(x, [0, lane * 64], [16, 64])
            if form == "lane * step":
                col = lane * arg
            elif form == "min(lane, c) * 64":
                col = pl.min(lane, arg) * 64
            else:
                col = pl.max(lane - arg, 0) * 64
            pl.store(t + t, [0, col], out)

    return moving


@pl.kernel
def _neighbours(buf: pl.InOut[pl.Tensor[[16, 256], pl.FP32]], d: pl.Scalar[pl.INDEX]):
    for lane in pl.spmd(4):
        t = pl.load(buf, [0, (lane + d) % 4 * 64], [16, 64])
        pl.store(t + t, [0, lane * 64], buf)


_PATHS = (Options(), Options(batch=False), Options(fast=False), Options(lane_group=1))


def _overlap(starts: list[int], width: int) -> bool:
    """Do two of the column ranges [s, s + width) meet (brute force over the pairs)?"""
    return any(a < b + width and b < a + width for i, a in enumerate(starts) for b in starts[i + 1 :])


def _on_device(k: object, args: list[object], outs: list[np.ndarray], device: bool) -> None:
    """Call `k` on host arrays, or on DeviceTensors (the outputs copied back into `outs`)."""
    if not device:
        k(*args)  # type: ignore[operator]
        return
    dev = runtime.Worker(0)
    placed = [dev.alloc_tensor(a.shape, a.dtype, init=a) if isinstance(a, np.ndarray) else a for a in args]
    try:
        k(*placed)  # type: ignore[operator]
    finally:
        for o in outs:
            i = next(j for j, a in enumerate(args) if a is o)
            o[...] = dev.copy_from(placed[i])  # type: ignore[arg-type]  # placed[i] is the DeviceTensor of output o


def _moving_case(rng: np.random.Generator, i: int) -> SafetyCase:
    form = str(rng.choice(list(_OFFSETS)))
    arg = int(rng.choice([0, 16, 32, 48, 64, 80])) if form == "lane * step" else int(rng.integers(0, _LANES))
    starts = [_OFFSETS[form](lane, arg) for lane in range(_LANES)]
    options, device = _PATHS[int(rng.integers(len(_PATHS)))], bool(rng.integers(2))
    x = rng.standard_normal((16, 256)).astype(np.float32)
    out = np.full((16, _COLS), 7, np.float32)
    k = _kernel(("moving", form), lambda: _moving(form))
    race = _overlap(starts, 64)  # a scalar argument decides: only the run-time log can tell

    def run() -> list[np.ndarray]:
        with using(options):
            _on_device(k, [x, out, arg], [out], device)
        return [out]

    def ref() -> list[np.ndarray]:
        want = np.full((16, _COLS), 7, np.float32)
        for lane, s in enumerate(starts):
            want[:, s : s + 64] = 2 * x[:, lane * 64 : lane * 64 + 64]
        return [want]

    where = f"{'device' if device else 'host'}, {options}"
    return SafetyCase(
        f"{i}: lane windows {form}, arg {arg}, {where}",
        "refused" if race else "equal",
        run,
        ref,
        (out, x),
        LaneRaceError,
    )


def _neighbour_case(rng: np.random.Generator, i: int) -> SafetyCase:
    d = int(rng.integers(0, _LANES))  # lane reads block lane + d: another lane's unless d == 0
    options, device = _PATHS[int(rng.integers(len(_PATHS)))], bool(rng.integers(2))
    buf = rng.standard_normal((16, 256)).astype(np.float32)
    src = buf.copy()

    def run() -> list[np.ndarray]:
        with using(options):
            _on_device(_neighbours, [buf, d], [buf], device)
        return [buf]

    def ref() -> list[np.ndarray]:
        want = src.copy()
        for lane in range(_LANES):
            b = (lane + d) % _LANES
            want[:, lane * 64 : lane * 64 + 64] = 2 * src[:, b * 64 : b * 64 + 64]
        return [want]

    where = f"{'device' if device else 'host'}, {options}"
    return SafetyCase(
        f"{i}: lane reads block lane + {d}, {where}",
        "refused" if d else "equal",
        run,
        ref,
        (buf,),
        LaneRaceError,
    )


def safety_cases(seed: int, n: int) -> list[SafetyCase]:
    """`n` random probes of campaign `seed` (deterministic)."""
    rng = np.random.default_rng(seed)
    makers = (_nz_case, _alias_case, _lane_case, _moving_case, _neighbour_case)
    return [makers[int(rng.integers(len(makers)))](rng, i) for i in range(n)]


def run_case(case: SafetyCase) -> tuple[str, str]:
    """(class, detail): "refused" / "equal" as expected, else "wrong" with why."""
    before = [a.tobytes() for a in case.watched]
    try:
        got = case.run()
    except _REFUSALS as e:
        if case.expect != "refused":
            return "wrong", f"refused ({type(e).__name__}: {e}) a call that should run"
        if case.error is not None and not isinstance(e, case.error):
            return "wrong", f"refused with {type(e).__name__}, not {case.error.__name__}: {e}"
        if [a.tobytes() for a in case.watched] != before:
            return "wrong", "refused, but bytes changed"
        return "refused", type(e).__name__
    if case.expect == "refused":
        return "wrong", "ran a call that must be refused"
    for g, r in zip(got, case.ref()):
        if g.tobytes() != np.ascontiguousarray(r, g.dtype).tobytes():
            return "wrong", "differs from the reference"
    return "equal", ""


def safety_campaign(seed: int, n: int) -> Counter[str]:
    """Classes of `n` probes; the wrong ones are listed in the Counter's keys as 'wrong: <case>'."""
    classes: Counter[str] = Counter()
    for case in safety_cases(seed, n):
        cls, detail = run_case(case)
        classes[cls if cls != "wrong" else f"wrong: {case.name}: {detail}"] += 1
    return classes


if __name__ == "__main__":  # pragma: no cover - a manual run
    seed, n = (int(a) for a in (sys.argv[1:] + ["0", "60"])[:2])
    for k, v in sorted(safety_campaign(seed, n).items()):
        print(f"{v:5d}  {k}")
