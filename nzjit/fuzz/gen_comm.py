"""Random programs of communicating ranks (issue 28): pld kernels + an orchestration, each with its
numpy reference or its predicted diagnosis.

`generate_comm(seed, index)` is a pure function of its arguments (like `gen.generate`): a module
text defining `N` (ranks), kernels, the orchestration `prog`, `inputs()`, `reference(d)` and
`EXPECT` ("ok", "hang" or "race"). `run_comm(p)` runs it on a `runtime.Cluster(N)` and classifies:

- "equal": an "ok" program whose outputs equal the reference (integers, or small integers in fp32:
  exact);
- "hang" / "race": the predicted `CommHangError` / `CommRaceError`, its message naming what the
  prediction says (every blocked rank, the window);
- anything else is a bug: "wrong" (a different result), "missed" (a bug the simulator did not
  diagnose), "crash" (another error), "surprise" (an unwritten-window warning in an "ok" program).

Patterns: PyPTO's barrier and remote accumulate written with one-armed `if peer != me:` inside
pl.range, a ring shift by remote_load behind notify / wait (Set or AtomicAdd, Eq or Ge), a ring
shift by remote_store behind a barrier, a mesh reduction (add / max) with remote loads, the
collectives (allreduce with every op, allgather, reduce_scatter, all_to_all), atomic-add remote
stores into one rank, a notify counter. Injected bugs: a dropped notify, a dropped wait or barrier,
a wrong expected value, Set where AtomicAdd was needed, plain stores where atomic adds were needed,
a collective one rank skips.

`python -m nzjit.fuzz.gen_comm --n 50 --seed 0` runs a small campaign and prints the counts.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import warnings
from dataclasses import dataclass, field

__all__ = ["CommG", "CommProgram", "CommOutcome", "PATTERNS", "generate_comm", "run_comm", "main"]

_HEAD = '''"""nzjit fuzz program (communicating ranks) {name}: {tags}."""

import numpy as np

import runtime
from nzjit import pl, pld

N, SIZE, DT, NPT = {n}, {size}, pl.{dt}, np.{npt}
EXPECT = {expect!r}
BLOCKED = {blocked!r}  # the ranks a hang report must show blocked
'''

_SIG = (
    "x: pl.Tensor[[{xr}, SIZE], DT], y: pl.Out[pl.Tensor[[{yr}, SIZE], DT]], "
    "data: pld.DistributedTensor[[{dr}, SIZE], DT], sig: pld.DistributedTensor[[N, 1], pl.INT32]"
)

_ORCH = """

@pl.kernel
def idle(x: pl.Tensor[[{xr}, SIZE], DT], y: pl.Out[pl.Tensor[[{yr}, SIZE], DT]]):
    pl.store(pl.load(x, [0, 0], [1, SIZE]), [0, 0], y)


@pl.orchestration
def prog(x: pl.Tensor[[N, {xr}, SIZE], DT], y: pl.Out[pl.Tensor[[N, {yr}, SIZE], DT]]):
    data_buf = pld.alloc_window_buffer([{dr}, SIZE], dtype=DT)
    sig_buf = pld.alloc_window_buffer([N, 1], dtype=pl.INT32)
    for r in range(pld.world_size()):
        data = pld.window(data_buf, [{dr}, SIZE], dtype=DT)
        sig = pld.window(sig_buf, [N, 1], dtype=pl.INT32)
        if r == {skip}:
            idle(x[r], y[r], device=r)
        else:
            kernel(x[r], y[r], data, sig, device=r)


def inputs():
    rng = np.random.default_rng({data_seed})
    return rng.integers(-{hi}, {hi} + 1, (N, {xr}, SIZE)).astype(NPT)
