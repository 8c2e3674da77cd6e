"""Staged loops: rebinding a name has Python semantics (a loop-carried value), plain `range`
unrolls, pl.range / pl.pipeline / pl.spmd are traced once (api.md "Loops").

Scalars are observed numerically: a kernel loads row `s` of `ROWS` (row r holds the value r in
every column) and stores it to a known row of the output, so `out[j, 0]` shows the value of `s`.
"""

from __future__ import annotations

import numpy as np
import pytest

from nzjit import pl
from nzjit import prims as P

R = 64
ROWS = np.repeat(np.arange(R, dtype=np.int32)[:, None], 16, axis=1)
X = pl.Tensor[[R, 16], pl.INT32]
OUT = pl.Out[pl.Tensor[[32, 16], pl.INT32]]
U = -1  # a row no store writes: the poison pattern of fresh device memory (docs/safety.md)


def show(x, value, j, out):
    """Make `value` visible as out[j, 0]."""
    pl.store(pl.load(x, [value, 0], [1, 16]), [j, 0], out)


def loops(g):
    return [e for e in g.walk() if e.primitive is P.for_p]


def run(kernel, n):
    out = kernel(ROWS)
    return [int(v) for v in out[:n, 0]]


def test_carried_scalar_sum_starting_from_a_python_number():
    @pl.kernel
    def k(x: X, out: OUT):
        s = 0
        for i in pl.range(5):
            s = s + i
        show(x, s, 0, out)

    assert run(k, 1) == [0 + 1 + 2 + 3 + 4]
    (loop,) = loops(k.lower().ir("trace"))
    assert loop.params["arity"] == (3, 0, 1)  # one carry, its body reads the carry parameter
    body = loop.params["body"]
    assert body.eqns[0].inputs[0] is body.params[1]


def test_a_carry_read_before_another_carry_starts_as_a_number():
    @pl.kernel
    def k(x: X, out: OUT):
        last = 0
        total = 0
        for i in pl.range(5):
            total = total + last  # a Python 0 + 0 on the first trace: it becomes a carry later
            last = i
        show(x, total, 0, out)
        show(x, last, 1, out)

    assert run(k, 2) == [0 + 0 + 1 + 2 + 3, 4]


def test_carried_scalar_sum_starting_from_a_traced_value():
    @pl.kernel
    def k(x: X, out: OUT):
        s = pl.get_block_idx() + 3
        for i in pl.range(1, 4):
            s = s + i * 2
        show(x, s, 0, out)

    assert run(k, 1) == [3 + 2 + 4 + 6]


def test_carried_acc_tile_matmul_accumulates():
    @pl.kernel
    def k(
        a: pl.Tensor[[16, 128], pl.INT8],
        b: pl.Tensor[[16, 128], pl.INT8],
        out: pl.Out[pl.Tensor[[16, 16], pl.INT32]],
    ):
        acc = pl.matmul(
            pl.load(a, [0, 0], [16, 32], target_memory=pl.Mem.Mat),
            pl.load(b, [0, 0], [16, 32], target_memory=pl.Mem.Mat),
            b_trans=True,
        )
        for k0 in pl.range(32, 128, 32):
            at = pl.load(a, [0, k0], [16, 32], target_memory=pl.Mem.Mat)
            bt = pl.load(b, [0, k0], [16, 32], target_memory=pl.Mem.Mat)
            acc = pl.matmul_acc(acc, at, bt, b_trans=True)
        pl.store(acc, [0, 0], out)

    rng = np.random.default_rng(1)
    a = rng.integers(-128, 128, (16, 128), dtype=np.int8)
    b = rng.integers(-128, 128, (16, 128), dtype=np.int8)
    np.testing.assert_array_equal(k(a, b), a.astype(np.int32) @ b.astype(np.int32).T)
    (loop,) = loops(k.lower().ir("trace"))
    (carry,) = loop.outputs
    assert str(carry.type) == "i32[16,16]@Acc" and carry.hint == "acc"


def test_nested_loops_carry_through_both_levels():
    @pl.kernel
    def k(x: X, out: OUT):
        s = 0
        for i in pl.range(3):
            for j in pl.range(4):
                s = s + j
            s = s + i
        show(x, s, 0, out)

    assert run(k, 1) == [3 * (0 + 1 + 2 + 3) + 0 + 1 + 2]
    outer = loops(k.lower().ir("trace"))[0]
    inner = loops(outer.params["body"])[0]
    assert len(outer.outputs) == 1 and len(inner.outputs) == 1


def test_a_carry_the_body_does_not_read_keeps_the_last_value():
    @pl.kernel
    def k(x: X, out: OUT):
        last = pl.get_block_idx()
        other = 0
        for i in pl.range(5):
            last = i * 2
            other = i  # a second name bound to the loop variable is carried too
        show(x, last, 0, out)
        show(x, other, 1, out)

    assert run(k, 2) == [8, 4]


def test_zero_trip_loops_keep_the_initial_value():
    @pl.kernel
    def k(x: X, n: pl.Scalar[pl.INDEX], out: OUT):
        z = pl.get_block_idx() + 3
        for _i in pl.range(5, 5):
            z = z + 100
        w = 7
        for i in pl.range(n):
            w = w + i
        show(x, z, 0, out)
        show(x, w, 1, out)

    out = k(ROWS, 0)
    assert [int(v) for v in out[:2, 0]] == [3, 7]
    out = k(ROWS, 4)
    assert [int(v) for v in out[:2, 0]] == [3, 7 + 0 + 1 + 2 + 3]


