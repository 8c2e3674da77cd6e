"""The op reference, generated from the primitive table (nzjit.core.primitives): every registered
primitive, the `pl` spellings that build it, the operand kinds, memories and dtypes its type rule
accepts (found by calling the rule on probe operands, so an op added to the table appears with no
edit here), and the refusals its rule can raise (read from the rule's source). Writes docs/ops.md:

    python docs/op_reference.py            # rewrite docs/ops.md
    python docs/op_reference.py --check    # exit 1 if docs/ops.md is not what it would write
"""

from __future__ import annotations

import ast
import inspect
import itertools
import re
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "ops.md"
SHAPE = (32, 32)
INDEX_GROUPS = {"offsets": 2, "valid": 0}  # operand groups of index scalars: how many a rank-2 probe takes
UNPROBED_GROUPS = {"bounds", "captured", "carries", "body"}  # loops: their body decides


def _modules() -> tuple[Any, Any, Any, Any]:
    import nzjit.pl  # noqa: F401 - registers every primitive the language builds
    from nzjit.core import dtypes as dt
    from nzjit.core import primitives as P
    from nzjit.core import types as T

    return nzjit.pl, dt, P, T


def _dtypes() -> list[Any]:
    """The dtypes a probe tries: the ones the A2/A3 cube and vector units compute in."""
    _, dt, _, _ = _modules()
    return [dt.INT8, dt.UINT8, dt.INT16, dt.INT32, dt.FP16, dt.BF16, dt.FP32]


def probe_operands() -> list[tuple[str, Any]]:
    """(label, type) of every operand kind a probe tries, in FP32: a tile in each memory, a tensor in
    each layout, a window (an ND `pld.DistributedTensor`), a scalar."""
    _, dt, _, T = _modules()
    out: list[tuple[str, Any]] = []
    out += [(f"tile@{m.value}", T.TileType(SHAPE, dt.FP32, m)) for m in T.Mem]
    out += [(f"tensor {lay.value}", T.TensorType(SHAPE, dt.FP32, lay)) for lay in T.Layout]
    out.append(("scalar", T.ScalarType(dt.FP32)))
    from nzjit.prims import DistributedTensorType

    out.append(("window", DistributedTensorType(SHAPE, dt.FP32, T.Layout.ND)))  # pld.DistributedTensor
    return out


def _with_dtype(t: Any, d: Any) -> Any:
    return type(t)(**{**{f: getattr(t, f) for f in t.__dataclass_fields__}, "dtype": d})


def _kwargs(rule: Callable[..., Any], groups: tuple[str, ...]) -> dict[str, Any] | None:
    """Keyword arguments for the rule's required parameters, or None when one cannot be guessed."""
    _, dt, _, T = _modules()
    known = {
        "shape": SHAPE,
        "memory": T.Mem.Vec,
        "dtype": dt.FP32,
        "arity": tuple(INDEX_GROUPS.get(g, 1) for g in groups),
    }
    kw: dict[str, Any] = {}
    for p in inspect.signature(rule).parameters.values():
        if p.kind is not p.KEYWORD_ONLY or p.default is not p.empty:
            continue
        if p.name not in known:
            return None
        kw[p.name] = known[p.name]
    if "arity" in inspect.signature(rule).parameters:
        kw.setdefault("arity", known["arity"])
    return kw


def probe(prim: Any) -> dict[str, Any] | None:
    """What the type rule accepts: per operand position the kinds, and the dtype signatures
    (operand dtypes -> result). None for a primitive the probe cannot call (a loop, a rule that
    needs a parameter the probe does not know)."""
    _, dt, _, T = _modules()
    if UNPROBED_GROUPS & set(prim.groups):
        return None
    kw = _kwargs(prim.type_rule, prim.groups)
    if kw is None:
        return None
    data = [g for g in prim.groups if g not in INDEX_GROUPS]
    index = [T.ScalarType(dt.INDEX)] * sum(INDEX_GROUPS.get(g, 0) for g in prim.groups)
    cands = probe_operands()
    kinds: list[set[str]] = [set() for _ in data]
    sigs: set[str] = set()
    # every kind combination with one dtype for all operands; an accumulator operand (group `acc`)
    # also in each accumulator dtype against the others' dtype
    dtype_combos = [[d] * len(data) for d in _dtypes()]
    dtype_combos += [
        [a if g == "acc" else d for g in data]
        for d in _dtypes()
        for a in (dt.INT32, dt.FP32)
        if "acc" in data and a is not d
    ]
    for combo in itertools.product(cands, repeat=len(data)):
        for dts in dtype_combos:
            typed = [_with_dtype(t, d) for (_, t), d in zip(combo, dts)]
            ops = _assemble(prim.groups, typed, index)
            try:
                res = prim.type_rule(*ops, **kw)
            except Exception:  # noqa: BLE001 - a refusal of the probe: not accepted
                continue
            for i, (label, _) in enumerate(combo):
                kinds[i].add(label)
            ins = " x ".join(t.dtype.short for t in typed)
            outs = ", ".join(getattr(getattr(r, "dtype", None), "short", "?") for r in res)
            sigs.add(f"{ins} -> {outs}" if ins else f"-> {outs}")
    return {"operands": list(zip(data, kinds)), "signatures": sorted(sigs)}


