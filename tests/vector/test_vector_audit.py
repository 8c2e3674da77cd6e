"""The vector unit's audit (issue 22 item 8 for every op of items 1-6), case by case from
tests/vector/audit_cases.py: each op stages its primitive and emits its pto-isa instruction, gives
the same bytes after every pass (`low.run(after=PASS)`), equals numpy (exact, or within the
case's stated rtol), runs lane-batched where the case says so (and byte for byte as the per-lane and
reference paths), and gives each refusal it lists with its message. The table in docs/vector-ops.md
is rendered from the same catalogue (docs/vector_audit.py) and must be current."""

from __future__ import annotations

import sys
import zlib
from pathlib import Path

import numpy as np
import pytest

import nzjit
import runtime
from nzjit.backend.options import Options, using
from tests.vector import audit_cases as A
from tests.vector.test_vector_ops import run_all_stages

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "docs"))

CASES = A.all_cases()
PATHS = (Options(strict=True), Options(batch=False), Options(fast=False))


def _args(case: A.Case) -> list:
    rng = np.random.default_rng(zlib.crc32(case.op.encode()))
    (orow, ocol), od = case.out
    return [A.data(s, A.LANES, rng) for s in case.ins] + [np.zeros((A.LANES * orow, ocol), od.np_dtype)]


def _lane(arg, spec: A.In, lane: int):
    if spec.scalar is not None or spec.whole:
        return arg
    r = spec.shape[0]
    return arg[lane * r : (lane + 1) * r]


@pytest.mark.parametrize("case", CASES, ids=[c.op for c in CASES])
def test_op(case: A.Case, attempts):
    args = _args(case)
    k = A.kernel_for(case.ins, case.out, case.body, case.target)
    low, got = run_all_stages(k, *args)  # every pass gives the final bytes
    names = [e.primitive.name for e in low.ir().walk()]
    assert case.prim in names, names
    assert any(
        ln.strip().startswith(f"{case.instr} ") or f"= {case.instr} " in ln for ln in low.pto().splitlines()
    )
    want = np.concatenate(
        [case.ref(*[_lane(a, s, i) for a, s in zip(args, case.ins)]) for i in range(A.LANES)]
    )
    if case.rtol:
        np.testing.assert_allclose(
            got.astype(np.float64), want.astype(np.float64), rtol=case.rtol, atol=case.rtol * 10
        )
    else:
        assert got.dtype == want.dtype and np.array_equal(
            np.ascontiguousarray(got).view(np.uint8), np.ascontiguousarray(want).view(np.uint8)
        ), (
            got,
            want,
        )
    outs = []
    attempts.clear()
    for o in PATHS:
        with using(o):
            copies = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
            k(*copies)
            outs.append(copies[-1].tobytes())
    assert outs[0] == outs[1] == outs[2]
    assert attempts and attempts[0] is (case.batched is True), case.batched


REFUSALS = [(c, r) for c in CASES for r in c.refusals]


@pytest.mark.parametrize(
    "case,refusal", REFUSALS, ids=[f"{c.op}-{r.kind}-{i}" for i, (c, r) in enumerate(REFUSALS)]
)
def test_refusal(case: A.Case, refusal: A.Refusal):
    ins = refusal.ins or case.ins
    target = refusal.target or case.target
    if refusal.at == "compile":
        k = A.kernel_for(ins, None, refusal.body, target)
        rng = np.random.default_rng(0)
        with pytest.raises(nzjit.CompileError, match=refusal.match):
            k.lower(*[A.data(s, A.LANES, rng) for s in ins])
    else:
        k = A.kernel_for(ins, case.out, refusal.body, target)
        args = [A.data(s, A.LANES, np.random.default_rng(0)) for s in ins]
        (orow, ocol), od = case.out
        with pytest.raises((runtime.DeviceError, nzjit.CompileError), match=refusal.match):
            k(*args, np.zeros((A.LANES * orow, ocol), od.np_dtype))


def test_the_audit_table_is_current():
    import vector_audit

    assert vector_audit.OUT.read_text() == vector_audit.render(), "run `python docs/generate.py`"
