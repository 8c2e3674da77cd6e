"""The assembler-compat check of PTO text: `check_ptoas(text, version)` refuses what PTOAS of that
version refuses (nz-layout.md §10, NZ-6, NZ-14), and `parse_pto` / `global_tensors` read the text
back for tests and tools.

- From 0.61 an explicit layout is authoritative and an NZ view must be rank 5:
  `'pto.make_tensor_view' op user-specified layout=nz requires a rank-5 view`.
- Up to 0.60 layouts were inferred structurally, so any NZ view failed with
  `layout mismatch: user-specified layout=nz but inferred=nd`.
- Every version: a tensor's three sites agree in rank (the make_tensor_view shape arity, its
  `!pto.tensor_view` type, and each partition_view's offsets, sizes and both types), every SSA value
  is defined once and before it is used, and every typed use of a view, partition or tile buffer
  spells the type it was defined with.

Statements are one per line; a line that starts neither with a `%result`, an `op.name`, `}` nor
`return` continues the previous statement, so the multi-line form of §10 parses too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

RANK5_MESSAGE = "'pto.make_tensor_view' op user-specified layout=nz requires a rank-5 view"
INFERRED_MESSAGE = "layout mismatch: user-specified layout=nz but inferred=nd"
FIRST_AUTHORITATIVE = (0, 61)


class PtoasError(ValueError):
    """PTO text the assembler would refuse; the message is the assembler's, then where."""


_SSA = re.compile(r"%[A-Za-z0-9_$.\-]+(?:#\d+)?")
_STARTS = re.compile(r"^\s*(%|[A-Za-z_][\w]*\.[\w.]+\b|\}|return\b|module\b)")
_RESULTS = re.compile(r"^\s*(%[^=]*?)\s*=\s*([A-Za-z_][\w.]*)")


@dataclass
class Statement:
    """One operation: `results = op ...`, with the line it starts on."""

    line: int
    text: str
    op: str
    results: list[str] = field(default_factory=list)

    def list_field(self, name: str) -> list[str]:
        """The items of `name = [a, b, ...]` (e.g. offsets, sizes, shape, strides)."""
        m = re.search(rf"\b{name}\s*=\s*\[([^\]]*)\]", self.text)
        if m is None:
            raise PtoasError(f"'{self.op}' op expects '{name} = [...]' (line {self.line})")
        return [x.strip() for x in m.group(1).split(",") if x.strip()]

    @property
    def operands(self) -> list[str]:
        """Every SSA value this statement reads, in order (its own definitions excluded)."""
        own = set(self.results) | set(block_args(self))
        return [u for u in (_strip(x) for x in _SSA.findall(_uses_text(self))) if u not in own]


def _strip(name: str) -> str:
    return name.split("#", 1)[0]


def _uses_text(s: Statement) -> str:
    text = s.text
    if s.results:
        text = text.split("=", 1)[1]
    if s.op == "func.func":
        return ""
    return re.sub(r"scf\.for\s+%[\w$.\-]+\s*=", "scf.for", text)


def block_args(s: Statement) -> list[str]:
    """Values a statement defines for its region: the induction variable, iter_args, func args."""
    if s.op == "func.func":
        return _SSA.findall(s.text.split("(", 1)[1].rsplit(")", 1)[0])
    if s.op == "scf.for":
        iv = re.search(r"scf\.for\s+(%[\w$.\-]+)\s*=", s.text)
        iters = (
            re.findall(r"(%[\w$.\-]+)\s*=\s*%", s.text.split("iter_args", 1)[1])
            if "iter_args" in s.text
            else []
        )
        return ([iv.group(1)] if iv else []) + iters
    return []


def parse_pto(text: str) -> list[Statement]:
    """The statements of PTO text, comments dropped, continuation lines joined."""
    out: list[Statement] = []
    for no, raw in enumerate(text.splitlines(), 1):
        line = raw.split("//", 1)[0].rstrip()
        if not line.strip():
            continue
        if out and not _STARTS.match(line):
            out[-1].text += " " + line.strip()
            continue
        out.append(Statement(no, line.strip(), ""))
    for s in out:
        m = _RESULTS.match(s.text)
        if m:
            s.results = [r.strip().split(":", 1)[0] for r in m.group(1).split(",")]
            s.op = m.group(2)
        else:
            s.op = s.text.split()[0]
    return out


