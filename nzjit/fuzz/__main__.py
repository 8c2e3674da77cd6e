"""`python -m nzjit.fuzz --n 10000 --seed S [--out DIR]`: run a campaign and print its report.

Exit status 1 when any program is wrong or crashes (every such program is written to DIR as a
standalone reproducer), else 0. `--show I` prints program I of the seed instead of running.
"""

from __future__ import annotations

import argparse
import contextlib
import sys

from ..progress import CountLines, Progress
from .campaign import run_campaign, summary
from .classify import classify
from .gen import FAMILIES, generate


def main(argv: list[str] | None = None) -> int:
    """The `python -m nzjit.fuzz` command line; returns 1 when a program is wrong or crashes, else 0."""
    ap = argparse.ArgumentParser(prog="python -m nzjit.fuzz", description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1000, help="number of programs (default 1000)")
    ap.add_argument("--seed", type=int, default=0, help="campaign seed (default 0)")
    ap.add_argument(
        "--out", default="nzjit-fuzz-out", help="directory for reproducers (default ./nzjit-fuzz-out)"
    )
    ap.add_argument("--jobs", type=int, default=None, help="worker processes (default: all cores)")
    ap.add_argument("--family", choices=sorted(FAMILIES), help="generate one family only")
    ap.add_argument("--exclude", default="", help="comma-separated generator tags to skip (e.g. oob)")
    ap.add_argument("--safety", type=int, default=60, help="safety probes to run too (issue 24; default 60)")
    ap.add_argument("--show", type=int, metavar="I", help="print program I's source and its classification")
    ap.add_argument(
        "--progress",
        action="store_true",
        default=None,
        help="show progress even when stderr is not a terminal (default: on a terminal only)",
    )
    args = ap.parse_args(argv)
    exclude = tuple(t for t in args.exclude.split(",") if t)
    if args.show is not None:
        p = generate(args.seed, args.show, args.family, exclude)
        print(p.source)
        o = classify(p)
        print(
            f"# family {p.family}; spec expects {p.expect} {sorted(p.expect_rows)}; tags {' '.join(p.tags)}"
        )
        print(f"# classified {o.cls} {o.rule or ''} {' '.join(o.rows)} {o.error} {o.detail} {o.surprise}")
        return 1 if o.bug else 0
    with Progress(args.n, "programs", enabled=args.progress) as bar:  # progress: stderr, on a terminal
        with contextlib.redirect_stdout(CountLines(bar)) if bar.enabled else contextlib.nullcontext():
            rep = run_campaign(
                args.n,
                args.seed,
                args.jobs,
                args.out,
                exclude,
                args.family,
                progress=bar.enabled,
                safety=args.safety,
            )
    print(summary(rep))
    return 1 if rep.bugs or any(k.startswith("wrong") for k in rep.safety) else 0


if __name__ == "__main__":
    sys.exit(main())