"""


@dataclass(frozen=True)
class CommProgram:
    """One generated program: its module text and what it must do."""

    seed: int
    index: int
    pattern: str
    tags: tuple[str, ...]
    expect: str  # ok | hang | race
    source: str

    @property
    def name(self) -> str:
        """`comm_seed_index`."""
        return f"comm_{self.seed}_{self.index}"


@dataclass
class CommOutcome:
    """How a program ran: its class, whether that is a bug, and the evidence."""

    cls: str
    bug: bool
    detail: str = ""


@dataclass
class CommG:
    """A communicating kernel under construction: its body and reference lines, its tags, what it
    must do (`expect`, the ranks a hang leaves `blocked`), the window rows; a pattern fills it."""

    rnd: random.Random
    n: int
    tags: list[str] = field(default_factory=list)
    body: list[str] = field(default_factory=list)
    ref: list[str] = field(default_factory=list)
    expect: str = "ok"
    blocked: tuple[int, ...] = ()
    rows: tuple[int, int, int] = (1, 1, 1)  # x rows, y rows, data rows
    skip: int = -1  # a rank that runs `idle` instead of the kernel
    bugs: bool = True  # inject bugs (the orchestration family, orch_comm.py, builds only correct programs)

    def p(self, prob: float) -> bool:
        """True with probability `prob`."""
        return self.rnd.random() < prob

    def bug(self, *names: str) -> str | None:
        """An injected bug of `names` with probability 0.35, recorded as a tag."""
        if not self.bugs or not self.p(0.35):
            return None
        b = self.rnd.choice(names)
        self.tags.append(f"bug:{b}")
        return b


_CTX = [
    "ctx = pld.get_comm_ctx(data)",
    "me = pld.rank(ctx)",
    "n = pld.nranks(ctx)",
    "t = pl.load(x, [0, 0], [1, SIZE])",
]


def _shift_load(g: CommG) -> None:
    s = g.rnd.randrange(1, g.n)
    op = g.rnd.choice(["Set", "AtomicAdd"])
    cmp = g.rnd.choice(["Ge", "Eq"])
    bug = g.bug("drop_notify", "drop_wait", "wrong_expected")
    g.tags += [f"shift:{s}", f"op:{op}", f"cmp:{cmp}"]
    g.body += [*_CTX, "pl.store(t, [0, 0], data)"]
    if bug != "drop_notify":  # the rank that reads my slice is me - s
        g.body.append(f"pld.system.notify(sig, (me + {g.n - s}) % n, [me, 0], 1, op=pld.NotifyOp.{op})")
    if bug != "drop_wait":
        expected = 2 if bug == "wrong_expected" else 1
        g.body.append(f"pld.system.wait(sig, [(me + {s}) % n, 0], {expected}, cmp=pld.WaitCmp.{cmp})")
    g.body.append(f"pl.store(pld.tile.remote_load(data, (me + {s}) % n, [0, 0], [1, SIZE]), [0, 0], y)")
    g.ref.append(f"return np.stack([d[(r + {s}) % N] for r in range(N)])")
    if bug in ("drop_notify", "wrong_expected"):
        g.expect, g.blocked = "hang", tuple(range(g.n))
    elif bug == "drop_wait":
        g.expect = "race"


def _shift_store(g: CommG) -> None:
    s = g.rnd.randrange(1, g.n)
    bug = g.bug("drop_barrier")
    g.tags.append(f"shift:{s}")
    g.body += [*_CTX, f"pld.tile.remote_store(t, data, (me + {s}) % n, [0, 0])"]
    if bug is None:
        g.body.append("sig = pld.tensor.barrier(sig)")
    g.body.append("pl.store(pl.load(data, [0, 0], [1, SIZE]), [0, 0], y)")
    g.ref.append(f"return np.stack([d[(r - {s}) % N] for r in range(N)])")
    if bug:
        g.expect = "race"


def _mesh(g: CommG) -> None:
    op = g.rnd.choice(["add", "maximum"])  # (this pl has no pl.minimum yet)
    bug = g.bug("drop_notify")
    g.tags.append(f"mesh:{op}")
    g.body += [*_CTX, "pl.store(t, [0, 0], data)"]
    if bug is None:
        g.body += [
            "for k in pl.range(1, n):",
            "    pld.system.notify(sig, (me + pl.cast(k, pl.INT32)) % n, [me, 0], 1, op=pld.NotifyOp.Set)",
        ]
    g.body += [
        "acc = t",
        "for k in pl.range(1, n):",
        "    peer = (me + pl.cast(k, pl.INT32)) % n",
        "    pld.system.wait(sig, [peer, 0], 1, cmp=pld.WaitCmp.Ge)",
        f"    acc = pl.{op}(acc, pld.tile.remote_load(data, peer, [0, 0], [1, SIZE]))",
        "pl.store(acc, [0, 0], y)",
    ]
    red = {"add": "sum", "maximum": "max"}[op]
    g.ref.append(f"return np.broadcast_to(d.{red}(axis=0), d.shape).astype(d.dtype)")
    if bug:
        g.expect, g.blocked = "hang", tuple(range(g.n))


def _collective(g: CommG) -> None:
    kind = g.rnd.choice(["allreduce", "allgather", "reduce_scatter", "all_to_all"])
    n = g.n
    bug = g.bug("skip_one_rank")
    g.tags.append(f"collective:{kind}")
    if kind == "allreduce":
        op = g.rnd.choice(["Sum", "Max", "Min", "Prod"])
        g.tags.append(f"op:{op}")
        g.rows = (n, n, n)
        g.body += [
            f"pl.store(pl.load(x, [0, 0], [{n}, SIZE]), [0, 0], data)",
            f"data = pld.tensor.allreduce(data, sig, op=pld.ReduceOp.{op})",
            f"pl.store(pl.load(data, [0, 0], [{n}, SIZE]), [0, 0], y)",
        ]
        fn = {"Sum": "sum", "Max": "max", "Min": "min", "Prod": "prod"}[op]
        g.ref.append(f"return np.broadcast_to(d.{fn}(axis=0), d.shape).astype(d.dtype)")
    elif kind == "allgather":
        g.rows = (1, n, n)
        g.body += [
            "data = pld.tensor.allgather(x, data, sig)",
            f"pl.store(pl.load(data, [0, 0], [{n}, SIZE]), [0, 0], y)",
        ]
        g.ref.append("return np.stack([d[:, 0] for _ in range(N)])")
    elif kind == "reduce_scatter":
        g.rows = (n, 1, n)
        g.body += [
            "me = pld.rank(pld.get_comm_ctx(data))",
            f"pl.store(pl.load(x, [0, 0], [{n}, SIZE]), [0, 0], data)",
            "data = pld.tensor.reduce_scatter(data, sig, op=pld.ReduceOp.Sum)",
            "pl.store(pl.load(data, [me, 0], [1, SIZE]), [0, 0], y)",
        ]
        g.ref.append("return np.stack([d[:, r].sum(axis=0)[None] for r in range(N)]).astype(d.dtype)")
    else:
        g.rows = (n, n, n)
        g.body += [
            "data = pld.tensor.all_to_all(x, data, sig)",
            f"pl.store(pl.load(data, [0, 0], [{n}, SIZE]), [0, 0], y)",
        ]
        g.ref.append("return np.stack([d[:, r] for r in range(N)])")
    if bug:
        g.skip = g.rnd.randrange(n)
        g.expect, g.blocked = "hang", tuple(r for r in range(n) if r != g.skip)


def _atomic(g: CommG) -> None:
    target = g.rnd.randrange(g.n)
    bug = g.bug("plain_store")
    atomic = "" if bug else ", atomic=pld.AtomicType.Add"
    g.tags.append(f"atomic_into:{target}")
    g.body += [
        "t = pl.load(x, [0, 0], [1, SIZE])",
        f"pld.tile.remote_store(t, data, {target}, [0, 0]{atomic})",
        "sig = pld.tensor.barrier(sig)",
        "pl.store(pl.load(data, [0, 0], [1, SIZE]), [0, 0], y)",
    ]
    g.ref += ["out = np.zeros_like(d)", f"out[{target}] = d.sum(axis=0)", "return out"]
    if bug:
        g.expect = "race"


def _counter(g: CommG) -> None:
    """Every rank adds 1 to every rank's cell [0, 0], then waits for its cell to reach n."""
    bug = g.bug("set_not_add")
    op = "Set" if bug else "AtomicAdd"
    g.tags.append("counter")
    g.body += [
        "n = pld.nranks(pld.get_comm_ctx(sig))",
        "for k in pl.range(n):",
        f"    pld.system.notify(sig, pl.cast(k, pl.INT32), [0, 0], 1, op=pld.NotifyOp.{op})",
        "pld.system.wait(sig, [0, 0], n, cmp=pld.WaitCmp.Ge)",
        "pl.store(pl.load(x, [0, 0], [1, SIZE]), [0, 0], y)",
    ]
    g.ref.append("return d.copy()")
    if bug:  # with Set every cell holds 1, never n >= 2: every rank waits forever
        g.expect, g.blocked = "hang", tuple(range(g.n))


