"""Mutation campaign over the NZ prover, the NZ pass, the gap guard and the device's NZ code (issue 29).

    python tools/mutate.py [--files F,...] [--sample N] [--jobs J] [--seed S] [--out results.json]
    python tools/mutate.py --list                 # the mutants, without running anything
    python tools/mutate.py --show ID              # one mutant's diff
    python tools/mutate.py --ids ID,ID,...        # run these mutants only (e.g. a run's survivors)

Each mutant changes one AST node of one target file: an arithmetic operator (`+`/`-`, `*`/`//`,
`//`/`%`), a comparison (`<`/`<=`, `>`/`>=`, `==`/`!=`), a boolean (`and`/`or`, a dropped
`not`), an integer constant (n -> n + 1, 1 -> 0), `min`/`max`, or a dropped argument of
`math.gcd`. Message text (f-strings, strings) is never mutated. The mutated module is written
(ast.unparse) into a private copy of the repository and a fast, targeted test subset (TESTS, per
file) runs there with `pytest -x`; a mutant is killed when a test fails (or the run times out).
`--sample N` draws N mutants per file (deterministic for a seed) when there are more.

Results (2026-12-01, seed 29; the numbers and the tests written for the survivors are in
docs/verification.md): the targets have 1044 mutants; a stratified sample of 99 ran (20 of
proofs.py, 19 of block_nz.py, 12 of each other file). 12 are equivalent (SURVIVORS below says
why); of the 87 others the suite at the campaign's start killed 65 (74.7%), the suite now all 87.
A fresh sample (--sample 4 --seed 30, 28 mutants): 3 equivalent, 23 of 25 killed (92%) at once,
25 of 25 after two debug-assert tests.
"""

from __future__ import annotations

import argparse
import ast
import atexit
import concurrent.futures as cf
import difflib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PASS_TESTS = [
    "tests/passes/test_nz_block_views.py",
    "tests/passes/test_nz_refusals.py",
    "tests/passes/test_nz_store.py",
    "tests/passes/test_nz_valid_shape.py",
    "tests/passes/test_nz_bounds.py",
    "tests/passes/test_nz_prover_refusals.py",
    "tests/passes/test_nz_proofs.py",
    "tests/passes/test_decode_rows.py",
    "tests/verify/test_translation_validation.py",
    "tests/e2e/test_nz_load_e2e.py",
    "tests/e2e/test_nz_store_e2e.py",
]
TESTS: dict[str, list[str]] = {
    "nzjit/passes/proofs.py": [
        "tests/passes/test_nz_prover_refusals.py",
        "tests/passes/test_nz_proofs.py",
        "tests/passes/test_nz_bounds.py",
        "tests/verify/test_prover_rules_smt.py",
    ],
    "nzjit/passes/block_nz.py": PASS_TESTS,
    "nzjit/passes/block_nz_store.py": PASS_TESTS,
    "nzjit/passes/nz_gap_guard.py": ["tests/passes/test_nz_gap_guard.py", "tests/e2e/test_nz_gap_e2e.py"],
    "runtime/nz.py": [
        "tests/runtime/test_rt_campaign_gaps.py",
        "tests/runtime/test_rt_nz.py",
        "tests/runtime/test_rt_nz_threads.py",
        "tests/test_nz_contract.py",
    ],
    "runtime/load.py": [
        "tests/runtime/test_rt_campaign_gaps.py",
        "tests/runtime/test_rt_nz_load.py",
        "tests/runtime/test_rt_gmview_dma.py",
        "tests/runtime/test_rt_other_paths.py",
        "tests/runtime/test_rt_tile.py",
        "tests/e2e/test_nz_load_e2e.py",
        "tests/e2e/test_nd_ops.py",
    ],
    "runtime/store.py": [
        "tests/runtime/test_rt_campaign_gaps.py",
        "tests/runtime/test_rt_acc_store.py",
        "tests/runtime/test_rt_other_paths.py",
        "tests/e2e/test_nz_store_e2e.py",
    ],
}
TIMEOUT = 240  # seconds per mutant: a mutant that hangs the tests is killed

