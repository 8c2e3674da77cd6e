"""Every fuzz program the compiler accepts also has PTO text, and that text passes the
assembler-compat check (codegen/ptoas_check.py): accepting a kernel and then failing to emit it
would be a refusal too late."""

from __future__ import annotations

import itertools
import runpy

import pytest

from nzjit import check_ptoas
from nzjit.errors import CompileError
from nzjit.fuzz.classify import lowering_arguments
from nzjit.fuzz.gen import FAMILIES, generate

_names = itertools.count()


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_accepted_fuzz_programs_emit_checked_pto(tmp_path, family):
    emitted = 0
    for i in range(15):
        p = generate(20261131, i, family)
        path = tmp_path / f"prog_{p.name}.py"
        path.write_text(p.source)
        mod = runpy.run_path(str(path), run_name=f"nzjit_codegen_{next(_names)}")
        try:
            low = mod["kernel"].lower(*lowering_arguments(mod))
        except CompileError:
            continue  # refused at compile time: nothing to emit
        check_ptoas(str(low.pto()))
        emitted += 1
    assert emitted  # the sample reaches codegen