def _if_barrier(g: CommG) -> None:
    """PyPTO's barrier + remote accumulate: one-armed `if peer != me:` arms inside pl.range."""
    op = g.rnd.choice(["Set", "AtomicAdd"])
    bug = g.bug("drop_notify", "drop_wait")
    g.tags += ["if_barrier", f"op:{op}"]
    g.body += [*_CTX, "pl.store(t, [0, 0], data)"]
    if bug != "drop_notify":
        g.body += [
            "for p in pl.range(n):",
            "    peer = pl.cast(p, pl.INT32)",
            "    if peer != me:",
            f"        pld.system.notify(sig, peer, [me, 0], 1, op=pld.NotifyOp.{op})",
        ]
    if bug != "drop_wait":
        g.body += [
            "for p in pl.range(n):",
            "    src = pl.cast(p, pl.INT32)",
            "    if src != me:",
            "        pld.system.wait(sig, [src, 0], 1, cmp=pld.WaitCmp.Ge)",
        ]
    g.body += [
        "acc = t",
        "for p in pl.range(n):",
        "    peer = pl.cast(p, pl.INT32)",
        "    if peer != me:",
        "        acc = pl.add(acc, pld.tile.remote_load(data, peer, [0, 0], [1, SIZE]))",
        "pl.store(acc, [0, 0], y)",
    ]
    g.ref.append("return np.broadcast_to(d.sum(axis=0), d.shape).astype(d.dtype)")
    if bug == "drop_notify":
        g.expect, g.blocked = "hang", tuple(range(g.n))
    elif bug == "drop_wait":
        g.expect = "race"


