"""The PTO text of the vector examples passes the assembler-compat check, and names pto-isa's
instructions: the mixed kernels' cross-core pairs on A2/A3, the direct TMOV on A5."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

import nzjit
import runtime
from nzjit.core.types import Layout, ScalarType, TensorType

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
KERNELS = {
    "row_softmax": "row_softmax",
    "rmsnorm_rope": "rmsnorm_rope",
    "ffn_swiglu": "ffn",
    "fused_moe_expert": "moe_expert",
    "flash_attention": "attention",
    "topk": "topk",
}


def _module(name: str):
    spec = importlib.util.spec_from_file_location(f"vector_example_{name}", EXAMPLES / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def zero_args(kernel):
    args = []
    for p in kernel.params:
        t = p.type
        if isinstance(t, ScalarType):
            args.append(0.5 if t.dtype.is_float else 1)
            continue
        assert isinstance(t, TensorType)
        a = np.zeros(t.shape, t.dtype.np_dtype)
        args.append(runtime.pack_nz(a) if t.layout is Layout.NZ else a)
    return args


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_example_pto_passes_the_assembler_check(name):
    kernel = getattr(_module(name), KERNELS[name])
    text = kernel.lower(*zero_args(kernel)).pto()
    nzjit.check_ptoas(text)
    if name in ("fused_moe_expert", "flash_attention"):
        assert "pto.tpush_to_aiv" in text and "pto.tpop_from_aic" in text  # Acc -> Vec through GM (A2/A3)
        assert "pto.tpush_to_aic" in text and "pto.tpop_from_aiv" in text  # Vec -> Mat
    if name == "row_softmax":
        for instr in (
            "pto.tfillpad",
            "pto.trowmax",
            "pto.trowexpandsub",
            "pto.texp",
            "pto.trowsum",
            "pto.trowexpanddiv",
        ):
            assert instr in text
