"""Golden PTO text: nz-layout.md §10 for a whole NZ weight loaded into Mat, and the SPMD offset
chain of a symbolic NZ row offset (NZ-6, NZ-14, NZ-16..18)."""

from __future__ import annotations

import codegen_kernels as K
from pto_helpers import golden_regex, normalize, partition_read_by

from nzjit.codegen.ptoas_check import global_tensors, ssa_defs

# nz-layout.md §10, verbatim
GOLDEN = """
%w_view = pto.make_tensor_view %arg1,
    shape = [%c1, %c16, %c16, %c16, %c32],
    strides = [%c131072, %c8192, %c512, %c32, %c1]
    {layout = #pto.layout<nz>} : !pto.tensor_view<?x?x?x?x?xi8>
%w_pview = pto.partition_view %w_view,
    offsets = [%c0, %c0, %c0, %c0, %c0], sizes = [%c1, %c16, %c16, %c16, %c32]
    : !pto.tensor_view<?x?x?x?x?xi8> -> !pto.partition_tensor_view<1x16x16x16x32xi8>
pto.tload ins(%w_pview : !pto.partition_tensor_view<1x16x16x16x32xi8>)
          outs(%wt : !pto.tile_buf<loc=mat, dtype=i8, rows=256, cols=512,
                                   blayout=col_major, slayout=row_major, fractal=512, ...>)
"""


def _golden_statements() -> list[str]:
    """The three statements of the golden, each as it would sit on one line."""
    text = GOLDEN.strip().replace("\n    ", " ").replace("\n          ", " ")
    return [s for s in text.split("\n") if s.strip()]


def test_golden_three_statements_appear():  # NZ-6, NZ-14
    text = K.golden_nz_load.lower().pto()
    lines = [normalize(line) for line in text.splitlines()]
    stmts = _golden_statements()
    assert len(stmts) == 3
    for stmt in stmts:
        pattern = golden_regex(stmt)
        assert any(pattern.fullmatch(line) for line in lines), f"missing golden line:\n{stmt}\n\nin:\n{text}"


def test_golden_block_matches_up_to_whitespace():  # NZ-6
    text = normalize(K.golden_nz_load.lower().pto())
    view, pview, tload = (normalize(s) for s in _golden_statements())
    assert view in text and pview in text
    assert golden_regex(tload).search(text)


def test_golden_global_tensor_is_the_assemblers():  # NZ-6, §10
    text = K.golden_nz_load.lower().pto()
    assert (
        "GlobalTensor<int8_t, Shape<1,16,16,16,32>, Stride<131072,8192,512,32,1>, Layout::NZ>"
        in global_tensors(text)
    )


def test_spmd_row_offset_is_the_clamped_floordiv_of_the_product():  # NZ-16, NZ-17, NZ-18
    text = K.spmd_nz_load.lower().pto()
    defs = ssa_defs(text)
    (pview,) = partition_read_by(text, "pto.tload", "%w_view")
    off = pview.list_field("offsets")
    assert len(off) == 5 and off[3:] == ["%c0", "%c0"]
    clamp = defs[off[2]]
    assert clamp.op == "arith.maxsi" and clamp.operands[1] == "%c0"  # NZ-18: the device's clamp
    blk = defs[clamp.operands[0]]
    assert blk.op == "arith.floordivsi" and blk.operands[1] == "%c16"  # the row fractal
    n0 = defs[blk.operands[0]]  # NZ-17: the value of n0 divided, not nb * (256 // 16)
    assert n0.results == ["%n0"] and n0.op == "arith.muli" and "%c256" in n0.operands
    nb = n0.operands[0]
    assert nb == "%nb" and defs[nb].op == "pto.get_block_idx"
