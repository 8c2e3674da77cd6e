"""The graph IR, jaxpr-like.

    Atom  := Var | Literal
    Eqn   := outputs = primitive[params] inputs        (source: the kernel line that made it)
    Graph := { params ; eqns ; outputs ; attrs }

Loops are equations whose `body` param is a closed Graph with params
`[induction variable, *captured values, *carries]` and outputs `[*carries after one iteration]`
(the captured values of nested bodies are explicit operands too: closure conversion).
Equations are immutable; passes build new graphs. `str(graph)` is the graph's text form (the
printer, at the end of this file).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ..errors import Source
from .primitives import Primitive
from .types import ScalarType, Type


class Var:
    """A value with identity. `hint` is the kernel's variable name where known (for the printer)."""

    __slots__ = ("type", "hint")

    def __init__(self, type: Type, hint: str | None = None) -> None:
        self.type = type
        self.hint = hint

    def __repr__(self) -> str:
        return f"Var({self.hint or '_'}:{self.type})"


@dataclass(frozen=True)
class Literal:
    """A constant operand of a scalar type (no identity: equal values are the same literal)."""

    value: int | float | bool
    type: ScalarType

    def __repr__(self) -> str:
        return f"{self.value}"


Atom = Var | Literal


@dataclass(frozen=True, eq=False, init=False)
class Eqn:
    """`outputs = primitive[params] inputs`, made by the kernel line `source`. Immutable."""

    primitive: Primitive
    inputs: tuple[Atom, ...]
    outputs: tuple[Var, ...]
    params: dict[str, Any]
    source: Source | None = None

    def __init__(
        self,
        primitive: Primitive,
        inputs: tuple[Atom, ...],
        outputs: tuple[Var, ...],
        params: dict[str, Any],
        source: Source | None = None,
    ) -> None:
        # Writes the instance dict directly: a frozen dataclass's own __init__ calls
        # object.__setattr__ once per field (1.3 us vs 0.5 us per equation; tracing and every
        # pass build thousands). Assigning a field afterwards still raises FrozenInstanceError.
        d = self.__dict__
        d["primitive"] = primitive
        d["inputs"] = inputs
        d["outputs"] = outputs
        d["params"] = params
        d["source"] = source

    def operands(self, group: str) -> tuple[Atom, ...]:
        """The inputs of one named operand group (see Primitive.groups and params['arity'])."""
        start = 0
        for name, n in zip(self.primitive.groups, self.params["arity"]):
            if name == group:
                return self.inputs[start : start + n]
            start += n
        raise KeyError(group)

    def replace(self, **kw: Any) -> Eqn:
        """A copy of this equation with the given fields replaced."""
        d: dict[str, Any] = {
            "primitive": self.primitive,
            "inputs": self.inputs,
            "outputs": self.outputs,
            "params": self.params,
            "source": self.source,
        }
        d.update(kw)
        return Eqn(**d)


@dataclass(eq=False)
class Graph:
    """A kernel or loop body: `params`, `eqns` in program order, `outputs`, and `attrs` set by passes."""

    params: list[Var]
    eqns: list[Eqn]
    outputs: list[Atom]
    attrs: dict[str, Any] = field(default_factory=dict)
    name: str = "kernel"

    def walk(self) -> Iterator[Eqn]:
        """Every equation, nested bodies included, in program order."""
        for e in self.eqns:
            yield e
            body = e.params.get("body")
            if isinstance(body, Graph):
                yield from body.walk()

    def __str__(self) -> str:
        return print_graph(self)


def group_arity(**groups: int) -> tuple[int, ...]:
    """`params['arity']` from operand-group sizes in group order: `group_arity(src=1, offsets=2)`."""
    return tuple(groups.values())


# ------------------------------------------------------------------------------- the text form
#
# A stable, readable text form of a Graph, JAX-like, keeping the kernel's variable names.
#
#     { lambda ; x:i8[64,512] w:i8[256,512]{NZ}. let
#         n0:index = mul nb 256
#         t:i8[256,512]@Mat = tile.load[memory=Mat shape=(256, 512)] w 0 n0
#       in () }

_LETTERS = "abcdefghijklmnopqrstuvwxyz"


class _Namer:
    """Names vars by their kernel hint (n0, n0_1, ...), else a, b, c... Stable across runs."""

    def __init__(self) -> None:
        self.names: dict[Var, str] = {}
        self.used: set[str] = set()
        self.anon = 0

    def __call__(self, v: Var) -> str:
        if v in self.names:
            return self.names[v]
        base = v.hint
        if base is None:
            while True:
                n, s = self.anon, ""
                self.anon += 1
                while True:
                    s = _LETTERS[n % 26] + s
                    n = n // 26 - 1
                    if n < 0:
                        break
                if s not in self.used:
                    base = s
                    break
        name, i = base, 1
        while name in self.used:
            name, i = f"{base}_{i}", i + 1
        self.used.add(name)
        self.names[v] = name
        return name


def _atom(a: Atom, names: _Namer) -> str:
    if isinstance(a, Literal):
        return repr(a.value) if not isinstance(a.value, bool) else str(a.value)
    return names(a)


def _param(v: Any) -> str:
    if isinstance(v, dict):
        return "{" + " ".join(f"{k}={_param(x)}" for k, x in sorted(v.items())) + "}"
    if hasattr(v, "value") and hasattr(v, "name") and not isinstance(v, (int, str)):  # enums
        return str(v.value)
    if hasattr(v, "short") and hasattr(v, "bits"):  # DType
        return v.short
    return str(v)


_HIDDEN = {"arity", "body", "proofs", "memory_given", "out_type", "valid_static", "lane_log"}


def _eqn(e: Eqn, names: _Namer, indent: str, lines: list[str]) -> None:
    outs = " ".join(f"{names(v)}:{v.type}" for v in e.outputs)
    params = [
        f"{k}={_param(v)}"
        for k, v in e.params.items()
        if k not in _HIDDEN and v is not None and not (isinstance(v, dict | tuple | list) and not v)
    ]
    pstr = f"[{' '.join(params)}]" if params else ""
    ins = " ".join(_atom(a, names) for a in e.inputs)
    lhs = f"{outs} = " if outs else ""
    lines.append(f"{indent}{lhs}{e.primitive.name}{pstr} {ins}".rstrip())
    for proof in e.params.get("proofs", ()) or ():
        lines.append(f"{indent}  # {proof}")
    body = e.params.get("body")
    if isinstance(body, Graph):
        _graph(body, names, indent + "  ", lines)


def _graph(g: Graph, names: _Namer, indent: str, lines: list[str]) -> None:
    params = " ".join(f"{names(v)}:{v.type}" for v in g.params)
    lines.append(f"{indent}{{ lambda ; {params}. let")
    for e in g.eqns:
        _eqn(e, names, indent + "    ", lines)
    outs = ", ".join(_atom(a, names) for a in g.outputs)
    lines.append(f"{indent}  in ({outs}) }}")


def print_graph(g: Graph) -> str:
    """The text form of `g` (a `# name [attrs]` header, then the equations, loop bodies indented)."""
    lines: list[str] = []
    attrs = " ".join(f"{k}" if v is True else f"{k}={v}" for k, v in sorted(g.attrs.items()))
    if attrs:
        lines.append(f"# {g.name} [{attrs}]")
    _graph(g, _Namer(), "", lines)
    return "\n".join(lines)
