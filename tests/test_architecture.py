"""Guards of the architecture rules (BRIEF "Rules of the house", issue 21 item 5), read from the source
with `ast`, never by importing it:

- no import cycle among the modules of `nzjit` and `runtime` (every import counts: module level,
  function level, under `if`/`try`);
- no file over 600 lines in `nzjit/` or `runtime/`, and `nzjit/core` at most 800 lines in total;
- `nzjit` uses only the public names of `runtime` (see `private_runtime_uses` for the exact rule);
- `runtime` (the device) never imports `nzjit` (the compiler).

Each checker is a plain function over a source root so that the tests at the bottom can show it
finds a planted violation in a small synthetic tree (a checker that cannot fail guards nothing).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("nzjit", "runtime")
MAX_FILE_LINES = 600
MAX_CORE_LINES = 800


# ------------------------------------------------------------------------------------- the modules
def module_files(root: Path, packages: tuple[str, ...] = PACKAGES) -> dict[str, Path]:
    """Dotted module name -> file, for every `.py` file of `packages` under `root` (a package is its
    `__init__.py`)."""
    mods: dict[str, Path] = {}
    for pkg in packages:
        for path in sorted((root / pkg).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            mods[".".join(parts)] = path
    return mods


def _parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


@dataclass(frozen=True)
class Import:
    """One import statement's edge: `source` imports `target` at `line`."""

    source: str
    target: str
    line: int


