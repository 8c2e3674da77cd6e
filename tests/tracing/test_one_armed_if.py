"""A one-armed `if` on a traced value inside pl.range, staged as `cond` (issue 28): the implicit else
keeps every name as it was; side-effect-only arms; IR, PTO text, results and refusals."""

from __future__ import annotations

import numpy as np
import pytest

from nzjit import CompileError, pl


@pl.kernel
def doubling(x: pl.Tensor[[1, 64], pl.FP32], y: pl.Out[pl.Tensor[[1, 64], pl.FP32]], n: pl.Scalar[pl.INT32]):
    acc = pl.load(x, [0, 0], [1, 64])
    for i in pl.range(4):
        if pl.cast(i, pl.INT32) < n:
            acc = pl.add(acc, acc)  # a carry: kept when the condition fails
    pl.store(acc, [0, 0], y)


@pl.kernel
def pick_row(x: pl.Tensor[[4, 64], pl.FP32], y: pl.Out[pl.Tensor[[1, 64], pl.FP32]], r: pl.Scalar[pl.INT32]):
    for i in pl.range(4):
        if pl.cast(i, pl.INT32) == r:
            pl.store(pl.load(x, [i, 0], [1, 64]), [0, 0], y)  # side effect only


@pl.kernel
def nested(x: pl.Tensor[[4, 64], pl.FP32], y: pl.Out[pl.Tensor[[1, 64], pl.FP32]], r: pl.Scalar[pl.INT32]):
    acc = pl.load(x, [0, 0], [1, 64])
    for i in pl.range(1, 4):
        if pl.cast(i, pl.INT32) >= r:
            for _j in pl.range(2):  # a loop inside the arm
                acc = pl.add(acc, pl.load(x, [i, 0], [1, 64]))
            if pl.cast(i, pl.INT32) == r:  # an arm inside the arm
                acc = pl.add(acc, acc)
    pl.store(acc, [0, 0], y)


def test_ir_of_a_carried_arm() -> None:
    ir = str(doubling.lower().ir("trace"))
    assert "b:i1 = lt a n_1" in ir
    assert "acc_3:f32[1,64]@Vec = cond b acc_2" in ir
    assert "{ lambda ; cond:i1 acc_4:f32[1,64]@Vec. let" in ir and "in (acc_3) }" in ir


@pytest.mark.parametrize("n", range(5))
def test_carried_arm_runs_only_when_the_condition_holds(n: int) -> None:
    x = np.arange(64, dtype=np.float32).reshape(1, 64)
    np.testing.assert_array_equal(doubling(x, n), x * 2 ** min(n, 4))


@pytest.mark.parametrize("r", range(4))
def test_side_effect_only_arm(r: int) -> None:
    x = np.arange(256, dtype=np.float32).reshape(4, 64)
    y = np.full((1, 64), -1, np.float32)
    np.testing.assert_array_equal(pick_row(x, y, r), x[r : r + 1])


@pytest.mark.parametrize("r", range(5))
def test_loops_and_arms_inside_an_arm(r: int) -> None:
    x = np.arange(256, dtype=np.float32).reshape(4, 64) % 7
    ref = x[0:1].copy()
    for i in range(1, 4):
        if i >= r:
            ref = ref + 2 * x[i : i + 1]
            if i == r:
                ref = ref * 2
    np.testing.assert_array_equal(nested(x, r), ref)


def test_pto_text_is_an_scf_if_with_an_else_that_keeps_the_carry() -> None:
    text = doubling.lower().pto()
    assert "%acc_3 = scf.if %v_1 -> (!pto.tile_buf<" in text
    assert "} else {\n      scf.yield %acc_2 : !pto.tile_buf<" in text
    side = pick_row.lower().pto()
    assert "    scf.if %v_1 {\n" in side and "} else {" not in side


def _refusal(src_fn) -> str:
    k = pl.kernel(src_fn)
    with pytest.raises(CompileError) as ei:
        k.lower()
    return str(ei.value)


def test_if_with_else_is_staged_now() -> None:
    # issue 23 (spec change): the if/else that issue 28 refused is staged as two arms
    # (tests/tracing/test_if_else.py has the full coverage)
    @pl.kernel
    def f(x: pl.Tensor[[1, 64], pl.FP32], y: pl.Out[pl.Tensor[[1, 64], pl.FP32]], n: pl.Scalar[pl.INT32]):
        t = pl.load(x, [0, 0], [1, 64])
        for i in pl.range(4):
            if pl.cast(i, pl.INT32) < n:
                t = pl.add(t, t)
            else:
                t = pl.sub(t, t)
        pl.store(t, [0, 0], y)

    x = np.arange(64, dtype=np.float32).reshape(1, 64)
    np.testing.assert_array_equal(f(x, 4), x * 16)
    np.testing.assert_array_equal(f(x, 2), x * 0)


def test_while_and_or_stay_refused() -> None:
    def w(x: pl.Tensor[[1, 64], pl.FP32], n: pl.Scalar[pl.INT32]):
        for i in pl.range(4):
            while pl.cast(i, pl.INT32) < n:
                pl.load(x, [0, 0], [1, 64])

    def o(x: pl.Tensor[[1, 64], pl.FP32], n: pl.Scalar[pl.INT32]):
        for i in pl.range(4):
            if pl.cast(i, pl.INT32) < n or pl.cast(i, pl.INT32) > n:
                pl.load(x, [0, 0], [1, 64])

    for fn in (w, o):
        msg = _refusal(fn)
        assert "a Python `if`/`while`/`and`/`or` on a traced value cannot be staged" in msg
        assert "help: compute both sides, or use pl.min / pl.max" in msg


def test_a_python_value_changed_in_the_arm_is_refused() -> None:
    def f(x: pl.Tensor[[1, 64], pl.FP32], y: pl.Out[pl.Tensor[[1, 64], pl.FP32]], n: pl.Scalar[pl.INT32]):
        k = 0
        for i in pl.range(4):
            if pl.cast(i, pl.INT32) < n:
                k = 1
            pl.store(pl.load(x, [0, 0], [1, 64]), [0, k], y)

    assert "the Python value 'k' changes inside the staged `if`: 0 -> 1" in _refusal(f)


def test_a_carry_changing_type_is_refused() -> None:
    def f(x: pl.Tensor[[1, 64], pl.FP32], y: pl.Out[pl.Tensor[[1, 64], pl.FP16]], n: pl.Scalar[pl.INT32]):
        t = pl.load(x, [0, 0], [1, 64])
        for i in pl.range(4):
            if pl.cast(i, pl.INT32) < n:
                t = pl.cast(t, pl.FP16)
        pl.store(t, [0, 0], y)

    assert "'t' changes type inside the staged `if`" in _refusal(f)
