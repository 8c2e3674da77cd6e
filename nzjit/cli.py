"""The `nzjit` command line: run a kernel file's demo, print its IR or PTO, explain an NZ layout.

    nzjit run FILE [ARGS...]                      the file's `__main__` block, else its main()
    nzjit ir FILE [--kernel NAME|EXPR] [--after PASS | --all | --memory]   (NAME may be an orchestration)
    nzjit pto FILE [--kernel NAME|EXPR]
    nzjit --version
    nzjit explain-layout SHAPE DTYPE [--at R,C] [--svg OUT.svg]

Exit status: 0 success; 1 a CompileError (rendered by nzjit.diagnostics, no traceback), a
refused layout, or an exception in the user's code (traceback without nzjit frames); 2 bad
usage; 70 an nzjit InternalError (full traceback: it is a compiler bug).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import difflib
import inspect
import os
import runpy
import sys
from collections.abc import Iterator, Sequence
from typing import Any

from . import __version__, diagnostics
from .driver.program_text import program_text
from .errors import CompileError, InternalError
from .language.kernel import Kernel
from .language.orchestration import Orchestration

__all__ = [
    "main",
    "build_parser",
    "load_namespace",
    "find_kernels",
    "ir_text",
    "ir_sequence",
    "kernel_from_expression",
]

EXIT_COMPILE_ERROR = 1
EXIT_USAGE = 2
EXIT_INTERNAL = 70  # EX_SOFTWARE: an internal software error
INSPECT_RUN_NAME = "__nzjit_inspect__"


class UsageError(Exception):
    """A mistake in the command line (missing file, unknown kernel or pass): exit status 2."""


class CommandError(Exception):
    """A refusal that is not a compile error (bad layout, no codegen): exit status 1."""


# ---------------------------------------------------------------------------------- loading files
@contextlib.contextmanager
def _script_context(path: str, argv: Sequence[str]) -> Iterator[None]:
    """What `python FILE` gives a script: its folder first on sys.path, and sys.argv."""
    old_argv, folder = sys.argv, os.path.dirname(os.path.abspath(path))
    sys.argv = [path, *argv]
    sys.path.insert(0, folder)
    try:
        yield
    finally:
        sys.argv = old_argv
        with contextlib.suppress(ValueError):
            sys.path.remove(folder)


def _check_file(path: str) -> None:
    if not os.path.isfile(path):
        raise UsageError(f"no such file: {path}")


def has_main_block(path: str) -> bool:
    """Whether the file has a module-level `if __name__ == "__main__":` block."""
    with open(path, "rb") as f:
        tree = ast.parse(f.read(), filename=path)
    for node in tree.body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Compare):
            parts = [node.test.left, *node.test.comparators]
            names = {p.id for p in parts if isinstance(p, ast.Name)}
            consts = {p.value for p in parts if isinstance(p, ast.Constant)}
            if "__name__" in names and "__main__" in consts:
                return True
    return False


def load_namespace(path: str, run_name: str = INSPECT_RUN_NAME) -> dict[str, Any]:
    """Execute FILE as a module named `run_name` (not `__main__`, so its demo does not run)."""
    _check_file(path)
    with _script_context(path, []):
        return runpy.run_path(path, run_name=run_name)


def find_kernels(namespace: dict[str, Any], name: str | None = None) -> list[tuple[str, Kernel]]:
    """The module-level `nzjit.Kernel` objects as (first bound name, kernel), each once.

    With `name`, the one kernel bound to that name or whose function is called that.
    """
    names: dict[int, list[str]] = {}
    found: list[tuple[str, Kernel]] = []
    for key, value in namespace.items():
        if isinstance(value, Kernel):
            if id(value) not in names:
                names[id(value)] = []
                found.append((key, value))
            names[id(value)].append(key)
    if name is None:
        return found
    hits = [(k, v) for k, v in found if name in (*names[id(v)], v.__name__)]
    if not hits:
        have = ", ".join(k for k, _ in found) or "none"
        orchs = ", ".join(k for k, v in namespace.items() if isinstance(v, Orchestration))
        raise UsageError(
            f"no kernel named {name!r}; kernels in this file: {have}"
            + (f"; orchestrations: {orchs}" if orchs else "")
        )
    return hits[:1]


def kernel_from_expression(namespace: dict[str, Any], expr: str) -> tuple[str, Kernel]:
    """The kernel an expression over FILE's names gives, e.g. a factory call ``make(pl.INT8)``.
    FILE has run already, so evaluating one of its own calls trusts nothing new."""
    try:
        value = eval(compile(expr, "<--kernel>", "eval"), namespace)  # noqa: S307 - see above
    except SyntaxError as e:
        raise UsageError(f"--kernel {expr!r} is neither a name nor a Python expression: {e.msg}") from None
    except Exception as e:  # the file's own factory failed: say so, as a usage error
        raise UsageError(f"--kernel {expr!r} failed: {type(e).__name__}: {e}") from None
    if not isinstance(value, Kernel):
        raise UsageError(f"--kernel {expr!r} gave a {type(value).__name__}, not a @pl.kernel")
    return expr, value


def _kernels_of(
    path: str, name: str | None, orchestrations: list[tuple[str, Orchestration]] | None = None
) -> list[tuple[str, Kernel]]:
    """The kernels to show. `--kernel ORCH` prints the orchestration's program first and gives the
    kernels it calls; with no `--kernel`, the file's orchestrations are added to `orchestrations`
    (when given) for the caller to print after the kernels, and a file may then have no kernel."""
    namespace = load_namespace(path)
    orch = namespace.get(name) if name is not None else None
    if isinstance(orch, Orchestration):  # its program, then the kernels it calls
        text, kernels = orchestration_program(orch)
        print(text + "\n")
        return kernels
    if name is not None and not name.isidentifier():
        return [kernel_from_expression(namespace, name)]
    if name is None and orchestrations is not None:
        orchestrations.extend(find_orchestrations(namespace))
    kernels = find_kernels(namespace, name)
    if not kernels and not orchestrations:
        functions = [
            k
            for k, v in namespace.items()
            if inspect.isfunction(v) and v.__module__ == INSPECT_RUN_NAME and not k.startswith("_")
        ]
        raise UsageError(
            f"{path} defines no @pl.kernel at module level; a kernel made by a factory is "
            f"shown with --kernel and the factory call, e.g. --kernel 'make(pl.INT8)' (functions "
            f"in this file: {', '.join(functions) or 'none'})"
        )
    return kernels


# ------------------------------------------------------------------------------- orchestrations
def placeholder_arguments(orch: Orchestration) -> list[Any]:
    """Zero arrays of the annotated shapes (NZ ones packed): enough to record the program, whose
    calls depend on shapes only. A dynamic dimension has no shape to take: a usage error."""
    import numpy as np

    import runtime

    from .core.types import DynDim, Layout, TensorType

    args: list[Any] = []
    for p in orch.params:
        t = p.type
        if not isinstance(t, TensorType):
            raise UsageError(
                f"orchestration {orch.__name__} takes the scalar '{p.name}': its program depends "
                "on the value; call .record(...) with it in Python"
            )
        dyn = [d.name for d in t.shape if isinstance(d, DynDim)]
        if dyn:
            raise UsageError(
                f"orchestration {orch.__name__}: parameter '{p.name}' has the dynamic dimension "
                f"{dyn[0]}; its program depends on the extent: call .record(...) in Python"
            )
        a = np.zeros(tuple(int(d) for d in t.shape), t.dtype.np_dtype)  # type: ignore[arg-type]
        args.append(runtime.pack_nz(a) if t.layout is Layout.NZ else a)
    return args


def find_orchestrations(namespace: dict[str, Any]) -> list[tuple[str, Orchestration]]:
    """The module-level `@pl.orchestration` objects as (first bound name, orchestration), each once."""
    found: dict[int, tuple[str, Orchestration]] = {}
    for key, value in namespace.items():
        if isinstance(value, Orchestration):
            found.setdefault(id(value), (key, value))
    return list(found.values())


def orchestration_program(orch: Orchestration) -> tuple[str, list[tuple[str, Kernel]]]:
    """The program an orchestration records (driver/program_text.py), recorded with placeholder
    arguments, and its kernels (each once, in call order)."""
    prog = orch.record(*placeholder_arguments(orch))
    kernels: dict[int, tuple[str, Kernel]] = {}
    for c in sorted(prog.calls, key=lambda c: c.device):
        kernels.setdefault(id(c.kernel), (c.kernel.__name__, c.kernel))
    return program_text(prog), list(kernels.values())


# ---------------------------------------------------------------------------------------- ir
def _stages(low: Any) -> list[str]:
    return ["trace", *low.passes]


def _resolve_stage(low: Any, after: str) -> str:
    stages = _stages(low)
    for s in stages:
        if after in (s, s.lower()) or after.lower() == s.lower():
            return s
    raise UsageError(f"unknown pass {after!r}; passes are: {', '.join(stages)}")


def ir_text(low: Any, after: str | None = None) -> str:
    """The printed graph after pass `after` (default: the last pass)."""
    stage = _resolve_stage(low, after) if after else _stages(low)[-1]
    return str(low.ir(after=stage)).rstrip("\n")


def ir_sequence(low: Any) -> str:
    """The traced graph, then for every pass a unified diff of the printed IR, or `unchanged`."""
    stages = _stages(low)
    texts = [str(low.ir(after=s)).rstrip("\n") for s in stages]
    out = ["=== trace ===", texts[0]]
    for i in range(1, len(stages)):
        prev, cur = texts[i - 1], texts[i]
        if prev == cur:
            out.append(f"=== {stages[i]}: unchanged ===")
            continue
        diff = difflib.unified_diff(
            prev.splitlines(), cur.splitlines(), fromfile=stages[i - 1], tofile=stages[i], lineterm=""
        )
        out.append(f"=== {stages[i]}: changed ===")
        out.extend(diff)
    return "\n".join(out)


def _print_per_kernel(kernels: list[tuple[str, Kernel]], render: Any) -> None:
    for i, (name, k) in enumerate(kernels):
        if len(kernels) > 1:
            print(("\n" if i else "") + f"# kernel {name}")
        print(render(k.lower()))


def cmd_ir(args: argparse.Namespace) -> int:
    """`nzjit ir`: print a kernel's graph after a pass, or the whole pass sequence; without
    `--kernel`, then the program of each `@pl.orchestration` of the file."""
    orchestrations: list[tuple[str, Orchestration]] = []
    kernels = _kernels_of(args.file, args.kernel, orchestrations)
    if args.validate:  # translation validation (nzjit/verify/translation.py): 1 when an access fails
        from .verify import VerifyUnavailable

        try:
            results = [k.lower().validate() for _, k in kernels]
        except VerifyUnavailable as err:
            raise CommandError(str(err)) from None
        print("\n\n".join(str(v) for v in results))
        return 0 if all(v.ok for v in results) else 1
    if args.all:
        _print_per_kernel(kernels, ir_sequence)
    elif args.memory:  # issue 23: the compile-time on-chip memory plan
        _print_per_kernel(kernels, lambda low: str(low.memory()))
    else:
        _print_per_kernel(kernels, lambda low: ir_text(low, args.after))
    for i, (_, orch) in enumerate(orchestrations):
        print(("\n" if kernels or i else "") + orchestration_program(orch)[0])
    return 0


def cmd_pto(args: argparse.Namespace) -> int:
    """`nzjit pto`: print the emitted PTO text of a kernel."""
    kernels = _kernels_of(args.file, args.kernel)

    def pto(low: Any) -> str:
        try:
            return str(low.pto()).rstrip("\n")
        except ModuleNotFoundError as e:
            if e.name and e.name.startswith(__package__ + ".codegen"):
                raise CommandError(
                    f"PTO codegen is not available in this build ({e.name} is missing); "
                    "`nzjit ir` shows the lowered graph"
                ) from None
            raise

    _print_per_kernel(kernels, pto)
    return 0


# ---------------------------------------------------------------------------------------- run
def cmd_run(args: argparse.Namespace) -> int:
    """`nzjit run`: the file's `if __name__ == "__main__"` block, else its `main()` function."""
    _check_file(args.file)
    if has_main_block(args.file):
        with _script_context(args.file, args.args):
            runpy.run_path(args.file, run_name="__main__")
        return 0
    with _script_context(args.file, args.args):
        ns = runpy.run_path(args.file, run_name=INSPECT_RUN_NAME)
        entry = ns.get("main")
        if not callable(entry):
            raise UsageError(
                f'{args.file} has no demo: add an `if __name__ == "__main__":` block or a main() function'
            )
        result = entry()
    return result if isinstance(result, int) and not isinstance(result, bool) else 0