def ssa_defs(text: str) -> dict[str, Statement]:
    """Each SSA name -> the statement that defines it (a block argument maps to its loop/func)."""
    defs: dict[str, Statement] = {}
    for s in parse_pto(text):
        for name in s.results + block_args(s):
            defs[name] = s
    return defs


# ================================================================================ the check
def version_tuple(version: str) -> tuple[int, ...]:
    """ "0.61" -> (0, 61): versions compare numerically, component by component."""
    try:
        return tuple(int(p) for p in version.strip().lstrip("v").split("."))
    except ValueError:
        raise ValueError(f"PTOAS version {version!r} is not of the form '0.61'") from None


@dataclass
class _View:
    stmt: Statement
    arity: int
    type_rank: int
    layout: str | None
    type: str


def _type_rank(t: str) -> int:
    """The rank of `!pto.tensor_view<?x?xi8>` / `!pto.partition_tensor_view<1x16xi8>`."""
    m = re.search(r"<([^>]*)>", t)
    return 0 if m is None else len(m.group(1).split("x")) - 1


def _view(s: Statement) -> _View:
    m = re.search(r"layout\s*=\s*#pto\.layout<(\w+)>", s.text)
    t = s.text.rsplit(":", 1)[1].strip()
    return _View(s, len(s.list_field("shape")), _type_rank(t), m.group(1) if m else None, t)


def _where(s: Statement) -> str:
    return f"{', '.join(s.results) or s.op} (line {s.line})"


def _check_view(v: _View, version: tuple[int, ...]) -> None:
    s = v.stmt
    if v.arity != v.type_rank:
        raise PtoasError(
            f"'pto.make_tensor_view' op rank mismatch: shape has {v.arity} dims but the type "
            f"{v.type} has rank {v.type_rank}, at {_where(s)} (NZ-14)"
        )
    if v.layout != "nz":
        return
    if version < FIRST_AUTHORITATIVE:
        raise PtoasError(f"{INFERRED_MESSAGE}, at {_where(s)}; PTOAS >= 0.61 takes the explicit layout")
    if v.arity != 5:
        raise PtoasError(
            f"{RANK5_MESSAGE}, got rank {v.arity} at {_where(s)} (NZ-6: [B, C/c0, R/16, 16, c0])"
        )


def _check_partition(s: Statement, views: dict[str, _View]) -> str:
    """Ranks of the partition's sites against its view's; returns the partition's type."""
    src = s.operands[0] if s.operands else "?"
    v = views.get(src)
    if v is None:
        raise PtoasError(
            f"'pto.partition_view' op source {src} is not a pto.make_tensor_view, at {_where(s)}"
        )
    types = s.text.rsplit(":", 1)[1].split("->")
    if len(types) != 2:
        raise PtoasError(f"'pto.partition_view' op expects 'src type -> partition type', at {_where(s)}")
    src_t, part_t = (t.strip() for t in types)
    sites = {
        "make_tensor_view shape": v.arity,
        "its !pto.tensor_view type": v.type_rank,
        "offsets": len(s.list_field("offsets")),
        "sizes": len(s.list_field("sizes")),
        "source type": _type_rank(src_t),
        "partition type": _type_rank(part_t),
    }
    if len(set(sites.values())) != 1:
        got = ", ".join(f"{k} {n}" for k, n in sites.items())
        raise PtoasError(
            f"'pto.partition_view' op rank mismatch between the sites of {src}: {got}, at "
            f"{_where(s)} (NZ-14: all derive from the tensor type's shape)"
        )
    if src_t != v.type:
        raise PtoasError(
            f"'pto.partition_view' op source type {src_t} differs from {src}'s {v.type}, at {_where(s)}"
        )
    return part_t


def _check_ssa(stmts: list[Statement]) -> None:
    defined: set[str] = set()
    for s in stmts:
        if s.op == "func.func":
            defined = set()  # a function's values are its own (a mixed kernel is two functions)
        for u in s.operands:
            if u not in defined:
                raise PtoasError(f"use of undefined value '{u}', at {_where(s)}")
        for d in s.results + block_args(s):
            if d in defined:
                raise PtoasError(f"redefinition of SSA value '{d}', at {_where(s)}")
            defined.add(d)


