"""PTO emitters of the cube primitives: `pto.textract` into Left/Right and `pto.tmatmul(.acc)`. The
matmuls before tiling never reach codegen (refused as internal errors)."""

from __future__ import annotations

from ... import prims as P
from ...core.ir import Eqn
from ...core.types import Mem
from .emitter import Emitter, instr, pto_rules, rule, unlowered

pto_rules[P.tensor_matmul_p] = pto_rules[P.tensor_matmul_acc_p] = unlowered("ConvertTensorToTileOps")
pto_rules[P.tile_matmul_p] = pto_rules[P.tile_matmul_acc_p] = unlowered("AutoTileMatmulL0")
pto_rules[P.tile_matmul_bias_p] = unlowered("AutoTileMatmulL0")


@rule(P.tile_extract_p)
def _extract(em: Emitter, e: Eqn) -> None:
    src = em.tile(e.inputs[0])
    r0, c0 = (em.operand(em.index(a)) for a in e.operands("offsets"))
    out = em.alloc(e.outputs[0])
    if e.outputs[0].type.memory is Mem.Bias:  # type: ignore[union-attr]
        # Mat -> Bias is TMOV (pto-isa TMOV.md: tmov.m2b), of the window at (r0, c0)
        em.line(f"pto.tmov ins({src.ssa}, {r0}, {c0} : {src.spelled}, index, index) outs({out.ssa} : {out.spelled})")
        return
    flag = " {transpose}" if e.params.get("transpose") else ""
    em.line(f"pto.textract ins({src.ssa}, {r0}, {c0} : {src.spelled}, index, index) "
            f"outs({out.ssa} : {out.spelled}){flag}")


@rule(P.tile_mad_p)
def _mad(em: Emitter, e: Eqn) -> None:
    instr(em, e, "pto.tmatmul")


@rule(P.tile_mad_acc_p)
def _mad_acc(em: Emitter, e: Eqn) -> None:
    instr(em, e, "pto.tmatmul.acc")


@rule(P.tile_mad_bias_p)
def _mad_bias(em: Emitter, e: Eqn) -> None:
    instr(em, e, "pto.tmatmul.bias")
