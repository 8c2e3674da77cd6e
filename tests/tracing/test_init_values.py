"""PyPTO's explicit loop carries (issue 23 item 6): `for i, (a, b) in pl.range(n, init_values=(a0, b0))`
with the body ending in `a_out, b_out = pl.yield_(a2, b2)`. The carries are the body's parameters,
the yielded values the next trip's carries and, after the loop, its results (one `for` equation,
an `scf.for` with iter_args); `pl.yield_` in an `if` arm is PyPTO's phi (the names the arms bind);
every refusal names its line and the fix."""

from __future__ import annotations

import numpy as np
import pytest

from nzjit import CompileError, pl

rng = np.random.default_rng(6)


@pl.kernel
def sum_and_max(x: pl.Tensor[[64, 64], pl.FP32], y: pl.Out[pl.Tensor[[16, 64], pl.FP32]]):
    acc0 = pl.full([16, 64], dtype=pl.FP32, value=0.0)
    m0 = pl.full([16, 64], dtype=pl.FP32, value=-1e30)
    for i, (acc, m) in pl.range(4, init_values=(acc0, m0)):
        t = pl.load(x, [i * 16, 0], [16, 64])
        acc_out, m_out = pl.yield_(pl.add(acc, t), pl.maximum(m, t))
    pl.store(pl.sub(acc_out, m_out), [0, 0], y)


def test_two_explicit_carries_are_one_loop_with_two_results():
    x = rng.standard_normal((64, 64)).astype(np.float32)
    low = sum_and_max.lower(x, np.zeros((16, 64), np.float32))
    g = low.ir()
    (loop,) = [e for e in g.eqns if e.primitive.name == "for"]
    body = loop.params["body"]
    assert [v.hint for v in loop.outputs] == ["acc_out", "m_out"]
    assert [p.hint for p in body.params[-2:]] == ["acc", "m"]  # the carries are the body's parameters
    assert [o.type for o in body.outputs] == [p.type for p in body.params[-2:]]
    assert [i.hint for i in loop.inputs[-2:]] == ["acc0", "m0"]  # initial values
    assert "iter_args(" in low.pto()
    y = sum_and_max(x)
    xs = x.reshape(4, 16, 64)
    ref = (((xs[0] + xs[1]) + xs[2]) + xs[3]) - xs.max(axis=0)  # the device's order of the adds
    assert np.array_equal(y, ref)


def test_a_scalar_carry_and_the_loop_index_with_start_and_step():
    @pl.kernel
    def k(x: pl.Tensor[[1, 64], pl.INT32], y: pl.Out[pl.Tensor[[1, 64], pl.INT32]]):
        t0 = pl.load(x, [0, 0], [1, 64])
        for i, (t, s) in pl.range(2, 10, 3, init_values=(t0, 0)):  # i = 2, 5, 8
            t_out, s_out = pl.yield_(pl.add(t, pl.cast(i, pl.INT32)), s + i)
        pl.store(pl.add(t_out, pl.cast(s_out, pl.INT32)), [0, 0], y)

    x = rng.integers(-50, 50, (1, 64)).astype(np.int32)
    assert np.array_equal(k(x), x + 15 + 15)


def test_yield_in_if_arms_is_the_phi_of_the_if_k0_idiom():
    @pl.kernel
    def k(
        a: pl.Tensor[[64, 256], pl.FP16],
        b: pl.Tensor[[256, 128], pl.FP16],
        c: pl.Out[pl.Tensor[[64, 128], pl.FP32]],
    ):
        acc0 = pl.matmul(a[:, 0:64], b[0:64, :])
        for kb, (acc,) in pl.range(4, init_values=(acc0,)):
            k0 = kb * 64
            nxt = acc
            if k0 == 0:
                nxt = pl.yield_(pl.matmul(a[:, k0 : k0 + 64], b[k0 : k0 + 64, :]))
            else:
                nxt = pl.yield_(pl.matmul_acc(acc, a[:, k0 : k0 + 64], b[k0 : k0 + 64, :]))
            out = pl.yield_(nxt)
        c[:, :] = out

    a = rng.integers(-3, 4, (64, 256)).astype(np.float16)
    b = rng.integers(-3, 4, (256, 128)).astype(np.float16)
    low = k.lower(a, b, np.zeros((64, 128), np.float32))
    assert "scf.if" in low.pto()
    assert np.array_equal(k(a, b), a.astype(np.float32) @ b.astype(np.float32))


