"""Print the README's rule map: for each rule NZ-n of nz-layout.md, where it is implemented and
where it is tested (files that cite it). Run: python docs/rule_map.py > /tmp/map.md"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SUMMARY = {
    1: "NZ annotation = GM byte order", 2: "logical shapes and slices", 3: "NZ->NZ weight load",
    4: "c0 per dtype", 5: "blocked form", 6: "always rank 5", 7: "row-major strides are NZ strides",
    8: "element offset / packer", 9: "pipeline order", 10: "NZ source window kept whole",
    11: "phase 1: types", 12: "phase 2: loads", 13: "tile type stays logical", 14: "no logical NZ after the pass",
    15: "idempotence mark", 16: "symbolic offsets proven", 17: "floordiv of the value, wrap",
    18: "sign proven (clamp)", 19: "floor semantics", 20: "Acc store into NZ", 21: "store support table",
    22: "N-only split of NZ stores", 23: "full rows (dstStride)", 24: "panels on the batch axis",
    25: "GM row-gap guard", 26: "gap measured on valid_shape", 27: "single column block exempt",
    28: "leading axes folded", 29: "dynamic batch, rank-3 arguments", 30: "slices of leading axes",
    31: "whole-tensor flatten", 32: "entry reshape to blocked", 33: "sub-byte dtypes refused",
    34: "alignment errors vs internal errors",
}


def cites(folder: str, n: int) -> list[str]:
    pat = re.compile(rf"NZ-{n}(?!\d)")
    return sorted(str(p.relative_to(ROOT)) for p in (ROOT / folder).rglob("*.py") if pat.search(p.read_text()))


def main() -> None:
    print("| rule | what | implemented in | tested in |")
    print("|---|---|---|---|")
    for n, what in SUMMARY.items():
        code = [c.removeprefix("nzjit/") for c in cites("nzjit", n) + cites("runtime", n)
                if "fuzz" not in c]
        tests = [t.removeprefix("tests/") for t in cites("tests", n)]
        short = lambda xs: ", ".join(f"`{x}`" for x in xs[:4]) + (f" +{len(xs) - 4}" if len(xs) > 4 else "")
        print(f"| NZ-{n} | {what} | {short(code)} | {short(tests)} |")


if __name__ == "__main__":
    main()
