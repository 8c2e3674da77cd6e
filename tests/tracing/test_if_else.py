"""A two-armed `if` on a traced value (issue 23 item 3): both arms are traced (the `else` arm by a
line-trace jump, language/branch.py), staged as two `cond` equations on one predicate (the second
negated), emitted as two `scf.if`; the PyPTO idiom `if k0 == 0: acc = pl.matmul(...) else:
acc = pl.matmul_acc(acc, ...)`; refusals name the line and the rule."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from nzjit import CompileError, pl


@pl.kernel
def k_split(
    a: pl.Tensor[[64, 256], pl.FP16],
    b: pl.Tensor[[256, 128], pl.FP16],
    c: pl.Out[pl.Tensor[[64, 128], pl.FP32]],
):
    acc = pl.matmul(a[:, 0:64], b[0:64, :])  # any value of the accumulator's type before the loop
    for kb in pl.range(4):
        k0 = kb * 64
        at = a[:, k0 : k0 + 64]
        bt = b[k0 : k0 + 64, :]
        if k0 == 0:
            acc = pl.matmul(at, bt)
        else:
            acc = pl.matmul_acc(acc, at, bt)
    c[:, :] = acc


@pl.kernel
def three_way(x: pl.Tensor[[4, 64], pl.FP32], y: pl.Out[pl.Tensor[[4, 64], pl.FP32]], r: pl.Scalar[pl.INT32]):
    for i in pl.range(4):
        t = pl.load(x, [i, 0], [1, 64])
        j = pl.cast(i, pl.INT32)
        if j < r:
            t = pl.add(t, t)
        elif j == r:
            t = pl.sub(t, t)
        else:
            t = pl.mul(t, t)
        pl.store(t, [i, 0], y)


@pl.kernel
def fresh_scalar(
    x: pl.Tensor[[4, 64], pl.FP32], y: pl.Out[pl.Tensor[[1, 64], pl.FP32]], r: pl.Scalar[pl.INT32]
):
    # `row` is bound in both arms and not before the `if`: a scalar carry (both arms assign it)
    if r > 1:
        row = r - 2
    else:
        row = r + 1
    pl.store(pl.load(x, [row, 0], [1, 64]), [0, 0], y)


@pl.kernel
def flag_top_level(
    x: pl.Tensor[[1, 64], pl.FP32], y: pl.Out[pl.Tensor[[1, 64], pl.FP32]], flag: pl.Scalar[pl.BOOL]
):
    t = pl.load(x, [0, 0], [1, 64])
    if flag:  # an `if` on a BOOL scalar parameter at the kernel's top level (item 5)
        t = pl.add(t, t)
    else:
        t = pl.neg(t)
    pl.store(t, [0, 0], y)


def test_ir_is_two_conds_on_one_predicate() -> None:
    ir = str(k_split.lower().ir("trace"))
    assert "f:i1 = eq k0 0" in ir
    assert "acc_3:f32[64,128] = cond f at bt acc_2" in ir or "= cond f at bt acc_2" in ir
    assert "= cond[negate=True] f at bt acc_" in ir
    assert "tensor.matmul[b_trans=False]" in ir and "tensor.matmul_acc[b_trans=False]" in ir


def test_pto_text_is_scf_if_then_the_negated_else() -> None:
    text = k_split.lower().pto()
    assert "%v = arith.cmpi eq, %k0, %c0 : index" in text
    assert "scf.if %v -> (!pto.tile_buf<loc=acc, dtype=f32, rows=64, cols=128" in text
    assert "%not_v = arith.xori %v, %true : i1" in text
    assert "scf.if %not_v -> (!pto.tile_buf<loc=acc" in text
    assert text.count("pto.tmatmul ins(") == 2 and text.count("pto.tmatmul.acc ins(") == 1


def test_split_k_idiom_matches_numpy() -> None:
    rng = np.random.default_rng(0)
    a = rng.integers(-3, 4, (64, 256)).astype(np.float16)
    b = rng.integers(-3, 4, (256, 128)).astype(np.float16)
    # small integers: every partial sum is exact in f32, whatever the summation order
    np.testing.assert_array_equal(k_split(a, b), a.astype(np.float32) @ b.astype(np.float32))


@pytest.mark.parametrize("r", range(-1, 5))
def test_elif_chains_nest_in_the_else_arm(r: int) -> None:
    x = (np.arange(256, dtype=np.float32).reshape(4, 64) % 5) - 2
    ref = np.stack([x[i] * 2 if i < r else (x[i] * 0 if i == r else x[i] * x[i]) for i in range(4)])
    np.testing.assert_array_equal(three_way(x, r), ref)
    ir = str(three_way.lower().ir("trace"))
    assert ir.count("cond[negate=True]") == 2  # the elif is an if/else inside the outer else arm


@pytest.mark.parametrize("r", range(4))
def test_a_scalar_bound_in_both_arms_only(r: int) -> None:
    x = np.arange(256, dtype=np.float32).reshape(4, 64)
    row = r - 2 if r > 1 else r + 1
    np.testing.assert_array_equal(fresh_scalar(x, r), x[row : row + 1])


@pytest.mark.parametrize("flag", [True, False])
def test_if_on_a_bool_parameter_at_top_level(flag: bool) -> None:
    x = np.arange(64, dtype=np.float32).reshape(1, 64)
    np.testing.assert_array_equal(flag_top_level(x, flag), x * 2 if flag else -x)
    assert "%flag: i1" in flag_top_level.lower().pto()


def test_the_line_trace_is_removed_after_tracing() -> None:
    before = sys.gettrace()
    three_way.lower()
    assert sys.gettrace() is before


def _refusal(src_fn) -> CompileError:
    k = pl.kernel(src_fn)
    with pytest.raises(CompileError) as ei:
        k.lower()
    return ei.value


def test_arms_binding_different_types_are_refused() -> None:
    def f(x: pl.Tensor[[1, 64], pl.FP32], y: pl.Out[pl.Tensor[[1, 64], pl.FP16]], n: pl.Scalar[pl.INT32]):
        t = pl.load(x, [0, 0], [1, 64])
        for i in pl.range(4):
            if pl.cast(i, pl.INT32) < n:  # <- if
                t = pl.cast(t, pl.FP16)
            else:
                t = pl.cast(t, pl.FP16)
        pl.store(t, [0, 0], y)

    err = _refusal(f)
    assert "'t' changes type inside the staged `if`: f32[1,64]@Vec before it, f16[1,64]@Vec in an arm" in str(
        err
    )
    assert "# <- if" in err.render()


def test_a_tile_first_bound_in_both_arms_is_pyptos_phi() -> None:
    # issue 23 (PyPTO's `pl.yield_` in if arms): a tile both arms bind needs no value before the `if`;
    # its start value is an uninitialised tile.create that neither arm's result reads
    @pl.kernel
    def f(x: pl.Tensor[[1, 64], pl.FP32], y: pl.Out[pl.Tensor[[1, 64], pl.FP32]], n: pl.Scalar[pl.INT32]):
        if n > 0:
            t = pl.load(x, [0, 0], [1, 64])
        else:
            t = pl.neg(pl.load(x, [0, 0], [1, 64]))
        pl.store(t, [0, 0], y)

    x = np.arange(64, dtype=np.float32).reshape(1, 64)
    assert [e.primitive.name for e in f.lower(x, np.zeros_like(x), 1).ir().eqns][:4] == [
        "gt",
        "tile.create",
        "cond",
        "cond",
    ]
    assert np.array_equal(f(x, 1), x) and np.array_equal(f(x, 0), -x)


def test_a_tensor_first_bound_in_both_arms_is_refused_with_the_fix() -> None:
    def f(x: pl.Tensor[[2, 64], pl.FP32], y: pl.Out[pl.Tensor[[1, 64], pl.FP32]], n: pl.Scalar[pl.INT32]):
        if n > 0:
            t = x[0:1, :]
        else:
            t = x[1:2, :]
        y[:, :] = pl.load(t, [0, 0], [1, 64])

    err = _refusal(f)
    assert (
        "'t' is first bound inside the staged `if`/`else` to a f32[1,64]; a tensor needs a value before the `if`"
        in str(err)
    )
    assert err.help == "bind 't' before the `if`"


def test_an_arm_ending_in_continue_and_a_conditional_expression_stay_refused() -> None:
    def c(x: pl.Tensor[[1, 64], pl.FP32], y: pl.Out[pl.Tensor[[1, 64], pl.FP32]], n: pl.Scalar[pl.INT32]):
        for i in pl.range(4):
            if pl.cast(i, pl.INT32) < n:
                continue
            pl.store(pl.load(x, [0, 0], [1, 64]), [0, 0], y)

    def e(x: pl.Tensor[[1, 64], pl.FP32], y: pl.Out[pl.Tensor[[1, 64], pl.FP32]], n: pl.Scalar[pl.INT32]):
        t = pl.load(x, [0, 0], [1, 64])
        u = t if n > 0 else pl.neg(t)
        pl.store(u, [0, 0], y)

    assert "an `if` arm ending in `continue` on a traced value is not staged" in str(_refusal(c))
    assert "a Python `if`/`while`/`and`/`or` on a traced value cannot be staged" in str(_refusal(e))


def test_fuzz_programs_with_an_if_else_equal_their_reference() -> None:
    from nzjit.fuzz import classify, generate

    # programs whose lanes race on one output window are refused since issue 24 (fuzz row R1): not these
    progs = [
        p
        for p in (generate(5, i, family="vec_ew") for i in range(160))
        if "ew:branch" in p.tags and p.expect == "ok"
    ][:6]
    assert len(progs) == 6
    for p in progs:
        assert "        else:\n" in p.source and "cond" not in p.source  # an if/else in the kernel text
        o = classify(p)
        assert o.cls == "equal", (p.source, o.error, o.detail)
