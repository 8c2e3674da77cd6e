"""A stable, readable text form of a Graph, JAX-like, keeping the kernel's variable names.

    { lambda ; x:i8[64,512] w:i8[256,512]{NZ}. let
        n0:index = mul nb 256
        t:i8[256,512]@Mat = tile.load[memory=Mat shape=(256, 512)] w 0 n0
      in () }
"""

from __future__ import annotations

from typing import Any

from .ir import Atom, Eqn, Graph, Literal, Var

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


_HIDDEN = {"arity", "body", "proofs", "memory_given", "out_type", "valid_static"}


def _eqn(e: Eqn, names: _Namer, indent: str, lines: list[str]) -> None:
    outs = " ".join(f"{names(v)}:{v.type}" for v in e.outputs)
    params = [f"{k}={_param(v)}" for k, v in e.params.items()
              if k not in _HIDDEN and v is not None and not (isinstance(v, dict | tuple | list) and not v)]
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
