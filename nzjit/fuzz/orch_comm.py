"""Fuzz family `orch_comm` (issue 28): orchestrations whose ranks run several kernels and talk.

Each rank runs three kernels in a row: `pre` (a local op on its shard of x, into an intermediate),
`comm` (one communication pattern of gen_comm.py: ring shifts behind notify / wait, a mesh
reduction, the collectives, atomic remote stores, a notify counter, PyPTO's `if peer != me` barrier;
here without injected bugs) on that intermediate and the program's windows, and `post` (a local op
of the exchanged result into y[r]). The reference is numpy: pre, the pattern's reference, post.

With a small probability the data window is declared NZ, which the seed's table refuses
("distributed tensor: refused — remote_load has no NZ blocking", row L23). The comm kernel is
defined by `comm_kernel()`, called when the program runs, so that the refusal is the program's
outcome rather than an import error of its module.

The module defines `kernel` (the `pre` kernel) / `PARAMS` / `OUTS` / `inputs()` for one rank's call
as the other families do (the codegen test lowers `kernel` from them), and its own `execute()`,
which runs the orchestration on a `runtime.Cluster`; the shared harness gives the rest (its
kernel-call `execute` renamed, as orch_slices.py does).
"""

from __future__ import annotations

import random
from typing import Any

from .gen_comm import PATTERNS, CommG
from .harness import ORCHESTRATION_HARNESS

# a local op: (kernel line from t, numpy of v); exact on small integers in INT32 and FP32
_LOCAL = {"double": ("pl.add(t, t)", "v + v"), "neg": ("pl.neg(t)", "-v"), "copy": ("t", "v")}


def fam_orch_comm(g: Any) -> None:
    """Build one communicating orchestration into `g` (its whole source in `g.own_source`)."""
    n = int(g.choice([2, 2, 3, 4]))
    c = CommG(random.Random(g.rnd.randrange(2**31)), n, bugs=False)
    pattern = str(g.choice(sorted(PATTERNS)))
    PATTERNS[pattern](c)
    dt, npt, hi = (("FP32", "float32", 8), ("INT32", "int32", 1000))[int(g.choice([0, 1]))]
    pre, post = str(g.choice(sorted(_LOCAL))), str(g.choice(sorted(_LOCAL)))
    if "op:Prod" in c.tags:
        hi = 3 if pre == "copy" else 1  # products of up to 4 small integers stay exact in fp32
    size = int(g.choice([8, 64]))
    nz = g.p(0.08)
    g.tag(
        "orch_comm",
        f"comm:{pattern}",
        f"ranks:{n}",
        f"pre:{pre}",
        f"post:{post}",
        *c.tags,
        *(["comm:nz_window"] if nz else []),
    )
    if nz:
        g.refuse.add("L23")
    xr, yr, dr = c.rows
    data_ann = f"pld.DistributedTensor[[{dr}, SIZE], DT{', pl.NZ' if nz else ''}]"
    seed = g.rnd.randrange(2**31)
    lines = [
        f'"""nzjit fuzz program (family orch_comm): {n} ranks, pre {pre} -> {pattern} -> post {post}.',
        "",
        "tags: " + " ".join(g.tags),
        "",
        "Standalone: `python this_file.py` runs the orchestration on a runtime.Cluster and asserts the",
        'numpy reference (see the harness at the end)."""',
        "",
        "import ml_dtypes  # noqa: F401",
        "import numpy as np",
        "",
        "import runtime",
        "from nzjit import pl, pld",
        "",
        f"N, SIZE, DT, NPT = {n}, {size}, pl.{dt}, np.{npt}",
        "",
        "",
        "@pl.kernel",
        f"def kernel(x: pl.Tensor[[{xr}, SIZE], DT], m: pl.Out[pl.Tensor[[{xr}, SIZE], DT]]):",
        f"    t = pl.load(x, [0, 0], [{xr}, SIZE])",
        f"    pl.store({_LOCAL[pre][0]}, [0, 0], m)",
        "",
        "",
        "@pl.kernel",
        f"def post(c: pl.Tensor[[{yr}, SIZE], DT], y: pl.Out[pl.Tensor[[{yr}, SIZE], DT]]):",
        f"    t = pl.load(c, [0, 0], [{yr}, SIZE])",
        f"    pl.store({_LOCAL[post][0]}, [0, 0], y)",
        "",
        "",
        "def comm_kernel():",
        '    """The communicating kernel (made when the program runs: an NZ window is refused here)."""',
        "    @pl.kernel",
        f"    def comm(x: pl.Tensor[[{xr}, SIZE], DT], data: {data_ann},",
        f"             sig: pld.DistributedTensor[[N, 1], pl.INT32], y: pl.Out[pl.Tensor[[{yr}, SIZE], DT]]):",
        *("        " + line for line in c.body),
        "    return comm",
        "",
        "",
        "def orchestration(comm):",
        "    @pl.orchestration",
        f"    def prog(x: pl.Tensor[[N, {xr}, SIZE], DT], y: pl.Out[pl.Tensor[[N, {yr}, SIZE], DT]]):",
        f"        data_buf = pld.alloc_window_buffer([{dr}, SIZE], dtype=DT)",
        "        sig_buf = pld.alloc_window_buffer([N, 1], dtype=pl.INT32)",
        "        for r in range(pld.world_size()):",
        "            m = kernel(x[r], device=r)  # an intermediate of rank r",
        f"            c = comm(m, pld.window(data_buf, [{dr}, SIZE], dtype=DT), "
        "pld.window(sig_buf, [N, 1], dtype=pl.INT32), device=r)",
        "            post(c, y[r], device=r)",
        "    return prog",
        "",
        "",
        f"SEED = {seed}",
        "CALL = 'numpy'",
        "# one rank's `pre` call (the codegen test lowers `kernel` from these)",
        "PARAMS = [('x', 'in', False), ('m', 'out', False)]",
        f"OUTS = {{'m': (({xr}, {size}), NPT, False)}}",
        "",
        "",
        "def orch_inputs():",
        "    rng = np.random.default_rng(SEED)",
        f"    return rng.integers(-{hi}, {hi} + 1, (N, {xr}, SIZE)).astype(NPT)",
        "",
        "",
        "def inputs():",
        "    return {'x': orch_inputs()[0]}",
        "",
        "",
        "def comm_reference(d):",
        *("    " + line for line in c.ref),
        "",
        "",
        "def reference(d, outs):",
        "    v = d",
        f"    v = ({_LOCAL[pre][1]}).astype(NPT)",
        "    v = comm_reference(v)",
        f"    outs['y'] = ({_LOCAL[post][1]}).astype(np.float64)",
        "    return outs",
        "",
        "",
        "def execute():",
        '    """Run the orchestration; return (got, expected, must_refuse) as the harness\'s execute does."""',
        "    d = orch_inputs()",
        "    rng = np.random.default_rng(SEED + 1)",
        f"    y = sentinel((N, {yr}, SIZE), NPT, rng)",
        "    expected = reference(d, {})",
        "    orchestration(comm_kernel())(d, y, cluster=runtime.Cluster(N))",
        "    return {'y': y}, expected, None",
    ]
    g.own_source = "\n".join(lines) + "\n" + ORCHESTRATION_HARNESS


__all__ = ["fam_orch_comm"]
