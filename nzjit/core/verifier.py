"""The IR type checker, run after every pass in tests (NZJIT_VERIFY=1): every use is defined
before it and every value defined once, every equation's outputs are what its type rule says, loop
bodies are closed and match their operands, and no NZ view survives unblocked past
BlockNzTensorViews (NZ-34)."""

from __future__ import annotations

from ..errors import CompileError, InternalError
from .ir import Eqn, Graph, Var
from .types import Layout, TensorType, Type


def _norm(t: Type) -> Type:
    if isinstance(t, TensorType):
        return TensorType(t.shape, t.dtype, t.layout)
    return t


def verify(g: Graph, stage: str = "?") -> None:
    """Raise InternalError naming the pass (`stage`) and equation that broke an invariant."""
    blocked = bool(g.attrs.get("nz_tensor_views_blocked"))
    _check(g, set(), stage, blocked)


def _fail(stage: str, e: Eqn | None, msg: str) -> InternalError:
    where = f" at {e.source}" if e is not None and e.source else ""
    prim = f" in {e.primitive.name}" if e is not None else ""
    return InternalError(f"IR verifier after {stage}{prim}{where}: {msg}")


def _check_nz(t: Type, stage: str, e: Eqn | None, blocked: bool) -> None:
    if blocked and isinstance(t, TensorType) and t.layout is Layout.NZ and t.rank != 5:
        raise _fail(stage, e, f"NZ view {t} is not blocked (NZ-34)")


def _check(g: Graph, defined: set[Var], stage: str, blocked: bool) -> None:
    scope = set(defined)
    for v in g.params:
        _check_nz(v.type, stage, None, blocked)
        if v in scope:
            raise _fail(stage, None, f"graph parameter {v!r} appears twice")
        scope.add(v)
    for e in g.eqns:
        for a in e.inputs:
            if isinstance(a, Var) and a not in scope:
                raise _fail(stage, e, f"uses {a!r} before it is defined")
        body = e.params.get("body")
        if isinstance(body, Graph):
            nb, nc, nk = e.params["arity"]
            if len(body.params) != 1 + nc + nk or len(body.outputs) != nk or len(e.outputs) != nk:
                raise _fail(stage, e, "loop body arity does not match its operands")
            for p, a in zip(body.params[1:], e.inputs[nb:]):
                if _norm(p.type) != _norm(a.type):
                    raise _fail(stage, e, f"body input {p!r} has type {p.type}, operand has {a.type}")
            _check(body, set(), stage, blocked)  # bodies are closed: captures are explicit inputs
        try:
            want = e.primitive.type_rule(*(a.type for a in e.inputs), **e.params)
        except CompileError as err:
            raise _fail(stage, e, f"type rule refused: {err.raw_message}") from None
        got = [v.type for v in e.outputs]
        if [_norm(t) for t in want] != [_norm(t) for t in got]:
            raise _fail(
                stage,
                e,
                f"outputs have types {[str(t) for t in got]}, the type rule says {[str(t) for t in want]}",
            )
        for v in e.outputs:
            _check_nz(v.type, stage, e, blocked)
            if v in scope:
                raise _fail(stage, e, f"redefines {v!r} (every value is defined once)")
            scope.add(v)
    for a in g.outputs:
        if isinstance(a, Var) and a not in scope:
            raise _fail(stage, None, f"graph '{g.name}' returns {a!r}, which it never defines")
