"""Every public function, class and method of nzjit/ and runtime/ has a docstring.

Public: a name not starting with `_`, at module level or directly in a public class (properties,
setters and dataclasses included). Private helpers and nested functions are not checked.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("nzjit", "runtime")


def _undocumented() -> list[str]:
    missing: list[str] = []
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            tree = ast.parse(path.read_text(), filename=str(path))
            rel = path.relative_to(ROOT)
            for node in tree.body:
                if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                    continue
                if node.name.startswith("_"):
                    continue
                if ast.get_docstring(node) is None:
                    missing.append(f"{rel}:{node.lineno} {node.name}")
                if isinstance(node, ast.ClassDef):
                    for sub in node.body:
                        if (
                            isinstance(sub, ast.FunctionDef | ast.AsyncFunctionDef)
                            and not sub.name.startswith("_")
                            and ast.get_docstring(sub) is None
                        ):
                            missing.append(f"{rel}:{sub.lineno} {node.name}.{sub.name}")
    return missing


def test_every_public_function_class_and_method_has_a_docstring():
    missing = _undocumented()
    assert not missing, (
        f"{len(missing)} public functions / classes / methods of nzjit/ and runtime/ have no docstring "
        "(say what it returns or does and, where it matters, why):\n  " + "\n  ".join(missing)
    )
