"""`nzjit ir FILE` on an orchestration prints its program (issue 25 item 2)."""

from __future__ import annotations

from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tp_moe.py"

CHAIN = '''\
from nzjit import pl

R, T, N = 2, 16, 64

@pl.kernel
def double(x: pl.Tensor[[T, N], pl.FP32], y: pl.Out[pl.Tensor[[T, N], pl.FP32]]):
    t = pl.load(x, [0, 0], [T, N])
    pl.store(pl.add(t, t), [0, 0], y)

@pl.orchestration
def chain(x: pl.Tensor[[R, 2, T, N], pl.FP32], y: pl.Out[pl.Tensor[[R, T, N], pl.FP32]]):
    for r in range(R):
        h = double(x[r, 1], device=r)
        double(h, y[r], device=r)
'''


def test_ir_of_an_orchestration_prints_its_program(cli, write):
    res = cli("ir", write("chain.py", CHAIN), "--kernel", "chain")
    assert res.code == 0, res.err
    assert res.out.splitlines() == [
        "orchestration chain(x: FP32[2, 2, 16, 64], y: Out FP32[2, 16, 64])",
        "program chain: 4 kernel calls on ranks 0..1, 2 intermediates (on their rank, freed when the program "
        "ends); ranks run in parallel, each its calls in this order",
        "  rank 0: double(x=x[0, 1]) -> y=new double.y@rank0 FP32[16, 64]  # chain.py:13",
        "  rank 0: double(x=double.y@rank0) -> y=y[0]  # chain.py:14",
        "  rank 1: double(x=x[1, 1]) -> y=new double.y@rank1 FP32[16, 64]  # chain.py:13",
        "  rank 1: double(x=double.y@rank1) -> y=y[1]  # chain.py:14",
    ]


def test_ir_of_a_file_shows_kernels_then_programs(cli, write):
    res = cli("ir", write("chain.py", CHAIN))
    assert res.code == 0, res.err
    out = res.out
    assert "# orchestration chain" in out and out.index("tile.load") < out.index("# orchestration chain")
    res = cli("ir", str(EXAMPLE), "--kernel", "moe_experts")
    assert res.code == 0, res.err
    lines = res.out.splitlines()
    assert lines[1].startswith("program moe_experts: 12 kernel calls on ranks 0..3, 12 intermediates")
    assert lines[2] == ("  rank 0: gate_up(x=xe[0], wg=wg[0], wu=wu[0]) -> g=new gate_up.g@rank0 FP32[2, 64, 512], "
                        "u=new gate_up.u@rank0 FP32[2, 64, 512]  # tp_moe.py:80")
    assert lines[4] == "  rank 0: down(h=act.h@rank0, wd=wd[0]) -> y=ye[0]  # tp_moe.py:82"
