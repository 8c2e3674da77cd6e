"""A mixed cube + vector kernel as PyPTO's ExpandMixedKernel emits it: one AIC (cube) function and
one AIV (vector) function in the same text, joined by the cross-core pipe.

On A2/A3 the cube and the vector cores are separate processors, so a kernel whose body uses both
(the A2/A3 lowering of `pl.move` put `tile.tpush_*` / `tile.tpop_*` pairs at the boundary) is two
programs. Each equation goes to the side its tiles live on: Mat / Left / Right / Acc tiles and
`tpush_to_aiv` / `tpop_from_aiv` to the AIC function, Vec tiles and `tpop_from_aic` /
`tpush_to_aic` to the AIV function; scalar and view equations (offsets, `tensor.slice`) to both,
kept only where that side uses them. A loop (an SPMD launch, a `pl.range`, a staged `if`) goes to
both, its body split the same way; a captured value or a carry the side does not use is dropped
from it. What PyPTO's pass does and this text says:

- both functions take the kernel's whole signature (the shared argument ABI of one mixed task),
  plus the GM pipe buffer the A2/A3 backend injects (`%__gm_pipe_buffer`, its FIFO slots);
- `attributes {pto.kernel_kind = #pto.kernel_kind<cube>}` / `<vector>` on the two functions;
- the pipe setup first in each body: the consumer of a direction reserves its slot buffer
  (`pto.reserve_buffer {name = "<k>_c2v_slot_buffer", ...}` in the vector core's UB for cube ->
  vector, `"<k>_v2c_slot_buffer"` in L1 for vector -> cube), the producer imports it
  (`pto.import_reserved_buffer {..., peer_func = @<peer>}`), and both initialise the pipe
  (`pto.aic_initialize_pipe` / `pto.aiv_initialize_pipe {dir_mask = D, slot_size = S, slot_num = N}`
  with dir_mask C2V = 1, V2C = 2, both = 3, slot_size the largest pushed tile's bytes, and N the
  FIFO depth the simulator models, `runtime.crosscore.SLOT_NUM`);
- the TPUSH / TPOP / TFREE lines themselves are the pipe emitters' (codegen/pto/vector.py).

A kernel with no pipe equation - pure cube, pure vector, or A5's direct TMOV moves - is one
function as before, its text unchanged. A mixed body whose split would leave a side reading a value
only the other side defines (a dependency through something other than the pipe) is also left as
one function: the split is then not PyPTO's either (its pass refuses or fences it).
"""

from __future__ import annotations

from collections.abc import Callable

from ...core.dtypes import INT32
from ...core.ir import Eqn, Graph, Literal, Var
from ...core.types import Mem, TileType
from ...passes.pipe_buffers import C2V, SLOT_NUM, V2C, Pipe, pipe_of
from ...prims import vector as VP
from .emitter import Emitter

CUBE, VECTOR = "cube", "vector"
_CUBE_MEMORY = frozenset({Mem.Mat, Mem.Left, Mem.Right, Mem.Acc})
_PIPE_SIDE = {
    VP.tpush_to_aiv_p: CUBE,
    VP.tpop_from_aiv_p: CUBE,
    VP.tpop_from_aic_p: VECTOR,
    VP.tpush_to_aic_p: VECTOR,
}


def side_of(e: Eqn) -> str | None:
    """The core an equation runs on: CUBE, VECTOR, or None (scalar / view work both may need)."""
    pipe = _PIPE_SIDE.get(e.primitive)
    if pipe is not None:
        return pipe
    mems = {a.type.memory for a in (*e.inputs, *e.outputs) if isinstance(a.type, TileType)}
    if mems & _CUBE_MEMORY:
        return CUBE
    return VECTOR if Mem.Vec in mems else None


def split(g: Graph) -> tuple[Graph, Graph] | None:
    """The (AIC, AIV) graphs of a mixed kernel, or None when it is not split (module docstring)."""
    if pipe_of(g) is None:
        return None
    aic, aiv = _keep(g, CUBE), _keep(g, VECTOR)
    if aic is None or aiv is None or not (_closed(aic, set(aic.params)) and _closed(aiv, set(aiv.params))):
        return None
    return aic, aiv


def _keep(g: Graph, side: str) -> Graph | None:
    """`g` with the equations of `side` and what they (or the graph's outputs) need (a TPOP's slot
    is the peer's: it arrives through the pipe)."""
    need: set[Var] = {a for a in g.outputs if isinstance(a, Var)}
    kept: list[Eqn] = []
    for e in reversed(g.eqns):
        body = e.params.get("body")
        if isinstance(body, Graph):
            e2 = _keep_loop(e, body, side, need)
            if e2 is None:
                continue
            e = e2
        else:
            s = side_of(e)
            if s is not None and s != side:
                continue
            if s is None and not any(o in need for o in e.outputs):
                continue
        kept.append(e)
        if e.primitive not in (VP.tpop_from_aic_p, VP.tpop_from_aiv_p):
            need.update(a for a in e.inputs if isinstance(a, Var))
    return Graph(g.params, kept[::-1], g.outputs, g.attrs, g.name)