# --------------------------------------------------------------------------------- explain-layout
def cmd_explain_layout(args: argparse.Namespace) -> int:
    """`nzjit explain-layout`: blocked shape, strides, c0, an element's offset, pictures."""
    from . import layout_picture as lp

    try:
        shape, dtype = lp.parse_shape(args.shape), lp.parse_dtype(args.dtype)
        at = lp.parse_index(args.at) if args.at else None
    except ValueError as e:
        raise UsageError(str(e)) from None
    try:  # the NZ rules refuse the layout (NZ-4, NZ-8, NZ-33) or the element is outside it
        layout = lp.NzLayout(shape, dtype)
        sections = [lp.describe(layout)]
        if at is not None:
            sections.append(lp.describe_location(layout, at))
        sections.append(lp.ascii_picture(layout, at))
        svg = lp.svg_picture(layout, at) if args.svg else None
    except ValueError as e:
        raise CommandError(str(e)) from None
    print("\n\n".join(sections))
    if svg is not None:
        with open(args.svg, "w", encoding="utf-8") as f:
            f.write(svg)
        print(f"\nwrote {args.svg}: {layout.n_fractals} fractal rects")
    return 0


# ------------------------------------------------------------------------------------- parser
_KERNEL_HELP = (
    "the kernel to show: a name bound in FILE, or an expression over FILE's names such as a "
    "factory call, e.g. 'make(pl.INT8)'; an orchestration's name shows its program (the calls per "
    "rank), then each kernel it calls (default: every module-level kernel in FILE)"
)


