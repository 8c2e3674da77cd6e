"""Structural rules of issue 21, checked on the source (function-level imports count):

* no import cycle through the backend, the drivers or the author's decorators;
* `passes/` imports only `core/` (and `errors`), never the backend, codegen or the drivers;
* no file of the backend or the drivers over 600 lines;
* nzjit uses no `_`-prefixed name of `runtime` (modules, functions, attributes of its objects).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NZJIT = ROOT / "nzjit"

#: attributes of runtime objects (TileBuf, GmView, TileWindow, geometries) that are private there
_RUNTIME_PRIVATE_ATTRS = {"_data", "_g", "_owner", "_logical", "_live", "_check_window", "_from_geometry",
                          "_make", "_trusted", "_blk", "_phys", "_inv", "_init", "_materialize", "_view4"}


def _modules() -> dict[str, Path]:
    out = {}
    for p in NZJIT.rglob("*.py"):
        rel = p.relative_to(ROOT).with_suffix("")
        name = ".".join(rel.parts)
        out[name[: -len(".__init__")] if name.endswith(".__init__") else name] = p
    return out


def _imports(mod: str, path: Path, mods: dict[str, Path]) -> set[str]:
    """Every nzjit module `mod` imports, at any depth of its code."""
    is_pkg = path.name == "__init__.py"
    base = mod.split(".") if is_pkg else mod.split(".")[:-1]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name in mods)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                pkg = base[: len(base) - (node.level - 1)]
                target = ".".join(pkg + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for a in node.names:
                full = f"{target}.{a.name}"
                if full in mods:
                    out.add(full)
                elif target in mods:
                    out.add(target)
    out.discard(mod)
    return out


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    return {m: _imports(m, p, mods) for m, p in mods.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return out


OWNED = ("nzjit.backend", "nzjit.driver", "nzjit.language.kernel", "nzjit.language.orchestration")


def test_no_import_cycle_through_the_backend_or_the_drivers():
    bad = [c for c in _cycles(_graph()) if any(m.startswith(OWNED) for m in c)]
    assert not bad, f"import cycles: {bad}"


def test_the_cycle_finder_finds_a_cycle():  # the check above can fail
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_passes_import_only_core():
    g = _graph()
    for m, deps in g.items():
        if m.startswith("nzjit.passes"):
            bad = {d for d in deps if not d.startswith(("nzjit.core", "nzjit.passes", "nzjit.errors"))}
            assert not bad, f"{m} imports {sorted(bad)}"


@pytest.mark.parametrize("package", ["backend", "driver"])
def test_no_file_over_600_lines(package):
    for p in (NZJIT / package).rglob("*.py"):
        n = len(p.read_text().splitlines())
        assert n <= 600, f"{p.relative_to(ROOT)} has {n} lines"


def _private_runtime_uses(tree: ast.AST) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "runtime":
            if any(part.startswith("_") for part in node.module.split(".")):
                found.append(f"from {node.module}")
            found += [f"from {node.module} import {a.name}" for a in node.names if a.name.startswith("_")]
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names
                      if a.name.split(".")[0] == "runtime" and any(x.startswith("_") for x in a.name.split("."))]
        elif isinstance(node, ast.Attribute):
            name = node.attr
            if name.startswith("_") and not name.startswith("__"):
                chain, v = [name], node.value
                while isinstance(v, ast.Attribute):
                    chain.append(v.attr)
                    v = v.value
                if isinstance(v, ast.Name) and v.id == "runtime" or name in _RUNTIME_PRIVATE_ATTRS:
                    if not (isinstance(v, ast.Name) and v.id == "self"):
                        found.append(".".join(reversed(chain)))
    return found


def test_nzjit_uses_no_private_runtime_name():
    bad = {}
    for p in NZJIT.rglob("*.py"):
        uses = _private_runtime_uses(ast.parse(p.read_text()))
        if uses:
            bad[str(p.relative_to(ROOT))] = uses
    assert not bad, bad


def test_the_private_name_check_can_fail():
    src = "import runtime\nfrom runtime._strided import byte_span\nx = runtime.tile._geometry\nt._owner\n"
    assert _private_runtime_uses(ast.parse(src)) == ["from runtime._strided", "tile._geometry", "_owner"]
