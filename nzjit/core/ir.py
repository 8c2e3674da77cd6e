"""The graph IR, jaxpr-like.

    Atom  := Var | Literal
    Eqn   := outputs = primitive[params] inputs        (source: the kernel line that made it)
    Graph := { params ; eqns ; outputs ; attrs }

Loops are equations whose `body` param is a closed Graph with params
`[induction variable, *captured values, *carries]` and outputs `[*carries after one iteration]`
(the captured values of nested bodies are explicit operands too: closure conversion).
Equations are immutable; passes build new graphs.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ..errors import Source
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

    primitive: Any  # Primitive; Any avoids an import cycle
    inputs: tuple[Atom, ...]
    outputs: tuple[Var, ...]
    params: dict[str, Any]
    source: Source | None = None

    def __init__(self, primitive: Any, inputs: tuple[Atom, ...], outputs: tuple[Var, ...],
                 params: dict[str, Any], source: Source | None = None) -> None:
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
        d = {"primitive": self.primitive, "inputs": self.inputs, "outputs": self.outputs,
             "params": self.params, "source": self.source}
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
        from .printer import print_graph

        return print_graph(self)


def group_arity(**groups: int) -> tuple[int, ...]:
    """`params['arity']` from operand-group sizes in group order: `group_arity(src=1, offsets=2)`."""
    return tuple(groups.values())
