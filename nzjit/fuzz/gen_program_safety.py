"""Safety probes for the campaign (issue 24 item 10): random calls that a user gets wrong - an
unpacked weight for an NZ parameter, a packed array for an ND one, packing twice, an output
aliasing an input (the same array, overlapping views, one DeviceTensor), lanes of a pl.spmd that
all store one window - each classified as `refused` (the documented error, every output and
input byte-identical afterwards) or `equal` (the numpy reference). Anything else is `wrong`.

Standalone: `python -m nzjit.fuzz.gen_program_safety [SEED] [N]` prints the classes; the
test suite runs it (tests/fuzz/test_safety_campaign.py). Not yet part of `campaign.py`'s
programs (a hook for the lead: run `safety_campaign` next to the generated programs).

Lane windows that depend on the lane and overlap are not generated: the compiler cannot prove
them and the executor does not feed `runtime.races.LaneWriteLog` yet (docs/safety.md)."""

# no `from __future__ import annotations`: the kernels' annotations use local dtypes and must be
# evaluated where the kernel is defined
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

import runtime

from .. import pl
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


def _mm(np_dtype: type, nz: bool) -> object:
    dt = pl.INT8 if np_dtype == np.int8 else pl.FP16
    out_t = pl.INT32 if np_dtype == np.int8 else pl.FP32
    layout = (pl.NZ,) if nz else ()

    @pl.kernel
    def mm(x: pl.Tensor[[32, 64], dt], w: pl.Tensor[[32, 64], dt, *layout],
           out: pl.Out[pl.Tensor[[32, 32], out_t]]):
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
        int(rng.integers(6))]
    nz_k, nd_k = _kernel(("mm", np_dtype, True), lambda: _mm(np_dtype, True)), _kernel(
        ("mm", np_dtype, False), lambda: _mm(np_dtype, False))

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
            nz_k(dev.alloc_tensor(x.shape, x.dtype, init=x), dev.alloc_tensor(w.shape, w.dtype, init=init),  # type: ignore[operator]
                 res := dev.alloc_tensor(out.shape, out.dtype, init=out))
            out[...] = dev.copy_from(res)
        return [out]

    expect = "equal" if variant in ("packed", "device packed") else "refused"
    return SafetyCase(f"{i}: NZ provenance, {variant}, {np.dtype(np_dtype).name}", expect, run, lambda: [ref],
                      (out, x, w))


def _alias_case(rng: np.random.Generator, i: int) -> SafetyCase:
    big = rng.standard_normal((96, 64)).astype(np.float32)
    a0, b0 = int(rng.integers(0, 65)), int(rng.integers(0, 65))
    same = bool(rng.integers(2))
    x, out = (big[a0:a0 + 32], big[a0:a0 + 32]) if same else (big[a0:a0 + 32], big[b0:b0 + 32])
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

    return SafetyCase(f"{i}: lane windows, step {step}", "refused" if step == 0 else "equal", run,
                      lambda: [2 * x], (out, x))


def safety_cases(seed: int, n: int) -> list[SafetyCase]:
    """`n` random probes of campaign `seed` (deterministic)."""
    rng = np.random.default_rng(seed)
    makers = (_nz_case, _alias_case, _lane_case)
    return [makers[int(rng.integers(len(makers)))](rng, i) for i in range(n)]


def run_case(case: SafetyCase) -> tuple[str, str]:
    """(class, detail): "refused" / "equal" as expected, else "wrong" with why."""
    before = [a.tobytes() for a in case.watched]
    try:
        got = case.run()
    except _REFUSALS as e:
        if case.expect != "refused":
            return "wrong", f"refused ({type(e).__name__}: {e}) a call that should run"
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
