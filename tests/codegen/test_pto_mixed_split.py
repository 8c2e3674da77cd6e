"""PTO text of a mixed cube + vector kernel on A2/A3 (codegen/pto/split.py): PyPTO's ExpandMixedKernel
split - an AIC and an AIV function with the shared signature, the kernel_kind attributes and the
cross-core pipe setup - while pure cube / pure vector kernels and A5's direct moves stay one
function, their text unchanged."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

import nzjit
import runtime
from nzjit import pl
from nzjit.codegen.pto import split

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))

import fused_moe_expert as fm  # noqa: E402


def _functions(text):
    """name -> (head line, body lines) of each func.func in `text`."""
    out, name = {}, None
    for line in text.splitlines():
        if line.startswith("func.func @"):
            name = line.split("@", 1)[1].split("(", 1)[0]
            out[name] = (line, [])
        elif name is not None:
            out[name][1].append(line)
    return out


def _expert_text():
    x, wg, wu, sg, su, wd, xs = fm.data()
    low = fm.moe_expert.lower(
        x,
        runtime.pack_nz(wg),
        runtime.pack_nz(wu),
        sg,
        su,
        runtime.pack_nz(wd),
        float(xs),
        np.zeros((fm.E, fm.T, fm.H), np.float32),
    )
    return low.pto()


def test_the_fused_expert_is_an_aic_and_an_aiv_function():
    text = _expert_text()
    nzjit.check_ptoas(text)  # SSA values, views and tile types are checked per function
    fns = _functions(text)
    assert list(fns) == ["moe_expert_aic", "moe_expert_aiv"]
    (aic_head, aic), (aiv_head, aiv) = fns["moe_expert_aic"], fns["moe_expert_aiv"]
    for head, kind in ((aic_head, "cube"), (aiv_head, "vector")):
        # the shared signature (every kernel argument) plus the GM pipe buffer the A2/A3 backend injects
        assert (
            "(%arg0: !pto.ptr<i8>, %arg1: !pto.ptr<i8>, %arg2: !pto.ptr<i8>, %arg3: !pto.ptr<f32>, %arg4: "
            "!pto.ptr<f32>, %arg5: !pto.ptr<f16>, %x_scale: f32, %arg7: !pto.ptr<f32>, %__gm_pipe_buffer: "
            "!pto.ptr<f32>)" in head
        )
        assert head.endswith(
            f"attributes {{pto.block_dim = 4 : i64, pto.kernel_kind = #pto.kernel_kind<{kind}>}} {{"
        )
    aic_t, aiv_t = "\n".join(aic), "\n".join(aiv)
    # the cube side: loads into L1, the mads, the Acc pushes and the pop of h; no vector instruction
    assert aic_t.count("pto.tmatmul") == 3 and aic_t.count("pto.tpush_to_aiv") == 2
    assert aic_t.count("pto.tpop_from_aiv") == 1 and "pto.tstore ins(%acc_d" in aic_t
    for instr in (
        "pto.texp",
        "pto.tcvt",
        "pto.tcolexpandmul",
        "pto.tpop_from_aic",
        "pto.tpush_to_aic",
        "loc=vec",
    ):
        assert instr not in aic_t
    # the vector side: the pops of the sums, the dequant and SwiGLU, the push of h; no cube instruction
    assert aiv_t.count("pto.tpop_from_aic") == 2 and aiv_t.count("pto.tpush_to_aic") == 1
    for instr in ("pto.texp", "pto.tcvt", "pto.tcolexpandmul", "pto.tdiv"):
        assert instr in aiv_t
    for instr in ("pto.tmatmul", "pto.textract", "pto.tpush_to_aiv", "loc=mat", "loc=acc", "%wg_pview"):
        assert instr not in aiv_t
    assert "%sg_pview" in aiv_t and "%sg_pview" not in aic_t  # a view goes where it is read
    # the pipe setup: the consumer of a direction reserves its slots, the producer imports them
    assert aic[aic.index(next(x for x in aic if "import_reserved_buffer" in x))] == (
        '  %c2v_slot_buffer_import = pto.import_reserved_buffer {name = "moe_expert_c2v_slot_buffer", '
        "peer_func = @moe_expert_aiv} -> i32"
    )
    assert (
        '  %v2c_slot_buffer = pto.reserve_buffer {name = "moe_expert_v2c_slot_buffer", size = 131072, '
        "location = #pto.address_space<mat>, auto = true} -> i32"
    ) in aic
    assert (
        '  %c2v_slot_buffer = pto.reserve_buffer {name = "moe_expert_c2v_slot_buffer", size = 131072, '
        "location = #pto.address_space<vec>, auto = true} -> i32"
    ) in aiv
    assert (
        "  pto.aic_initialize_pipe {dir_mask = 3, slot_size = 16384, slot_num = 8} (gm_slot_buffer = "
        "%__gm_pipe_buffer : !pto.ptr<f32>, c2v_consumer_buf = %c2v_slot_buffer_import : i32, v2c_consumer_buf = "
        "%v2c_slot_buffer : i32)"
    ) in aic
    assert (
        "  pto.aiv_initialize_pipe {dir_mask = 3, slot_size = 16384, slot_num = 8} (gm_slot_buffer = "
        "%__gm_pipe_buffer : !pto.ptr<f32>, c2v_consumer_buf = %c2v_slot_buffer : i32, v2c_consumer_buf = "
        "%v2c_slot_buffer_import : i32)"
    ) in aiv
    # the setup comes before the body's first instruction
    first_aiv = next(i for i, x in enumerate(aiv) if "pto.tpop_from_aic" in x)
    assert max(i for i, x in enumerate(aiv) if "_initialize_pipe" in x) < first_aiv


def test_one_direction_passes_a_zero_for_the_other_buffer_and_loop_carries_stay_on_their_side():
    # a K loop on the cube pushes each partial product; the vector core sums them in a carried tile
    M, K, N = 16, 64, 32

    @pl.kernel
    def k(
        a: pl.Tensor[[M, K], pl.FP16], b: pl.Tensor[[K, N], pl.FP16], y: pl.Out[pl.Tensor[[M, N], pl.FP32]]
    ):
        s = pl.full([M, N], dtype=pl.FP32, value=0.0)
        for i in pl.range(2):
            acc = pl.matmul(
                pl.load(a, [0, i * 32], [M, 32], target_memory=pl.Mem.Mat),
                pl.load(b, [i * 32, 0], [32, N], target_memory=pl.Mem.Mat),
            )
            s = pl.add(s, pl.move(acc, target_memory=pl.Mem.Vec))
        pl.store(s, [0, 0], y)

    a = np.random.default_rng(3).standard_normal((M, K)).astype(np.float16)
    b = np.random.default_rng(4).standard_normal((K, N)).astype(np.float16)
    y = np.zeros((M, N), np.float32)
    low = k.lower(a, b, y)
    k(a, b, y)
    np.testing.assert_allclose(y, a.astype(np.float32) @ b.astype(np.float32), rtol=1e-3, atol=1e-3)
    text = low.pto()
    nzjit.check_ptoas(text)
    fns = _functions(text)
    aic, aiv = "\n".join(fns["k_aic"][1]), "\n".join(fns["k_aiv"][1])
    assert (
        "pto.aic_initialize_pipe {dir_mask = 1, slot_size = 2048, slot_num = 8} (gm_slot_buffer = "
        "%__gm_pipe_buffer : !pto.ptr<f32>, c2v_consumer_buf = %c2v_slot_buffer_import : i32, v2c_consumer_buf = "
        "%c0_i32 : i32)" in aic
    )
    assert "v2c_slot_buffer" not in aic + aiv  # no vector -> cube direction
    aic_for = next(x for x in aic.splitlines() if "scf.for" in x)
    aiv_for = next(x for x in aiv.splitlines() if "scf.for" in x)
    assert "iter_args" not in aic_for  # the carried sum is the vector core's
    assert "iter_args" in aiv_for and "loc=vec" in aiv_for
    assert "pto.tmatmul" in aic and "pto.tmatmul" not in aiv and "pto.tadd" in aiv and "pto.tadd" not in aic


def test_kernels_without_a_pipe_stay_one_function():
    @pl.kernel
    def vec(x: pl.Tensor[[16, 64], pl.FP32], y: pl.Out[pl.Tensor[[16, 64], pl.FP32]]):
        pl.store(pl.exp(pl.load(x, [0, 0], [16, 64])), [0, 0], y)

    @pl.kernel(target=pl.A5)
    def mixed_a5(
        a: pl.Tensor[[16, 32], pl.FP16],
        b: pl.Tensor[[32, 64], pl.FP16],
        y: pl.Out[pl.Tensor[[16, 64], pl.FP32]],
    ):
        acc = pl.matmul(
            pl.load(a, [0, 0], [16, 32], target_memory=pl.Mem.Mat),
            pl.load(b, [0, 0], [32, 64], target_memory=pl.Mem.Mat),
        )
        pl.store(pl.exp(pl.move(acc, target_memory=pl.Mem.Vec)), [0, 0], y)

    x = np.zeros((16, 64), np.float32)
    for text in (
        vec.lower(x, x).pto(),
        mixed_a5.lower(np.zeros((16, 32), np.float16), np.zeros((32, 64), np.float16), x).pto(),
    ):
        assert text.count("func.func") == 1 and "kernel_kind" not in text and "initialize_pipe" not in text


def test_the_text_slot_count_is_the_simulators_fifo_depth():
    assert split.SLOT_NUM == runtime.crosscore.SLOT_NUM
