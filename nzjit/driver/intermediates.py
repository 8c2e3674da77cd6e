"""`pl.create_tensor(shape, dtype)` in an orchestration body: an intermediate of the program.

(language/ops.py `create_tensor` hands it here while an orchestration records.)

The tensor belongs to the rank of the first kernel call that uses it (PyPTO's orchestration
functions create their intermediates the same way); it is allocated on that rank when the program
is validated (zeroed), stays there for every later call of that rank, and is freed when the program
ends. A call on another rank is refused before dispatch (ranks do not share memory).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..backend.refs import PendingRef
from ..core.dtypes import DType
from ..errors import CompileError, user_source


@dataclass(eq=False)
class CreatedTensor(PendingRef):
    """An intermediate made by `pl.create_tensor`; `device` is None until a kernel call binds it."""

    device: int | None = None  # type: ignore[assignment]


def created_tensor(shape: Sequence[int], dtype: DType) -> CreatedTensor:
    """The intermediate `pl.create_tensor(shape, dtype)` makes in an orchestration body (see the
    module; Program.create_tensor wraps it in a handle)."""
    src = user_source()
    if not isinstance(dtype, DType):
        raise CompileError(f"pl.create_tensor: dtype must be a pl dtype such as pl.FP32, got {dtype!r}", src)
    dims = list(shape)
    if not dims or not all(
        isinstance(d, int | np.integer) and not isinstance(d, bool) and d > 0 for d in dims
    ):
        raise CompileError(f"pl.create_tensor: shape must be positive Python ints, got {dims}", src)
    where = f"{os.path.basename(src.file)}:{src.line}" if src else "body"
    return CreatedTensor(tuple(int(d) for d in dims), dtype.np_dtype, None, f"create_tensor@{where}")


def bind_created(refs: Sequence[Any], rank: int) -> None:
    """The first call that uses a created tensor decides its rank (Program.record calls this)."""
    for a in refs:
        if isinstance(a, CreatedTensor) and a.device is None:
            a.device = rank
            a.name = f"{a.name}@rank{rank}"


def unbound(a: Any) -> bool:
    """A created tensor no call has used yet (it has no rank to offer `device=None`)."""
    return isinstance(a, CreatedTensor) and a.device is None


__all__ = ["CreatedTensor", "bind_created", "created_tensor", "unbound"]