def _absolute(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The absolute module a `from ... import` names (relative levels resolved against `module`)."""
    if not node.level:
        return node.module or ""
    base = module.split(".")
    if not is_package:
        base.pop()  # a plain module's `.` is its package
    if node.level > 1:
        base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def _imported_modules(
    module: str, is_package: bool, tree: ast.Module, known: set[str]
) -> Iterator[tuple[str, int]]:
    """(target, line) for every module of `known` that `module`'s source imports, anywhere in the
    file. `import a.b.c` imports `a.b.c`; `from a.b import c` imports `a.b.c` when that is a module,
    else `a.b` (the name comes from the package). The packages on the way (`a`, `a.b`) run too but
    are not counted as edges: every submodule would otherwise be in a cycle with its package's
    `__init__`, which says nothing about ownership."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                name = alias.name
                while name and name not in known:  # `import a.b.c` of a name inside a module
                    name = name.rpartition(".")[0]
                if name:
                    yield name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(module, is_package, node)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                if sub in known:
                    yield sub, node.lineno
                elif base in known:
                    yield base, node.lineno


def extension_modules(root: Path, packages: tuple[str, ...] = PACKAGES) -> set[str]:
    """Dotted names of compiled modules (`runtime/_lines.c` -> `runtime._lines`, and its built
    `.so`/`.pyd`): `from . import _lines` imports that module, not the package's `__init__`."""
    out = set()
    for pkg in packages:
        for path in (root / pkg).rglob("*"):
            if path.suffix in (".c", ".so", ".pyd"):
                stem = path.name.partition(".")[0]
                out.add(".".join([*path.relative_to(root).parent.parts, stem]))
    return out


def import_edges(root: Path, packages: tuple[str, ...] = PACKAGES) -> list[Import]:
    """Every import edge among the modules of `packages` under `root` (self-imports left out)."""
    mods = module_files(root, packages)
    known = set(mods) | extension_modules(root, packages)
    edges: set[Import] = set()
    for mod, path in mods.items():
        for target, line in _imported_modules(mod, path.name == "__init__.py", _parse(path), known):
            if target != mod and target in mods:
                edges.add(Import(mod, target, line))
    return sorted(edges, key=lambda e: (e.source, e.target, e.line))


def strongly_connected(nodes: set[str], succ: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components (iterative), each with more than one module, sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    comps: list[list[str]] = []
    counter = 0
    for start in sorted(nodes):
        if start in index:
            continue
        work = [(start, iter(sorted(succ.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(succ.get(w, ())))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        comps.append(sorted(comp))
    return sorted(comps)


def import_cycles(root: Path, packages: tuple[str, ...] = PACKAGES) -> list[list[Import]]:
    """The import cycles: for each strongly connected component of the import graph, the import
    edges inside it (each edge with the line that makes it)."""
    edges = import_edges(root, packages)
    succ: dict[str, set[str]] = {}
    for e in edges:
        succ.setdefault(e.source, set()).add(e.target)
    comps = strongly_connected(set(module_files(root, packages)), succ)
    return [[e for e in edges if e.source in c and e.target in c] for c in map(set, comps)]


def describe_cycles(cycles: list[list[Import]]) -> str:
    out = []
    for edges in cycles:
        mods = sorted({e.source for e in edges})
        out.append(f"cycle among {', '.join(mods)}:")
        out.extend(f"    {e.source} -> {e.target}  (line {e.line})" for e in edges)
    return "\n".join(out)


# ---------------------------------------------------------------------------------------- sizes
def line_count(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def oversized_files(
    root: Path, packages: tuple[str, ...] = PACKAGES, limit: int = MAX_FILE_LINES
) -> dict[str, int]:
    """Files (relative paths) of more than `limit` lines, with their line counts."""
    return {
        str(p.relative_to(root)): n
        for p in module_files(root, packages).values()
        if (n := line_count(p)) > limit
    }


def package_lines(root: Path, package: str) -> int:
    """All lines of the `.py` files under `root/package` (e.g. `nzjit/core`)."""
    return sum(line_count(p) for p in sorted((root / package).rglob("*.py")))


# -------------------------------------------------------------------------- runtime private names
def _is_private(name: str) -> bool:
    """`_x` is private; a dunder (`__version__`, `__name__`) is Python's, not a private name."""
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def runtime_private_attributes(root: Path) -> set[str]:
    """The private attribute names runtime's classes own: `self._x = ...` / `cls._x = ...`
    assignments, `setattr(obj, "_x", ...)` / `object.__setattr__(obj, "_x", ...)` (frozen
    dataclasses), `_x` entries of `__slots__`, and `_x` methods and class attributes (annotated
    fields included) in class bodies."""
    names: set[str] = set()
    for path in module_files(root, ("runtime",)).values():
        for node in ast.walk(_parse(path)):
            if isinstance(node, ast.ClassDef):
                for stmt in node.body:
                    if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef) and _is_private(stmt.name):
                        names.add(stmt.name)
                    targets = (
                        stmt.targets
                        if isinstance(stmt, ast.Assign)
                        else [stmt.target]
                        if isinstance(stmt, ast.AnnAssign)
                        else []
                    )
                    for t in targets:
                        if isinstance(t, ast.Name) and t.id == "__slots__" and stmt.value is not None:
                            names.update(
                                c.value
                                for c in ast.walk(stmt.value)
                                if isinstance(c, ast.Constant)
                                and isinstance(c.value, str)
                                and _is_private(c.value)
                            )
                        elif isinstance(t, ast.Name) and _is_private(t.id):
                            names.add(t.id)
            elif (
                isinstance(node, ast.Call)
                and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant)
                and isinstance(node.args[1].value, str)
                and _is_private(node.args[1].value)
                and (
                    (isinstance(node.func, ast.Name) and node.func.id == "setattr")
                    or (isinstance(node.func, ast.Attribute) and node.func.attr == "__setattr__")
                )
            ):
                names.add(node.args[1].value)
            elif (
                isinstance(node, ast.Attribute)
                and isinstance(node.ctx, ast.Store)
                and isinstance(node.value, ast.Name)
                and node.value.id in ("self", "cls")
                and _is_private(node.attr)
            ):
                names.add(node.attr)
    return names


@dataclass(frozen=True)
class PrivateUse:
    """`file:line`: what private name of runtime is used there."""

    path: str
    line: int
    what: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.what}"


def _private_in_path(dotted: str) -> str | None:
    return next((p for p in dotted.split(".") if _is_private(p)), None)


def private_runtime_uses(root: Path, client: str = "nzjit") -> list[PrivateUse]:
    """Every use of a private (`_`-prefixed, not dunder) name of `runtime` in `client`'s source:

    1. an import of a private runtime module or name: `import runtime._x`, `from runtime._x import y`,
       `from runtime import _x`, `from runtime.m import _name` (relative imports of a client never
       reach runtime, so only absolute ones are read);
    2. a private attribute of a name bound to runtime by an import in the same file:
       `runtime._strided`, `runtime.tile._geometry`, `tile._geometry` after `from runtime import
       tile`, `TileBuf._from_geometry` after `from runtime.tile import TileBuf`;
    3. a private attribute that runtime's classes own (`runtime_private_attributes`: `._data`,
       `._g`, ...) read or written on any object other than the client's own `self`/`cls`, also
       through `getattr`/`setattr`/`hasattr` with the name as a string literal. The client cannot
       know the type of `obj` in `obj._data`, so the rule is by name: a client class must not name
       its own attributes like runtime's private ones (which would make such code ambiguous to a
       reader too).
    """
    private_attrs = runtime_private_attributes(root)
    uses: list[PrivateUse] = []
    for path in module_files(root, (client,)).values():
        rel = str(path.relative_to(root))
        tree = _parse(path)
        bound: set[str] = set()  # local names bound to runtime modules or objects
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name == "runtime" or a.name.startswith("runtime."):
                        if (p := _private_in_path(a.name)) is not None:
                            uses.append(
                                PrivateUse(
                                    rel, node.lineno, f"import of private runtime module {a.name} ({p})"
                                )
                            )
                        bound.add(a.asname or a.name.partition(".")[0])
            elif (
                isinstance(node, ast.ImportFrom)
                and not node.level
                and node.module
                and (node.module == "runtime" or node.module.startswith("runtime."))
            ):
                if (p := _private_in_path(node.module)) is not None:
                    uses.append(
                        PrivateUse(rel, node.lineno, f"import from private runtime module {node.module}")
                    )
                for a in node.names:
                    if _is_private(a.name):
                        uses.append(
                            PrivateUse(rel, node.lineno, f"import of private name {node.module}.{a.name}")
                        )
                    bound.add(a.asname or a.name)
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and _is_private(node.attr):
                root_name = node.value
                while isinstance(root_name, ast.Attribute):
                    root_name = root_name.value
                owner = node.value
                if isinstance(root_name, ast.Name) and root_name.id in bound:
                    uses.append(
                        PrivateUse(rel, node.lineno, f"private attribute {ast.unparse(node)} of runtime")
                    )
                elif node.attr in private_attrs and not (
                    isinstance(owner, ast.Name) and owner.id in ("self", "cls")
                ):
                    uses.append(
                        PrivateUse(
                            rel,
                            node.lineno,
                            f"runtime's private attribute {node.attr} in {ast.unparse(node)}",
                        )
                    )
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "setattr", "hasattr", "delattr")
                and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant)
                and node.args[1].value in private_attrs
            ):
                uses.append(
                    PrivateUse(
                        rel,
                        node.lineno,
                        f"runtime's private attribute {node.args[1].value} through {node.func.id}",
                    )
                )
    return sorted(set(uses), key=lambda u: (u.path, u.line, u.what))


