"""The error catalogue: for every rule nzjit refuses by, a kernel that breaks it, the message nzjit
gives (obtained by running the kernel, never typed in), the fix, and the fixed kernel (which must
compile). Writes docs/errors.md:

    python docs/error_catalogue.py            # rewrite docs/errors.md
    python docs/error_catalogue.py --check    # exit 1 if docs/errors.md is not what it would write

tests/test_docs_generated.py runs the check, and fails when a rule id raised in nzjit/ has no entry.
"""

from __future__ import annotations

import os
import re
import runpy
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "errors.md"
PRELUDE = "from nzjit import pl\n\n\n"


@dataclass(frozen=True)
class Entry:
    """One catalogue entry: `rule` is the NZ rule id the refusal carries ("" for a tracing refusal)."""

    rule: str
    title: str
    failing: (
        str  # a module defining the kernel `k` (after PRELUDE); the catalogue calls main(), else k.lower()
    )
    fix: str
    fixed: str


def _mm(wshape: str, window: str, extra: str = "") -> str:
    return (
        f"@pl.kernel\ndef k(x: pl.Tensor[[64, 512], pl.INT8],\n      w: pl.Tensor[{wshape}, pl.INT8, pl.NZ],\n"
        f"      out: pl.Out[pl.Tensor[[64, 128], pl.INT32]]):\n{extra}"
        f"    out[:, :] = pl.matmul(x[:, 0:512], {window}, b_trans=True)\n"
    )


#: the store of an spmd `_mm` example: each lane its own 32 rows of `out` (issue 24: lanes storing
#: the same window race, refused as lane-race)
_LANE_ROWS = "        out[nb * 32:nb * 32 + 32, :] = pl.matmul(x[nb * 32:nb * 32 + 32, 0:512]"


def _load(
    wshape: str,
    dtype: str = "pl.INT8",
    offs: str = "[0, 0]",
    win: str = "[16, 32]",
    mem: str = ", target_memory=pl.Mem.Mat",
) -> str:
    return f"@pl.kernel\ndef k(w: pl.Tensor[{wshape}, {dtype}, pl.NZ]):\n    pl.load(w, {offs}, {win}{mem})\n"


def _store(
    rows: int = 64,
    offs: str = "[0, 0]",
    target: str = "",
    attrs: str = "",
    out_rows: int = 64,
    out_cols: int = 16,
) -> str:
    deco = f"@pl.kernel(target={target})" if target else "@pl.kernel"
    return (
        f"{deco}\ndef k(a: pl.Tensor[[{rows}, 32], pl.FP16], b: pl.Tensor[[16, 32], pl.FP16],\n"
        f"      out: pl.Out[pl.Tensor[[{out_rows}, {out_cols}], pl.FP32, pl.NZ]]):\n"
        f"    at = pl.load(a, [0, 0], [{rows}, 32], target_memory=pl.Mem.Mat)\n"
        "    bt = pl.load(b, [0, 0], [16, 32], target_memory=pl.Mem.Mat)\n"
        "    acc = pl.matmul(at, bt, b_trans=True)\n"
        f"    pl.store(acc, {offs}, out{attrs})\n"
    )


_DYN = (
    'import numpy as np\nimport runtime\n\nB = pl.dynamic("B")\n\n\n@pl.kernel\n'
    "def k(x: pl.Tensor[[B, 16, 64], pl.INT8], w: pl.Tensor[[B, 32, 64], pl.INT8, pl.NZ],\n"
    "      nb: pl.Scalar[pl.INT32], out: pl.Out[pl.Tensor[[B, 16, 32], pl.INT32]]):\n"
    "    for e in pl.range(nb):\n"
    "        out[e, :, :] = pl.matmul(x[e, :, :], w[e, :, :], b_trans=True)\n\n\n"
    "def main():\n"
    "    x = np.zeros((2, 16, 64), np.int8)\n"
)


