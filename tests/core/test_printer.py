"""The printer: stable, readable, JAX-like text that keeps the kernel's variable names (golden)."""

from __future__ import annotations

import textwrap

from nzjit import pl
from nzjit.core import dtypes as D
from nzjit.core.ir import Eqn, Graph, Literal, Var
from nzjit.core.types import ScalarType
from nzjit.prims import add_p, mul_p


@pl.kernel
def double_rows(x: pl.Tensor[[32, 64], pl.FP16], out: pl.Out[pl.Tensor[[32, 64], pl.FP32]]):
    for i in pl.range(2):
        row = i * 16
        t = pl.load(x, [row, 0], [16, 64])
        y = pl.cast(t, pl.FP32)
        pl.store(pl.add(y, y), [row, 0], out)


GOLDEN_TRACE = """\
{ lambda ; x:f16[32,64] out:f32[32,64]. let
    for[kind=range] 0 2 1 x out
      { lambda ; i:index x_1:f16[32,64] out_1:f32[32,64]. let
          row:index = mul i 16
          t:f16[16,64]@Vec = tile.load[shape=(16, 64) memory=Vec] x_1 row 0
          y:f32[16,64]@Vec = tile.cast[dtype=f32] t
          a:f32[16,64]@Vec = tile.add y y
          b:f32[32,64] = tile.store a row 0 out_1
        in () }
  in () }"""

GOLDEN_FINAL = """\
# double_rows [nz_tensor_views_blocked]
{ lambda ; x:f16[32,64]/[64,1] out:f32[32,64]/[64,1]. let
    for[kind=range] 0 2 1 x out
      { lambda ; i:index x_1:f16[32,64]/[64,1] out_1:f32[32,64]/[64,1]. let
          row:index = mul i 16
          t:f16[16,64]@Vec = tile.load[shape=(16, 64) memory=Vec] x_1 row 0
          y:f32[16,64]@Vec = tile.cast[dtype=f32] t
          a:f32[16,64]@Vec = tile.add y y
          b:f32[32,64]/[64,1] = tile.store a row 0 out_1
        in () }
  in () }"""


def test_golden_after_trace():
    assert str(double_rows.lower().ir(after="trace")) == GOLDEN_TRACE


def test_golden_after_the_last_pass():
    low = double_rows.lower()
    assert str(low.ir(after=low.passes[-1])) == GOLDEN_FINAL
    assert str(low.ir()) == GOLDEN_FINAL  # the default is the final graph


def test_printing_is_stable():
    low = double_rows.lower()
    assert str(low.ir("trace")) == str(low.ir("trace"))


def test_kernel_names_carries_and_tensor_level_ops():
    @pl.kernel
    def mm(
        x: pl.Tensor[[16, 128], pl.INT8],
        w: pl.Tensor[[32, 128], pl.INT8],
        out: pl.Out[pl.Tensor[[16, 32], pl.INT32]],
    ):
        acc = pl.matmul(x[:, 0:64], w[:, 0:64], b_trans=True)
        for k0 in pl.pipeline(64, 128, 64):
            acc = pl.matmul_acc(acc, x[:, k0 : k0 + 64], w[:, k0 : k0 + 64], b_trans=True)
        out[:, :] = acc

    assert str(mm.lower().ir("trace")) == textwrap.dedent("""\
        { lambda ; x:i8[16,128] w:i8[32,128] out:i32[16,32]. let
            a:i8[16,64] = tensor.slice[shape=(16, 64)] x 0 0
            b:i8[32,64] = tensor.slice[shape=(32, 64)] w 0 0
            acc:i32[16,32] = tensor.matmul[b_trans=True] a b
            acc_1:i32[16,32] = for[kind=pipeline stage=2] 64 128 64 x w acc
              { lambda ; k0:index x_1:i8[16,128] w_1:i8[32,128] acc_2:i32[16,32]. let
                  c:i8[16,64] = tensor.slice[shape=(16, 64)] x_1 0 k0
                  d:i8[32,64] = tensor.slice[shape=(32, 64)] w_1 0 k0
                  acc_3:i32[16,32] = tensor.matmul_acc[b_trans=True] acc_2 c d
                in (acc_3) }
            e:i32[16,32] = tensor.assign[shape=(16, 32)] out acc_1 0 0
          in () }""")


def test_a_hand_built_graph_prints_hints_and_letters():
    i = ScalarType(D.INDEX)
    nb, n0, t = Var(i, "nb"), Var(i, "n0"), Var(i)
    g = Graph(
        [nb],
        [
            Eqn(mul_p, (nb, Literal(256, i)), (n0,), {"arity": (1, 1)}),
            Eqn(add_p, (n0, Literal(-1, i)), (t,), {"arity": (1, 1)}),
        ],
        [t],
    )
    assert str(g) == textwrap.dedent("""\
        { lambda ; nb:index. let
            n0:index = mul nb 256
            a:index = add n0 -1
          in (a) }""")


def test_nz_layout_is_printed():
    @pl.kernel
    def k(w: pl.Tensor[[64, 64], pl.INT8, pl.NZ]):
        pl.load(w, [0, 0], [64, 64], target_memory=pl.Mem.Mat)

    assert "w:i8[64,64]{NZ}" in str(k.lower().ir("trace"))
