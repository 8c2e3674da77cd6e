"""The NZ contract as a whole: rules without a pass of their own (NZ-2, NZ-3), and a guard that
every rule of nz-layout.md is cited by at least one test."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

import runtime
from nzjit import pl
from nzjit.core.types import Layout

M, N, K = 32, 256, 512


@pl.kernel
def logical_slices(
    x: pl.Tensor[[M, K], pl.INT8],
    w: pl.Tensor[[N, K], pl.INT8, pl.NZ],
    out: pl.Out[pl.Tensor[[M, N], pl.INT32]],
):
    for nb in pl.spmd(2):
        n0 = nb * 128
        out[:, n0 : n0 + 128] = pl.matmul(x[:, 128:384], w[n0 : n0 + 128, 128:384], b_trans=True)


def _tile_loads(g):
    return [e for e in g.walk() if e.primitive.name == "tile.load"]


def test_author_writes_logical_shapes_and_slices():  # NZ-2
    # the traced graph keeps the logical [N, K] type and the logical window [n0:n0+128, 128:384]
    traced = logical_slices.lower().ir("trace")
    w = traced.params[1]
    assert w.type.shape == (N, K) and w.type.layout is Layout.NZ
    slices = [
        e
        for e in traced.walk()
        if e.primitive.name == "tensor.slice" and e.inputs[0].type.layout is Layout.NZ
    ]
    assert [e.params["shape"] for e in slices] == [(128, 256)]
    # the compiler supplies the physical description: rank 5 after BlockNzTensorViews
    assert logical_slices.lower().ir().params[1].type.shape == (1, K // 32, N // 16, 16, 32)


def test_weight_load_is_nz_to_nz_and_exact():  # NZ-3
    low = logical_slices.lower()
    loads = _tile_loads(low.ir())
    w_loads = [e for e in loads if e.inputs[0].type.layout is Layout.NZ]
    x_loads = [e for e in loads if e.inputs[0].type.layout is Layout.ND]
    # the B operand reads the blocked NZ view straight into a Mat (NZ) tile: no ND->NZ window
    assert len(w_loads) == 1 and w_loads[0].params["blocked"] and "window_2d" not in w_loads[0].params
    assert w_loads[0].params["shape"] == (1, 256 // 32, 128 // 16, 16, 32)
    assert all(e.params.get("window_2d") for e in x_loads)  # only the activation is converted
    rng = np.random.default_rng(3)
    x = rng.integers(-128, 128, (M, K), dtype=np.int8)
    w = rng.integers(-128, 128, (N, K), dtype=np.int8)
    out = logical_slices(x, runtime.pack_nz(w))
    ref = x[:, 128:384].astype(np.int32) @ w[:, 128:384].astype(np.int32).T
    assert np.array_equal(out, ref)


def test_every_rule_is_cited_by_a_test():
    spec = Path(__file__).resolve().parents[2] / "shared" / "spec" / "nz-layout.md"
    n_rules = max(int(m) for m in re.findall(r"NZ-(\d+)\.", spec.read_text())) if spec.exists() else 34
    cited: set[int] = set()
    for f in Path(__file__).parent.rglob("*.py"):
        cited.update(int(m) for m in re.findall(r"NZ-(\d+)(?!\d)", f.read_text()))
    missing = [f"NZ-{i}" for i in range(1, n_rules + 1) if i not in cited]
    assert not missing, f"rules with no test citing them: {missing}"