ENTRIES: tuple[Entry, ...] = (
    Entry(
        "NZ-4",
        "NZ columns must be whole C0 lines",
        _load("[32, 48]", win="[16, 48]"),
        "an NZ tensor's last axis is a whole number of 32-byte C0 lines (c0 = 32 INT8, 16 FP16/BF16, "
        "8 FP32 elements): pad the columns",
        _load("[32, 64]", win="[16, 64]"),
    ),
    Entry(
        "NZ-5",
        "NZ rows must be whole fractals",
        _load("[40, 64]"),
        "an NZ tensor's rows are whole 16-row fractals: pad R to a multiple of 16",
        _load("[48, 64]"),
    ),
    Entry(
        "NZ-6",
        "NZ needs rank >= 2",
        _load("[64]", offs="[0]", win="[64]"),
        "an NZ tensor has a row and a column axis: give it shape [1, C] or more rows",
        _load("[16, 64]", win="[16, 64]"),
    ),
    Entry(
        "NZ-11",
        "the [R, C] plane must be static",
        _load("[pl.dynamic('R'), 64]"),
        "only leading (batch) axes may be dynamic: make R and C static",
        _load("[64, 64]"),
    ),
    Entry(
        "NZ-12",
        "a load window must start on the fractal grid",
        _mm("[256, 512]", "w[8:136, 0:512]"),
        "start the window at a multiple of 16 rows and c0 columns",
        _mm("[256, 512]", "w[16:144, 0:512]"),
    ),
    Entry(
        "NZ-12",
        "an NZ tensor is loaded into Mat",
        _load("[32, 64]", mem=""),
        "load NZ data with target_memory=pl.Mem.Mat (the cube's L1 keeps the NZ order)",
        _load("[32, 64]"),
    ),
    Entry(
        "NZ-16",
        "a symbolic offset must be provably aligned",
        _mm(
            "[256, 512]", "w[n0:n0 + 128, 0:512]", "    for nb in pl.spmd(2):\n        n0 = nb * 8\n"
        ).replace("    out[:, :] = pl.matmul(x[:, 0:512]", _LANE_ROWS),
        "build the offset from a multiple of 16 (rows) or c0 (columns), e.g. nb * 128",
        _mm(
            "[256, 512]", "w[n0:n0 + 128, 0:512]", "    for nb in pl.spmd(2):\n        n0 = nb * 128\n"
        ).replace("    out[:, :] = pl.matmul(x[:, 0:512]", _LANE_ROWS),
    ),
    Entry(
        "NZ-18",
        "a symbolic offset must be provably non-negative",
        _mm(
            "[256, 512]", "w[n0:n0 + 128, 0:512]", "    for nb in pl.spmd(2):\n        n0 = nb * 128 - 128\n"
        ).replace("    out[:, :] = pl.matmul(x[:, 0:512]", _LANE_ROWS),
        "build offsets from non-negative loop variables, or clamp with pl.max(x, 0)",
        _mm(
            "[256, 512]", "w[n0:n0 + 128, 0:512]", "    for nb in pl.spmd(2):\n        n0 = nb * 128\n"
        ).replace("    out[:, :] = pl.matmul(x[:, 0:512]", _LANE_ROWS),
    ),
    Entry(
        "NZ-28",
        "folding leading axes needs static extents",
        _load("[pl.dynamic('G'), 2, 32, 64]", offs="[0, 0, 0, 0]", win="[1, 1, 16, 32]"),
        "with rank > 3 only the first axis may be dynamic if it is the only leading axis: make the inner "
        "leading axes static, or fold them yourself into one batch axis",
        _load("[pl.dynamic('G'), 32, 64]", offs="[0, 0, 0]", win="[1, 16, 32]"),
    ),
    Entry(
        "NZ-30",
        "a slice of an NZ tensor cuts leading axes only",
        "@pl.kernel\ndef k(w: pl.Tensor[[4, 32, 64], pl.INT8, pl.NZ]):\n    s = w[1, 0:16, :]\n"
        "    pl.load(s, [0, 0], [16, 64], target_memory=pl.Mem.Mat)\n",
        "slice the batch axes only and put the row / column window in the load",
        "@pl.kernel\ndef k(w: pl.Tensor[[4, 32, 64], pl.INT8, pl.NZ]):\n    s = w[1]\n"
        "    pl.load(s, [0, 0], [16, 64], target_memory=pl.Mem.Mat)\n",
    ),
    Entry(
        "NZ-31",
        "an NZ tensor reshapes only to its flat bytes",
        "@pl.kernel\ndef k(w: pl.Tensor[[32, 64], pl.INT8, pl.NZ]):\n    r = pl.reshape(w, [64, 32])\n"
        "    pl.load(r, [0, 0], [16, 32], target_memory=pl.Mem.Mat)\n",
        "reshape the logical array on the host before pack_nz, or flatten the whole tensor to [R * C]",
        "@pl.kernel\ndef k(w: pl.Tensor[[64, 32], pl.INT8, pl.NZ]):\n"
        "    pl.load(w, [0, 0], [16, 32], target_memory=pl.Mem.Mat)\n",
    ),
    Entry(
        "NZ-14",
        "no view of an NZ tensor",
        "@pl.kernel\ndef k(w: pl.Tensor[[32, 64], pl.INT8, pl.NZ]):\n    pl.tensor.view(w, [64, 32])\n",
        "an NZ tensor's bytes are not row-major: view the logical array before packing it",
        "@pl.kernel\ndef k(w: pl.Tensor[[32, 64], pl.INT8]):\n    pl.tensor.view(w, [64, 32])\n",
    ),
    Entry(
        "NZ-33",
        "no sub-byte NZ dtypes",
        _load("[32, 64]", dtype="pl.INT4"),
        "use an 8-bit or wider dtype for NZ tensors",
        _load("[32, 64]"),
    ),
    Entry(
        "NZ-25",
        "the GM row gap of a multi-column-block load (pto-isa#317)",
        _load("[65552, 64]", win="[16, 64]"),
        "load one column block at a time (a window of c0 columns) or fewer tensor rows",
        _load("[65552, 64]", win="[16, 32]"),
    ),
    Entry(
        "NZ-21",
        "an Acc store into NZ is A2/A3 only",
        _store(target="pl.A5"),
        "compile for pl.A2A3, or store into an ND tensor",
        _store(),
    ),
    Entry(
        "NZ-21",
        "an Acc store into NZ converts nothing",
        _store(attrs=", pre_relu=True"),
        "apply the ReLU / quantisation / atomic add in a separate step",
        _store(),
    ),
    Entry(
        "NZ-23",
        "an Acc store into NZ writes whole rows",
        _store(out_rows=128, out_cols=32),
        "store into a target whose row axis the tile covers exactly (offset 0, all rows)",
        _store(out_rows=64, out_cols=32),
    ),
    Entry(
        "NZ-24",
        "an Acc store into NZ writes one panel",
        "@pl.kernel\ndef k(x: pl.Tensor[[64, 16], pl.FP32], out: pl.Out[pl.Tensor[[2, 32, 16], pl.FP32, pl.NZ]]):\n"
        "    t = pl.load(x, [0, 0], [64, 16], target_memory=pl.Mem.Acc)\n    pl.store(t, [0, 0, 0], out)\n",
        "store each batch panel with its own pl.store",
        "@pl.kernel\ndef k(x: pl.Tensor[[64, 16], pl.FP32], out: pl.Out[pl.Tensor[[2, 32, 16], pl.FP32, pl.NZ]]):\n"
        "    t = pl.load(x, [0, 0], [32, 16], target_memory=pl.Mem.Acc)\n    pl.store(t, [0, 0, 0], out)\n",
    ),
    Entry(
        "NZ-22",
        "an Acc tile into NZ must fit L0C whole-M",
        "@pl.kernel\ndef k(a: pl.Tensor[[4096, 16], pl.FP16], b: pl.Tensor[[16, 16], pl.FP16],\n"
        "      out: pl.Out[pl.Tensor[[4096, 16], pl.FP32, pl.NZ]]):\n"
        "    at = pl.load(a, [0, 0], [4096, 16], target_memory=pl.Mem.Mat)\n"
        "    bt = pl.load(b, [0, 0], [16, 16], target_memory=pl.Mem.Mat)\n"
        "    pl.store(pl.matmul(at, bt), [0, 0], out)\n",
        "split M yourself: one matmul and one store per block of at most 2048 rows",
        "@pl.kernel\ndef k(a: pl.Tensor[[2048, 16], pl.FP16], b: pl.Tensor[[16, 16], pl.FP16],\n"
        "      out: pl.Out[pl.Tensor[[2048, 16], pl.FP32, pl.NZ]]):\n"
        "    at = pl.load(a, [0, 0], [2048, 16], target_memory=pl.Mem.Mat)\n"
        "    bt = pl.load(b, [0, 0], [16, 16], target_memory=pl.Mem.Mat)\n"
        "    pl.store(pl.matmul(at, bt), [0, 0], out)\n",
    ),
    Entry(
        "NZ-29",
        "a dynamic-batch NZ argument keeps its batch axis",
        _DYN + "    w = runtime.pack_nz(np.zeros((32, 64), np.int8))  # one plane, no batch axis\n"
        "    k(x, w, 2)\n",
        "pass the stacked [B, R, C] weight, packed plane by plane (a single plane is [1, R, C])",
        _DYN + "    w = runtime.pack_nz(np.zeros((2, 32, 64), np.int8))\n    k(x, w, 2)\n",
    ),
    Entry(
        "lane-race",
        "every lane of a pl.spmd stores the same window",
        "@pl.kernel\ndef k(x: pl.Tensor[[16, 256], pl.FP32], out: pl.Out[pl.Tensor[[16, 256], pl.FP32]]):\n"
        "    for lane in pl.spmd(4):\n        t = pl.load(x, [0, lane * 64], [16, 64])\n"
        "        out[:, 0:64] = t + t\n",
        "the lanes run concurrently: compute each lane's window from the lane index",
        "@pl.kernel\ndef k(x: pl.Tensor[[16, 256], pl.FP32], out: pl.Out[pl.Tensor[[16, 256], pl.FP32]]):\n"
        "    for lane in pl.spmd(4):\n        t = pl.load(x, [0, lane * 64], [16, 64])\n"
        "        out[:, lane * 64:lane * 64 + 64] = t + t\n",
    ),
    Entry(
        "lane-race",
        "two lanes of a pl.spmd touch the same bytes at run time",
        "import numpy as np\n\n\n@pl.kernel\n"
        "def k(x: pl.Tensor[[16, 256], pl.FP32], out: pl.Out[pl.Tensor[[16, 320], pl.FP32]],\n"
        "      step: pl.Scalar[pl.INDEX]):\n"
        "    for lane in pl.spmd(4):\n        t = pl.load(x, [0, lane * 64], [16, 64])\n"
        "        pl.store(t + t, [0, lane * step], out)  # a window from an argument: checked at run time\n\n\n"
        "def main():\n    k(np.ones((16, 256), np.float32), np.zeros((16, 320), np.float32), 32)\n",
        "give each lane its own bytes: here a step of at least the window's 64 columns (the call is refused, "
        "and its outputs are unchanged, whenever two lanes' windows meet)",
        "import numpy as np\n\n\n@pl.kernel\n"
        "def k(x: pl.Tensor[[16, 256], pl.FP32], out: pl.Out[pl.Tensor[[16, 320], pl.FP32]],\n"
        "      step: pl.Scalar[pl.INDEX]):\n"
        "    for lane in pl.spmd(4):\n        t = pl.load(x, [0, lane * 64], [16, 64])\n"
        "        pl.store(t + t, [0, lane * step], out)\n\n\n"
        "def main():\n    k(np.ones((16, 256), np.float32), np.zeros((16, 320), np.float32), 64)\n",
    ),
    Entry(
        "ND2NZ-pitch",
        "an ND -> NZ load's row pitch must fit 16 bits",
        "@pl.kernel\ndef k(x: pl.Tensor[[16, 65536], pl.INT8], w: pl.Tensor[[32, 64], pl.INT8, pl.NZ],\n"
        "      out: pl.Out[pl.Tensor[[16, 32], pl.INT32]]):\n"
        "    out[:, :] = pl.matmul(x[:, 0:64], w[:, :], b_trans=True)\n",
        "keep the ND row pitch <= 65535 elements: split the rows into a leading axis",
        "@pl.kernel\ndef k(x: pl.Tensor[[2, 16, 32768], pl.INT8], w: pl.Tensor[[32, 64], pl.INT8, pl.NZ],\n"
        "      out: pl.Out[pl.Tensor[[16, 32], pl.INT32]]):\n"
        "    out[:, :] = pl.matmul(x[0, :, 0:64], w[:, :], b_trans=True)\n",
    ),
    Entry(
        "k-tail",
        "a dynamic K tail through TGEMV",
        'Kd = pl.dynamic("Kd")\n\n\n@pl.kernel\n'
        "def k(x: pl.Tensor[[1, Kd], pl.FP16], w: pl.Tensor[[Kd, 48], pl.FP16],\n"
        "      y: pl.Out[pl.Tensor[[1, 48], pl.FP32]]):\n"
        "    tx = pl.load(x, [0, 0], [1, 512], valid_shape=[1, x.shape[1]], target_memory=pl.Mem.Mat)\n"
        "    tw = pl.load(w, [0, 0], [512, 48], valid_shape=[w.shape[0], 48], target_memory=pl.Mem.Mat)\n"
        "    pl.store(pl.tile.gemv(tx, tw), [0, 0], y)\n",
        "TGEMV takes k from the Right tile's valid rows; TMATMUL (pl.matmul) takes it from the Left row's "
        "valid columns at run time, so a run-time K is exact there",
        'Kd = pl.dynamic("Kd")\n\n\n@pl.kernel\n'
        "def k(x: pl.Tensor[[1, Kd], pl.FP16], w: pl.Tensor[[Kd, 48], pl.FP16],\n"
        "      y: pl.Out[pl.Tensor[[1, 48], pl.FP32]]):\n"
        "    tx = pl.load(x, [0, 0], [1, 512], valid_shape=[1, x.shape[1]], target_memory=pl.Mem.Mat)\n"
        "    tw = pl.load(w, [0, 0], [512, 48], valid_shape=[w.shape[0], 48], target_memory=pl.Mem.Mat)\n"
        "    pl.store(pl.matmul(tx, tw), [0, 0], y)\n",
    ),
    Entry(
        "k-tail",
        "a dynamic K tail over several L0 chunks",
        'Kd = pl.dynamic("Kd")\n\n\n@pl.kernel\n'
        "def k(x: pl.Tensor[[16, Kd], pl.FP16], w: pl.Tensor[[Kd, 256], pl.FP16],\n"
        "      y: pl.Out[pl.Tensor[[16, 256], pl.FP32]]):\n"
        "    tx = pl.load(x, [0, 0], [16, 4096], valid_shape=[16, x.shape[1]], target_memory=pl.Mem.Mat)\n"
        "    tw = pl.load(w, [0, 0], [4096, 256], valid_shape=[w.shape[0], 256], target_memory=pl.Mem.Mat)\n"
        "    pl.store(pl.matmul(tx, tw), [0, 0], y)\n",
        "a chunk past the run-time K would be a TMATMUL with k = 0: loop over K in windows of one chunk, "
        "each with its run-time valid K",
        'Kd = pl.dynamic("Kd")\n\n\n@pl.kernel\n'
        "def k(x: pl.Tensor[[16, Kd], pl.FP16], w: pl.Tensor[[Kd, 256], pl.FP16],\n"
        "      y: pl.Out[pl.Tensor[[16, 256], pl.FP32]]):\n"
        "    kd = x.shape[1]\n    kv = pl.min(128, kd)\n"
        "    tx = pl.load(x, [0, 0], [16, 128], valid_shape=[16, kv], target_memory=pl.Mem.Mat)\n"
        "    tw = pl.load(w, [0, 0], [128, 256], valid_shape=[kv, 256], target_memory=pl.Mem.Mat)\n"
        "    acc = pl.matmul(tx, tw)\n"
        "    for k0 in pl.range(128, kd, 128):\n        kv = pl.min(128, kd - k0)\n"
        "        tx = pl.load(x, [0, k0], [16, 128], valid_shape=[16, kv], target_memory=pl.Mem.Mat)\n"
        "        tw = pl.load(w, [k0, 0], [128, 256], valid_shape=[kv, 256], target_memory=pl.Mem.Mat)\n"
        "        acc = pl.matmul_acc(acc, tx, tw)\n"
        "    pl.store(acc, [0, 0], y)\n",
    ),
    Entry(
        "",
        "a Python `while` on a traced value",
        "@pl.kernel\ndef k(x: pl.Tensor[[16, 32], pl.FP32], out: pl.Out[pl.Tensor[[16, 32], pl.FP32]]):\n"
        "    for i in pl.range(2):\n        while i > 0:\n"
        "            pl.store(pl.load(x, [0, 0], [16, 32]), [0, 0], out)\n",
        "the body is traced once: move the condition into the loop bounds, or compute both sides",
        "@pl.kernel\ndef k(x: pl.Tensor[[16, 32], pl.FP32], out: pl.Out[pl.Tensor[[16, 32], pl.FP32]]):\n"
        "    for i in pl.range(1, 2):\n"
        "        pl.store(pl.load(x, [0, 0], [16, 32]), [0, 0], out)\n",
    ),
    Entry(
        "",
        "`break` in a staged loop",
        "@pl.kernel\ndef k(x: pl.Tensor[[16, 32], pl.FP32], out: pl.Out[pl.Tensor[[16, 32], pl.FP32]]):\n"
        "    for i in pl.range(2):\n        pl.store(pl.load(x, [0, 0], [16, 32]), [0, 0], out)\n        break\n",
        "a staged loop runs all its trips: shorten its range instead",
        "@pl.kernel\ndef k(x: pl.Tensor[[16, 32], pl.FP32], out: pl.Out[pl.Tensor[[16, 32], pl.FP32]]):\n"
        "    for i in pl.range(1):\n        pl.store(pl.load(x, [0, 0], [16, 32]), [0, 0], out)\n",
    ),
)


