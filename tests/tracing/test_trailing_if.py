"""An `if` on a traced value that is the last statement of the kernel (issue 23 item 3).

Python 3.11+ compiles the function's implicit `return` into every arm of a trailing `if`, and a
trace function may move the frame only at a 'line' event, which never comes between an arm's end
and that return. So the `then` arm returns from the kernel; its `else` arm is traced by calling the
kernel a second time and jumping, at the new frame's first line, to the `else` arm with the names
set to their values before the `if` (language/branch.py `replay_returned`). The result is the same
two `cond` equations (two `scf.if`) as for an if/else in the middle of a body. A helper function
ending in an `if` cannot be replayed and stays refused, with the fix. An if/else that ends a
staged loop's body closes with the trip."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from nzjit import CompileError, pl

RUNS: list[int] = []  # the kernel's first statement appends here: the replay must not run it again


@pl.kernel
def last_if_else(
    x: pl.Tensor[[4, 64], pl.FP32], y: pl.Out[pl.Tensor[[4, 64], pl.FP32]], n: pl.Scalar[pl.INT32]
):
    RUNS.append(1)
    t = pl.load(x, [0, 0], [4, 64])
    u = pl.add(t, t)
    if n > 1:
        pl.store(pl.neg(t), [0, 0], y)
    elif n > 0:
        pl.store(u, [0, 0], y)
    else:
        if n > -1:
            pl.store(t, [0, 0], y)
        else:
            pl.store(pl.mul(u, u), [0, 0], y)


@pl.kernel
def last_one_armed(
    x: pl.Tensor[[4, 64], pl.FP32], y: pl.Out[pl.Tensor[[4, 64], pl.FP32]], flag: pl.Scalar[pl.BOOL]
):
    t = pl.load(x, [0, 0], [4, 64])
    pl.store(t, [0, 0], y)
    if flag:  # item 5: an `if` on a BOOL scalar parameter, here the kernel's last statement
        pl.store(pl.neg(t), [0, 0], y)


@pl.kernel
def then_arm_ends_in_an_if_else(
    x: pl.Tensor[[4, 64], pl.FP32], y: pl.Out[pl.Tensor[[4, 64], pl.FP32]], n: pl.Scalar[pl.INT32]
):
    t = pl.load(x, [0, 0], [4, 64])
    if n > 0:
        if n > 1:
            pl.store(pl.add(t, t), [0, 0], y)
        else:
            pl.store(t, [0, 0], y)
    else:
        pl.store(pl.neg(t), [0, 0], y)


@pl.kernel
def loop_body_ends_in_an_if_else(
    x: pl.Tensor[[4, 64], pl.FP32], y: pl.Out[pl.Tensor[[4, 64], pl.FP32]], n: pl.Scalar[pl.INT32]
):
    for i in pl.range(4):
        t = pl.load(x, [i, 0], [1, 64])
        if pl.cast(i, pl.INT32) < n:
            pl.store(t, [i, 0], y)
        else:
            pl.store(pl.neg(t), [i, 0], y)


X = np.arange(256, dtype=np.float32).reshape(4, 64) - 100


@pytest.mark.parametrize("n", [2, 1, 0, -1])
def test_an_if_elif_else_that_ends_the_kernel_matches_numpy(n: int) -> None:
    ref = -X if n > 1 else (2 * X if n > 0 else (X if n > -1 else (2 * X) ** 2))
    np.testing.assert_array_equal(last_if_else(X, n), ref)


def test_the_replay_does_not_run_the_body_before_the_if_again() -> None:
    RUNS.clear()
    before = len(RUNS)
    pl.kernel(last_if_else.fn).lower()
    assert len(RUNS) == before + 1  # one trace; the three replays jump past the first statement


def test_the_trailing_if_else_is_two_conds_and_two_scf_ifs() -> None:
    low = last_if_else.lower()
    top = [e.primitive.name for e in low.ir("trace").eqns]
    assert top == ["tile.load", "tile.add", "gt", "cond", "cond"]
    assert low.ir("trace").eqns[-1].params["negate"] is True
    text = low.pto()
    # three if/else levels: six scf.if, three negated predicates
    assert text.count("scf.if ") == 6 and text.count("arith.xori") == 3


@pytest.mark.parametrize("flag", [True, False])
def test_a_one_armed_if_that_ends_the_kernel(flag: bool) -> None:
    np.testing.assert_array_equal(last_one_armed(X, flag), -X if flag else X)
    assert [e.primitive.name for e in last_one_armed.lower().ir("trace").eqns][-1] == "cond"


@pytest.mark.parametrize("n", [2, 1, 0])
def test_a_then_arm_that_ends_in_an_if_else(n: int) -> None:
    np.testing.assert_array_equal(then_arm_ends_in_an_if_else(X, n), 2 * X if n > 1 else (X if n > 0 else -X))


@pytest.mark.parametrize("n", [0, 2, 4])
def test_an_if_else_that_ends_a_staged_loop_body(n: int) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the stores in the arms write `y` (no UnwrittenOutputWarning)
        out = loop_body_ends_in_an_if_else(X, n)
    np.testing.assert_array_equal(out, np.where(np.arange(4)[:, None] < n, X, -X))


def test_the_line_trace_is_removed_after_a_replay() -> None:
    import sys

    before = sys.gettrace()
    pl.kernel(last_if_else.fn).lower()
    assert sys.gettrace() is before


def _store_either(t, y, n):  # a helper whose last statement is an if/else on a traced value
    if n > 0:
        pl.store(t, [0, 0], y)
    else:
        pl.store(pl.neg(t), [0, 0], y)


def test_a_helper_that_ends_in_an_if_is_refused_with_the_fix(line_of) -> None:
    def f(x: pl.Tensor[[4, 64], pl.FP32], y: pl.Out[pl.Tensor[[4, 64], pl.FP32]], n: pl.Scalar[pl.INT32]):
        _store_either(pl.load(x, [0, 0], [4, 64]), y, n)
        pl.store(pl.load(x, [0, 0], [4, 64]), [0, 0], y)

    with pytest.raises(CompileError) as ei:
        pl.kernel(f).lower()
    err = ei.value
    assert "an `if` on a traced value that ends a helper function is not staged" in str(err)
    assert (
        err.help
        == "put a statement after the `if` in the helper (`pass` is enough), or inline the helper into the kernel"
    )
    assert err.source is not None and err.source.line == line_of(_store_either, "if n > 0")


def _store_either_then_pass(t, y, n):
    if n > 0:
        pl.store(t, [0, 0], y)
    else:
        pl.store(pl.neg(t), [0, 0], y)
    pass  # the fix the refusal names


@pytest.mark.parametrize("n", [1, 0])
def test_the_helper_fix_works(n: int) -> None:
    @pl.kernel
    def f(x: pl.Tensor[[4, 64], pl.FP32], y: pl.Out[pl.Tensor[[4, 64], pl.FP32]], n: pl.Scalar[pl.INT32]):
        _store_either_then_pass(pl.load(x, [0, 0], [4, 64]), y, n)

    np.testing.assert_array_equal(f(X, n), X if n > 0 else -X)
