"""What the tracer cannot stage faithfully is refused with a CompileError naming the kernel line
(api.md "Loops"): the message starts `file:line: ` at the offending line, checked exactly."""

from __future__ import annotations

import sys

import pytest

import nzjit
from nzjit import pl

V = pl.Tensor[[16, 16], pl.INT32]
OUT = pl.Out[pl.Tensor[[16, 16], pl.INT32]]


def refused(kernel) -> nzjit.CompileError:
    with pytest.raises(nzjit.CompileError) as ei:
        kernel.lower()
    assert isinstance(ei.value, ValueError)  # api.md: CompileError is a ValueError
    return ei.value


def test_python_while_on_a_traced_value(where):
    # issue 28: a one-armed `if` on a traced value is staged now (tests/tracing/test_one_armed_if.py);
    # a `while` on one stays refused, at its line
    @pl.kernel
    def k(x: V, out: OUT):
        for i in pl.range(4):
            while i > 2:  # <- while
                pl.store(pl.load(x, [0, 0], [16, 16]), [0, 0], out)

    err = refused(k)
    assert str(err).startswith(where(k, "# <- while"))
    assert "`while`" in str(err) and "traced once" in str(err)


def test_python_while_and_boolean_operators_on_traced_values(where):
    @pl.kernel
    def k(x: V, n: pl.Scalar[pl.INT32], out: OUT):
        _ok = (n > 0) and (n < 8)  # <- and
        pl.store(pl.load(x, [0, 0], [16, 16]), [0, 0], out)

    assert str(refused(k)).startswith(where(k, "# <- and"))


def test_break_in_a_staged_loop(where):
    @pl.kernel
    def k(x: V, out: OUT):
        for _i in pl.range(4):  # <- loop
            pl.store(pl.load(x, [0, 0], [16, 16]), [0, 0], out)
            break  # <- break
        pl.store(pl.load(x, [0, 0], [16, 16]), [0, 0], out)

    err = refused(k)
    # raised at the next traced op, though CPython swallows the exception of the GeneratorExit handler
    assert str(err).startswith(where(k, "# <- break"))
    assert "`break`" in str(err) and "pl.range" in str(err)
    line_of_loop = where(k, "# <- loop").rsplit(":", 2)[1]
    assert f"line {line_of_loop}" in str(err)  # names the loop's line too


def test_cpython_swallows_an_exception_raised_when_break_closes_a_generator():
    """The premise of the deferred break/return refusal (design.md "Tracing"): raising in the
    GeneratorExit handler would be lost, so tracing records the early exit instead."""
    seen = []

    def loop():
        try:
            yield 0
        except GeneratorExit:
            seen.append("closed")
            raise RuntimeError("lost") from None

    hook, sys.unraisablehook = sys.unraisablehook, lambda u: seen.append(type(u.exc_value).__name__)
    try:
        for _ in loop():
            break  # no RuntimeError here
    finally:
        sys.unraisablehook = hook
    assert seen == ["closed", "RuntimeError"]


def test_break_as_the_last_statement_is_raised_at_the_end_of_tracing(where):
    @pl.kernel
    def k(x: V, out: OUT):
        pl.store(pl.load(x, [0, 0], [16, 16]), [0, 0], out)
        for _i in pl.pipeline(0, 4, 1):
            break  # <- break

    err = refused(k)
    assert str(err).startswith(where(k, "# <- break")) and "pl.pipeline" in str(err)


def test_break_in_a_nested_staged_loop(where):
    @pl.kernel
    def k(x: V, out: OUT):
        for i in pl.range(2):
            for _j in pl.range(2):
                break  # <- break
            pl.store(pl.load(x, [0, 0], [16, 16]), [i, 0], out)

    assert str(refused(k)).startswith(where(k, "# <- break"))


def test_return_in_a_staged_loop(where):
    @pl.kernel
    def k(x: V, out: OUT):
        for _i in pl.range(4):
            pl.store(pl.load(x, [0, 0], [16, 16]), [0, 0], out)
            return  # <- return

    err = refused(k)
    assert str(err).startswith(where(k, "# <- return"))
    assert "`return`" in str(err)


def test_a_value_used_outside_the_loop_that_defined_it(where):
    @pl.kernel
    def k(x: V, out: OUT):
        for _i in pl.range(4):
            t = pl.load(x, [0, 0], [16, 16])  # <- def
        pl.store(t, [0, 0], out)  # <- use

    err = refused(k)
    assert str(err).startswith(where(k, "# <- use"))
    assert "'t'" in str(err) and "outside the loop" in str(err)
    assert where(k, "# <- def").rstrip(": ") in str(err)  # and where it was defined


def test_the_loop_variable_used_after_the_loop(where):
    @pl.kernel
    def k(x: V, out: OUT):
        for i in pl.range(4):  # noqa: B007 - read after the loop on purpose
            pass
        pl.store(pl.load(x, [i, 0], [1, 16]), [0, 0], out)  # <- use

    assert str(refused(k)).startswith(where(k, "# <- use"))


def test_a_python_value_that_changes_inside_a_staged_loop(where):
    @pl.kernel
    def k(x: V, out: OUT):
        row = 0
        for i in pl.range(4):
            pl.store(pl.load(x, [row, 0], [1, 16]), [i, 0], out)
            row = row + 1  # <- change

    err = refused(k)
    assert str(err).startswith(where(k, "# <- change"))
    assert "'row'" in str(err) and "0 -> 1" in str(err)