def test_a_vec_tile_first_bound_in_both_arms_needs_no_value_before_the_if():
    # PyPTO's phi: both arms bind `v`; its start value is an uninitialised tile.create, never read
    @pl.kernel
    def k(x: pl.Tensor[[64, 64], pl.FP32], y: pl.Out[pl.Tensor[[64, 64], pl.FP32]]):
        for i in pl.range(4):
            t = pl.load(x, [i * 16, 0], [16, 64])
            if i == 0:
                v = pl.add(t, 1.0)
            else:
                v = pl.mul(t, 2.0)
            pl.store(v, [i * 16, 0], y)

    x = rng.standard_normal((64, 64)).astype(np.float32)
    g = k.lower(x, np.zeros_like(x)).ir()
    (loop,) = [e for e in g.eqns if e.primitive.name == "for"]
    names = [e.primitive.name for e in loop.params["body"].eqns]
    assert names.count("cond") == 2 and names.index("tile.create") < names.index("cond")
    ref = x * 2
    ref[:16] = x[:16] + 1
    assert np.array_equal(k(x), ref)


def test_yield_outside_a_trace_returns_its_values():
    assert pl.yield_(3) == 3 and pl.yield_(1, 2) == (1, 2)


def _lower(body):
    @pl.kernel
    def k(x: pl.Tensor[[16, 64], pl.FP32], y: pl.Out[pl.Tensor[[16, 64], pl.FP32]]):
        body(pl.load(x, [0, 0], [16, 64]), y)

    return k.lower(np.zeros((16, 64), np.float32), np.zeros((16, 64), np.float32))


def _no_yield(t, y):
    for _i, (a,) in pl.range(4, init_values=(t,)):
        pl.add(a, a)


def _two_values(t, y):
    for _i, (a,) in pl.range(4, init_values=(t,)):
        pl.yield_(a, a)


def _other_type(t, y):
    for _i, (a,) in pl.range(4, init_values=(t,)):
        pl.yield_(pl.cast(a, pl.FP16))


def _twice(t, y):
    for _i, (a,) in pl.range(4, init_values=(t,)):
        pl.yield_(a)
        pl.yield_(a)


def _python_float(t, y):
    for _i, (_a,) in pl.range(4, init_values=(1.5,)):
        pass


def _yield_a_number(t, y):
    for _i, (_a,) in pl.range(4, init_values=(t,)):
        pl.yield_(2)


def _empty(t, y):
    for _i in pl.range(4, init_values=()):
        pass


@pytest.mark.parametrize(
    "body,message,help_text",
    [
        (
            _no_yield,
            r"the body of pl.range with init_values \(line \d+\) does not end with pl.yield_",
            "help: end the body with `c0 = pl.yield_(...)`",
        ),
        (
            _two_values,
            r"pl.yield_ gives 2 values to pl.range with 1 init_values",
            "help: yield one value per init value",
        ),
        (
            _other_type,
            r"pl.yield_ value 0 is f16\[16,64\]@Vec, init value 0 of pl.range is f32\[16,64\]@Vec; a carry "
            "keeps one type",
            "help: yield a value of the init value's shape",
        ),
        (_twice, r"a second pl.yield_ in one loop body", None),
        (
            _python_float,
            r"pl.range init_values are traced values or ints, got 1.5",
            "help: make a float start value",
        ),
        (
            _yield_a_number,
            r"pl.yield_ of a loop's carries takes traced values, got 2",
            "help: yield the carry itself",
        ),
        (_empty, r"pl.range init_values must be a non-empty tuple of values, got \(\)", None),
    ],
)
def test_refusals(body, message, help_text):
    with pytest.raises(CompileError, match=message) as ei:
        _lower(body)
    assert "test_init_values.py:" in str(ei.value)
    if help_text:
        assert help_text in str(ei.value)