_PATTERNS = {
    "if_barrier": _if_barrier,
    "shift_load": _shift_load,
    "shift_store": _shift_store,
    "mesh": _mesh,
    "collective": _collective,
    "atomic": _atomic,
    "counter": _counter,
}
PATTERNS = (
    _PATTERNS  # the communication patterns, each `pattern(CommG)`: the orchestration family draws them too
)


def generate_comm(seed: int, index: int, pattern: str | None = None) -> CommProgram:
    """Program `index` of campaign `seed` (deterministic)."""
    rnd = random.Random(f"nzjit.fuzz.comm:{seed}:{index}")
    n = rnd.choice([2, 2, 3, 4])
    g = CommG(rnd, n)
    pat = pattern or rnd.choice(sorted(_PATTERNS))
    _PATTERNS[pat](g)
    dt, npt, hi = rnd.choice([("FP32", "float32", 8), ("INT32", "int32", 1000)])
    if "op:Prod" in g.tags:
        hi = 3  # products of up to 4 small integers stay exact in fp32
    size = rnd.choice([8, 64, 128]) if dt == "INT32" else rnd.choice([8, 64])
    xr, yr, dr = g.rows
    tags = [f"ranks:{n}", f"dtype:{dt}", *g.tags]
    text = _HEAD.format(
        name=f"{seed}_{index}",
        tags=" ".join(tags),
        n=n,
        size=size,
        dt=dt,
        npt=npt,
        expect=g.expect,
        blocked=g.blocked,
    )
    kernel = [
        "",
        "",
        "@pl.kernel",
        f"def kernel({_SIG.format(xr=xr, yr=yr, dr=dr)}):",
        *("    " + line for line in g.body),
    ]
    orch = _ORCH.format(xr=xr, yr=yr, dr=dr, skip=g.skip, data_seed=rnd.randrange(2**31), hi=hi)
    ref = ["", "", "def reference(d):", *("    " + line for line in g.ref), ""]
    return CommProgram(
        seed, index, pat, tuple(tags), g.expect, text + "\n".join(kernel) + orch + "\n".join(ref)
    )


