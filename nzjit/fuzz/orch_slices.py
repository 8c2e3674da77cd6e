"""Fuzz family `orch_slices` (issue 25): orchestration bodies that slice their arguments.

A program is one `@pl.kernel` (a matmul of E planes: x [E, T, K] ND, w [E, N, K] NZ) and one
`@pl.orchestration` over `[RANKS, A, ...]` arguments whose body calls it once or twice per rank
through random views: `w[r, a]`, `w[r][a]`, `w[r, a0:a0 + E]`, `pl.slice(w[r], [E, N, K], [a0, 0,
0])`, `pl.slice(w, [1, 1, N, K], [r, a, 0, 0])[0][0]`, the same forms for x and out, on host arrays
or on StackedDeviceTensors of a `runtime.Cluster` (CALL = "stacked"). Planes are independent per
argument, out planes of one rank disjoint; the reference is numpy on the logical planes, untouched
planes keep their sentinel. With a small probability one view windows the trailing `[R, C]` plane
of w, which the spec refuses (NZ-30, rule-table row L15).

The module defines `kernel` / `PARAMS` / `OUTS` / `inputs()` for one rank's call as the other
families do (the codegen test lowers `kernel` from them), and its own `execute()`, which runs the
orchestration; the shared harness (harness.py) gives the rest (its kernel-call `execute` renamed).
"""

from __future__ import annotations

from typing import Any

from .harness import ORCHESTRATION_HARNESS

# dtype -> (numpy type, accumulator pl name, its numpy type, c0)
DTYPES = {"INT8": ("np.int8", "INT32", "np.int32", 32), "FP16": ("np.float16", "FP32", "np.float32", 16)}


def _view(g: Any, t: str, r: int, plane: int, e: int, rest: tuple[int, int], drop: bool) -> str:
    """A random spelling of planes [plane, plane + e) of rank r of argument t (drop: one plane, rank 2)."""
    forms = ["index", "chain", "slice", "slice_all"]
    form = str(g.choice(forms))
    g.tag(f"view:{form}")
    rr, cc = rest
    if drop:
        return {
            "index": f"{t}[{r}, {plane}]",
            "chain": f"{t}[{r}][{plane}]",
            "slice": f"pl.slice({t}[{r}], [1, {rr}, {cc}], [{plane}, 0, 0])[0]",
            "slice_all": f"pl.slice({t}, [1, 1, {rr}, {cc}], [{r}, {plane}, 0, 0])[0][0]",
        }[form]
    return {
        "index": f"{t}[{r}, {plane}:{plane + e}]",
        "chain": f"{t}[{r}][{plane}:{plane + e}]",
        "slice": f"pl.slice({t}[{r}], [{e}, {rr}, {cc}], [{plane}, 0, 0])",
        "slice_all": f"pl.slice({t}, [1, {e}, {rr}, {cc}], [{r}, {plane}, 0, 0])[0]",
    }[form]


