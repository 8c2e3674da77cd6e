"""The kernels of issue 29's mutation campaign, each refused at `lower()` (NZ-16..18, NZ-12).

Every kernel here was accepted, and silently wrong or refused only by the simulator's run-time
checks, under one surviving mutant of passes/proofs.py. The device has no such check (it clamps a
negative offset to 0), so each refusal is asserted at compile time: the exception, its rule, its
message and the kernel line. No `from __future__ import annotations`: annotations use closures.
"""

import inspect

import pytest

import nzjit
from nzjit import pl

N, K = 1024, 1024


def _refused(kernel, text, *phrases, rule):
    with pytest.raises(nzjit.CompileError) as ei:
        kernel.lower()
    lines, start = inspect.getsourcelines(kernel.__wrapped__)
    line = start + next(i for i, s in enumerate(lines) if text in s)
    msg = str(ei.value)
    assert msg.startswith(f"{kernel.__wrapped__.__code__.co_filename}:{line}: "), msg
    for p in phrases:
        assert p in msg, (p, msg)
    assert ei.value.rule == rule, msg
    assert ei.value.help
    return msg


# ----------------------------------------------------------------- silently wrong under a mutant
def test_loop_variable_factor_needs_the_start_too():  # NZ-16 loop row: start AND step multiples
    @pl.kernel
    def k(w: pl.Tensor[[N, K], pl.INT8, pl.NZ]):
        for i in pl.range(8, 24, 16):  # i = 8: a multiple of 8, not of 16
            pl.load(w, [i, 0], [16, 32], target_memory=pl.Mem.Mat)  # load

    _refused(
        k,
        "# load",
        "row offset",
        "cannot be proven a multiple of 16",
        "i in pl.range(8, 24, 16)",
        rule="NZ-16",
    )


