"""`@pl.kernel` and `@pl.orchestration`: the author's decorators. What they build - `Kernel`,
`Orchestration`, and the compile cache behind them - lives in nzjit/driver/."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from ..core.types import Layout, ScalarType, Target, TensorType
from ..driver.kernel import Kernel
from ..driver.orchestration import Orchestration
from ..driver.params import Param, Spec, spec
from ..errors import api_boundary


@api_boundary
def kernel(fn: Callable[..., Any] | None = None, *, target: Target = Target.A2A3) -> Any:
    """@pl.kernel or @pl.kernel(target=pl.A2A3): an InCore device kernel, traced on first use."""
    if fn is None:
        return functools.partial(Kernel, target=target)  # a C callable: no nzjit frame in a traceback
    return Kernel(fn, target)


@api_boundary
def orchestration(fn: Callable[..., Any]) -> Any:
    """@pl.orchestration: a host-side entry whose body calls kernels (see driver/orchestration.py)."""
    return Orchestration(fn)


__all__ = ["Kernel", "Param", "kernel", "orchestration", "spec", "Spec", "Layout", "TensorType", "ScalarType"]
