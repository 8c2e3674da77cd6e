"""Reading emitted PTO text back in tests: whitespace-insensitive matching, the partition view a
load reads, and a tiny interpreter of the `arith` index arithmetic (to check floor semantics)."""

from __future__ import annotations

import re

from nzjit.codegen.ptoas_check import Statement, parse_pto, ssa_defs


def normalize(text: str) -> str:
    """Collapse every run of whitespace to one space (goldens match "up to whitespace")."""
    return re.sub(r"\s+", " ", text).strip()


def golden_regex(golden: str) -> re.Pattern[str]:
    """A golden snippet as a regex: whitespace-insensitive, `...` stands for more type fields."""
    parts = [re.escape(p) for p in normalize(golden).split("...")]
    return re.compile(r"[^>]*".join(parts))


def statements(text: str, op: str) -> list[Statement]:
    return [s for s in parse_pto(text) if s.op == op]


def partition_read_by(text: str, op: str, view: str) -> list[Statement]:
    """The partition_view statements of `view` that a `pto.tload` / `pto.tstore` uses, in order."""
    defs = ssa_defs(text)
    out = []
    for s in statements(text, op):
        for name in s.operands:
            d = defs.get(name)
            if d is not None and d.op == "pto.partition_view" and d.operands[0] == view:
                out.append(d)
    return out


def _trunc_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


_BINARY = {
    "addi": lambda a, b: a + b,
    "subi": lambda a, b: a - b,
    "muli": lambda a, b: a * b,
    "floordivsi": lambda a, b: a // b,
    "remsi": lambda a, b: a - b * _trunc_div(a, b),
    "maxsi": max,
    "minsi": min,
    "andi": lambda a, b: a & b,
}
_PRED = {
    "eq": lambda a, b: a == b,
    "ne": lambda a, b: a != b,
    "slt": lambda a, b: a < b,
    "sle": lambda a, b: a <= b,
    "sgt": lambda a, b: a > b,
    "sge": lambda a, b: a >= b,
}


def evaluate(text: str, env: dict[str, int]) -> dict[str, int]:
    """Run every `arith` statement whose operands are known (MLIR semantics: remsi truncates)."""
    env = dict(env)
    for s in parse_pto(text):
        if not s.op.startswith("arith.") or not s.results:
            continue
        kind = s.op.split(".", 1)[1]
        if kind == "constant":
            m = re.search(r"constant\s+(-?\d+|true|false)\b", s.text)
            if m:
                v = m.group(1)
                env[s.results[0]] = {"true": 1, "false": 0}[v] if v in ("true", "false") else int(v)
            continue
        args = s.operands
        if any(a not in env for a in args):
            continue
        vals = [env[a] for a in args]
        if kind in _BINARY:
            env[s.results[0]] = int(_BINARY[kind](*vals))
        elif kind == "cmpi":
            pred = re.search(r"cmpi\s+(\w+)", s.text).group(1)
            env[s.results[0]] = int(_PRED[pred](*vals))
        elif kind == "select":
            env[s.results[0]] = vals[1] if vals[0] else vals[2]
    return env
