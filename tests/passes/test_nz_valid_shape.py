"""valid_shape on NZ loads (issue 5, the §7 valid_shape rows): IR facts and refusals.

Static valid extents block like shapes; a dynamic row count provably a multiple of 16 becomes
`floordiv(rows, 16)` row fractals; anything that may end inside a fractal is refused, and so is
a slice whose valid_shape narrows its window. Numbers on real NZ bytes (partial loads, the ragged
tail) are in tests/e2e/test_nz_gap_e2e.py. No `from __future__ import annotations`.
"""

import inspect

import pytest

import nzjit
from nzjit import pl
from nzjit.core import dtypes as D
from nzjit.core.ir import Literal
from nzjit.core.types import Mem, TileType


def _line(kernel, text):
    lines, start = inspect.getsourcelines(kernel.__wrapped__)
    return start + next(i for i, s in enumerate(lines) if text in s)


def _refused(kernel, text, *phrases):
    with pytest.raises(nzjit.CompileError) as ei:
        kernel.lower()
    msg = str(ei.value)
    assert msg.startswith(f"{__file__}:{_line(kernel, text)}: "), msg
    for p in phrases:
        assert p in msg, (p, msg)
    assert ei.value.help
    return msg


def _blocked(g):
    (ld,) = [e for e in g.walk() if e.params.get("blocked")]
    return ld


def _vals(atoms):
    return [a.value if isinstance(a, Literal) else a for a in atoms]


def _defining(g, v):
    return next(e for e in g.walk() if v in e.outputs)


def test_static_valid_shape_blocks_like_shapes():  # §7, NZ-12, NZ-26
    @pl.kernel
    def k(w: pl.Tensor[[800, 64], pl.INT8, pl.NZ]):
        pl.load(w, [768, 0], [256, 64], target_memory=pl.Mem.Mat, valid_shape=[32, 32])

    ld = _blocked(k.lower().ir(after="BlockNzTensorViews"))
    assert ld.params["shape"] == (1, 2, 16, 16, 32)  # the tile's window
    assert _vals(ld.operands("valid")) == [1, 1, 2, 16, 32]  # the partition: [1, vc/c0, vr/16, 16, c0]
    assert _vals(ld.operands("offsets")) == [0, 0, 48, 0, 0]
    assert ld.outputs[0].type == TileType((256, 64), D.INT8, Mem.Mat, (32, 32))  # NZ-13


def test_static_valid_shape_fp16():  # NZ-4: c0 = 16
    @pl.kernel
    def k(w: pl.Tensor[[64, 64], pl.FP16, pl.NZ]):
        pl.load(w, [0, 16], [32, 48], target_memory=pl.Mem.Mat, valid_shape=[16, 32])

    ld = _blocked(k.lower().ir(after="BlockNzTensorViews"))
    assert ld.params["shape"] == (1, 3, 2, 16, 16)
    assert _vals(ld.operands("valid")) == [1, 2, 1, 16, 16]
    assert _vals(ld.operands("offsets")) == [0, 1, 0, 0, 0]


def test_dynamic_rows_provably_a_multiple_of_16():  # §7 valid_shape[-2] dynamic, multiple of 16
    @pl.kernel
    def k(w: pl.Tensor[[800, 64], pl.INT8, pl.NZ]):
        for ob in pl.range(4):
            o0 = ob * 256
            valid = pl.min(800 - o0, 256)
            pl.load(w, [o0, 0], [256, 64], target_memory=pl.Mem.Mat, valid_shape=[valid, 64])

    g = k.lower().ir(after="BlockNzTensorViews")
    ld = _blocked(g)
    v = _vals(ld.operands("valid"))
    assert [v[0], v[1], v[3], v[4]] == [1, 2, 16, 32]
    div = _defining(g, v[2])  # row fractals = floordiv(rows, 16), of the value
    assert div.primitive.name == "floordiv" and div.inputs[0].hint == "valid" and div.inputs[1].value == 16
    assert _defining(g, div.inputs[0]).primitive.name == "min"
    assert any(p.startswith("16 | valid by valid = min(800 - o0, 256)") for p in ld.params["proofs"])
    assert ld.outputs[0].type == TileType((256, 64), D.INT8, Mem.Mat, (None, 64))


def test_dynamic_rows_that_may_end_inside_a_fractal():  # §7: refused
    @pl.kernel
    def k(w: pl.Tensor[[800, 64], pl.INT8, pl.NZ]):
        for ob in pl.range(4):
            o0 = ob * 256
            valid = pl.min(800 - o0, 250)
            pl.load(w, [o0, 0], [256, 64], target_memory=pl.Mem.Mat, valid_shape=[valid, 64])  # load

    _refused(k, "# load", "may end inside a fractal", "multiple of 16", "min(800 - o0, 250)")


def test_dynamic_rows_from_a_kernel_argument():  # §7: nothing is known about an argument
    @pl.kernel
    def k(w: pl.Tensor[[800, 64], pl.INT8, pl.NZ], rows: pl.Scalar[pl.INDEX]):
        pl.load(w, [0, 0], [256, 64], target_memory=pl.Mem.Mat, valid_shape=[rows, 64])  # load

    _refused(k, "# load", "may end inside a fractal")


def test_static_valid_rows_inside_a_fractal():  # §7: a partial fractal has no representation
    @pl.kernel
    def k(w: pl.Tensor[[800, 64], pl.INT8, pl.NZ]):
        pl.load(w, [0, 0], [256, 64], target_memory=pl.Mem.Mat, valid_shape=[40, 64])  # load

    _refused(k, "# load", "valid_shape rows 40 must be a multiple of 16")


def test_valid_columns_must_be_static_whole_c0_lines():  # §7: a partial C0 line
    @pl.kernel
    def partial(w: pl.Tensor[[64, 64], pl.INT8, pl.NZ]):
        pl.load(w, [0, 0], [32, 64], target_memory=pl.Mem.Mat, valid_shape=[32, 48])  # load

    @pl.kernel
    def dynamic(w: pl.Tensor[[64, 64], pl.INT8, pl.NZ]):
        for j in pl.range(2):
            pl.load(w, [0, 0], [32, 64], target_memory=pl.Mem.Mat, valid_shape=[32, j * 32 + 32])  # load

    _refused(partial, "# load", "multiple of c0 = 32")
    _refused(dynamic, "# load", "is dynamic")


def test_slice_whose_valid_shape_narrows_its_window():  # §7, NZ-30: refused
    @pl.kernel
    def k(w: pl.Tensor[[2, 64, 64], pl.INT8, pl.NZ]):
        s = pl.slice(w, [1, 64, 64], [1, 0, 0], valid_shape=[1, 32, 64])  # slice
        pl.load(s, [0, 0, 0], [1, 32, 64], target_memory=pl.Mem.Mat)

    _refused(k, "# slice", "valid_shape on an NZ slice", "give valid_shape to the pl.load")