def build_parser() -> argparse.ArgumentParser:
    """The argparse tree of the `nzjit` command."""
    p = argparse.ArgumentParser(
        prog="nzjit",
        description="nzjit: trace, lower and inspect Ascend PTO kernels written in Python.",
        epilog=f"Set {diagnostics.ENV_VAR}=full to see nzjit-internal frames in tracebacks.",
    )
    p.add_argument("--version", action="version", version=f"nzjit {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    r = sub.add_parser(
        "run",
        help="run a kernel file's demo",
        description='Run FILE\'s `if __name__ == "__main__":` block (as `python FILE` '
        "would), or its main() function if it has no such block.",
    )
    r.add_argument("file", metavar="FILE")
    r.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS", help="sys.argv[1:] for the demo")
    r.set_defaults(func=cmd_run)

    i = sub.add_parser(
        "ir",
        help="print a kernel's IR after a pass, an orchestration's program",
        description="Import FILE (its demo does not run), lower its @pl.kernel objects "
        "from their annotations and print the graph after a pass; then print the program each "
        "@pl.orchestration records (its calls rank by rank; --kernel NAME may name an orchestration).",
    )
    i.add_argument("file", metavar="FILE")
    i.add_argument("--kernel", metavar="NAME", help=_KERNEL_HELP)
    g = i.add_mutually_exclusive_group()
    g.add_argument(
        "--after",
        metavar="PASS",
        help="show the graph after this pass ('trace' = before any pass; default: the last)",
    )
    g.add_argument(
        "--all",
        action="store_true",
        help="show the traced graph, then what every pass changed (unified diffs)",
    )
    g.add_argument(
        "--memory",
        action="store_true",
        help="show the on-chip memory plan: peak bytes per space and the buffers live there",
    )
    g.add_argument(
        "--validate",
        action="store_true",
        help="prove every NZ access of the lowered graph with z3 (needs nzjit[verify]): a "
        "certificate per access or a counterexample; exit status 1 on a counterexample",
    )
    i.set_defaults(func=cmd_ir)

    t = sub.add_parser(
        "pto",
        help="print a kernel's emitted PTO text",
        description="Import FILE, lower its @pl.kernel objects and print their PTO text.",
    )
    t.add_argument("file", metavar="FILE")
    t.add_argument("--kernel", metavar="NAME", help=_KERNEL_HELP)
    t.set_defaults(func=cmd_pto)

    e = sub.add_parser(
        "explain-layout",
        help="explain the NZ layout of a shape and dtype",
        description="Print the NZ blocked shape [B, C/c0, R/16, 16, c0], its strides, "
        "c0, where an element lands (NZ-8) and a picture of the fractal order.",
        epilog="examples: nzjit explain-layout 256x512 int8 --at 40,70; "
        "nzjit explain-layout 4,64,64 fp16 --svg nz.svg",
    )
    e.add_argument("shape", metavar="SHAPE", help="logical shape: 256x512 or 4,256,512")
    e.add_argument("dtype", metavar="DTYPE", help="int8, fp16, bf16, fp32, ... (any case)")
    e.add_argument("--at", metavar="R,C", help="a logical element (R,C, or every coordinate: B,R,C)")
    e.add_argument("--svg", metavar="OUT.svg", help="also write an SVG with one rect per fractal")
    e.set_defaults(func=cmd_explain_layout)
    return p