def full_source(body: str) -> str:
    """The module of an entry: its own leading imports, `from nzjit import pl`, then the rest."""
    lines = body.splitlines(keepends=True)
    n = 0
    while n < len(lines) and lines[n].startswith("import "):
        n += 1
    rest = "".join(lines[n:]).lstrip("\n")
    if not n:
        return PRELUDE + rest
    return "".join(lines[:n]) + "from nzjit import pl\n\n" + rest


def _refusal(source: str, workdir: str) -> BaseException | None:
    """Run the module, then its `main()` (a call with arguments) or else `k.lower()`; the refusal
    (CompileError, runtime.DispatchError for an argument, runtime.races.LaneRaceError for lanes that
    race at run time), or None when nothing is refused."""
    import nzjit
    import runtime
    from runtime.races import LaneRaceError

    path = os.path.join(workdir, "kernel.py")
    with open(path, "w") as f:
        f.write(full_source(source))
    import linecache

    linecache.checkcache(path)
    try:
        ns = runpy.run_path(path, run_name="nzjit_catalogue")
        ns["main"]() if "main" in ns else ns["k"].lower()
    except (nzjit.CompileError, runtime.DispatchError, LaneRaceError) as e:
        return e
    return None


def message(entry: Entry) -> tuple[str, str | None]:
    """(the refusal as `str(err)` shows it, its rule) for the entry's failing kernel, with the
    temporary folder removed from the path."""
    with tempfile.TemporaryDirectory() as d:
        err = _refusal(entry.failing, d)
        if err is None:
            raise AssertionError(f"catalogue entry {entry.title!r}: the failing kernel compiles")
        text = str(err).replace(d + os.sep, "")
        rule = getattr(err, "rule", None)
        if rule is None and not isinstance(err, ValueError):  # an argument refusal names its rule in the text
            m = re.search(r"\bNZ-\d+\b", text)
            rule = m.group(0) if m else None
        return f"{type(err).__module__.split('.')[0]}.{type(err).__name__}: {text}", rule


