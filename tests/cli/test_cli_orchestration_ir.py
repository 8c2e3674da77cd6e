"""`nzjit ir FILE` on an orchestration prints its program (issue 25 item 2)."""

from __future__ import annotations

from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tp_moe.py"

CHAIN = """\
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
"""


def test_ir_of_an_orchestration_prints_its_program(cli, write):
    res = cli("ir", write("chain.py", CHAIN), "--kernel", "chain")
    assert res.code == 0, res.err
    lines = res.out.splitlines()
    assert lines[:11] == [
        "# orchestration chain: 4 kernel calls on 2 ranks",
        "orchestration chain(x: FP32[2, 2, 16, 64], y: Out FP32[2, 16, 64])",
        "2 intermediates, each on its rank and freed when the program ends; ranks run in parallel, each its "
        "calls in order",
        "rank 0:",
        "  double(x[0, 1]) -> double.y@rank0  # chain.py:13",
        "  double(double.y@rank0) -> y[0]  # chain.py:14",
        "  intermediates: double.y@rank0 FP32[16, 64]",
        "rank 1:",
        "  double(x[1, 1]) -> double.y@rank1  # chain.py:13",
        "  double(double.y@rank1) -> y[1]  # chain.py:14",
        "  intermediates: double.y@rank1 FP32[16, 64]",
    ]
    assert lines[11:13] == ["", "# double [nz_tensor_views_blocked]"]  # then the one kernel it calls


def test_ir_of_a_file_shows_kernels_then_programs(cli, write, line_of):
    res = cli("ir", write("chain.py", CHAIN))
    assert res.code == 0, res.err
    out = res.out
    assert "# orchestration chain: 4 kernel calls on 2 ranks" in out
    assert out.index("tile.load") < out.index("# orchestration chain")
    res = cli("ir", str(EXAMPLE), "--kernel", "moe_experts")
    assert res.code == 0, res.err
    lines = res.out.splitlines()
    assert lines[2].startswith("12 intermediates, each on its rank")
    gate_up_line, down_line = line_of(EXAMPLE, "g, u = gate_up(xe[r]"), line_of(EXAMPLE, "down(h, wd[r]")
    assert (
        lines[4]
        == f"  gate_up(xe[0], wg[0], wu[0]) -> gate_up.g@rank0, gate_up.u@rank0  # tp_moe.py:{gate_up_line}"
    )
    assert lines[6] == f"  down(act.h@rank0, wd[0]) -> ye[0]  # tp_moe.py:{down_line}"
    assert lines[7] == (
        "  intermediates: gate_up.g@rank0 FP32[2, 64, 512], gate_up.u@rank0 FP32[2, 64, 512], "
        "act.h@rank0 FP16[2, 64, 512]"
    )


def test_ir_of_a_file_with_only_an_orchestration(cli, write):
    kernels = "from nzjit import pl\nfrom chain import double, R\n\n"
    write("chain.py", CHAIN)
    orch_only = kernels + (
        "@pl.orchestration\n"
        "def twice(x: pl.Tensor[[R, 16, 64], pl.FP32], y: pl.Out[pl.Tensor[[R, 16, 64], pl.FP32]]):\n"
        "    for r in range(R):\n"
        "        double(x[r], y[r], device=r)\n"
    )
    res = cli("ir", write("orch_only.py", orch_only))
    assert res.code == 0, res.err
    assert "# orchestration twice: 2 kernel calls on 2 ranks" in res.out
