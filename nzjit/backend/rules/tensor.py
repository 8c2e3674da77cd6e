"""Rules of the tensor family: GM views (slice, reshape / view / reinterpret_view), and the
tensor-level reference primitives of the stages before ConvertTensorToTileOps (matmul, assign),
so the graph after any pass executes (per-pass bisection)."""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

import runtime

from ... import prims as P
from ...core.ir import Eqn
from ...core.types import TensorType, static_dim
from ..lane_state import Fallback, LaneState, addresses, replays
from ..lane_values import LaneTensor
from ..replay import element_offset
from ..rule import Run, Step, rule
from ..steps import check_window, clamp, concrete, finish_or_generic, operand_groups, split, static_shape
from ..values import HostValue, TensorVal


# ----------------------------------------------------------------------------------- slice
def _specialize_slice(st: Step) -> Run | None:
    e = st.eqn
    out_t = e.outputs[0].type
    shape = static_shape(out_t.shape) if isinstance(out_t, TensorType) else None
    if shape is None:
        return None
    g = operand_groups(e, st.ins)
    (s_src,) = g["src"]
    offs_slots = g["offsets"]
    drop = e.params["drop"]
    window = tuple(e.params["shape"])
    getter = operator.itemgetter(*offs_slots) if len(offs_slots) > 1 else None

    def body(ctx: Any, env: list[Any]) -> Any:
        src = env[s_src]
        if src.nz is not None:
            return None
        offs = getter(env) if getter is not None else tuple(env[i] for i in offs_slots)
        delta = element_offset(ctx, e, offs, src.strides)
        check_window(e, src.shape, offs, window)
        strides = tuple(s for i, s in enumerate(src.strides) if i not in drop)
        if len(strides) != len(shape):  # a blocked NZ slice: same rank-5 geometry, narrower batch
            strides = src.strides
        return TensorVal(src.addr + delta * src.dtype.itemsize, src.dtype, shape, strides, src.layout)

    return finish_or_generic(st, body)


def _batch_slice(st: Step) -> Any:
    e = st.eqn
    out_t = e.outputs[0].type
    shape = static_shape(out_t.shape) if isinstance(out_t, TensorType) else None
    if shape is None:
        return None
    g = operand_groups(e, st.ins)
    (s_src,) = g["src"]
    offs = g["offsets"]
    drop = e.params["drop"]
    (o,) = st.outs

    def run(s: LaneState, env: list[Any]) -> None:
        src = env[s_src]
        if type(src) not in (TensorVal, LaneTensor) or src.nz is not None:
            raise Fallback("tensor value")
        addr = addresses(src, [env[i] for i in offs], s.L, e.params["shape"])
        strides = tuple(x for i, x in enumerate(src.strides) if i not in drop)
        if len(strides) != len(shape):
            strides = src.strides
        if isinstance(addr, np.ndarray):
            env[o] = LaneTensor(addr, src.dtype, shape, strides, src.layout)
        else:
            env[o] = TensorVal(addr, src.dtype, shape, strides, src.layout)

    return replays(run)  # lane addresses: no buffer work


