"""The compile-time on-chip memory plan (issue 23 item 8): `low.memory()` peaks equal the
simulator's run-time peaks (runtime.OnChip) on every example kernel; a kernel over capacity is
refused at compile time naming the buffers and their lines."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

import numpy as np
import pytest

import runtime
from nzjit import CompileError, pl
from nzjit.backend.executor import Ctx, run_graph
from nzjit.backend.launch import tensor_value
from nzjit.backend.options import Options, current, using
from nzjit.driver.kernel import Kernel

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))


def runtime_peak(kernel, args) -> dict[str, int]:
    """Run the final graph of `kernel` on resident copies of `args`; the on-chip peaks."""
    w = runtime.Worker(0)
    devs = [w.alloc_tensor(a.shape, a.dtype, init=a) if isinstance(a, np.ndarray) else a for a in args]
    low = kernel.lower(*devs)
    graph = low.final
    blocked = bool(graph.attrs.get("nz_tensor_views_blocked"))
    vals = [
        tensor_value(p.type, d, {}, blocked) if not isinstance(d, int | bool) else d
        for p, d in zip(kernel.params, devs)
    ]
    onchip = runtime.OnChip(w.target)
    run_graph(Ctx(w.gm, onchip, {}, current()), graph, vals)
    return {s: n for s, n in onchip.peak.items() if n}


def planned(kernel, args) -> dict[str, int]:
    return {s: n for s, n in kernel.lower(*args).memory().peak.items() if n}


@pl.kernel
def two_tiles(x: pl.Tensor[[64, 128], pl.FP32], y: pl.Out[pl.Tensor[[64, 128], pl.FP32]]):
    for i in pl.range(2):
        a = pl.load(x, [0, 0], [32, 128])
        b = pl.add(a, a)
        pl.store(b, [i * 32, 0], y)


@pl.kernel
def split_k(
    a: pl.Tensor[[64, 256], pl.FP16],
    b: pl.Tensor[[256, 128], pl.FP16],
    c: pl.Out[pl.Tensor[[64, 128], pl.FP32]],
):
    acc = pl.matmul(a[:, 0:64], b[0:64, :])
    for kb in pl.range(1, 4):
        k0 = kb * 64
        acc = pl.matmul_acc(acc, a[:, k0 : k0 + 64], b[k0 : k0 + 64, :])
    c[:, :] = acc


def test_plan_of_a_vector_loop_is_exact() -> None:
    x = np.ones((64, 128), np.float32)
    y = np.zeros_like(x)
    plan = two_tiles.lower(x, y).memory()
    assert plan.peak["Vec"] == 2 * 32 * 128 * 4  # a and b live together in one trip
    assert planned(two_tiles, (x, y)) == runtime_peak(two_tiles, (x, y))
    text = str(plan)
    assert "Vec   (UB ) " in text and "32768 /   196608 B" in text


def test_plan_of_a_split_k_matmul_equals_the_run_time_peak() -> None:
    a = np.ones((64, 256), np.float16)
    b = np.ones((256, 128), np.float16)
    c = np.zeros((64, 128), np.float32)
    assert planned(split_k, (a, b, c)) == runtime_peak(split_k, (a, b, c))


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_plan_equals_the_run_time_peak_on_every_example(path, monkeypatch, capsys) -> None:
    monkeypatch.setattr(sys, "argv", [str(path)])
    monkeypatch.syspath_prepend(str(path.parent))
    ns = runpy.run_path(str(path), run_name="example")
    kernels = [k for k in ns.values() if isinstance(k, Kernel)]
    if callable(ns.get("make")):  # grouped_matmul.py: one kernel per dtype
        kernels += [ns["make"](d) for d in (pl.INT8, pl.FP16)]
    assert kernels, f"{path.name} defines no kernel"
    checked = distributed = 0
    for k in kernels:
        if _takes_windows(k):  # a communicating rank's kernel runs only inside its orchestration
            distributed += 1
            continue
        args = _zeros_for(k)
        if args is None:
            continue
        assert planned(k, args) == runtime_peak(k, args), k.__name__
        checked += 1
    if not checked and distributed == len(kernels):
        pytest.skip(f"{path.name}: every kernel takes windows (pld), and runs only inside its orchestration")
    assert checked, f"no kernel of {path.name} has static parameters to plan"


def _takes_windows(k) -> bool:
    from nzjit.prims import DistributedTensorType

    return any(isinstance(p.type, DistributedTensorType) for p in k.params)


def _zeros_for(k):
    from nzjit.core.types import ScalarType, TensorType

    out = []
    for p in k.params:
        t = p.type
        if isinstance(t, TensorType):
            if not all(isinstance(d, int) for d in t.shape):
                return None
            z = np.zeros(t.shape, t.dtype.np_dtype)
            out.append(runtime.pack_nz(z) if t.layout.name == "NZ" else z)
        elif isinstance(t, ScalarType):
            out.append(0)
    return out


def test_a_kernel_over_capacity_is_refused_at_compile_time() -> None:
    @pl.kernel
    def big(
        w: pl.Tensor[[512, 512], pl.FP16],
        x: pl.Tensor[[64, 512], pl.FP16],
        y: pl.Out[pl.Tensor[[64, 512], pl.FP32]],
    ):
        tw = pl.load(w, [0, 0], [512, 512], target_memory=pl.Mem.Mat)  # <- weight
        tx = pl.load(x, [0, 0], [64, 512], target_memory=pl.Mem.Mat)  # <- input
        pl.store(pl.matmul(tx, tw), [0, 0], y)

    low = big.lower()  # the passes' graphs and the plan can still be inspected
    assert low.memory().over() == ["Mat"] and low.memory().peak["Mat"] == 524288 + 65536
    with pytest.raises(CompileError) as ei:
        low.pto()
    w, x = np.zeros((512, 512), np.float16), np.zeros((64, 512), np.float16)
    with pytest.raises(CompileError) as again:
        big(w, x)  # refused before it runs: the simulator's run-time check is never reached
    assert str(again.value) == str(ei.value)
    msg = str(ei.value)
    assert "on-chip memory plan: Mat (L1) needs" in msg and "holds 524288 on A2A3" in msg
    assert "'tw' f16[512,512]@Mat (524288 B" in msg and "'tx' f16[64,512]@Mat (65536 B" in msg
    assert ei.value.help.startswith("load smaller tiles")


# every family's programs, and 40 more of vec_mix: the ones that move between the cores (the pipe's
# slot buffers, test_memory_plan_pipes.py)
@pytest.mark.parametrize(
    "family, index", [(None, i) for i in range(80)] + [("vec_mix", i) for i in range(40)]
)
def test_plan_equals_the_run_time_peak_on_fuzz_programs(family: str | None, index: int) -> None:
    from nzjit.fuzz import generate

    prog = generate(23, index, family=family)
    ns: dict = {"__name__": f"fuzz_{prog.name}"}
    exec(compile(prog.source, f"fuzz_{prog.name}.py", "exec"), ns)
    k = ns["kernel"]
    try:
        args = _zeros_for(k)
    except ValueError:
        return  # an NZ operand with no NZ representation: refused before any kernel runs (NZ-8)
    if args is None:
        pytest.skip("dynamic shapes: the plan is per call")
    try:
        plan = planned(k, args)
    except CompileError:
        return  # refused at compile time (the spec's refusals, or the plan's own)
    try:
        peak = runtime_peak(k, args)
    except (runtime.DispatchError, runtime.DeviceError):
        return  # refused by the device: its windows or its capacity
    assert plan == peak, prog.source


def test_cli_ir_memory_prints_the_plan(tmp_path, capsys) -> None:
    from nzjit.cli import main

    path = tmp_path / "k.py"
    path.write_text(
        "from nzjit import pl\n\n"
        "@pl.kernel\n"
        "def k(x: pl.Tensor[[64, 128], pl.FP32], y: pl.Out[pl.Tensor[[64, 128], pl.FP32]]):\n"
        "    a = pl.load(x, [0, 0], [64, 128])\n"
        "    pl.store(pl.add(a, a), [0, 0], y)\n"
    )
    capsys.readouterr()
    assert main(["ir", str(path), "--memory"]) == 0
    out = capsys.readouterr().out
    assert "on-chip memory plan (A2A3): peak bytes per space" in out
    assert "Vec   (UB )    65536 /   196608 B" in out  # a and the sum live together
    assert f"a: f32[64,128]@Vec  32768 B  ({path}:5)" in out


@pl.kernel
def rebinds_in_an_arm(
    x: pl.Tensor[[16, 512], pl.FP16],
    w: pl.Tensor[[128, 512], pl.FP16],
    y: pl.Out[pl.Tensor[[16, 256], pl.FP32]],
):
    for nb in pl.spmd(2):
        acc = pl.matmul(
            pl.load(x, [0, 0], [16, 128], target_memory=pl.Mem.Mat),
            pl.load(w, [0, 0], [128, 128], target_memory=pl.Mem.Mat),
        )
        for kb in pl.range(4):
            a = pl.load(x, [0, kb * 128], [16, 128], target_memory=pl.Mem.Mat)
            b = pl.load(w, [0, kb * 128], [128, 128], target_memory=pl.Mem.Mat)
            if kb == 0:  # the arm never reads the carry: it dies on entry, on every path
                acc = pl.matmul(a, b)
            else:
                acc = pl.matmul_acc(acc, a, b)
        pl.store(acc, [0, nb * 128], y)


@pytest.mark.parametrize("options", [Options(), Options(batch=False), Options(fast=False)], ids=str)
def test_a_carry_an_arm_never_reads_is_freed_on_entry_on_every_path(options) -> None:
    # the batched path once held the old accumulator through the arm: two Acc tiles at run time
    # where the plan (and the per-lane path) counted one (examples/qwen3_decode_proj.py)
    args = (np.ones((16, 512), np.float16), np.ones((128, 512), np.float16), np.zeros((16, 256), np.float32))
    with using(options):
        assert runtime_peak(rebinds_in_an_arm, args) == planned(rebinds_in_an_arm, args)
    assert planned(rebinds_in_an_arm, args)["Acc"] == 16 * 128 * 4
