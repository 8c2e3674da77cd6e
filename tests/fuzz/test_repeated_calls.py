"""A kernel called again with the signature of an earlier call runs its cached plan
(backend/direct_call.py), re-checking only per-call facts. On random fuzz programs, every call -
the first and the cached ones, each on new data and, for the "device" calling convention, on
fresh tensors - equals the numpy reference, and a refused program is refused every time."""

from __future__ import annotations

import itertools
import runpy
import warnings

import pytest

import runtime
from nzjit.errors import CompileError
from nzjit.fuzz.gen import generate

_names = itertools.count()


def _three_calls(tmp_path, seed: int, i: int, family: str) -> None:
    """Generate program `i` of `family`, call it three times on new data each time: every call
    equals the numpy reference, or every call is refused the same way."""
    p = generate(seed, i, family)
    path = tmp_path / f"prog_{p.name}.py"
    path.write_text(p.source)
    mod = runpy.run_path(str(path), run_name=f"nzjit_calls_{next(_names)}")
    execute, first = mod["execute"], mod["SEED"]
    outcomes = []
    for call in range(3):
        execute.__globals__["SEED"] = first + 7 * call  # execute() reads its inputs' seed here
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", runtime.HardwareDefectWarning)
                got, expected, must_refuse = execute()
        except (CompileError, runtime.DeviceError, runtime.DispatchError) as e:
            outcomes.append(type(e).__name__)
            continue
        assert must_refuse is None, (call, p.source)
        assert not mod["compare"](got, expected), (call, p.source)
        outcomes.append("equal")
    assert len(set(outcomes)) == 1, (outcomes, p.source)


@pytest.mark.parametrize("family", ["tensor_mm", "tile_mm", "vec_ew", "acc_store"])
def test_every_call_of_a_fuzz_kernel_equals_its_reference(tmp_path, family):
    for i in range(20):
        _three_calls(tmp_path, 20261130, i, family)


def test_every_call_of_a_fuzz_orchestration_equals_its_reference(tmp_path):
    """Orchestrations (issue 25 item 4): a program recorded again with the signature of an earlier
    one reuses its checked launch plans (backend/program_cache.py). Every call - on new data, on
    new host arrays, and on a new cluster for the "stacked" convention - equals the numpy
    reference, and a refused program is refused every time."""
    from nzjit.backend import program_cache

    hits = program_cache.HITS[0]
    for i in range(24):
        _three_calls(tmp_path, 20261203, i, "orch_slices")
    assert program_cache.HITS[0] > hits  # the host-array programs ran from the cache