def _split_top(s: str) -> list[str]:
    """Split on commas outside <...>."""
    out, depth, cur = [], 0, ""
    for ch in s:
        depth += ch == "<"
        depth -= ch == ">"
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    return out + [cur.strip()] if cur.strip() else out


def _typed_uses(s: Statement) -> list[tuple[str, str]]:
    """(value, spelled type) pairs of `ins(a, b : A, B)` / `outs(...)` groups."""
    pairs = []
    for group in re.findall(r"\b(?:ins|outs)\(([^()]*)\)", s.text):
        if ":" not in group:
            continue
        vals, types = group.split(":", 1)
        pairs += list(zip([v.strip() for v in vals.split(",")], _split_top(types)))
    return pairs


def _defined_types(s: Statement) -> dict[str, str]:
    """The types a statement gives its results (and a loop its iter_args)."""
    if s.op == "pto.alloc_tile":
        return {s.results[0]: s.text.rsplit(":", 1)[1].strip()}
    if s.op == "pto.treshape":
        return {s.results[0]: s.text.rsplit("->", 1)[1].strip()}
    if s.op == "scf.for" and "iter_args" in s.text:
        m = re.search(r"->\s*\((.*)\)\s*\{?\s*$", s.text)
        types = _split_top(m.group(1)) if m else []
        iters = block_args(s)[1:]
        return {**dict(zip(s.results, types)), **dict(zip(iters, types))}
    return {}


def check_ptoas(text: str, version: str = "0.61") -> None:
    """Raise PtoasError where PTOAS `version` would refuse `text` (module docstring)."""
    ver = version_tuple(version)
    stmts = parse_pto(text)
    _check_ssa(stmts)
    views: dict[str, _View] = {}
    types: dict[str, str] = {}
    for s in stmts:
        if s.op == "func.func":  # each function's views and tiles are its own
            views, types = {}, {}
        if s.op == "pto.make_tensor_view":
            views[s.results[0]] = v = _view(s)
            _check_view(v, ver)
        elif s.op == "pto.partition_view":
            types[s.results[0]] = _check_partition(s, views)
        types.update(_defined_types(s))
        for name, spelled in _typed_uses(s):
            want = types.get(name)
            if want is not None and spelled != want:
                raise PtoasError(
                    f"'{s.op}' op operand {name} is used as {spelled} but defined as {want}, at {_where(s)}"
                )


# ================================================================================ read back
_C_TYPES = {
    "i8": "int8_t",
    "ui8": "uint8_t",
    "i16": "int16_t",
    "ui16": "uint16_t",
    "i32": "int32_t",
    "ui32": "uint32_t",
    "i64": "int64_t",
    "f16": "half",
    "bf16": "bfloat16_t",
    "f32": "float",
    "f8E4M3FN": "float8_e4m3_t",
    "f8E5M2": "float8_e5m2_t",
}


def global_tensors(text: str) -> list[str]:
    """What the assembler (>= 0.61) builds for each tload / tstore partition, in text order:
    `GlobalTensor<int8_t, Shape<1,16,16,16,32>, Stride<131072,8192,512,32,1>, Layout::NZ>`.
    A dynamic extent prints `?`."""
    defs = ssa_defs(text)
    out = []
    for s in parse_pto(text):
        if s.op not in ("pto.tload", "pto.tstore"):
            continue
        for name, _ in _typed_uses(s):
            part = defs.get(name)
            if part is not None and part.op == "pto.partition_view":
                out.append(_global_tensor(part, defs))
    return out


def _global_tensor(part: Statement, defs: dict[str, Statement]) -> str:
    view = defs[part.operands[0]]
    dtype = re.search(r"x([\w]+)>\s*$", view.text).group(1)  # type: ignore[union-attr]
    layout = re.search(r"#pto\.layout<(\w+)>", view.text)
    shape = ",".join(_const(x, defs) for x in part.list_field("sizes"))
    strides = ",".join(_const(x, defs) for x in view.list_field("strides"))
    lay = (layout.group(1) if layout else "nd").upper()
    return f"GlobalTensor<{_C_TYPES.get(dtype, dtype)}, Shape<{shape}>, Stride<{strides}>, Layout::{lay}>"


def _const(name: str, defs: dict[str, Statement]) -> str:
    s = defs.get(name)
    m = re.match(r".*arith\.constant\s+(-?\d+)", s.text) if s is not None else None
    return m.group(1) if m else "?"