def _keep_loop(e: Eqn, body: Graph, side: str, need: set[Var]) -> Eqn | None:
    """A loop / staged `if` for `side`: its body split, the captured values and carries the side
    does not use dropped (a carry of the side's is kept when a later use or the side's body work
    reads it), or None when nothing of the side is left in it."""
    nb, nc, nk = e.params["arity"]
    params = body.params
    captured, carries = params[1 : 1 + nc], params[1 + nc :]
    first = _keep(body, side)
    assert first is not None
    read = _eqn_reads(first)
    keep_k = [
        i for i in range(nk) if _on_side(carries[i], side) and (e.outputs[i] in need or carries[i] in read)
    ]
    yields = [body.outputs[i] for i in keep_k]
    inner = _keep(Graph(params, body.eqns, yields, body.attrs, body.name), side)
    assert inner is not None
    if not keep_k and not any(side_of(x) == side for x in inner.walk()):
        return None
    read = _eqn_reads(inner) | {a for a in yields if isinstance(a, Var)}
    keep_c = [i for i in range(nc) if captured[i] in read]
    inner = Graph(
        [params[0], *(captured[i] for i in keep_c), *(carries[i] for i in keep_k)],
        inner.eqns,
        yields,
        body.attrs,
        body.name,
    )
    ins = (*e.inputs[:nb], *(e.inputs[nb + i] for i in keep_c), *(e.inputs[nb + nc + i] for i in keep_k))
    return e.replace(
        inputs=ins,
        outputs=tuple(e.outputs[i] for i in keep_k),
        params={**e.params, "body": inner, "arity": (nb, len(keep_c), len(keep_k))},
    )


def _on_side(v: Var, side: str) -> bool:
    t = v.type
    if not isinstance(t, TileType):
        return True  # scalars and tensors: either side may carry them
    return (t.memory in _CUBE_MEMORY) == (side == CUBE)


def _eqn_reads(g: Graph) -> set[Var]:
    """The values the equations of `g` (nested bodies included) read."""
    out: set[Var] = set()
    for e in g.walk():
        out.update(a for a in e.inputs if isinstance(a, Var))
    return out


def _closed(g: Graph, defined: set[Var]) -> bool:
    """Every value the graph reads is a parameter or defined before it is read (nested bodies too)."""
    defined = set(defined)
    for e in g.eqns:
        through_pipe = e.primitive in (VP.tpop_from_aic_p, VP.tpop_from_aiv_p)  # the peer pushed its slot
        if not through_pipe and any(isinstance(a, Var) and a not in defined for a in e.inputs):
            return False
        body = e.params.get("body")
        if isinstance(body, Graph) and not _closed(body, defined | set(body.params)):
            return False
        defined.update(e.outputs)
    return all(isinstance(a, Literal) or a in defined for a in g.outputs)


def pipe_setup(em: Emitter, kernel: str, side: str, pipe: Pipe) -> None:
    """The pipe setup at the top of `side`'s function (module docstring)."""
    me, peer = ("aic", "aiv") if side == CUBE else ("aiv", "aic")
    bufs = {}
    for bit, name, consumer in ((C2V, "c2v", VECTOR), (V2C, "v2c", CUBE)):
        if not pipe.dir_mask & bit:
            bufs[name] = em.const(0, INT32)
            continue
        buffer = f"{kernel}_{name}_slot_buffer"
        if side == consumer:
            ssa = em.names.fresh(f"{name}_slot_buffer")
            loc = "vec" if consumer == VECTOR else "mat"
            em.line(
                f'{ssa} = pto.reserve_buffer {{name = "{buffer}", size = {pipe.slot_size * SLOT_NUM}, '
                f"location = #pto.address_space<{loc}>, auto = true}} -> i32"
            )
        else:
            ssa = em.names.fresh(f"{name}_slot_buffer_import")
            em.line(
                f'{ssa} = pto.import_reserved_buffer {{name = "{buffer}", peer_func = @{kernel}_{peer}}} -> i32'
            )
        bufs[name] = ssa
    em.line(
        f"pto.{me}_initialize_pipe {{dir_mask = {pipe.dir_mask}, slot_size = {pipe.slot_size}, "
        f"slot_num = {SLOT_NUM}}} (gm_slot_buffer = {GM_PIPE_BUFFER} : !pto.ptr<f32>, "
        f"c2v_consumer_buf = {bufs['c2v']} : i32, v2c_consumer_buf = {bufs['v2c']} : i32)"
    )


#: The GM FIFO the A2/A3 backend injects as a trailing kernel argument (PyPTO's __gm_pipe_buffer).
GM_PIPE_BUFFER = "%__gm_pipe_buffer"

#: `function(graph, name, kernel_kind, setup)` -> one function's text (codegen/pto/__init__.py).
Function = Callable[[Graph, str, str, Callable[[Emitter], None]], str]


def emit_split(kernel: str, sides: tuple[Graph, Graph], pipe: Pipe, function: Function) -> str:
    """The two functions of a split kernel, AIC first."""
    aic, aiv = sides

    def setup(side: str) -> Callable[[Emitter], None]:
        return lambda em: pipe_setup(em, kernel, side, pipe)

    return "".join(
        function(g, f"{kernel}_{tag}", kind, setup(kind))
        for g, tag, kind in ((aic, "aic", CUBE), (aiv, "aiv", VECTOR))
    )


__all__ = [
    "CUBE",
    "VECTOR",
    "SLOT_NUM",
    "GM_PIPE_BUFFER",
    "Pipe",
    "side_of",
    "pipe_of",
    "split",
    "emit_split",
    "pipe_setup",
]