def _assemble(groups: tuple[str, ...], data: list[Any], index: list[Any]) -> list[Any]:
    out, d, i = [], iter(data), iter(index)
    for g in groups:
        if g in INDEX_GROUPS:
            out += [next(i) for _ in range(INDEX_GROUPS[g])]
        else:
            out.append(next(d))
    return out


def _summary(kinds: set[str]) -> str:
    if not kinds:
        return "nothing"
    mems = sorted(k.removeprefix("tile@") for k in kinds if k.startswith("tile@"))
    parts = []
    if mems:
        parts.append("tile in " + ", ".join(mems))
    tens = sorted(k.removeprefix("tensor ") for k in kinds if k.startswith("tensor "))
    if tens:
        parts.append("tensor " + "/".join(tens))
    if "window" in kinds:
        parts.append("window (`pld.DistributedTensor`)")
    if "scalar" in kinds:
        parts.append("scalar")
    return "; ".join(parts)


# ------------------------------------------------------------------------------ refusals, spellings
def _called_functions(
    fn: Callable[..., Any], module: Any, seen: set[Any], bindings: dict[str, str] | None = None
) -> Iterator[tuple[Callable[..., Any], dict[str, str]]]:
    """`fn` and the module-level functions of `module` it calls, transitively, each with the string
    constants its parameters are called with (`_tile(t, "pl.matmul")` binds `what`)."""
    bindings = bindings or {}
    key = (fn.__name__, tuple(sorted(bindings.items())))
    if key in seen:
        return
    seen.add(key)
    yield fn, bindings
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            callee = getattr(module, node.func.id, None)
            if inspect.isfunction(callee) and callee.__module__ == module.__name__:
                yield from _called_functions(callee, module, seen, _bind(callee, node, bindings))
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.attr == "type_rule":
            other = getattr(module, node.value.id, None)
            if other is not None and hasattr(other, "type_rule"):
                yield from _called_functions(other.type_rule, module, seen)


def _bind(callee: Callable[..., Any], call: ast.Call, outer: dict[str, str]) -> dict[str, str]:
    """The callee's parameters that this call passes a known string (a literal, or an outer binding)."""

    def value(a: ast.expr) -> str | None:
        if isinstance(a, ast.Constant) and isinstance(a.value, str):
            return a.value
        return outer.get(a.id) if isinstance(a, ast.Name) else None

    names = list(inspect.signature(callee).parameters)
    out = {
        n: v
        for n, a in zip(names, call.args)
        if not isinstance(a, ast.Starred) and (v := value(a)) is not None
    }
    out.update({k.arg: v for k in call.keywords if k.arg is not None and (v := value(k.value)) is not None})
    return out


