"""Rules of the scalar access to GM (nzjit/prims/memory.py `tensor.read` / `tensor.write`): one
element of an ND tensor view, read or written through the view's element strides.

An index computed from the call's data (a value read from GM, a scalar argument) cannot be bounded
at compile time: an element outside the view would read or write another tensor's bytes, so the
call is refused (DispatchError, nothing written back), as `steps.check_window` refuses a window.
No batch form: a body with a scalar access runs lane by lane (a read must see the stores of the
lanes before it in program order, which the batched path defers)."""

from __future__ import annotations

from typing import Any

import numpy as np

import runtime

from ... import prims as P
from ...core.ir import Eqn
from ..rule import rule
from ..values import TensorVal


def _address(e: Eqn, t: TensorVal, idx: list[Any], what: str) -> int:
    if t.nz is not None:
        raise runtime.DispatchError(f"{e.source}: {what} of an NZ tensor view")  # refused when traced
    for axis, (i, d) in enumerate(zip(idx, t.shape)):
        if not 0 <= i < d:
            raise runtime.DispatchError(
                f"{e.source}: {what} at index {i} on axis {axis} is outside the view of shape {tuple(t.shape)}: an "
                "index computed from the call's data addresses past the tensor; the call is refused (nothing is "
                "written back)"
            )
    return t.addr + sum(i * s for i, s in zip(idx, t.strides)) * t.dtype.itemsize


@rule(P.tensor_read_p)
def _read(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    t: TensorVal = ins[0]
    addr = _address(e, t, [int(x) for x in ins[1:]], "pl.read")
    raw = ctx.gm.view(addr, (t.dtype.itemsize,), (1,))
    return [np.frombuffer(raw.tobytes(), dtype=t.dtype)[0].item()]


@rule(P.tensor_write_p)
def _write(ctx: Any, e: Eqn, ins: list[Any]) -> list[Any]:
    t: TensorVal = ins[0]
    addr = _address(e, t, [int(x) for x in ins[1:-1]], "pl.write")
    with np.errstate(over="ignore", invalid="ignore"):
        value = np.asarray(ins[-1]).astype(t.dtype)
    ctx.gm.view(addr, (t.dtype.itemsize,), (1,))[...] = np.frombuffer(value.tobytes(), dtype=np.uint8)
    return [t]
