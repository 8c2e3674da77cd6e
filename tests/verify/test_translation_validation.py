"""Translation validation (issue 29, nz-layout.md §4-§6): `Lowered.validate()` proves every NZ
load, slice, reshape and store of the lowered graph addresses exactly its logical window, for
every loop and lane value; a wrong translation gives a counterexample (loop and lane values, the
element, the expected and the addressed element). Every example, every kernel of the tests'
kernel modules and a bounded sample of compiling fuzz programs are validated.
"""

import glob
import importlib.util
import os
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nzjit import pl
from nzjit.core.ir import Graph, Literal
from nzjit.driver import Lowered
from nzjit.language.kernel import Kernel
from nzjit.passes import block_nz_store, proofs

z3 = pytest.importorskip("z3")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _module(path):
    name = "validate_" + os.path.relpath(path, ROOT).replace(os.sep, "_")[:-3]
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def _kernels():
    paths = sorted(glob.glob(os.path.join(ROOT, "examples", "*.py")))
    paths += sorted(
        p
        for p in glob.glob(os.path.join(ROOT, "tests", "*", "*_kernels.py"))
        if not os.path.basename(p).startswith("test_")
    )
    out = []
    for path in paths:
        mod = _module(path)
        rel = os.path.relpath(path, ROOT)
        out += [pytest.param(k, id=f"{rel}:{n}") for n, k in vars(mod).items() if isinstance(k, Kernel)]
        if path.endswith("gmm_kernels.py"):  # factories: one INT8 and one FP16 instance each
            for n in ("grouped", "grouped_in_turns"):
                out.append(
                    pytest.param(
                        getattr(mod, n)(pl.INT8, pl.INT32, 4, 32, 256, 512, 128, 256), id=f"{rel}:{n}[INT8]"
                    )
                )
            out.append(
                pytest.param(
                    mod.grouped(pl.FP16, pl.FP32, 2, 16, 128, 256, 64, 128), id=f"{rel}:grouped[FP16]"
                )
            )
    return out


KERNELS = _kernels()


def test_the_kernels_are_found():  # the sweep below is not empty: examples and kernel modules
    ids = [p.id for p in KERNELS]
    assert any(i.startswith("examples/nz_matmul.py") for i in ids)
    assert any("codegen_kernels.py:nz_acc_store" in i for i in ids)
    assert len(ids) >= 25


@pytest.mark.parametrize("kernel", KERNELS)
def test_every_example_and_test_kernel_validates(kernel):  # NZ-12, NZ-20, NZ-28, NZ-30, NZ-31
    v = kernel.lower().validate()
    assert v.ok, str(v)
    assert all(a.facts for a in v.accesses)


def test_a_certificate_lists_the_facts_used():  # NZ-12, NZ-16: the loop and lane ranges, the window
    @pl.kernel
    def k(
        x: pl.Tensor[[64, 1024], pl.INT8],
        w: pl.Tensor[[512, 1024], pl.INT8, pl.NZ],
        out: pl.Out[pl.Tensor[[64, 512], pl.INT32]],
    ):
        for nb in pl.spmd(2):
            n0 = nb * 256
            xt = pl.load(x, [0, 0], [64, 512], target_memory=pl.Mem.Mat)
            for k0 in pl.pipeline(0, 1024, 512):
                wt = pl.load(w, [n0, k0], [256, 512], target_memory=pl.Mem.Mat)
                pl.store(pl.matmul(xt, wt, b_trans=True), [0, n0], out)

    v = k.lower().validate()
    assert v.ok, str(v)
    (a,) = v.accesses
    assert a.kind == "load" and a.tensor == "w" and a.status == "proven"
    assert a.facts[0] == "nb in [0, 2) (a lane of pl.spmd)"
    assert a.facts[1] == "k0 = 0 + i * 512, i >= 0, short of 1024 (pl.pipeline)"
    assert "proven at compile time" in a.facts[2]
    assert "partition [1, 16, 16, 16, 32]" in a.facts[3]
    assert "proven" in str(v) and "1/1 NZ accesses proven" in str(v)


