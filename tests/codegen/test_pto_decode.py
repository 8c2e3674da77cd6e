"""PTO text of a decode batch (a Left operand of M < 16 rows): the Mat, Left and Acc tiles are whole
16-row fractals whose valid rows are M (hardware-model.md §3 ND2NZ, §6 TMATMUL m = Left.validRow),
the load reads and the store writes an M-row partition, and the assembler check accepts it."""

from __future__ import annotations

import pytest
from pto_helpers import partition_read_by, statements

from nzjit import pl
from nzjit.codegen import check_ptoas


def _decode(M):
    @pl.kernel
    def k(
        x: pl.Tensor[[M, 64], pl.BF16],
        w: pl.Tensor[[32, 64], pl.BF16, pl.NZ],
        out: pl.Out[pl.Tensor[[M, 32], pl.FP32]],
    ):
        out[:, :] = pl.matmul(x[:, :], w[:, :], b_trans=True)

    return k


@pytest.mark.parametrize("M", [1, 4, 15])
def test_decode_tiles_emit_their_valid_rows(M):
    text = _decode(M).lower().pto()
    check_ptoas(text, version="0.61")
    allocs = [s.text for s in statements(text, "pto.alloc_tile")]
    for loc, cols in (("mat", 64), ("left", 64), ("acc", 32)):
        (a,) = [t for t in allocs if f"loc={loc}," in t and "rows=16," in t]
        assert f"rows=16, cols={cols}," in a and f"v_row={M}, v_col={cols}>" in a, a
    (ld,) = partition_read_by(text, "pto.tload", "%x_view")
    assert f"partition_tensor_view<{M}x64xbf16>" in ld.text
    (st,) = partition_read_by(text, "pto.tstore", "%out_view")
    assert f"partition_tensor_view<{M}x32xf32>" in st.text
    (mm,) = statements(text, "pto.tmatmul")
    assert mm.text.count(f"v_row={M}, ") == 2  # the Left operand and the Acc result