def test_plain_range_unrolls_at_trace_time():
    @pl.kernel
    def k(x: X, out: OUT):
        for i in range(3):
            show(x, i + 40, i, out)

    assert run(k, 3) == [40, 41, 42]
    g = k.lower().ir("trace")
    assert not loops(g) and sum(e.primitive is P.tile_load_p for e in g.eqns) == 3


def test_range_stop_and_start_stop_step_with_a_traced_start():
    @pl.kernel
    def k(x: X, out: OUT):
        for r in pl.range(3):
            show(x, r + 10, r, out)
        core = pl.get_block_idx()
        for r in pl.range(core, 7, 3):
            show(x, r + 20, r + 3, out)

    assert run(k, 10) == [10, 11, 12, 20, U, U, 23, U, U, 26]
    second = loops(k.lower().ir("trace"))[1]
    start = second.inputs[0]
    assert start.hint == "core"  # the traced start is the loop's operand, not a constant


def test_spmd_lanes_each_have_their_own_block_index():
    @pl.kernel
    def k(x: X, out: OUT):
        for lane in pl.spmd(4):
            idx = pl.get_block_idx()
            num = pl.get_block_num()
            show(x, idx * 10 + num, lane, out)
            for r in pl.range(idx, 8, 4):  # a lane-dependent traced start
                show(x, r + 50, r + 8, out)

    assert run(k, 16) == [4, 14, 24, 34, U, U, U, U, 50, 51, 52, 53, 54, 55, 56, 57]


def test_range_from_the_lane_index_with_a_step():
    @pl.kernel
    def k(x: X, out: OUT):
        for _lane in pl.spmd(2):
            core = pl.get_block_idx()
            for r in pl.range(core, 4, 2):  # lane 0: 0, 2; lane 1: 1, 3
                show(x, r * 10 + core, r, out)

    assert run(k, 4) == [0, 11, 20, 31]


def test_get_block_num_outside_spmd_is_one():
    @pl.kernel
    def k(x: X, out: OUT):
        show(x, pl.get_block_num() + pl.get_block_idx(), 0, out)

    assert run(k, 1) == [1]


def test_pipeline_keeps_its_stage():
    @pl.kernel
    def k(x: X, out: OUT):
        for i in pl.pipeline(0, 4, 2, stage=3):
            show(x, i, i, out)

    (loop,) = loops(k.lower().ir("trace"))
    assert loop.params["kind"] == "pipeline" and loop.params["stage"] == 3
    assert run(k, 4) == [0, U, 2, U]


def test_loops_are_traced_once_and_unused_carries_are_dropped():
    calls = []

    @pl.kernel
    def k(
        a: pl.Tensor[[16, 64], pl.FP16],
        b: pl.Tensor[[64, 16], pl.FP16],
        out: pl.Out[pl.Tensor[[16, 16], pl.FP32]],
    ):
        at = pl.load(a, [0, 0], [16, 32], target_memory=pl.Mem.Mat)
        bt = pl.load(b, [0, 0], [32, 16], target_memory=pl.Mem.Mat)
        acc = pl.matmul(at, bt)
        for k0 in pl.pipeline(32, 64, 32):
            calls.append(k0)
            at = pl.load(a, [0, k0], [16, 32], target_memory=pl.Mem.Mat)  # rebound, never read after
            bt = pl.load(b, [k0, 0], [32, 16], target_memory=pl.Mem.Mat)
            acc = pl.matmul_acc(acc, at, bt)
        pl.store(acc, [0, 0], out)

    (loop,) = loops(k.lower().ir("trace"))
    assert len(calls) == 1
    assert [v.hint for v in loop.outputs] == ["acc"]  # `at` / `bt` need not be carried


def test_a_loop_over_many_trips_does_not_exhaust_l1():
    """A tile reloaded under its old name every trip must not stay live trip after trip."""
    K = 8192

    @pl.kernel
    def k(
        a: pl.Tensor[[16, K], pl.INT8],
        b: pl.Tensor[[16, K], pl.INT8],
        out: pl.Out[pl.Tensor[[16, 16], pl.INT32]],
    ):
        at = pl.load(a, [0, 0], [16, 128], target_memory=pl.Mem.Mat)
        bt = pl.load(b, [0, 0], [16, 128], target_memory=pl.Mem.Mat)
        acc = pl.matmul(at, bt, b_trans=True)
        for k0 in pl.pipeline(128, K, 128):
            at = pl.load(a, [0, k0], [16, 128], target_memory=pl.Mem.Mat)
            bt = pl.load(b, [0, k0], [16, 128], target_memory=pl.Mem.Mat)
            acc = pl.matmul_acc(acc, at, bt, b_trans=True)
        pl.store(acc, [0, 0], out)

    rng = np.random.default_rng(2)
    a = rng.integers(-128, 128, (16, K), dtype=np.int8)
    b = rng.integers(-128, 128, (16, K), dtype=np.int8)
    np.testing.assert_array_equal(k(a, b), a.astype(np.int32) @ b.astype(np.int32).T)


@pytest.mark.parametrize("kind", ["range", "pipeline"])
def test_carried_tensor_alias_of_a_store(kind):
    @pl.kernel
    def k(x: X, out: OUT):
        for i in pl.range(4) if kind == "range" else pl.pipeline(0, 4, 1):
            out = pl.store(pl.load(x, [i + 5, 0], [1, 16]), [i, 0], out)
        show(x, 60, 4, out)

    assert run(k, 5) == [5, 6, 7, 8, 60]