def fixed_compiles(entry: Entry) -> bool:
    """Whether the entry's fixed kernel lowers through every pass."""
    with tempfile.TemporaryDirectory() as d:
        return _refusal(entry.fixed, d) is None


def rules_raised_in_source() -> set[str]:
    """Every `rule="NZ-n"` a refusal in nzjit/ carries: each needs an entry."""
    pat = re.compile(r'rule="(NZ-\d+|[a-z]+-[a-z]+)"|RULE = "([A-Za-z0-9]+-[a-z]+)"')
    return {a or b for p in (ROOT / "nzjit").rglob("*.py") for a, b in pat.findall(p.read_text())}


def render() -> str:
    """The text of docs/errors.md."""
    out = [
        "<!-- generated by docs/error_catalogue.py: do not edit by hand -->",
        "",
        "# Error catalogue",
        "",
        "Every refusal names the kernel line, the rule and the fix. Each entry below is a kernel that "
        "breaks one rule, the exception nzjit raises for it (as `python kernel.py` prints it; "
        "`nzjit ir kernel.py` prints the same body under a `kernel.py:LINE:COL: error[RULE]:` header), and "
        "the fixed kernel. The messages are produced by running the kernels; a test keeps this page in "
        "step with the compiler. The rules themselves are summarised in [the NZ layout guide](nz-layout-guide.md).",
        "",
        "| rule | refusal |",
        "|---|---|",
    ]
    anchors = []
    for i, e in enumerate(ENTRIES, 1):
        anchor = f"e{i}"
        anchors.append(anchor)
        out.append(f"| {e.rule or '(tracing)'} | [{e.title}](#{anchor}) |")
    for i, e in enumerate(ENTRIES, 1):
        text, rule = message(e)
        if (rule or "") != e.rule:
            raise AssertionError(
                f"catalogue entry {e.title!r} is filed under {e.rule!r}, nzjit says {rule!r}"
            )
        out += [
            "",
            f'<a id="e{i}"></a>',
            "",
            f"## {e.rule + ': ' if e.rule else ''}{e.title}",
            "",
            "```python",
            full_source(e.failing).rstrip(),
            "```",
            "",
            "```text",
            text,
            "```",
            "",
            f"**Fix:** {e.fix}.",
            "",
            "```python",
            full_source(e.fixed).rstrip(),
            "```",
        ]
    return "\n".join(out) + "\n"


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        if not OUT.exists() or OUT.read_text() != text:
            print(f"{OUT.relative_to(ROOT)} is stale: run python docs/error_catalogue.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    print(f"wrote {OUT.relative_to(ROOT)} ({len(ENTRIES)} entries)")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main(sys.argv[1:]))
