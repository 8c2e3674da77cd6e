"""PTO emitters of the scalar primitives: `arith` index arithmetic (floor `//` and `%`, NZ-19),
comparisons, conversions, and the SPMD block index and count."""

from __future__ import annotations

from ... import prims as P
from ...core.dtypes import INDEX, DType
from ...core.ir import Eqn
from ...errors import CompileError
from .emitter import Emitter, rule

_SIGNED = {
    "add": "addi",
    "sub": "subi",
    "mul": "muli",
    "floordiv": "floordivsi",
    "min": "minsi",
    "max": "maxsi",
}
_UNSIGNED = {**_SIGNED, "floordiv": "divui", "mod": "remui", "min": "minui", "max": "maxui"}
_FLOAT = {"add": "addf", "sub": "subf", "mul": "mulf", "min": "minimumf", "max": "maximumf"}


def _arith_op(name: str, d: DType, e: Eqn) -> str:
    table = _FLOAT if d.is_float else _SIGNED if d.is_signed else _UNSIGNED
    if name not in table:
        raise CompileError(
            f"'{name}' of {d.name} scalars has no PTO lowering",
            e.source,
            help="use integer scalars for floor division and modulo",
        )
    return table[name]


@rule(*(p for n, p in P.SCALAR_BINARY.items() if n != "mod"))
def _scalar_binary(em: Emitter, e: Eqn) -> None:
    _binary(em, e, _arith_op(e.primitive.name, e.outputs[0].type.dtype, e))


def _binary(em: Emitter, e: Eqn, op: str) -> None:
    a, b = (em.value(x) for x in e.inputs)
    out = em.define(e.outputs[0])
    em.line(f"{out} = arith.{op} {a}, {b} : {e.outputs[0].type.dtype.short}")


@rule(P.mod_p)
def _mod(em: Emitter, e: Eqn) -> None:
    """Floor modulo (NZ-19): `remsi` truncates toward zero; a non-zero remainder whose sign differs
    from the divisor's is moved into the divisor's range by adding the divisor once."""
    d = e.outputs[0].type.dtype
    if not (d.is_int and d.is_signed):  # unsigned: remui is already the floor modulo
        _binary(em, e, _arith_op("mod", d, e))
        return
    a, k = (em.value(x) for x in e.inputs)
    t = d.short
    out = em.define(e.outputs[0])
    base = out[1:]
    rem, nz, rneg, kneg, differ, fix, adj = (
        em.names.fresh(f"{base}_{s}")
        for s in ("rem", "rem_nz", "rem_neg", "k_neg", "signs_differ", "fix", "adj")
    )
    zero = em.const(0, d)
    em.line(f"{rem} = arith.remsi {a}, {k} : {t}")
    em.line(f"{nz} = arith.cmpi ne, {rem}, {zero} : {t}")
    em.line(f"{rneg} = arith.cmpi slt, {rem}, {zero} : {t}")
    em.line(f"{kneg} = arith.cmpi slt, {k}, {zero} : {t}")
    em.line(f"{differ} = arith.cmpi ne, {rneg}, {kneg} : i1")
    em.line(f"{fix} = arith.andi {nz}, {differ} : i1")
    em.line(f"{adj} = arith.addi {rem}, {k} : {t}")
    em.line(f"{out} = arith.select {fix}, {adj}, {rem} : {t}")


_PRED = {"lt": "lt", "le": "le", "gt": "gt", "ge": "ge", "eq": "eq", "ne": "ne"}


@rule(*P.COMPARE.values())
def _compare(em: Emitter, e: Eqn) -> None:
    a, b = (em.value(x) for x in e.inputs)
    d = e.inputs[0].type.dtype
    rel = _PRED[e.primitive.name]
    if d.is_float:
        op, pred = "cmpf", f"o{rel}" if rel not in ("eq", "ne") else ("oeq" if rel == "eq" else "one")
    else:
        op, pred = "cmpi", rel if rel in ("eq", "ne") else ("s" if d.is_signed else "u") + rel
    out = em.define(e.outputs[0])
    em.line(f"{out} = arith.{op} {pred}, {a}, {b} : {d.short}")


def _convert_op(src: DType, dst: DType) -> str:
    if src.kind == "index" or dst.kind == "index":
        return "index_cast" if src.is_signed else "index_castui"
    if src.is_float and dst.is_float:
        return "extf" if dst.bits > src.bits else "truncf"
    if src.is_float:
        return "fptosi" if dst.is_signed else "fptoui"
    if dst.is_float:
        return "sitofp" if src.is_signed else "uitofp"
    if dst.bits > src.bits:
        return "extsi" if src.is_signed else "extui"
    return "trunci" if dst.bits < src.bits else "bitcast"


@rule(P.convert_p)
def _convert(em: Emitter, e: Eqn) -> None:
    (a,) = e.inputs
    src, dst = a.type.dtype, e.params["dtype"]
    if src is dst:
        em.alias(e.outputs[0], a)
        return
    x = em.value(a)
    out = em.define(e.outputs[0])
    em.line(f"{out} = arith.{_convert_op(src, dst)} {x} : {src.short} to {dst.short}")


@rule(P.tensor_dim_p)
def _tensor_dim(em: Emitter, e: Eqn) -> None:
    """The dimension's `index` argument of the kernel function (codegen/pto/__init__.py)."""
    em.env[e.outputs[0]] = em.dims[e.params["name"]]


@rule(P.get_block_idx_p)
def _block_idx(em: Emitter, e: Eqn) -> None:
    """Inside a lane the lane's block index; outside any pl.spmd it is 0 (language/ops.py)."""
    em.env[e.outputs[0]] = em.lanes[-1].idx if em.lanes else em.const(0, INDEX)


@rule(P.get_block_num_p)
def _block_num(em: Emitter, e: Eqn) -> None:
    em.env[e.outputs[0]] = em.lanes[-1].count if em.lanes else em.const(1, INDEX)