def device_imports_of_compiler(root: Path) -> list[Import]:
    """Imports in `runtime` of any `nzjit` module (or of `nzjit` itself)."""
    mods = module_files(root, ("runtime",))
    out = []
    for mod, path in mods.items():
        for node in ast.walk(_parse(path)):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [_absolute(mod, path.name == "__init__.py", node)]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            out.extend(Import(mod, n, node.lineno) for n in names if n == "nzjit" or n.startswith("nzjit."))
    return out


# ------------------------------------------------------------------------------ the tree's rules
def test_no_import_cycles() -> None:
    cycles = import_cycles(ROOT)
    assert not cycles, (
        "import cycles (break them by ownership, not by moving imports into functions):\n"
        + describe_cycles(cycles)
    )


def test_no_file_over_600_lines() -> None:
    big = oversized_files(ROOT)
    assert not big, f"files over {MAX_FILE_LINES} lines (split them by concern): {big}"


def test_core_is_at_most_800_lines() -> None:
    n = package_lines(ROOT, "nzjit/core")
    assert n <= MAX_CORE_LINES, (
        f"nzjit/core is {n} lines, more than {MAX_CORE_LINES}: core is the IR; "
        "primitive definitions live in nzjit/prims, passes in nzjit/passes"
    )


def test_compiler_uses_only_public_runtime_names() -> None:
    uses = private_runtime_uses(ROOT)
    assert not uses, "nzjit uses private names of runtime (make them public API of runtime):\n" + "\n".join(
        map(str, uses)
    )