def test_a_traced_value_as_a_plain_range_bound(where):
    @pl.kernel
    def k(x: V, out: OUT):
        n = pl.get_block_num()
        for _i in range(n):  # <- range
            pl.store(pl.load(x, [0, 0], [16, 16]), [0, 0], out)

    err = refused(k)
    assert str(err).startswith(where(k, "# <- range"))
    assert "pl.range" in str(err)  # the fix


def test_loop_carried_type_mismatch_names_the_carry_both_types_and_a_fix(where):
    @pl.kernel
    def k(x: pl.Tensor[[16, 16], pl.FP16], out: pl.Out[pl.Tensor[[16, 16], pl.FP32]]):
        t = pl.load(x, [0, 0], [16, 16])
        for _i in pl.range(2):
            t = pl.cast(t, pl.FP32)  # <- carry
        pl.store(t, [0, 0], out)

    err = refused(k)
    msg = str(err)
    assert msg.startswith(where(k, "# <- carry"))
    assert "'t'" in msg and "f16[16,16]@Vec" in msg and "f32[16,16]@Vec" in msg
    assert err.help and "pl.cast" in err.help and "same" in err.help


def test_a_python_number_carried_into_a_tile_is_a_type_mismatch(where):
    @pl.kernel
    def k(x: pl.Tensor[[16, 16], pl.FP32], out: pl.Out[pl.Tensor[[16, 16], pl.FP32]]):
        acc = 0
        for _i in pl.range(2):
            acc = pl.load(x, [0, 0], [16, 16])  # <- carry
        pl.store(acc, [0, 0], out)

    msg = str(refused(k))
    assert msg.startswith(where(k, "# <- carry")) and "'acc'" in msg and "f32[16,16]@Vec" in msg


def test_rebinding_inside_spmd(where):
    @pl.kernel
    def k(x: V, out: OUT):
        t = pl.load(x, [0, 0], [16, 16])
        for _lane in pl.spmd(2):
            t = pl.load(x, [0, 0], [16, 16])  # <- rebind
        pl.store(t, [0, 0], out)

    err = refused(k)
    assert str(err).startswith(where(k, "# <- rebind"))
    assert "'t'" in str(err) and "pl.spmd" in str(err)


def test_type_errors_name_the_line_of_the_op(where):
    @pl.kernel
    def k(x: pl.Tensor[[16, 32], pl.FP16], out: pl.Out[pl.Tensor[[16, 16], pl.FP32]]):
        a = pl.load(x, [0, 0], [16, 32], target_memory=pl.Mem.Mat)
        c = pl.matmul(a, a)  # <- matmul
        pl.store(c, [0, 0], out)

    err = refused(k)
    assert str(err).startswith(where(k, "# <- matmul")) and "contraction" in str(err)


def test_a_constant_that_does_not_fit_the_scalar_width(where):
    @pl.kernel
    def k(x: V, n: pl.Scalar[pl.INT32], out: OUT):
        q = n // (1 << 32)  # <- const
        pl.store(pl.load(x, [q, 0], [1, 16]), [0, 0], out)

    err = refused(k)
    assert str(err).startswith(where(k, "# <- const")) and "does not fit pl.INT32" in str(err)


def test_a_static_window_out_of_bounds(where):
    @pl.kernel
    def k(x: V, out: OUT):
        t = pl.load(x, [8, 0], [16, 16])  # <- load
        pl.store(t, [0, 0], out)

    err = refused(k)
    assert str(err).startswith(where(k, "# <- load")) and "out of bounds" in str(err)


def test_the_caret_rendering_shows_the_source_line(where):
    @pl.kernel
    def k(x: V, out: OUT):
        for i in pl.range(4):
            while i > 2:  # <- while (issue 28: a one-armed `if` is staged now)
                pass

    err = refused(k)
    text = err.render()
    assert "while i > 2:  # <- while" in text and "^" in text and "help:" in text


def test_operators_outside_the_scalar_arithmetic(where):
    @pl.kernel
    def div(x: V, n: pl.Scalar[pl.INT32], out: OUT):
        pl.store(pl.load(x, [n / 2, 0], [1, 16]), [0, 0], out)  # <- op

    @pl.kernel
    def power(x: V, n: pl.Scalar[pl.INT32], out: OUT):
        pl.store(pl.load(x, [n**2, 0], [1, 16]), [0, 0], out)  # <- op

    @pl.kernel
    def shift(x: V, n: pl.Scalar[pl.INT32], out: OUT):
        pl.store(pl.load(x, [n << 2, 0], [1, 16]), [0, 0], out)  # <- op

    @pl.kernel
    def bitand(x: V, n: pl.Scalar[pl.INT32], out: OUT):
        pl.store(pl.load(x, [n & 2, 0], [1, 16]), [0, 0], out)  # <- op

    for k in (div, power, shift, bitand):
        err = refused(k)
        assert str(err).startswith(where(k, "# <- op")) and "//" in str(err)


def test_a_trace_inside_another_kernels_trace_is_refused():
    # tracing is one kernel per thread at a time: a second trace started from a kernel body is refused
    from nzjit.tracing import trace

    @pl.kernel
    def k(x: V, out: OUT):
        trace(lambda: None, [], [], "inner")  # <- nested

    with pytest.raises(nzjit.CompileError) as ei:
        k.lower()
    assert ei.value.headline().endswith("a kernel cannot be traced inside another kernel's trace")