#: The survivors of the recorded run, with why each is equivalent (no program can tell it apart).
SURVIVORS: dict[str, str] = {
    "nzjit/passes/proofs.py:22": "Fact.hi default (1 << 63) - 1 -> (1 << 63) - 0: only the budget-exhausted fact "
    "takes the default; its hi is read only by _lanes (clamped to MAX_LANES either way), and check_in_bounds "
    "skips exhausted facts",
    "nzjit/passes/proofs.py:140": "_FULL_LO -(1 << 63) -> -(1 << 64): claimed by divide_by_non_constant (whose "
    "result has a dtype: rule_wrap then yields factor 1, not non-negative, the dtype's range, as before) and by "
    "rule_unknown without a dtype (a non-integer value, never an index operand)",
    "nzjit/passes/proofs.py:237": "binding(): _binary(..., e.inputs[1]) -> e.inputs[0]: binding reads only the "
    "text, and every binary rule writes the same text _expr(p, a, b) whichever rule the rhs selects",
    "nzjit/passes/block_nz.py:4": "assert isinstance(r, int) and isinstance(c, int) -> or: the dynamic-axis "
    "refusal just above makes both true",
    "nzjit/passes/block_nz.py:50": "fold_batch len(terms) == 1 -> != 1: one unit-stride term takes the general "
    "path to the same value (0 + o * 1); several terms with a first stride of 1 mean every later leading axis "
    "has extent 1, so their offsets are 0 in every in-bounds program (an out-of-bounds one is the separate "
    "defect reported with this campaign)",
    "nzjit/passes/block_nz.py:140": "check_in_bounds f.hi >= 0 -> f.hi > 0: at hi == 0 both branches give 0",
    "nzjit/passes/block_nz.py:153": "check_in_bounds f.factor > 0 -> f.factor > 1: with factor 1, hi - hi % 1 == hi",
    "nzjit/passes/block_nz_store.py:44": "split_nz_store m > 65535 -> m >= 65535: at m = 65535 the L0C test "
    "m * 64 B > 128 KiB holds too, so the same refusal with the same (L0C) message",
    "nzjit/passes/nz_gap_guard.py:4": "gap <= 65535 -> gap < 65535: the gap R - loaded rows is a difference of "
    "multiples of 16, never the odd 65535",
    "runtime/nz.py:35": "_parts B >= n -> B > n: at B == n both ways of splitting the swap write the same bytes; "
    "only the split of the work among threads differs",
    "runtime/load.py:209": "l1_gap (cols - valid_col) * E % 2**32 -> % 3**32: the operand is a small non-negative "
    "number, the identity either way",
    "runtime/store.py:165": "src_gap (rows - vr) % 2**32 -> % 3**32: 0 <= rows - vr < 2**32, the identity either way",
    # the fresh sample (--seed 30)
    "nzjit/passes/block_nz_store.py:82": "the split store's column-block literal typed like o[0] instead of o[1]: the "
    "same value (ni // 8 < 512 fits either dtype)",
    "runtime/store.py:135": "gap_true % 2**64 -> % 3**64 of (s1 - g2*g3*g4) * E, non-negative for every view of "
    "an NZ tensor: the identity",
    "runtime/store.py:167": "g0 > 1 -> g0 >= 1: a batch loop of one trip is the single burst",
}

_BIN = {
    ast.Add: ast.Sub,
    ast.Sub: ast.Add,
    ast.Mult: ast.FloorDiv,
    ast.FloorDiv: ast.Mult,
    ast.Mod: ast.FloorDiv,
}
_CMP = {
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
}
_BOOL = {ast.And: ast.Or, ast.Or: ast.And}


@dataclass
class Mutant:
    """One mutant: the file, the node's line, what changed, and (after a run) the outcome."""

    id: str
    file: str
    line: int
    what: str
    status: str = ""  # killed, survived, timeout
    seconds: float = 0.0
    killer: str = ""


def _in_text(tree: ast.AST) -> set[int]:
    """ids of nodes inside message text (f-strings), never mutated."""
    skip: set[int] = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.JoinedStr):
            skip.update(id(m) for m in ast.walk(n))
    return skip


