"""Run one generated program and classify it: equal, refused, wrong or crash.

- equal: the kernel ran and every checked output element equals the numpy reference.
- refused: `nzjit.CompileError`, `runtime.DispatchError` or a lane race found at run time
  (`runtime.races.LaneRaceError`, issue 24), counted per NZ rule and table row.
- wrong: a mismatch, or a program whose reference has no value (an out-of-bounds or negative
  window) that ran anyway. Always a bug.
- crash: any other exception (DeviceError, InternalError, KeyError, ...). Also a bug, counted
  separately: the promise allows only a value equal to the reference or a refusal.

The program is written to a file and imported, so tracing sees real source lines and the file is
the reproducer. `HardwareDefectWarning`s raised while running are recorded with the outcome.
"""

from __future__ import annotations

import importlib.util
import linecache
import os
import sys
import tempfile
import time
import traceback
import warnings
from dataclasses import dataclass, field

import runtime
from runtime.races import LaneRaceError

from ..errors import CompileError
from .gen import Program
from .rules import rows_of, rule_of

CLASSES = ("equal", "refused", "wrong", "crash")


@dataclass
class Outcome:
    """How one program behaved: its class (equal / refused / wrong / crash) and the evidence."""

    cls: str  # one of CLASSES
    rule: str | None = None  # refused: the NZ rule ("none" when the refusal names none)
    rows: tuple[str, ...] = ()  # refused: the rule-table rows (rules.py) the message matches
    error: str = ""  # refused / crash: "Type: message" (first line)
    detail: str = ""  # wrong: the mismatch; crash: the innermost frames
    warnings: tuple[str, ...] = ()
    seconds: float = 0.0
    surprise: str = ""  # where the outcome disagrees with the spec's prediction (not a failure)
    tags: tuple[str, ...] = field(default_factory=tuple)

    @property
    def bug(self) -> bool:
        """True for wrong and crash: the promise allows only a value equal to the reference or a refusal."""
        return self.cls in ("wrong", "crash")


def lowering_arguments(module: dict) -> list:
    """A generated program's inputs and zero outputs, in parameter order, from its module's
    namespace (`runpy.run_path`): shapes and dtypes are all that lowering it needs."""
    import numpy as np

    data, args = module["inputs"](), []
    for name, kind, _ in module["PARAMS"]:
        if kind == "out":
            shape, dtype, _ = module["OUTS"][name]
            args.append(np.zeros(shape, dtype))
        else:
            args.append(data[name])
    return args


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"


def _load(path: str, name: str) -> object:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def run_source(source: str, name: str, workdir: str | None = None, keep: bool = False) -> Outcome:
    """Classify a program given as module text (the module defines kernel/inputs/reference and
    the harness's `execute` / `compare`)."""
    own = workdir is None
    workdir = workdir or tempfile.mkdtemp(prefix="nzjit_fuzz_")
    path = os.path.join(workdir, f"prog_{name}.py")
    with open(path, "w") as f:
        f.write(source)
    modname = f"nzjit_fuzz_prog_{name}_{os.getpid()}"
    t0 = time.perf_counter()
    caught: list[warnings.WarningMessage] = []
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", runtime.HardwareDefectWarning)
            out = _execute(path, modname)
    finally:
        sys.modules.pop(modname, None)
        linecache.cache.pop(path, None)  # tracing and diagnostics cache each program's lines
        if not keep:
            os.unlink(path)
            if own:
                os.rmdir(workdir)
    out.seconds = time.perf_counter() - t0
    out.warnings = tuple(
        str(w.message) for w in caught if issubclass(w.category, runtime.HardwareDefectWarning)
    )
    return out


def _execute(path: str, modname: str) -> Outcome:
    try:
        mod = _load(path, modname)
        got, expected, must_refuse = mod.execute()  # type: ignore[attr-defined]
    except (CompileError, runtime.DispatchError, LaneRaceError) as e:
        rule = rule_of(e)
        out = Outcome("refused", rule, rows_of(rule, str(e)), _first_line(e))
        if isinstance(e, LaneRaceError):
            out.detail = _reference_race(mod)
        return out
    except Exception as e:  # anything else is a crash: the promise allows only equal or refused
        tb = traceback.extract_tb(e.__traceback__)
        frames = " <- ".join(f"{os.path.basename(f.filename)}:{f.lineno}" for f in reversed(tb[-4:]))
        return Outcome("crash", error=_first_line(e), detail=frames)
    if must_refuse is not None:
        return Outcome("wrong", detail=f"accepted a program whose reference refuses it: {must_refuse}")
    bad = mod.compare(got, expected)  # type: ignore[attr-defined]
    if bad:
        return Outcome("wrong", detail="; ".join(bad))
    return Outcome("equal")


def _reference_race(mod: object) -> str:
    """After a run-time lane race: does the reference see it too? Its `lanes` loops record what
    every lane touches (harness.py); the windows depend on the inputs only, not on the values."""
    import numpy as np

    try:
        outs = {n: np.zeros(shape) for n, (shape, _dt, _nz) in mod.OUTS.items()}  # type: ignore[attr-defined]
        mod.reference(mod.inputs(), outs)  # type: ignore[attr-defined]
    except Exception as e:
        if "lane race" in str(e):
            return "the reference races too"
        return f"the reference fails otherwise: {type(e).__name__}"
    return "the reference has no lane race"


def surprise(p: Program, o: Outcome) -> str:
    """Where the outcome disagrees with what the spec predicts (reported, not a failure)."""
    if o.rule == "lane-race" and o.cls == "refused" and o.detail:  # decided by the reference's lanes
        return "" if o.detail == "the reference races too" else f"refused a lane race: {o.detail}"
    if p.expect == "ok" and o.cls == "refused":
        return f"spec accepts, refused by {o.rule}"
    if p.expect == "refuse" and o.cls == "equal":
        return f"spec refuses ({'/'.join(sorted(p.expect_rows))}), accepted"
    if p.expect == "refuse" and o.cls == "refused" and not set(o.rows) & p.expect_rows and not p.partial:
        return f"spec refuses by {'/'.join(sorted(p.expect_rows))}, refused by {o.rule} {'/'.join(o.rows) or '(no row)'}"
    return ""


def classify(p: Program, workdir: str | None = None, keep: bool = False) -> Outcome:
    """Run program `p` and classify it (see the module docstring)."""
    o = run_source(p.source, p.name, workdir, keep)
    o.surprise = surprise(p, o)
    o.tags = p.tags
    return o
