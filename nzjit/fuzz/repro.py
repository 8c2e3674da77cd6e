"""Reproducer files: a generated program, standalone, with how it was classified on top.

`DIR/wrong_<seed>_<i>.py` (and `crash_<seed>_<i>.py`) is the program module itself (kernel,
inputs, reference, harness): `python DIR/wrong_<seed>_<i>.py` runs it with plain Python and fails
on the assertion against the numpy reference (or with the crash).
"""

from __future__ import annotations

import os

from .classify import Outcome
from .gen import Program


def reproducer_text(p: Program, o: Outcome) -> str:
    """The standalone reproducer of `p`: a comment header (classification, how to regenerate, error) and the
    program source."""
    head = [
        f"# nzjit.fuzz reproducer: program {p.name}, family {p.family}, classified {o.cls.upper()}",
        f"# regenerate with: python -m nzjit.fuzz --seed {p.seed} --show {p.index}",
    ]
    for label, text in (("error", o.error), ("detail", o.detail), ("defect warnings", "; ".join(o.warnings))):
        if text:
            head.append(f"# {label}: {text[:400]}")
    head.append("# run: python this_file.py  (asserts the numpy reference)")
    return "\n".join(head) + "\n" + p.source


def write_reproducer(p: Program, o: Outcome, out_dir: str) -> str:
    """Write the program as `<out_dir>/<class>_<seed>_<index>.py`; return the path."""
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, f"{o.cls}_{p.seed}_{p.index}.py")
    with open(path, "w") as f:
        f.write(reproducer_text(p, o))
    return path
