"""The cross-core pipe's slot buffers in the memory plan (issue 23 item 8, issue 22's split kernel):
the consumer of each direction holds `slot_size * SLOT_NUM` bytes for the whole kernel (UB for cube
-> vector, L1 for vector -> cube), as the split text's `pto.reserve_buffer` does. `low.memory()`
and `nzjit ir --memory` show them, and the simulator charges them too, so the plan still equals the
run-time peak (on the fuzz programs that move between the cores as well)."""

from __future__ import annotations

import re

import numpy as np
import pytest
from test_memory_plan import _zeros_for, planned, runtime_peak

from nzjit import CompileError, pl
from nzjit.passes.pipe_buffers import SLOT_NUM, pipe_buffers, pipe_of

M, K, N = 16, 64, 32


@pl.kernel
def c2v(a: pl.Tensor[[M, K], pl.FP16], b: pl.Tensor[[K, N], pl.FP16], y: pl.Out[pl.Tensor[[M, N], pl.FP32]]):
    acc = pl.matmul(
        pl.load(a, [0, 0], [M, K], target_memory=pl.Mem.Mat),
        pl.load(b, [0, 0], [K, N], target_memory=pl.Mem.Mat),
    )
    pl.store(pl.exp(pl.move(acc, target_memory=pl.Mem.Vec)), [0, 0], y)


@pl.kernel
def both_ways(
    x: pl.Tensor[[M, K], pl.FP16], b: pl.Tensor[[K, N], pl.FP16], y: pl.Out[pl.Tensor[[M, N], pl.FP32]]
):
    v = pl.load(x, [0, 0], [M, K])  # Vec
    left = pl.move(pl.move(v, target_memory=pl.Mem.Mat), target_memory=pl.Mem.Left)  # vector -> cube
    acc = pl.matmul(
        left, pl.move(pl.load(b, [0, 0], [K, N], target_memory=pl.Mem.Mat), target_memory=pl.Mem.Right)
    )
    pl.store(pl.move(acc, target_memory=pl.Mem.Vec), [0, 0], y)  # cube -> vector


def _args(k):
    return _zeros_for(k)


def test_a_cube_to_vector_pipe_holds_its_ub_slot_buffer() -> None:
    low = c2v.lower(*_args(c2v))
    (buf,) = pipe_buffers(low.final)
    slot = M * N * 4  # the pushed FP32 tile
    assert (
        pipe_of(low.final).slot_size == slot and buf.nbytes == slot * SLOT_NUM and buf.memory.value == "Vec"
    )
    plan = low.memory()
    assert any(b.name == "c2v slot buffer" and b.nbytes == slot * SLOT_NUM for b in plan.at_peak["Vec"])
    # the popped tile and exp's result live with it at the Vec peak
    assert plan.peak["Vec"] == slot * SLOT_NUM + 2 * slot
    assert f"c2v slot buffer: ui8[{slot * SLOT_NUM}]@Vec  {slot * SLOT_NUM} B" in str(plan)
    # the split text reserves the same bytes in the same space
    text = low.pto()
    assert re.search(
        rf'"c2v_c2v_slot_buffer", size = {slot * SLOT_NUM}, location = #pto.address_space<vec>', text
    )
    assert planned(c2v, _args(c2v)) == runtime_peak(c2v, _args(c2v))


def test_both_directions_hold_a_ub_and_an_l1_buffer() -> None:
    low = both_ways.lower(*_args(both_ways))
    bufs = {b.name: b for b in pipe_buffers(low.final)}
    size = pipe_of(low.final).slot_size * SLOT_NUM
    assert {n: (b.memory.value, b.nbytes) for n, b in bufs.items()} == {
        "c2v slot buffer": ("Vec", size),
        "v2c slot buffer": ("Mat", size),
    }
    assert planned(both_ways, _args(both_ways)) == runtime_peak(both_ways, _args(both_ways))


def test_a_kernel_without_a_pipe_holds_none() -> None:
    @pl.kernel(target=pl.A5)  # A5 moves on chip (TMOV): no pipe
    def k(
        a: pl.Tensor[[M, K], pl.FP16], b: pl.Tensor[[K, N], pl.FP16], y: pl.Out[pl.Tensor[[M, N], pl.FP32]]
    ):
        acc = pl.matmul(
            pl.load(a, [0, 0], [M, K], target_memory=pl.Mem.Mat),
            pl.load(b, [0, 0], [K, N], target_memory=pl.Mem.Mat),
        )
        pl.store(pl.exp(pl.move(acc, target_memory=pl.Mem.Vec)), [0, 0], y)

    assert pipe_buffers(k.lower(*_args(k)).final) == []


def test_the_pipe_buffer_counts_against_ub_capacity() -> None:
    # a 16x1536 FP32 push: 96 KiB slots x 8 = 768 KiB of UB, over the 192 KiB UB: refused at compile time
    @pl.kernel
    def big(
        a: pl.Tensor[[16, 64], pl.FP16],
        b: pl.Tensor[[64, 1536], pl.FP16],
        y: pl.Out[pl.Tensor[[16, 1536], pl.FP32]],
    ):
        acc = pl.matmul(
            pl.load(a, [0, 0], [16, 64], target_memory=pl.Mem.Mat),
            pl.load(b, [0, 0], [64, 1536], target_memory=pl.Mem.Mat),
        )
        pl.store(pl.move(acc, target_memory=pl.Mem.Vec), [0, 0], y)

    with pytest.raises(CompileError) as ei:
        big(np.zeros((16, 64), np.float16), np.zeros((64, 1536), np.float16))
    assert "on-chip memory plan: Vec (UB) needs" in str(ei.value) and "'c2v slot buffer'" in str(ei.value)


def test_some_fuzz_programs_have_a_pipe() -> None:
    from nzjit.fuzz import generate

    with_pipe = 0
    for i in range(40):
        prog = generate(23, i, family="vec_mix")
        ns: dict = {"__name__": f"fuzz_{prog.name}"}
        exec(compile(prog.source, f"fuzz_{prog.name}.py", "exec"), ns)
        try:
            args = _zeros_for(ns["kernel"])
            with_pipe += bool(args is not None and pipe_buffers(ns["kernel"].lower(*args).final))
        except (ValueError, CompileError):
            continue
    # test_memory_plan.py's agreement test over these 40 programs covers pipes, not only pure-vector ones
    assert with_pipe >= 5