def test_a_factor_does_not_survive_a_wrap():  # NZ-17: s * 48 wraps; only gcd(48, 2^32) = 16 survives
    @pl.kernel
    def k(w: pl.Tensor[[N, K], pl.INT8, pl.NZ], s: pl.Scalar[pl.INT32]):
        n0 = pl.max((s * 48) // 3, 0)  # s = 89478486: s * 48 wraps to 32, n0 = 10
        pl.load(w, [n0, 0], [16, 32], target_memory=pl.Mem.Mat)  # load

    _refused(k, "# load", "row offset", "cannot be proven a multiple of 16", rule="NZ-16")


def test_a_floordiv_keeps_a_factor_only_when_k_divides_it():  # NZ-16 `x // k` row
    @pl.kernel
    def k(w: pl.Tensor[[N, K], pl.INT8, pl.NZ]):
        for i in pl.range(0, 4):
            n0 = (i * 49) // 3  # i = 3: 49, not a multiple of 16 (49 // 3 = 16 is not a factor)
            pl.load(w, [n0, 0], [16, 32], target_memory=pl.Mem.Mat)  # load

    _refused(k, "# load", "row offset", "cannot be proven a multiple of 16", rule="NZ-16")


# ----------------------------------------------------------------- refusals the device lacks
def test_a_negative_loop_start_is_refused():  # NZ-16 loop row, NZ-18: start and step non-negative
    @pl.kernel
    def k(w: pl.Tensor[[N, K], pl.INT8, pl.NZ]):
        for i in pl.range(-16, 64, 16):
            pl.load(w, [i, 0], [16, 32], target_memory=pl.Mem.Mat)  # load

    _refused(k, "# load", "cannot be proven non-negative", "starts at -16 (-16 < 0)", rule="NZ-18")


def test_a_negative_symbolic_step_is_refused():  # NZ-16 loop row, NZ-18: the step's sign is unknown
    @pl.kernel
    def k(w: pl.Tensor[[N, K], pl.INT8, pl.NZ], s: pl.Scalar[pl.INT32]):
        st = s * 16  # a multiple of 16, maybe negative: i walks below 0
        for i in pl.range(0, 64, st):
            pl.load(w, [i, 0], [16, 32], target_memory=pl.Mem.Mat)  # load

    _refused(k, "# load", "cannot be proven non-negative", "with step st", "kernel argument", rule="NZ-18")


def test_the_block_count_reaches_the_lane_count():  # NZ-12: get_block_num() is in [1, lanes]
    @pl.kernel
    def k(w: pl.Tensor[[N, K], pl.INT8, pl.NZ]):
        for _nb in pl.spmd(4):
            n0 = pl.get_block_num() * 256  # 4 * 256 = 1024: the window [1024, 1280) overhangs
            pl.load(w, [n0, 0], [256, 32], target_memory=pl.Mem.Mat)  # load

    _refused(k, "# load", "up to [1024, 1280)", "ends past the tensor's extent 1024", rule="NZ-12")


def test_the_lane_count_bounds_a_wrap():  # NZ-17/18: 16 lanes * 2^28 leave INT32, 8 lanes do not
    def make(lanes):
        @pl.kernel
        def k(w: pl.Tensor[[N, K], pl.INT8, pl.NZ]):
            for nb in pl.spmd(lanes):
                n0 = pl.cast(nb, pl.INT32) * (1 << 28)
                pl.load(w, [n0, 0], [16, 32], target_memory=pl.Mem.Mat)  # load

        return k

    _refused(
        make(16), "# load", "cannot be proven non-negative", "may wrap at its 32-bit width", rule="NZ-18"
    )
    # 8 lanes: no wrap (7 * 2^28 < 2^31), so the sign is proven and the bound refuses the overhang
    _refused(
        make(8), "# load", "up to [1879048192, 1879048208)", "ends past the tensor's extent", rule="NZ-12"
    )


def test_the_exact_maximum_of_a_sum_refuses_an_overhang():  # NZ-12: lane 3 reads [256, 320) of 256 rows
    @pl.kernel
    def k(w: pl.Tensor[[256, K], pl.INT8, pl.NZ]):
        for nb in pl.spmd(4):
            pl.load(w, [nb * 64 + 64, 0], [64, 32], target_memory=pl.Mem.Mat)  # load

    _refused(k, "# load", "up to [256, 320)", "ends past the tensor's extent 256", rule="NZ-12")


def test_exhausted_valid_rows_are_refused():  # NZ-12: the proof budget ran out: nothing is known
    from nzjit.passes import proofs

    @pl.kernel
    def k(w: pl.Tensor[[N, K], pl.INT8, pl.NZ], r: pl.Scalar[pl.INDEX]):
        vr = pl.min(pl.max(r, 16), 256)
        for _ in range(proofs.BUDGET + 10):  # a chain longer than the budget
            vr = (vr + 16) - 16
        pl.load(w, [0, 0], [256, 32], target_memory=pl.Mem.Mat, valid_shape=[vr, 32])  # load

    _refused(k, "# load", "may end inside a fractal", rule="NZ-12")


def test_the_exact_maximum_enumerates_up_to_65536_combinations():  # NZ-12: 256 lanes x 256 trips
    @pl.kernel
    def k(w: pl.Tensor[[8160, 32], pl.INT8, pl.NZ]):
        for nb in pl.spmd(256):
            for i in pl.range(256):
                pl.load(w, [nb * 16 + i * 16, 0], [16, 32], target_memory=pl.Mem.Mat)  # load

    _refused(k, "# load", "up to [8160, 8176)", rule="NZ-12")


def test_a_loop_variable_lies_between_start_and_stop():  # NZ-16 loop row: the interval is the tight hull
    from nzjit.passes import proofs

    def fact(lo, hi, nonneg=None):
        return proofs.Fact(1, lo >= 0 if nonneg is None else nonneg, "x", "", lo, hi)

    up = proofs.rule_loop_var(fact(0, 0), fact(100, 200), fact(1, 4), "i", None)
    assert (up.lo, up.hi) == (0, 199)  # counting up: [start, stop - 1]
    either = proofs.rule_loop_var(fact(0, 10), fact(100, 200), fact(0, 4), "i", None)
    assert (either.lo, either.hi) == (0, 199)  # a step that may be 0: still short of stop
    down = proofs.rule_loop_var(fact(50, 60), fact(-5, 0), fact(-4, -1, False), "i", None)
    assert (down.lo, down.hi) == (-4, 60)  # counting down: (stop, start]
