"""Kernels and data shared by the orchestration tests (issue 7)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import numpy as np

import runtime
from nzjit import pl

RANKS, E, N, K, T, NT, KT = 4, 2, 256, 512, 32, 128, 256
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pl.kernel
def gmm(
    x: pl.Tensor[[E, T, K], pl.INT8],
    w: pl.Tensor[[E, N, K], pl.INT8, pl.NZ],
    out: pl.Out[pl.Tensor[[E, T, N], pl.INT32]],
):
    for e in pl.spmd(E):
        for nb in pl.range(N // NT):
            n0 = nb * NT
            acc = pl.matmul(x[e, :, 0:KT], w[e, n0 : n0 + NT, 0:KT], b_trans=True)
            for k0 in pl.pipeline(KT, K, KT):
                acc = pl.matmul_acc(
                    acc, x[e, :, k0 : k0 + KT], w[e, n0 : n0 + NT, k0 : k0 + KT], b_trans=True
                )
            out[e, :, n0 : n0 + NT] = acc


@pl.orchestration
def tp(
    x: pl.Tensor[[RANKS, E, T, K], pl.INT8],
    w: pl.Tensor[[RANKS, E, N, K], pl.INT8, pl.NZ],
    out: pl.Out[pl.Tensor[[RANKS, E, T, N], pl.INT32]],
):
    for r in range(RANKS):
        gmm(x[r], w[r], out[r], device=r)


B = pl.dynamic("B")
DN, DK, DT = 64, 64, 16


@pl.kernel
def gmm_dyn(
    x: pl.Tensor[[B, DT, DK], pl.INT8],
    w: pl.Tensor[[B, DN, DK], pl.INT8, pl.NZ],
    nb: pl.Scalar[pl.INT32],
    out: pl.Out[pl.Tensor[[B, DT, DN], pl.INT32]],
):
    """A dynamic-batch NZ parameter (NZ-29): B is read from the argument's first logical axis."""
    for e in pl.range(nb):
        out[e, :, :] = pl.matmul(x[e, :, :], w[e, :, :], b_trans=True)


@pl.kernel
def window(
    x: pl.Tensor[[64, 32], pl.FP32], off: pl.Scalar[pl.INT32], out: pl.InOut[pl.Tensor[[16, 32], pl.FP32]]
):
    """Copies rows [off, off + 16) of x; an `off` past the end faults on the device, not on the host."""
    pl.store(pl.load(x, [off, 0], [16, 32]), [0, 0], out)


def data(seed: int = 0, ranks: int = RANKS) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Small integers (exact in int32): x [RANKS, E, T, K], logical w [RANKS, E, N, K], reference."""
    rng = np.random.default_rng(seed)
    x = rng.integers(-4, 5, (ranks, E, T, K)).astype(np.int8)
    w = rng.integers(-4, 5, (ranks, E, N, K)).astype(np.int8)
    ref = np.einsum("retk,renk->retn", x.astype(np.int32), w.astype(np.int32))
    return x, w, ref


def pack(w: np.ndarray) -> np.ndarray:
    return runtime.pack_nz(w)  # plane by plane: pack(w)[r] == pack_nz(w[r])


def tp_moe_case(name: str, seed: int) -> tuple[Any, np.ndarray, list[np.ndarray]]:
    """examples/tp_moe.py loaded as module `name` (4 ranks x gate_up, act, down; fp16 NZ weights)
    with real-valued fp16 data: (module, routed tokens xe, logical weights [wg, wu, wd])."""
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / "tp_moe.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    rng = np.random.default_rng(seed)
    # real-valued fp16 data: the float claim (the same bits on every path), not only small integers
    xe = rng.standard_normal((mod.RANKS, mod.E_LOCAL, mod.CAP, mod.H)).astype(np.float16)
    ws = [
        (rng.standard_normal((mod.RANKS, mod.E_LOCAL, *shape)) / 16).astype(np.float16)
        for shape in ((mod.F, mod.H), (mod.F, mod.H), (mod.H, mod.F))
    ]
    return mod, xe, ws