@rule(P.tensor_slice_p, specialize=_specialize_slice, batch=_batch_slice)
def _slice(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    src: TensorVal = ins[0]
    offs = clamp(ctx, e, split(e, ins, "offsets"))
    check_window(e, src.shape, offs, concrete(ctx, e.params["shape"]))  # a pl.dynamic extent: the call's
    out_t = e.outputs[0].type
    assert isinstance(out_t, TensorType)
    shape = concrete(ctx, out_t.shape)
    drop = e.params["drop"]
    if src.nz is not None:
        return [TensorVal(src.addr, src.dtype, shape, (), "NZ", src.nz.sub(offs, drop))]
    delta = sum(o * s for o, s in zip(offs, src.strides)) * src.dtype.itemsize
    strides = tuple(s for i, s in enumerate(src.strides) if i not in drop)
    if len(strides) != len(shape):  # a blocked NZ slice: same rank-5 geometry, narrower batch
        strides = src.strides
    return [TensorVal(src.addr + delta, src.dtype, shape, strides, src.layout)]


# -------------------------------------------------------------------------------- reshapes
@rule(P.tensor_reshape_p, P.tensor_view_p, P.tensor_reinterpret_view_p)
def _reshape(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    src: TensorVal = ins[0]
    out_t = e.outputs[0].type
    assert isinstance(out_t, TensorType)
    shape = concrete(ctx, out_t.shape)
    strides = runtime.isa.row_major_strides(shape)
    return [TensorVal(src.addr, out_t.dtype.np_dtype, shape, strides, out_t.layout.value)]


# -------------------------------------------------------------------- reference matmuls
def squeeze2(a: np.ndarray) -> np.ndarray:
    """`a` without its leading unit axes beyond two."""
    while a.ndim > 2 and a.shape[0] == 1:
        a = a[0]
    return a


def _operand(ctx: Any, v: Any) -> np.ndarray:
    if isinstance(v, TensorVal):
        return squeeze2(v.read(ctx.gm))
    return squeeze2(v.logical())


def reference_matmul(a: np.ndarray, b: np.ndarray, b_trans: bool, out: np.dtype) -> np.ndarray:
    """The exact math of the cube: int8 -> int32 wrapping, floating -> float32."""
    if b_trans:
        b = b.T
    if np.issubdtype(out, np.integer):
        return (a.astype(np.int64) @ b.astype(np.int64)).astype(out)
    # B to BLAS as the transpose of a C-contiguous n x k matrix, as runtime.cube passes it: the
    # operand layout decides OpenBLAS's summation order (docs/safety.md), so every path agrees
    return np.matmul(a.astype(np.float32), np.ascontiguousarray(b.T, dtype=np.float32).T).astype(out)


@rule(P.tensor_matmul_p, multiplies=True)
def _tensor_matmul(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    out_t = e.outputs[0].type
    assert isinstance(out_t, TensorType)
    a, b = (_operand(ctx, x) for x in ins)
    return [HostValue(reference_matmul(a, b, e.params["b_trans"], out_t.dtype.np_dtype))]


@rule(P.tensor_create_p)
def _tensor_create(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    """A kernel's `pl.create_tensor`: fresh zeroed GM of its shape, row-major, freed when the kernel
    returns (`Ctx.scratch`). Each run of the equation (each SPMD lane, when it is created inside
    the launch) gets its own. Zeroed: before ConvertTensorToTileOps the same value is the
    accumulator's start value, as the Acc tile.create it becomes (zeroed bytes), so every stage
    computes the same."""
    out_t = e.outputs[0].type
    assert isinstance(out_t, TensorType)
    shape = tuple(static_dim(d) for d in out_t.shape)
    dtype = np.dtype(out_t.dtype.np_dtype)
    addr = ctx.gm.alloc(max(int(np.prod(shape)) * dtype.itemsize, 32), zero=True)
    ctx.scratch.append(addr)
    return [TensorVal(addr, dtype, shape, runtime.isa.row_major_strides(shape))]


@rule(P.tensor_matmul_acc_p, multiplies=True)
def _tensor_matmul_acc(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    acc = ins[0].read(ctx.gm) if isinstance(ins[0], TensorVal) else ins[0].logical()  # a create's zeros
    a, b = (_operand(ctx, x) for x in ins[1:])
    prod = reference_matmul(a, b, e.params["b_trans"], acc.dtype)
    return [HostValue((acc + prod).astype(acc.dtype))]


@rule(P.tensor_assign_p)
def _assign(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    dst: TensorVal = ins[0]
    offs = clamp(ctx, e, split(e, ins, "offsets"))
    value = ins[1].logical()
    check_window(e, dst.shape, offs, (1,) * (len(dst.shape) - value.ndim) + value.shape)
    dst.write(ctx.gm, offs, value)
    return [dst]