def _sites(tree: ast.AST) -> list[tuple[ast.AST, str, object]]:
    """(node, description, replacement spec) for every mutation site of a module."""
    skip = _in_text(tree)
    out: list[tuple[ast.AST, str, object]] = []
    for n in ast.walk(tree):
        if id(n) in skip:
            continue
        if isinstance(n, ast.BinOp) and type(n.op) in _BIN:
            out.append((n, f"{type(n.op).__name__} -> {_BIN[type(n.op)].__name__}", ("op", _BIN[type(n.op)])))
        elif isinstance(n, ast.AugAssign) and type(n.op) in _BIN:
            out.append(
                (n, f"{type(n.op).__name__}= -> {_BIN[type(n.op)].__name__}=", ("op", _BIN[type(n.op)]))
            )
        elif isinstance(n, ast.Compare) and len(n.ops) == 1 and type(n.ops[0]) in _CMP:
            out.append(
                (
                    n,
                    f"{type(n.ops[0]).__name__} -> {_CMP[type(n.ops[0])].__name__}",
                    ("cmp", _CMP[type(n.ops[0])]),
                )
            )
        elif isinstance(n, ast.BoolOp):
            out.append(
                (n, f"{type(n.op).__name__} -> {_BOOL[type(n.op)].__name__}", ("bool", _BOOL[type(n.op)]))
            )
        elif isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.Not):
            out.append((n, "drop `not`", ("not", None)))
        elif isinstance(n, ast.Constant) and type(n.value) is int:
            new = 0 if n.value == 1 else n.value + 1
            out.append((n, f"{n.value} -> {new}", ("const", new)))
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in ("min", "max"):
            other = "max" if n.func.id == "min" else "min"
            out.append((n, f"{n.func.id} -> {other}", ("call", other)))
        elif (
            isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)
            and n.func.attr == "gcd"
            and len(n.args) == 2
        ):
            out.append((n, "gcd(a, b) -> b", ("gcd", None)))
    return out


def _apply(tree: ast.Module, index: int) -> str:
    """The module text with mutation site `index` applied (on a fresh parse)."""
    node, _, (kind, arg) = _sites(tree)[index]
    if kind == "op":
        node.op = arg()  # type: ignore[attr-defined]
    elif kind == "cmp":
        node.ops = [arg()]  # type: ignore[attr-defined]
    elif kind == "bool":
        node.op = arg()  # type: ignore[attr-defined]
    elif kind == "const":
        node.value = arg  # type: ignore[attr-defined]
    elif kind == "call":
        node.func = ast.Name(arg, ast.Load())  # type: ignore[attr-defined]
    elif kind == "gcd":
        node.args = [node.args[1], node.args[1]]  # type: ignore[attr-defined]
    elif kind == "not":
        parent = next(
            p
            for p in ast.walk(tree)
            for f, v in ast.iter_fields(p)
            if v is node or (isinstance(v, list) and any(x is node for x in v))
        )
        for f, v in ast.iter_fields(parent):
            if v is node:
                setattr(parent, f, node.operand)  # type: ignore[attr-defined]
            elif isinstance(v, list):
                setattr(parent, f, [node.operand if x is node else x for x in v])  # type: ignore[attr-defined]
    return ast.unparse(ast.fix_missing_locations(tree)) + "\n"


def mutants(files: list[str]) -> list[Mutant]:
    """Every mutant of the target files, in a stable order."""
    out = []
    for f in files:
        tree = ast.parse(open(os.path.join(ROOT, f)).read())
        for i, (node, what, _) in enumerate(_sites(tree)):
            out.append(Mutant(f"{f}:{i}", f, getattr(node, "lineno", 0), what))
    return out


def mutated_text(m: Mutant) -> str:
    """The source of mutant `m`."""
    src = open(os.path.join(ROOT, m.file)).read()
    return _apply(ast.parse(src), int(m.id.rsplit(":", 1)[1]))


def _copy_repo(dst: str) -> None:
    for d in ("nzjit", "runtime", "tests", "examples"):
        shutil.copytree(
            os.path.join(ROOT, d),
            os.path.join(dst, d),
            ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".hypothesis"),
        )
    for f in ("pyproject.toml", "README.md"):
        shutil.copy(os.path.join(ROOT, f), dst)