def _message(node: ast.expr) -> str | None:
    """The text of a message argument: a string, an f-string (its fields as `{...}`), a concatenation."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(
            str(v.value)
            if isinstance(v, ast.Constant)
            else "{" + ast.unparse(v.value) + "}"
            if isinstance(v, ast.FormattedValue)
            else ""
            for v in node.values
        )
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        a, b = _message(node.left), _message(node.right)
        return None if a is None or b is None else a + b
    return None


def refusals(prim: Any) -> list[str]:
    """The messages the type rule (and the helpers it calls) can refuse with, fields as `{...}`."""
    _, _, P, _ = _modules()
    out: list[str] = []
    for fn, bound in _called_functions(prim.type_rule, P, set()):
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
        except (OSError, TypeError, SyntaxError):
            continue
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("_fail", "CompileError")
                and node.args
            ):
                msg = _message(node.args[0])
                for name, text in bound.items():
                    msg = msg.replace("{" + name + "}", text) if msg else msg
                if msg and msg not in out:
                    out.append(msg)
    return out


#: How a kernel writes the scalar primitives: Python operators on traced scalars.
OPERATORS = {
    "cond": "if",  # a one-armed `if` on a traced BOOL (language/branch.py)
    "add": "+",
    "sub": "-",
    "mul": "*",
    "floordiv": "//",
    "mod": "%",
    "lt": "<",
    "le": "<=",
    "gt": ">",
    "ge": ">=",
    "eq": "==",
    "ne": "!=",
}


def spellings() -> dict[str, list[str]]:
    """primitive name -> the `pl` names whose source builds it (`P.<attr>`), else `pl.<its last name
    component>` when pl has that name."""
    pl, _, P, _ = _modules()
    attr_of = {id(v): k for k, v in vars(P).items() if hasattr(v, "type_rule") and hasattr(v, "groups")}
    names: dict[str, list[str]] = {}
    entries: list[tuple[str, Any]] = [(f"pl.{k}", v) for k, v in vars(pl).items() if not k.startswith("_")]
    for ns in ("tile", "tensor"):
        entries += [
            (f"pl.{ns}.{k}", v) for k, v in vars(getattr(pl, ns, object())).items() if not k.startswith("_")
        ]
    # pld (issue 28) binds through `nzjit.prims` (its `P`): its names, with that module's attributes
    import nzjit.pld as pld
    import nzjit.prims as prims

    attr_of.update(
        {id(v): k for k, v in vars(prims).items() if hasattr(v, "type_rule") and hasattr(v, "groups")}
    )
    entries += [(f"pld.{k}", getattr(pld, k)) for k in pld.__all__]
    for ns in ("system", "tensor", "tile"):
        entries += [(f"pld.{ns}.{k}", v) for k, v in vars(getattr(pld, ns)).items() if not k.startswith("_")]
    for label, fn in entries:
        if not callable(fn) or not inspect.isfunction(fn):
            continue
        try:
            src = inspect.getsource(fn)
        except (OSError, TypeError):
            continue
        for prim in P.all_primitives().values():
            attr = attr_of.get(id(prim))
            if attr and prim.name not in OPERATORS and re.search(rf"\bP\.{attr}\b", src):
                names.setdefault(prim.name, []).append(label)
    for prim in P.all_primitives().values():
        if prim.name in OPERATORS:  # a scalar primitive is written as a Python operator
            names[prim.name] = [OPERATORS[prim.name]]
        elif prim.name not in names and "." in prim.name:
            short = prim.name.rsplit(".", 1)[-1]
            if hasattr(pl, short) and callable(getattr(pl, short)) and not short.startswith("_"):
                names[prim.name] = [f"pl.{short}"]
    return {k: sorted(set(v)) for k, v in names.items()}


def render() -> str:
    """The text of docs/ops.md."""
    _, _, P, _ = _modules()
    prims = sorted(
        P.all_primitives().values(), key=lambda p: (p.name.count("."), p.name.split(".")[0], p.name)
    )
    spell = spellings()
    out = [
        "<!-- generated by docs/op_reference.py from nzjit.core.primitives: do not edit by hand -->",
        "",
        "# Op reference",
        "",
        "Every primitive of the IR, as the primitive table registers it. For each: the `pl` spellings that "
        "build it, what its **type rule** accepts (found by calling the rule on probe operands: a "
        f"{SHAPE[0]}x{SHAPE[1]} tile in each memory, a tensor in each layout, a window, a scalar, each in every "
        "dtype the cube and vector units compute in), and the refusals the rule can raise. The type rule is the first check; "
        "the passes refuse more (NZ windows, alignment, L0C, ...): see the [error catalogue](errors.md). "
        "`{...}` in a message is filled in with the kernel's values.",
        "",
        "| primitive | pl | operands |",
        "|---|---|---|",
    ]
    for p in prims:
        out.append(
            f"| [`{p.name}`](#{_anchor(p.name)}) | {', '.join(f'`{s}`' for s in spell.get(p.name, [])) or '-'} "
            f"| {', '.join(p.groups) or '-'} |"
        )
    for p in prims:
        doc = inspect.getdoc(p.type_rule) or ""
        out += ["", f'<a id="{_anchor(p.name)}"></a>', "", f"## `{p.name}`", ""]
        if doc:
            out += [_user_text(doc.split("\n\n")[0].replace("\n", " ")), ""]
        out.append(f"- built by: {', '.join(f'`{s}`' for s in spell.get(p.name, [])) or 'the passes only'}")
        out.append(f"- operand groups: {', '.join(f'`{g}`' for g in p.groups) or 'none'}")
        pr = probe(p)
        if pr is None:
            out.append(
                "- accepted operands: not probed (a loop, or a rule with parameters the probe cannot "
                "choose); see its refusals"
            )
        else:
            for g, kinds in pr["operands"]:
                out.append(f"- `{g}`: {_summary(kinds)}")
            sigs = pr["signatures"]
            if sigs:
                out.append(f"- dtypes: {'; '.join(f'`{s}`' for s in sigs)}")
        refs = refusals(p)
        if refs:
            out.append("- refusals:")
            out += [f"  - {r}" for r in refs]
    return "\n".join(out) + "\n"


#: Contributor notes cite the design contract by file and section (`hardware-model.md §6`), which
#: is not part of the repository: a user page says "the device" instead.
_SPEC_CITATION = re.compile(r"(?:hardware-model|nz-layout|api|design)\.md(?:\s*§[\d.]+)?:?\s*")


def _user_text(doc: str) -> str:
    return _SPEC_CITATION.sub("on the device: ", doc).replace("(on the device: ", "(on the device, ")


def _anchor(name: str) -> str:
    return "op-" + re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        if not OUT.exists() or OUT.read_text() != text:
            print(f"{OUT.relative_to(ROOT)} is stale: run python docs/op_reference.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main(sys.argv[1:]))
