"""The kernel language: `from nzjit import pl`."""

from __future__ import annotations

import types as _types

from .core.dtypes import (
    BF16,
    BOOL,
    FP4,
    FP8E4M3,
    FP8E5M2,
    FP16,
    FP32,
    INDEX,
    INT4,
    INT8,
    INT16,
    INT32,
    INT64,
    UINT4,
    UINT8,
    UINT16,
    UINT32,
)
from .core.types import Layout as _Layout
from .core.types import Mem, Target
from .language import branch as _branch  # noqa: F401 - stages an `if` on a traced value (sets the tracing hook)
from .language.annotations import InOut, Out, Scalar, Tensor, dynamic
from .language.kernel import kernel, orchestration
from .language.loops import range, spmd
from .language.ops import (
    abs,
    add,
    cast,
    exp,
    get_block_idx,
    get_block_num,
    load,
    matmul,
    matmul_acc,
    max,
    maximum,
    min,
    mul,
    neg,
    reshape,
    slice,
    store,
    sub,
)
from .language.ops import tensor_reinterpret_view as _reinterpret_view
from .language.ops import tensor_view as _view
from .language.ops import transpose_view as _transpose_view
from .language.pypto_forms import FunctionType, Level, at, function, incore, jit, parallel, pipeline, unroll

ND = _Layout.ND
NZ = _Layout.NZ
A2A3 = Target.A2A3
A5 = Target.A5
MemorySpace = Mem  # PyPTO's name of the on-chip memory spaces

tile = _types.SimpleNamespace(load=load, store=store, transpose_view=_transpose_view)
tensor = _types.SimpleNamespace(view=_view, reinterpret_view=_reinterpret_view, slice=slice, reshape=reshape)

__all__ = [
    "BF16", "BOOL", "FP4", "FP8E4M3", "FP8E5M2", "FP16", "FP32", "INDEX", "INT4", "INT8", "INT16",
    "INT32", "INT64", "UINT4", "UINT8", "UINT16", "UINT32", "ND", "NZ", "A2A3", "A5", "Mem", "Tensor",
    "Out", "InOut", "Scalar", "dynamic", "kernel", "orchestration", "range", "pipeline", "spmd", "load",
    "store", "matmul", "matmul_acc", "cast", "add", "sub", "mul", "maximum", "exp", "neg", "abs", "min", "max",
    "get_block_idx", "get_block_num", "slice", "reshape", "tile", "tensor",
    # PyPTO's loop, scope and decorator forms (language/pypto_forms.py)
    "parallel", "unroll", "at", "incore", "Level", "FunctionType", "function", "jit", "MemorySpace",
]
