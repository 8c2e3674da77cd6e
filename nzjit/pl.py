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
from .language.carries import yield_
from .language.cube_ops import batch_matmul, batch_matmul_acc, gemv, gemv_acc, gemv_bias, matmul_bias
from .language.kernel import kernel, orchestration
from .language.loops import range, spmd
from .language.move_ops import move
from .language.ops import (
    create_tensor,
    get_block_idx,
    get_block_num,
    load,
    max,
    min,
    slice,
)
from .language.ops import tensor_reinterpret_view as _reinterpret_view
from .language.ops import tensor_view as _view
from .language.ops import transpose_view as _transpose_view
from .language.pypto_forms import FunctionType, Level, at, function, incore, jit, parallel, pipeline, unroll
from .language.select_ops import cmp, cmps, sel, sels
from .language.select_ops import set_validshape as _tile_set_validshape
from .language.select_ops import transpose as _tile_transpose
from .language.tensor_forms import set_validshape, tensor_set_validshape, tensor_transpose, transpose
from .language.tensor_ops import assemble, dim, read, write
from .language.tile_values import assemble as _assemble
from .language.tile_values import reshape, store
from .language.topk_ops import MaskPattern as _MaskPattern
from .language.topk_ops import arange, gather, mrgsort, sort32
from .language.topk_ops import tile_gather as _tile_gather
from .language.topk_ops import tile_gather_mask as _tile_gather_mask
from .language.vector_ops import (
    MemorySpace,
    PadValue,
    abs,
    add,
    cast,
    col_expand,
    col_expand_add,
    col_expand_div,
    col_expand_mul,
    col_expand_sub,
    col_max,
    col_min,
    col_sum,
    create_tile,
    div,
    exp,
    fillpad,
    full,
    log,
    lrelu,
    matmul,
    matmul_acc,
    maximum,
    minimum,
    mul,
    neg,
    recip,
    relu,
    row_expand,
    row_expand_add,
    row_expand_div,
    row_expand_mul,
    row_expand_sub,
    row_max,
    row_min,
    row_sum,
    rsqrt,
    sqrt,
    sub,
)

ND = _Layout.ND
NZ = _Layout.NZ
A2A3 = Target.A2A3
A5 = Target.A5

tile = _types.SimpleNamespace(
    load=load,
    store=store,
    transpose_view=_transpose_view,
    create=create_tile,
    full=full,
    fillpad=fillpad,
    relu=relu,
    lrelu=lrelu,
    cast=cast,
    MaskPattern=_MaskPattern,
    gather=_tile_gather,
    gather_mask=_tile_gather_mask,
    sort32=sort32,
    mrgsort=mrgsort,
    assemble=_assemble,
    cmp=cmp,
    cmps=cmps,
    sel=sel,
    sels=sels,
    set_validshape=_tile_set_validshape,
    transpose=_tile_transpose,
    matmul_bias=matmul_bias,
    gemv=gemv,
    gemv_acc=gemv_acc,
    gemv_bias=gemv_bias,
    batch_matmul=batch_matmul,
    batch_matmul_acc=batch_matmul_acc,
)
tensor = _types.SimpleNamespace(
    view=_view,
    reinterpret_view=_reinterpret_view,
    slice=slice,
    reshape=reshape,
    dim=dim,
    read=read,
    write=write,
    assemble=assemble,
    set_validshape=tensor_set_validshape,
    transpose=tensor_transpose,
)

__all__ = [
    "BF16",
    "BOOL",
    "FP4",
    "FP8E4M3",
    "FP8E5M2",
    "FP16",
    "FP32",
    "INDEX",
    "INT4",
    "INT8",
    "INT16",
    "INT32",
    "INT64",
    "UINT4",
    "UINT8",
    "UINT16",
    "UINT32",
    "ND",
    "NZ",
    "A2A3",
    "A5",
    "Mem",
    "Tensor",
    "Out",
    "InOut",
    "Scalar",
    "dynamic",
    "kernel",
    "orchestration",
    "range",
    "pipeline",
    "spmd",
    "load",
    "store",
    "matmul",
    "matmul_acc",
    "cast",
    "add",
    "sub",
    "mul",
    "maximum",
    "exp",
    "min",
    "max",
    "get_block_idx",
    "get_block_num",
    "slice",
    "reshape",
    "tile",
    "tensor",
    "create_tensor",
    # the vector unit (language/vector_ops.py)
    "div",
    "minimum",
    "log",
    "sqrt",
    "rsqrt",
    "recip",
    "abs",
    "neg",
    "relu",
    "lrelu",
    "row_max",
    "row_sum",
    "row_min",
    "col_max",
    "col_sum",
    "col_min",
    "row_expand",
    "row_expand_add",
    "row_expand_sub",
    "row_expand_mul",
    "row_expand_div",
    "col_expand",
    "col_expand_add",
    "col_expand_sub",
    "col_expand_mul",
    "col_expand_div",
    "create_tile",
    "full",
    "fillpad",
    "PadValue",
    "MemorySpace",
    "move",
    "arange",
    "sort32",
    "mrgsort",
    "gather",
    # compare and select (language/select_ops.py)
    "cmp",
    "cmps",
    "sel",
    "sels",
    "set_validshape",
    "transpose",
    # tensor queries and scalar access (language/tensor_ops.py)
    "dim",
    "read",
    "write",
    "assemble",
    # the cube's variants (language/cube_ops.py)
    "matmul_bias",
    "gemv",
    "gemv_acc",
    "gemv_bias",
    "batch_matmul",
    # PyPTO's loop, scope and decorator forms (language/pypto_forms.py)
    "parallel",
    "unroll",
    "at",
    "incore",
    "Level",
    "FunctionType",
    "function",
    "jit",
    "yield_",
]