def test_device_does_not_import_compiler() -> None:
    bad = device_imports_of_compiler(ROOT)
    assert not bad, f"runtime imports nzjit (the device must not depend on the compiler): {bad}"


#: What each layer of nzjit may import (besides itself, `runtime` and the standard library): the
#: passes are pure Graph -> Graph functions over the IR and the primitive definitions; the IR
#: imports nothing above it.
LAYER_IMPORTS = {
    "nzjit.core": ("nzjit.core", "nzjit.errors"),
    "nzjit.prims": ("nzjit.core", "nzjit.prims", "nzjit.errors"),
    "nzjit.passes": ("nzjit.core", "nzjit.prims", "nzjit.passes", "nzjit.errors"),
}


def layer_violations(root: Path) -> list[Import]:
    """Imports of a layer of `LAYER_IMPORTS` that reach above what the layer may use."""
    bad = []
    for e in import_edges(root):
        for layer, allowed in LAYER_IMPORTS.items():
            if (
                (e.source == layer or e.source.startswith(layer + "."))
                and e.target.startswith("nzjit")
                and not any(e.target == a or e.target.startswith(a + ".") for a in allowed)
            ):
                bad.append(e)
    return bad


def test_layers_import_only_what_is_below_them() -> None:
    bad = layer_violations(ROOT)
    assert not bad, "a layer imports above itself (passes see only core and prims):\n" + "\n".join(
        f"{e.source} -> {e.target} (line {e.line})" for e in bad
    )


# ----------------------------------------------------------------- the checkers on planted trees
def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    for pkg in PACKAGES:
        (tmp_path / pkg).mkdir(exist_ok=True)
        (tmp_path / pkg / "__init__.py").touch()
    return tmp_path


def test_checker_finds_a_cycle_through_a_function_level_relative_import(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "nzjit/core/__init__.py": "",
            "nzjit/core/ir.py": "from . import types\n\ndef show(g):\n    from .printer import pr\n    return pr(g)\n",
            "nzjit/core/printer.py": "from .ir import Graph\n",
            "nzjit/core/types.py": "",
        },
    )
    cycles = import_cycles(root)
    assert [[(e.source, e.target, e.line) for e in c] for c in cycles] == [
        [("nzjit.core.ir", "nzjit.core.printer", 4), ("nzjit.core.printer", "nzjit.core.ir", 1)]
    ]
    assert "nzjit.core.ir -> nzjit.core.printer  (line 4)" in describe_cycles(cycles)