# ----------------------------------------------------------------- wrong translations are caught
def _row_plus_one(g):
    """A test-only pass: one fractal row more on every blocked load (inputs: src, b, col, row, 0, 0)."""
    eqns = []
    for e in g.eqns:
        body = e.params.get("body")
        if isinstance(body, Graph):
            e = e.replace(params={**e.params, "body": _row_plus_one(body)})
        elif e.params.get("blocked"):
            ins = list(e.inputs)
            ins[3] = Literal(ins[3].value + 1, ins[3].type)
            e = e.replace(inputs=tuple(ins))
        eqns.append(e)
    return Graph(g.params, eqns, g.outputs, dict(g.attrs), g.name)


def _load_kernel():
    @pl.kernel
    def k(
        x: pl.Tensor[[32, 512], pl.INT8],
        w: pl.Tensor[[512, 512], pl.INT8, pl.NZ],
        out: pl.Out[pl.Tensor[[32, 256], pl.INT32]],
    ):
        xt = pl.load(x, [0, 0], [32, 512], target_memory=pl.Mem.Mat)
        wt = pl.load(w, [0, 0], [256, 512], target_memory=pl.Mem.Mat)
        pl.store(pl.matmul(xt, wt, b_trans=True), [0, 0], out)

    return k


def test_a_corrupted_row_coordinate_gives_a_counterexample():  # NZ-12, NZ-8
    k = _load_kernel()
    traced = k.lower().ir(after="trace")
    v = Lowered(k, traced, extra=[("Corrupt", _row_plus_one)]).validate()
    assert not v.ok
    (a,) = v.accesses
    assert a.status == "counterexample"
    cex = a.counterexample
    tr, tc = cex["tr"], cex["tc"]
    assert cex["expected"].startswith(f"[0, {tr}, {tc}]")
    assert cex["addressed"].startswith(f"[0, {tr + 16}, {tc}]")  # one fractal (16 rows) down
    assert "FAILED" in str(v)


def test_the_step_only_loop_factor_mutant_is_caught(monkeypatch):  # NZ-16: issue 29's first mutant
    real = proofs.rule_loop_var

    def wrong(fs, fe, ft, name, dt):
        f = real(fs, fe, ft, name, dt)
        return proofs.Fact(ft.factor, f.nonneg, f.expr, f.nonneg_why, f.lo, f.hi)

    @pl.kernel
    def k(w: pl.Tensor[[64, 64], pl.INT8, pl.NZ]):
        for i in pl.range(8, 24, 16):
            pl.load(w, [i, 0], [16, 32], target_memory=pl.Mem.Mat)

    monkeypatch.setattr(proofs, "rule_loop_var", wrong)
    v = k.lower().validate()  # the wrong prover accepts it; validation does not
    (a,) = v.accesses
    assert a.status == "counterexample"
    assert a.counterexample["i"] == 8  # rows 8..23 expected, rows 0..15 addressed
    tr, tc = a.counterexample["tr"], a.counterexample["tc"]
    assert a.counterexample["expected"].startswith(f"[0, {8 + tr}, {tc}]")
    assert a.counterexample["addressed"].startswith(f"[0, {tr}, {tc}]")


def test_a_row_sub_window_store_is_a_counterexample():  # NZ-23: the device writes densely
    @pl.kernel
    def k(
        a: pl.Tensor[[64, 32], pl.FP16],
        b: pl.Tensor[[32, 16], pl.FP16],
        out: pl.Out[pl.Tensor[[128, 32], pl.FP32, pl.NZ]],
    ):
        at = pl.load(a, [0, 0], [64, 32], target_memory=pl.Mem.Mat)
        bt = pl.load(b, [0, 0], [32, 16], target_memory=pl.Mem.Mat)
        pl.store(pl.matmul(at, bt), [64, 16], out)

    with block_nz_store.unsafe_skip_full_row_check_for_tests():
        low = k.lower()
    v = low.validate()
    (s,) = v.accesses
    assert s.kind == "store" and s.status == "counterexample", str(v)
    assert s.counterexample["expected"] != s.counterexample["addressed"]


