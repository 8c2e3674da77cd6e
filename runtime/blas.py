"""The threads of the BLAS library numpy calls for the simulator's matmuls (issue 25 item 4).

OpenBLAS, as numpy bundles it, starts one thread per core and lets them spin waiting for work.
That suits one large product; it does not suit ranks running side by side (runtime.dispatch
`run_ranks`), where every rank thread calls BLAS for small products at once: the BLAS threads of
one call compete with the other ranks for the same cores, and their spinning costs CPU time no rank
uses (4 ranks of examples/tp_moe.py used ~10x the CPU time with numpy's default BLAS threads as
with one). So while ranks run side by side BLAS runs on the calling thread only (`one_thread`), and
the library's own setting comes back afterwards.

A product's bytes can depend on the thread count: with OPENBLAS_CORETYPE=Haswell, a float32
[256, 512] @ [512, 384] differs in 6% of its elements between one thread and two (other kernels,
e.g. SkylakeX's, give the same bits). So the simulator runs every launch that multiplies on one
BLAS thread too (nzjit's executor enters `one_thread` around it), and its bits are the same alone,
on ranks side by side and rank-batched; its own helper threads (runtime/threads.py) use the cores.

The library is found among those loaded into this process (numpy's `scipy_openblas`, or a system
OpenBLAS); with none found, or on a platform without `/proc/self/maps`, nothing changes.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["blas_threads", "one_thread", "set_blas_threads"]

# (set, get) entry points, by the prefix of each OpenBLAS build numpy may load
_NAMES = (
    ("scipy_openblas_set_num_threads64_", "scipy_openblas_get_num_threads64_"),
    ("scipy_openblas_set_num_threads", "scipy_openblas_get_num_threads"),
    ("openblas_set_num_threads64_", "openblas_get_num_threads64_"),
    ("openblas_set_num_threads", "openblas_get_num_threads"),
)

_lock = threading.Lock()
_users = 0  # callers inside `one_thread` now
_saved: int | None = None  # the library's thread count before the first of them
_api: tuple[Any, Any] | None | bool = False  # False: not looked up yet; None: no OpenBLAS loaded


def _openblas() -> tuple[Any, Any] | None:
    """(set, get) of the OpenBLAS loaded into this process, if any."""
    global _api
    if _api is False:
        _api = None
        try:
            with open("/proc/self/maps") as f:
                paths = sorted(
                    {line.split()[-1] for line in f if "openblas" in line.lower() and ".so" in line}
                )
        except OSError:
            paths = []
        for path in paths:
            try:
                lib = ctypes.CDLL(path)
            except OSError:
                continue
            for set_name, get_name in _NAMES:
                if hasattr(lib, set_name) and hasattr(lib, get_name):
                    setter, getter = getattr(lib, set_name), getattr(lib, get_name)
                    setter.argtypes, setter.restype, getter.restype = [ctypes.c_int], None, ctypes.c_int
                    _api = (setter, getter)
                    return _api
    return _api if isinstance(_api, tuple) else None


def blas_threads() -> int | None:
    """The thread count of the loaded OpenBLAS (None: none found)."""
    api = _openblas()
    return None if api is None else int(api[1]())


def set_blas_threads(n: int) -> int | None:
    """Set the loaded OpenBLAS's thread count (a benchmark compares settings); the previous count,
    or None (no OpenBLAS found: nothing changed). Call it where no product is in flight."""
    api = _openblas()
    if api is None:
        return None
    before = int(api[1]())
    api[0](int(n))
    return before


@contextmanager
def one_thread() -> Iterator[None]:
    """While the block runs, BLAS products run on their calling thread; nested and concurrent uses
    share one setting, and the first thread count comes back when the last one leaves. Entered
    only where no product is in flight (before rank threads start, after they all ended)."""
    global _users, _saved
    api = _openblas()
    if api is None:
        yield
        return
    with _lock:
        if _users == 0:
            _saved = int(api[1]())
            if _saved != 1:
                api[0](1)
        _users += 1
    try:
        yield
    finally:
        with _lock:
            _users -= 1
            if _users == 0 and _saved is not None and _saved != 1:
                api[0](_saved)
