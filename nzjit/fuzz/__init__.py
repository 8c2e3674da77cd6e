"""nzjit.fuzz: a randomized campaign over NZ programs and runtime inputs ("never silently wrong").

Every generated program must either equal its numpy reference or be refused (`nzjit.CompileError`
or `runtime.DispatchError`); a mismatch is "wrong" and any other exception a "crash": both are
bugs, and each is written out as a standalone reproducer.

    python -m nzjit.fuzz --n 10000 --seed S [--out DIR] [--jobs J] [--exclude TAG,...]
    python -m nzjit.fuzz --seed S --show I          # print program I and classify it

Modules: `expr` (offset expressions and the spec's NZ-16 facts), `gen` (program families, source
text), `harness` (the checking half of every program file), `classify` (run + classify),
`rules` (the §7 and NZ-21 rule tables, per row), `repro` (reproducer files), `campaign`
(parallel runs and the report).
"""

from .campaign import Report, run_campaign, summary
from .classify import Outcome, classify, run_source
from .gen import Program, generate

__all__ = ["Program", "generate", "Outcome", "classify", "run_source", "Report", "run_campaign", "summary"]