def test_validation_needs_the_verify_extra(monkeypatch):  # z3 is optional for users
    from nzjit.verify import VerifyUnavailable

    low = _load_kernel().lower()
    monkeypatch.setitem(sys.modules, "z3", None)  # import z3 now fails
    with pytest.raises(VerifyUnavailable, match=r"pip install nzjit\[verify\]"):
        low.validate()


# ----------------------------------------------------------------- fuzz programs that compile
@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(seed=st.integers(0, 2**16), index=st.integers(0, 10_000))
def test_fuzz_programs_that_compile_validate(seed, index, tmp_path_factory):
    import nzjit
    from nzjit.fuzz.classify import _load
    from nzjit.fuzz.gen import generate

    p = generate(seed, index)
    path = tmp_path_factory.mktemp("fz") / f"prog_{seed}_{index}.py"
    path.write_text(p.source)
    mod = _load(str(path), f"validate_fuzz_{seed}_{index}")
    try:
        low = mod.kernel.lower()
    except nzjit.CompileError:
        return  # refused: nothing lowered to validate
    v = low.validate()
    assert v.ok, f"fuzz program {seed}/{index} ({p.family}):\n{v}"


def test_cli_ir_validate_prints_the_certificates(capsys):  # `nzjit ir FILE --validate`
    from nzjit.cli import main

    assert main(["ir", os.path.join(ROOT, "examples", "nz_matmul.py"), "--validate"]) == 0
    out = capsys.readouterr().out
    assert "translation validation of nz_matmul (BlockNzTensorViews): 2/2 NZ accesses proven" in out
    assert "load of NZ tensor 'w': proven" in out and "k0 = 512 + i * 512" in out


def test_the_library_imports_without_z3():  # z3 is an optional extra: nothing but nzjit.verify needs it
    import subprocess

    code = (
        "import sys; sys.modules['z3'] = None\n"
        "import nzjit, nzjit.cli, nzjit.passes.pipeline, nzjit.fuzz, nzjit.verify\n"
        "from nzjit import pl\n"
        "@pl.kernel\n"
        "def k(w: pl.Tensor[[32, 64], pl.INT8, pl.NZ]):\n"
        "    pl.load(w, [16, 0], [16, 32], target_memory=pl.Mem.Mat)\n"
        "low = k.lower()\n"
        "try:\n"
        "    low.validate()\n"
        "except nzjit.verify.VerifyUnavailable as e:\n"
        "    print(e)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "pip install nzjit[verify]" in r.stdout


def test_a_rank4_batch_index_is_folded_with_its_stride():  # NZ-28: w[g, 0] is batch g * E
    @pl.kernel
    def k(
        x: pl.Tensor[[16, 32], pl.INT8],
        w: pl.Tensor[[2, 3, 32, 32], pl.INT8, pl.NZ],
        out: pl.Out[pl.Tensor[[16, 32], pl.INT32]],
    ):
        xt = pl.load(x, [0, 0], [16, 32], target_memory=pl.Mem.Mat)
        for g in pl.range(2):
            wt = pl.load(w, [g, 0, 16, 0], [1, 1, 16, 32], target_memory=pl.Mem.Mat)
            pl.store(pl.matmul(xt, wt, b_trans=True), [0, g * 16], out)

    low = k.lower()
    (ld,) = [e for e in low.ir(after="BlockNzTensorViews").walk() if e.params.get("blocked")]
    batch = ld.operands("offsets")[0]
    mul = next(
        e
        for e in low.ir(after="BlockNzTensorViews").walk()
        if batch in e.outputs or any(batch is o for o in e.outputs)
    )
    assert mul.primitive.name in ("add", "mul")  # g * 3 (+ 0), never g itself
    v = low.validate()
    assert v.ok, str(v)
