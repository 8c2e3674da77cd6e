"""The temporary GM row-gap guard (issue 5, NZ-25..27): compile-only tests of the NZ-25 table.

Delete this file with nzjit/passes/nz_gap_guard.py once pto-isa#317 is fixed (NZ-27). What the
device reads without the guard is shown in tests/e2e/test_nz_gap_e2e.py. No `from __future__
import annotations`: kernel annotations use closure values.
"""

import inspect

import pytest

import nzjit
from nzjit import pl
from nzjit.passes.nz_gap_guard import MAX_GM_GAP_BLOCKS, _bypass_for_tests, check_nz_gm_gap_fits_burst_stride


def _line(kernel, text):
    lines, start = inspect.getsourcelines(kernel.__wrapped__)
    return start + next(i for i, s in enumerate(lines) if text in s)


def _kernel(shape, win, dtype=pl.INT8, valid=None):
    @pl.kernel
    def k(w: pl.Tensor[list(shape), dtype, pl.NZ]):
        pl.load(w, [0] * len(shape), list(win), target_memory=pl.Mem.Mat, valid_shape=valid)  # the load

    return k


def _blocked_load(k):
    (ld,) = [e for e in k.lower().ir(after="BlockNzTensorViews").walk() if e.params.get("blocked")]
    return ld


def _refused(k, *phrases):
    with pytest.raises(nzjit.CompileError) as ei:
        k.lower()
    msg = str(ei.value)
    assert msg.startswith(f"{__file__}:{_line(k, 'pl.load(')}: "), msg  # the load's first line
    assert ei.value.rule == "NZ-25"
    for p in phrases:
        assert p in msg, (p, msg)
    return msg


# ------------------------------------------------------------------------------ the NZ-25 table
def test_r65536_tile16_is_accepted():  # gap 65520
    ld = _blocked_load(_kernel([65536, 64], [16, 64]))
    assert ld.params["shape"] == (1, 2, 1, 16, 32)


def test_r65552_tile16_is_refused():  # gap 65536
    msg = _refused(
        _kernel([65552, 64], [16, 64]),
        "GM gap of 65536 32-byte blocks",
        "tensor rows 65552",
        "loaded 16 rows",
        "2 column blocks",
        "NOT an expected pl.NZ limitation",
        "pto-isa#317",
        f"max {MAX_GM_GAP_BLOCKS}",
    )
    assert "taller row tile (at least 32 valid rows)" in msg  # workaround 1: a wider row tile
    assert "rank-3 [LAYERS, R, C]" in msg  # workaround 2: stack layers on the batch axis


def test_r65552_tile32_is_accepted():  # same tensor, wider tile: gap 65520
    ld = _blocked_load(_kernel([65552, 64], [32, 64]))
    assert ld.params["shape"] == (1, 2, 2, 16, 32)


def test_single_column_block_is_exempt():  # NZ-27: one burst never reads the gap
    ld = _blocked_load(_kernel([65552, 32], [16, 32]))
    assert ld.params["shape"] == (1, 1, 1, 16, 32)


@pytest.mark.parametrize("dtype,cols", [(pl.FP16, 32), (pl.BF16, 32), (pl.FP32, 16), (pl.INT32, 16)])
def test_the_gap_is_independent_of_the_dtype(dtype, cols):  # NZ-25: c0 * sizeof(T) == 32
    _refused(_kernel([65552, cols], [16, cols], dtype), "GM gap of 65536 32-byte blocks")
    _blocked_load(_kernel([65552, cols], [32, cols], dtype))
    _blocked_load(_kernel([65552, cols // 2], [16, cols // 2], dtype))  # one column block: exempt


# ------------------------------------------------------------------- NZ-26: the window measured
def test_valid_shape_narrows_the_window_and_widens_the_gap():  # NZ-26
    _refused(_kernel([65552, 64], [32, 64], valid=[16, 64]), "GM gap of 65536", "loaded 16 rows")


def test_valid_shape_in_a_smaller_tensor_is_accepted():  # NZ-26
    ld = _blocked_load(_kernel([65536, 64], [32, 64], valid=[16, 64]))
    assert [a.value for a in ld.operands("valid")] == [1, 2, 1, 16, 32]  # partition 1x2x1x16x32


def test_valid_columns_of_one_block_are_exempt():  # NZ-26 + NZ-27: the partition has one column block
    ld = _blocked_load(_kernel([65552, 64], [16, 64], valid=[16, 32]))
    assert [a.value for a in ld.operands("valid")] == [1, 1, 1, 16, 32]


def test_dynamic_rows_are_checked_at_zero_rows():  # NZ-26: worst case
    def kernel(rows):
        @pl.kernel
        def k(w: pl.Tensor[[rows, 64], pl.INT8, pl.NZ]):
            for ob in pl.range(2):
                o0 = ob * 32
                pl.load(
                    w, [o0, 0], [32, 64], target_memory=pl.Mem.Mat, valid_shape=[pl.min(rows - o0, 32), 64]
                )  # the load

        return k

    msg = _refused(kernel(65536), "GM gap of 65536", "a dynamic row count (worst case 0)")
    assert "static valid row count" in msg
    _blocked_load(kernel(65520))  # 65520 - 0 fits the field: safe for every run-time extent


def test_stacking_layers_on_the_batch_axis_avoids_the_gap():  # NZ-25 workaround 2
    _refused(_kernel([4 * 16400, 64], [16, 64]), "GM gap of 65584")  # layers stacked along rows
    ld = _blocked_load(_kernel([4, 16400, 64], [1, 16, 64]))  # the same bytes, rank 3
    assert ld.params["shape"] == (1, 2, 1, 16, 32)


# ------------------------------------------------------------------------------ the one function
def test_guard_function_directly():  # NZ-27: one named function with its own tests
    check_nz_gm_gap_fits_burst_stride("w", 65536, 16, 2, None)
    check_nz_gm_gap_fits_burst_stride("w", 65552, 16, 1, None)
    check_nz_gm_gap_fits_burst_stride("w", 65552, 32, 4095, None)
    with pytest.raises(nzjit.CompileError, match="65536 32-byte blocks"):
        check_nz_gm_gap_fits_burst_stride("w", 65552, 16, 2, None)
    with pytest.raises(nzjit.CompileError, match="worst case 0"):
        check_nz_gm_gap_fits_burst_stride("w", 65536, None, 2, None)


def test_bypass_is_scoped_to_the_block():  # the test-only switch (used by the e2e device test)
    with _bypass_for_tests():
        check_nz_gm_gap_fits_burst_stride("w", 65552, 16, 2, None)
        _blocked_load(_kernel([65552, 64], [16, 64]))
    with pytest.raises(nzjit.CompileError):
        check_nz_gm_gap_fits_burst_stride("w", 65552, 16, 2, None)