def _run(m: Mutant, text: str | None, work: str) -> Mutant:
    path = os.path.join(work, m.file)
    original = open(path).read()
    if text is not None:
        with open(path, "w") as fh:
            fh.write(text)
    t0 = time.perf_counter()
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-x",
        "-q",
        "-p",
        "no:cacheprovider",
        "--hypothesis-seed=0",
        *TESTS[m.file],
    ]
    try:
        r = subprocess.run(cmd, cwd=work, capture_output=True, text=True, timeout=TIMEOUT)
        m.status = "survived" if r.returncode == 0 else "killed"
        failed = [ln for ln in r.stdout.splitlines() if ln.startswith(("FAILED", "ERROR"))]
        m.killer = failed[0][:200] if failed else ("" if r.returncode == 0 else r.stdout.strip()[-200:])
    except subprocess.TimeoutExpired:
        m.status, m.killer = "timeout", f"tests ran past {TIMEOUT} s"
    finally:
        with open(path, "w") as fh:
            fh.write(original)
    m.seconds = round(time.perf_counter() - t0, 1)
    return m


_WORK: str | None = None


def _worker_init() -> None:
    global _WORK
    _WORK = tempfile.mkdtemp(prefix="nzjit_mutate_")
    atexit.register(shutil.rmtree, _WORK, True)  # the worker's private copy goes with it
    _copy_repo(_WORK)


def _job(m: Mutant) -> Mutant:
    assert _WORK is not None
    return _run(m, mutated_text(m), _WORK)


def main(argv: list[str] | None = None) -> int:
    """Run the campaign and print killed / survived per file; exit 1 if the baseline fails."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", default=",".join(TESTS))
    ap.add_argument("--sample", type=int, default=0, help="mutants per file (0: all)")
    ap.add_argument("--seed", type=int, default=29)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--out", default="mutation-results.json")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--show", metavar="ID")
    ap.add_argument(
        "--ids", default="", help="comma-separated mutant ids to run (e.g. the survivors of a run)"
    )
    args = ap.parse_args(argv)
    files = args.files.split(",")
    allm = mutants(files)
    if args.show:
        m = next(x for x in allm if x.id == args.show)
        a = ast.unparse(ast.parse(open(os.path.join(ROOT, m.file)).read())).splitlines()
        print(
            "\n".join(difflib.unified_diff(a, mutated_text(m).splitlines(), m.file, m.id, lineterm="", n=2))
        )
        return 0
    chosen: list[Mutant] = []
    rnd = random.Random(args.seed)
    for f in files:
        ms = [m for m in allm if m.file == f]
        chosen += (
            sorted(rnd.sample(ms, args.sample), key=lambda m: int(m.id.rsplit(":", 1)[1]))
            if args.sample and len(ms) > args.sample
            else ms
        )
    if args.ids:
        want = set(args.ids.split(","))
        chosen = [m for m in allm if m.id in want]
    if args.list:
        for m in chosen:
            print(f"{m.id:40s} line {m.line:4d}  {m.what}")
        print(f"{len(chosen)} of {len(allm)} mutants")
        return 0
    # the unmutated (unparsed) modules must pass their subsets, else nothing is measured
    work = tempfile.mkdtemp(prefix="nzjit_mutate_base_")
    _copy_repo(work)
    for f in files:
        base = _run(
            Mutant(f"{f}:base", f, 0, "baseline"),
            ast.unparse(ast.parse(open(os.path.join(ROOT, f)).read())) + "\n",
            work,
        )
        print(f"baseline {f}: {base.status} ({base.seconds} s)", flush=True)
        if base.status != "survived":
            print(base.killer)
            return 1
    shutil.rmtree(work, ignore_errors=True)
    done: list[Mutant] = []
    with cf.ProcessPoolExecutor(args.jobs, initializer=_worker_init) as ex:
        for m in ex.map(_job, chosen):
            done.append(m)
            print(
                f"{m.status:9s} {m.id:40s} line {m.line:4d} {m.what:24s} {m.seconds:6.1f}s {m.killer[:80]}",
                flush=True,
            )
    with open(args.out, "w") as fh:
        json.dump([asdict(m) for m in done], fh, indent=1)
    for f in files:
        ms = [m for m in done if m.file == f]
        k = sum(m.status != "survived" for m in ms)
        print(f"{f}: {len(ms)} mutants, {k} killed, {len(ms) - k} survived")
    k = sum(m.status != "survived" for m in done)
    print(f"total: {len(done)} mutants, {k} killed ({100 * k / max(1, len(done)):.1f}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