def _exit_code(code: Any) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush does not fail again."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `nzjit` / `python -m nzjit`; returns the exit status (never raises SystemExit)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:
        return _exit_code(e.code)
    if getattr(args, "func", None) is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    prog = f"nzjit {args.command}"
    was_installed = sys.excepthook is diagnostics.excepthook
    diagnostics.install()
    try:
        return args.func(args)
    except CompileError as err:
        print(diagnostics.format_compile_error(err), file=sys.stderr)
        return EXIT_COMPILE_ERROR
    except InternalError as err:
        print(diagnostics.format_internal_error(err), file=sys.stderr)
        return EXIT_INTERNAL
    except UsageError as err:
        print(f"{prog}: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    except CommandError as err:
        print(f"{prog}: error: {err}", file=sys.stderr)
        return EXIT_COMPILE_ERROR
    except SystemExit as e:  # the demo called sys.exit()
        return _exit_code(e.code)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `nzjit ir ... | head`: the reader left; not an error worth a traceback
        _silence_stdout()
        return 0
    except Exception as err:  # an error in the user's file: its traceback, without nzjit frames
        print(diagnostics.format_exception(err), file=sys.stderr)
        return 1
    finally:
        try:
            sys.stdout.flush()
        except BrokenPipeError:
            _silence_stdout()
        if not was_installed:
            diagnostics.uninstall()


if __name__ == "__main__":
    sys.exit(main())
