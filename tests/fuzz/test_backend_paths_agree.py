"""The backend's three ways to run a kernel agree on random fuzz programs: lane-batched SPMD
bodies (a rule's `batch` forms, batched.py), compiled per-trip plans (its `specialize` forms) and
the generic per-primitive interpreter (its reference `impl`; backend/rules/). Same output bytes - including the bytes no reference checks (tile contents outside a
valid_shape, left as the hardware leaves them) - the same hardware-defect warnings and the same
refusal text."""

from __future__ import annotations

import itertools
import runpy
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import runtime
from nzjit.backend.options import Options, using
from nzjit.errors import CompileError
from nzjit.fuzz.gen import generate

#: everything on; lane-batched attempts never replayed (backend/lane_replay.py: the fuzz harness
#: calls a "device" program three times, so its third call replays); per-trip plans only; the
#: generic interpreter only.
PATHS = [Options(), Options(replay=False), Options(batch=False), Options(fast=False)]
_names = itertools.count()


def _outcome(path: str, options: Options) -> tuple[object, tuple[str, ...]]:
    """(output bytes by name, or the refusal's type and text; warning texts) of one run."""
    with using(options), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", runtime.HardwareDefectWarning)
        mod = runpy.run_path(path, run_name=f"nzjit_paths_{next(_names)}")
        try:
            got, _, _ = mod["execute"]()
            result: object = {n: np.ascontiguousarray(a).tobytes() for n, a in got.items()}
        except (CompileError, runtime.DeviceError, runtime.DispatchError) as e:
            result = (type(e).__name__, str(e))
    texts = tuple(str(w.message) for w in caught if issubclass(w.category, runtime.HardwareDefectWarning))
    return result, texts


def _assert_paths_agree(tmp_path, p) -> None:
    path = tmp_path / f"prog_{p.name}.py"
    path.write_text(p.source)
    first, *others = (_outcome(str(path), options) for options in PATHS)
    for options, other in zip(PATHS[1:], others):
        assert other == first, f"{options} differs from the defaults, program {p.name}:\n{p.source}"


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(seed=st.integers(0, 2**31 - 1), index=st.integers(0, 10**6))
def test_backend_paths_agree(tmp_path, seed, index):
    _assert_paths_agree(tmp_path, generate(seed, index))


@pytest.mark.parametrize("family", ["tile_mm", "vec_ew"])
def test_backend_paths_agree_on_batched_families(tmp_path, family):
    """Programs of the families whose SPMD lanes run batched, a fixed sample of 25 each."""
    for i in range(25):
        _assert_paths_agree(tmp_path, generate(20261129, i, family))