def test_checker_resolves_parent_relative_and_package_imports(tmp_path: Path) -> None:
    # `from .. import x` from a subpackage's __init__, `from pkg import module`, `import a.b`, and a
    # three-module cycle across runtime and nzjit
    root = _tree(
        tmp_path,
        {
            "nzjit/a/__init__.py": "from .. import b\n",
            "nzjit/b.py": "import runtime.dev\n",
            "runtime/dev.py": "from nzjit import a\n",
            "nzjit/c.py": "from nzjit.a import thing\nimport nzjit.b\n",
        },
    )
    edges = {(e.source, e.target) for e in import_edges(root)}
    assert {
        ("nzjit.a", "nzjit.b"),
        ("nzjit.b", "runtime.dev"),
        ("runtime.dev", "nzjit.a"),
        ("nzjit.c", "nzjit.a"),
        ("nzjit.c", "nzjit.b"),
    } <= edges
    (cycle,) = import_cycles(root)
    assert {e.source for e in cycle} == {"nzjit.a", "nzjit.b", "runtime.dev"}
    assert [(e.source, e.target, e.line) for e in device_imports_of_compiler(root)] == [
        ("runtime.dev", "nzjit", 1)
    ]


def test_checker_accepts_a_tree_without_cycles(tmp_path: Path) -> None:
    # `from . import _lines` in runtime/nz.py imports the compiled runtime._lines, not runtime itself
    root = _tree(
        tmp_path,
        {
            "nzjit/a.py": "from . import b\n",
            "nzjit/b.py": "import runtime\n",
            "runtime/__init__.py": "from . import nz\n",
            "runtime/_lines.c": "",
            "runtime/nz.py": "try:\n    from . import _lines\nexcept ImportError:\n    pass\n",
        },
    )
    assert import_cycles(root) == []
    assert device_imports_of_compiler(root) == []


def test_checker_finds_an_oversized_file_and_core_lines(tmp_path: Path) -> None:
    root = _tree(tmp_path, {"nzjit/core/big.py": "x = 1\n" * 601, "runtime/ok.py": "x = 1\n" * 600})
    assert oversized_files(root) == {"nzjit/core/big.py": 601}
    assert package_lines(root, "nzjit/core") == 601


def test_checker_finds_every_kind_of_private_runtime_use(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "runtime/tile.py": (
                "class TileBuf:\n    __slots__ = ('_data', 'shape')\n"
                "    def __init__(self):\n        self._g = 1\n"
                "    def _from_geometry(self):\n        pass\n"
                "class Frozen:\n    _cache: int\n    def __post_init__(self):\n"
                "        object.__setattr__(self, '_frozen', 1)\n"
            ),
            "nzjit/use.py": (
                "import runtime\nfrom runtime._strided import f\nfrom runtime import _lines, tile\n"
                "from runtime.tile import TileBuf, _geometry\n\n"
                "def run(t, x):\n    runtime._strided.f()\n    tile._geometry(1)\n"
                "    TileBuf._from_geometry()\n    a = t._data\n    t._g = 2\n"
                "    getattr(x, '_data')\n    x._frozen, x._cache\n    return runtime.tile.public\n"
            ),
            "nzjit/own.py": "class C:\n    def __init__(self):\n        self._data = 1\n        self.__dict__\n",
        },
    )
    assert runtime_private_attributes(root) == {"_data", "_g", "_from_geometry", "_cache", "_frozen"}
    got = [(u.path, u.line) for u in private_runtime_uses(root)]
    assert got == [("nzjit/use.py", n) for n in (2, 3, 4, 7, 8, 9, 10, 11, 12, 13, 13)]
    # nzjit/own.py's `self._data` is its own attribute; `__dict__` is Python's: neither is a use


def test_checker_finds_a_pass_importing_the_backend(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "nzjit/passes/p.py": "from ..backend import run\n",
            "nzjit/backend/__init__.py": "",
            "nzjit/passes/__init__.py": "",
            "nzjit/core/__init__.py": "",
        },
    )
    assert [(e.source, e.target) for e in layer_violations(root)] == [("nzjit.passes.p", "nzjit.backend")]
