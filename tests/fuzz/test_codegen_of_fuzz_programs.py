"""Every fuzz program the compiler accepts also has PTO text, and that text passes the
assembler-compat check (codegen/ptoas_check.py): accepting a kernel and then failing to emit it
would be a refusal too late."""

from __future__ import annotations

import itertools
import runpy

import numpy as np
import pytest

from nzjit import check_ptoas
from nzjit.errors import CompileError
from nzjit.fuzz.gen import FAMILIES, generate

_names = itertools.count()


def _arguments(mod: dict) -> list:
    """The program's inputs and zero outputs, in parameter order (shapes and dtypes are all
    lowering needs)."""
    data, args = mod["inputs"](), []
    for name, kind, _ in mod["PARAMS"]:
        if kind == "out":
            shape, dtype, _ = mod["OUTS"][name]
            args.append(np.zeros(shape, dtype))
        else:
            args.append(data[name])
    return args


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_accepted_fuzz_programs_emit_checked_pto(tmp_path, family):
    emitted = 0
    for i in range(15):
        p = generate(20261131, i, family)
        path = tmp_path / f"prog_{p.name}.py"
        path.write_text(p.source)
        mod = runpy.run_path(str(path), run_name=f"nzjit_codegen_{next(_names)}")
        try:
            low = mod["kernel"].lower(*_arguments(mod))
        except CompileError:
            continue  # refused at compile time: nothing to emit
        check_ptoas(str(low.pto()))
        emitted += 1
    assert emitted  # the sample reaches codegen