def fam_orch_slices(g: Any) -> None:
    """Build one orchestration-slices program into `g` (its whole source in `g.own_source`)."""
    dt = str(g.choice(sorted(DTYPES)))
    npt, acc, acc_np, c0 = DTYPES[dt]
    ranks, planes = int(g.choice([1, 2])), int(g.choice([1, 2, 3]))
    e = int(g.choice(range(1, planes + 1)))
    t, n, k = int(g.choice([16, 32])), int(g.choice([32, 64])), int(g.choice([c0, 2 * c0]))
    call = str(g.choice(["numpy", "omit", "stacked"]))
    drop = e == 1 and g.p(0.6)
    g.tag("orch", f"orch:{call}", f"orch:E{e}", *(["orch:drop"] if drop else []))
    if drop:
        sig = (
            f"x: pl.Tensor[[{t}, {k}], pl.{dt}], w: pl.Tensor[[{n}, {k}], pl.{dt}, pl.NZ], "
            f"out: pl.Out[pl.Tensor[[{t}, {n}], pl.{acc}]]"
        )
        body = ["    out[:, :] = pl.matmul(x[:, :], w[:, :], b_trans=True)"]
        kshape: dict[str, tuple[int, ...]] = {"x": (t, k), "w": (n, k), "out": (t, n)}
    else:
        sig = (
            f"x: pl.Tensor[[{e}, {t}, {k}], pl.{dt}], w: pl.Tensor[[{e}, {n}, {k}], pl.{dt}, pl.NZ], "
            f"out: pl.Out[pl.Tensor[[{e}, {t}, {n}], pl.{acc}]]"
        )
        body = [
            f"    for e in pl.spmd({e}):",
            "        out[e, :, :] = pl.matmul(x[e, :, :], w[e, :, :], b_trans=True)",
        ]
        kshape = {"x": (e, t, k), "w": (e, n, k), "out": (e, t, n)}
    calls: list[str] = []
    ref: list[str] = []
    # as many calls on every rank (mostly): the ranks then run one program, rank-batched in the
    # mode below; different counts run each rank on its own thread
    per_rank = [int(g.choice([1, 2]))] * ranks if g.p(0.7) else [int(g.choice([1, 2])) for _ in range(ranks)]
    for r in range(ranks):
        starts = list(range(0, planes - e + 1))
        used: list[int] = []  # out planes [o, o + e) of this rank, kept disjoint
        for _ in range(per_rank[r]):
            free = [o for o in starts if all(abs(o - u) >= e for u in used)]
            if not free:
                break
            o = int(g.choice(free))
            used.append(o)
            xa, wa = int(g.choice(starts)), int(g.choice(starts))
            xv = _view(g, "x", r, xa, e, (t, k), drop)
            wv = _view(g, "w", r, wa, e, (n, k), drop)
            ov = _view(g, "out", r, o, e, (t, n), drop)
            if g.p(0.08):  # NZ-30: a window on the trailing [R, C] plane of the NZ argument
                wv = f"w[{r}, {wa}, 0:{n // 2}]" if drop else f"w[{r}, {wa}:{wa + e}, :, 0:{k // 2}]"
                g.tag("refuse:plane")
                g.refuse.add("L15")
            calls.append(
                f"    kernel({xv}, {wv}, {ov}, device={r})  # out[{r}] planes {o}.. = x {xa}.. @ w {wa}.."
            )
            ref.append(
                f"    out[{r}, {o}:{o + e}] = np.einsum('ptk,pnk->ptn', d['x'][{r}, {xa}:{xa + e}], "
                f"d['w'][{r}, {wa}:{wa + e}])"
            )
    seed = g.rnd.randrange(2**31)
    # how the ranks run (rank_batch.MODES, forced; None: the program's own timed choice), so the
    # campaign reaches every mode - rank processes too - and not only a first call's "groups"
    # (rank processes need a Cluster's shared GM: host arrays on the default workers run "alone")
    if call == "stacked" and ranks > 1:
        mode = g.wchoice([(0.4, "processes"), (0.15, None), (0.15, "groups"), (0.15, "one"), (0.15, "alone")])
    else:
        mode = g.wchoice([(0.1, "processes"), (0.3, None), (0.2, "groups"), (0.2, "one"), (0.2, "alone")])
    g.tag(f"orch:mode:{mode or 'chosen'}")
    full = {"x": (ranks, planes, t, k), "w": (ranks, planes, n, k), "out": (ranks, planes, t, n)}
    lines = [
        f'"""nzjit fuzz program (family orch_slices): {ranks} rank(s), {planes} planes, views of {e}.',
        "",
        "tags: " + " ".join(g.tags),
        "",
        'Standalone: `python this_file.py` runs the orchestration and asserts the numpy reference."""',
        "",
        "import ml_dtypes  # noqa: F401",
        "import numpy as np",
        "",
        "import runtime",
        "from nzjit import pl",
        "",
        f"RANKS = {ranks}",
        f"MODE = {mode!r}  # rank_batch.FORCE during the call (None: the program's own choice)",
        "",
        "",
        "@pl.kernel",
        f"def kernel({sig}):",
        *body,
        "",
        "",
        "@pl.orchestration",
        f"def orch(x: pl.Tensor[{list(full['x'])}, pl.{dt}], w: pl.Tensor[{list(full['w'])}, pl.{dt}, pl.NZ],",
        f"         out: pl.Out[pl.Tensor[{list(full['out'])}, pl.{acc}]]):",
        *calls,
        "",
        "",
        f"SEED = {seed}",
        f"CALL = {call!r}  # numpy: out given; omit: out omitted; stacked: every tensor on a runtime.Cluster",
        "# one rank's kernel call (the codegen test lowers `kernel` from these)",
        "PARAMS = [('x', 'in', False), ('w', 'in', True), ('out', 'out', False)]",
        f"OUTS = {{'out': ({kshape['out']}, {acc_np}, False)}}",
        f"ORCH_OUTS = {{'out': ({full['out']}, {acc_np}, False)}}",
        "",
        "",
        "def orch_inputs():",
        "    rng = np.random.default_rng(SEED)",
        f"    return {{'x': rng.integers(-4, 5, {full['x']}).astype({npt}), "
        f"'w': rng.integers(-4, 5, {full['w']}).astype({npt})}}",
        "",
        "",
        "def inputs():",
        "    d = orch_inputs()",
        f"    return {{'x': d['x'][0, 0{'' if drop else f':{e}'}], 'w': d['w'][0, 0{'' if drop else f':{e}'}]}}",
        "",
        "",
        "def reference(d, outs):",
        "    d = {name: a.astype(np.float64) for name, a in d.items()}",
        "    out = outs['out']",
        *ref,
        "    return outs",
        "",
        "",
        "def execute():",
        '    """Run the orchestration; return (got, expected, must_refuse) as the harness\'s execute does."""',
        "    d = orch_inputs()",
        "    rng = np.random.default_rng(SEED + 1)",
        "    shape, dtype, _ = ORCH_OUTS['out']",
        "    init = np.zeros(shape, dtype) if CALL == 'omit' else sentinel(shape, dtype, rng)",
        "    expected = reference(d, {'out': init.astype(np.float64)})",
        "    x, w = d['x'], runtime.pack_nz(d['w'])",
        "    if CALL == 'stacked':",
        "        cluster = runtime.Cluster(RANKS)",
        "        x, w = cluster.alloc_stacked_tensor(x), cluster.alloc_stacked_tensor(w)",
        "        out = cluster.alloc_stacked_tensor(init)",
        "        in_mode(x, w, out)",
        "        return {'out': cluster.copy_stacked_from(out)}, expected, None",
        "    # first a call on other data of the same shapes: the checked call below runs the plan",
        "    # that call left (a program of an earlier signature, backend/program_cache.py)",
        "    in_mode(x + 1, w) if CALL == 'omit' else in_mode(x + 1, w, init.copy())",
        "    if CALL == 'omit':",
        "        return {'out': in_mode(x, w)}, expected, None",
        "    out = init.copy()",
        "    in_mode(x, w, out)",
        "    return {'out': out}, expected, None",
        "",
        "",
        "def in_mode(*args):",
        '    """`orch(*args)` with the ranks in MODE."""',
        "    from nzjit.backend import rank_batch",
        "",
        "    before, rank_batch.FORCE = rank_batch.FORCE, MODE",
        "    try:",
        "        return orch(*args)",
        "    finally:",
        "        rank_batch.FORCE = before",
    ]
    g.own_source = "\n".join(lines) + "\n" + ORCHESTRATION_HARNESS


__all__ = ["fam_orch_slices"]