def _load(path: str, name: str) -> object:
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def run_comm(p: CommProgram) -> CommOutcome:
    """Run `p` on a fresh `runtime.Cluster` and classify the result against its prediction."""
    import runtime
    from runtime.comm import CommHangError, CommRaceError, UnwrittenWindowReadWarning

    fd, path = tempfile.mkstemp(prefix=f"nzjit_{p.name}_", suffix=".py")
    with os.fdopen(fd, "w") as f:
        f.write(p.source)
    modname = f"nzjit_fuzz_{p.name}_{os.getpid()}"
    try:
        mod = _load(path, modname)
        d = mod.inputs()  # type: ignore[attr-defined]
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", UnwrittenWindowReadWarning)
            try:
                got = mod.prog(d, cluster=runtime.Cluster(mod.N))  # type: ignore[attr-defined]
                err: BaseException | None = None
            except (CommHangError, CommRaceError) as e:
                got, err = None, e
        unwritten = [w for w in caught if issubclass(w.category, UnwrittenWindowReadWarning)]
    except Exception as e:  # noqa: BLE001 - a crash is a finding
        return CommOutcome("crash", True, f"{type(e).__name__}: {e}")
    finally:
        sys.modules.pop(modname, None)
        os.unlink(path)
    if p.expect == "ok":
        if err is not None:
            return CommOutcome("crash", True, f"{type(err).__name__}: {err}")
        if unwritten:
            return CommOutcome("surprise", True, str(unwritten[0].message))
        ref = mod.reference(d)  # type: ignore[attr-defined]
        if got.shape != ref.shape or not (got == ref).all():
            return CommOutcome("wrong", True, f"got {got.reshape(-1)[:8]} expected {ref.reshape(-1)[:8]}")
        return CommOutcome("equal", False)
    want = CommHangError if p.expect == "hang" else CommRaceError
    if not isinstance(err, want):
        return CommOutcome("missed", True, f"expected a {want.__name__}, got {err!r}")
    msg = str(err)
    if p.expect == "hang":
        missing = [
            r
            for r in mod.BLOCKED  # type: ignore[attr-defined]
            if f"  rank {r}: waits at " not in msg and f"  rank {r}: entered " not in msg
        ]
        if "communication hang" not in msg or missing:
            return CommOutcome(
                "missed", True, f"the hang report does not show ranks {missing} blocked:\n{msg}"
            )
        return CommOutcome("hang", False, msg)
    if "communication race on window 'data_buf'" not in msg:
        return CommOutcome("missed", True, f"the race report does not name the data window:\n{msg}")
    return CommOutcome("race", False, msg)


def main(argv: list[str] | None = None) -> int:
    """`python -m nzjit.fuzz.gen_comm --n N --seed S`: run N programs; 1 when any is a bug."""
    ap = argparse.ArgumentParser(prog="python -m nzjit.fuzz.gen_comm", description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=50)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--show", type=int, metavar="I", help="print program I's source and its outcome")
    args = ap.parse_args(argv)
    if args.show is not None:
        p = generate_comm(args.seed, args.show)
        o = run_comm(p)
        print(p.source)
        print(f"# expect {p.expect}; classified {o.cls}{' (BUG)' if o.bug else ''}\n# {o.detail}")
        return 1 if o.bug else 0
    counts: dict[str, int] = {}
    bugs = 0
    for i in range(args.n):
        p = generate_comm(args.seed, i)
        o = run_comm(p)
        counts[o.cls] = counts.get(o.cls, 0) + 1
        if o.bug:
            bugs += 1
            print(f"BUG {p.name} ({p.pattern}, {' '.join(p.tags)}): {o.cls}: {o.detail}")
    print(
        f"comm campaign seed {args.seed}: {args.n} programs, "
        + ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
        + f", bugs {bugs}"
    )
    return 1 if bugs else 0


if __name__ == "__main__":
    raise SystemExit(main())
