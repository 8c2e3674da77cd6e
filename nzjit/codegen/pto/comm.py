"""PTO text of the communication primitives (nzjit/prims/comm.py), registered into `pto_rules`.

The spellings follow PyPTO's distributed lowering (pto_ops_distributed): a signal operation is
`pto.comm.tnotify` / `pto.comm.twait` on a one-cell partition of the signal window with its
`notifyOp` / `cmp` attribute; a remote access first addresses the peer's copy of the window
(`pto.comm.peer_view`, from the rank's CommContext) and then is an ordinary `pto.tload` /
`pto.tstore` on a partition of it (`{atomic = add}` for AtomicType.Add); put / get are
`pto.comm.tput` / `pto.comm.tget`; `rank` / `nranks` read the CommContext of the window. A
collective is emitted as one composite `pto.comm.<name>` operation on its windows (PyPTO expands
it into notify / wait / remote loads in a later pass; this compiler stops at the composite).
"""

from __future__ import annotations

from ... import prims as P
from ...core.ir import Eqn
from ...core.types import TensorType
from ..pto_types import tensor_view_type
from . import memory as _memory  # noqa: F401 - registers the tile store / load emitters reused below
from .emitter import Emitter, Rule, View, pto_rules

__all__ = ["COMM_PTO_RULES"]


def _peer_view(em: Emitter, v: View, peer: str) -> View:
    """The peer's copy of window `v`: same shape and strides, the peer's base address."""
    ssa = em.names.fresh(f"{v.name}_peer")
    em.line(
        f"{ssa} = pto.comm.peer_view {v.ssa}, {peer} : {tensor_view_type(v.type.rank, v.type.dtype)}, i32"
    )
    return View(ssa, f"{v.name}_peer", v.type, v.ptr, v.strides, v.offsets, v.axes)


def _cell(em: Emitter, e: Eqn, group: str = "offsets") -> tuple[str, str]:
    v = em.view(e.inputs[0])
    offsets = [em.index(a) for a in e.operands(group)]
    return em.partition(v, offsets, [1] * len(offsets))


def _scalar(em: Emitter, e: Eqn, group: str) -> str:
    (a,) = e.operands(group)
    return em.value(a)


def _rank(em: Emitter, e: Eqn) -> None:
    v = em.view(e.inputs[0])
    field = "rankId" if e.primitive is P.comm_rank_p else "rankNum"
    out = em.define(e.outputs[0], "rank")
    em.line(f'{out} = pto.comm.ctx_field {v.ssa} {{field = "{field}"}} : i32')


def _notify(em: Emitter, e: Eqn) -> None:
    peer, value = _scalar(em, e, "peer"), _scalar(em, e, "value")
    v = _peer_view(em, em.view(e.inputs[0]), peer)
    offsets = [em.index(a) for a in e.operands("offsets")]
    pview, ptype = em.partition(v, offsets, [1] * len(offsets))
    em.line(
        f"pto.comm.tnotify({pview}, {value} : {ptype}, i32) {{notifyOp = #pto<notify_op {e.params['op']}>}}"
    )


def _wait(em: Emitter, e: Eqn) -> None:
    pview, ptype = _cell(em, e)
    expected = _scalar(em, e, "expected")
    em.line(f"pto.comm.twait({pview}, {expected} : {ptype}, i32) {{cmp = #pto<wait_cmp {e.params['cmp']}>}}")


def _box(t: TensorType, shape: tuple[int, ...]) -> list[int]:
    return [1] * (t.rank - 2) + list(shape) if t.rank >= 2 else list(shape[-1:])


def _remote_load(em: Emitter, e: Eqn) -> None:
    v = em.view(e.inputs[0])
    peer = _scalar(em, e, "peer")
    pv = _peer_view(em, v, peer)
    offsets = [em.index(a) for a in e.operands("offsets")]
    pview, ptype = em.partition(pv, offsets, _box(v.type, e.params.get("valid") or e.params["shape"]))  # type: ignore[arg-type]
    tile = em.alloc(e.outputs[0])
    em.line(f"pto.tload ins({pview} : {ptype}) outs({tile.ssa} : {tile.spelled})")


def _remote_store(em: Emitter, e: Eqn) -> None:
    tile = em.tile(e.inputs[0])
    v = em.view(e.inputs[1])
    peer = _scalar(em, e, "peer")
    pv = _peer_view(em, v, peer)
    offsets = [em.index(a) for a in e.operands("offsets")]
    pview, ptype = em.partition(pv, offsets, _box(v.type, tile.type.shape))  # type: ignore[arg-type]
    extra = " {atomic = add}" if e.params["atomic"] else ""
    em.line(f"pto.tstore ins({tile.ssa} : {tile.spelled}) outs({pview} : {ptype}){extra}")


def _transfer(em: Emitter, e: Eqn, op: str) -> None:
    dst, src = em.view(e.inputs[0]), em.view(e.operands("src")[0])
    peer = _scalar(em, e, "peer")
    shape = list(e.params["shape"])
    if op == "tput":
        dst = _peer_view(em, dst, peer)
    else:
        src = _peer_view(em, src, peer)
    dv, dtp = em.partition(dst, [em.index(a) for a in e.operands("dst_offsets")], shape)
    sv, stp = em.partition(src, [em.index(a) for a in e.operands("src_offsets")], shape)
    extra = " {atomic = add}" if e.params.get("atomic") else ""
    em.line(f"pto.comm.{op} ins({sv} : {stp}) outs({dv} : {dtp}){extra}")


def _collective(em: Emitter, e: Eqn) -> None:
    views = [em.view(a) for a in e.inputs]
    name = e.primitive.name.split(".", 1)[1]
    attrs = [f'{k} = "{e.params[k]}"' for k in ("op", "mode") if k in e.params]
    attrs += [f"root = {e.params['root']} : i64"] if "root" in e.params else []
    extra = " {" + ", ".join(attrs) + "}" if attrs else ""
    types = ", ".join(tensor_view_type(v.type.rank, v.type.dtype) for v in views)
    em.line(f"pto.comm.{name} {', '.join(v.ssa for v in views)}{extra} : {types}")
    em.env[e.outputs[0]] = (
        views[0] if e.primitive is P.comm_barrier_p else views[-2 if len(views) == 3 else 0]
    )


COMM_PTO_RULES: dict[P.Primitive, Rule] = {
    P.comm_rank_p: _rank,
    P.comm_nranks_p: _rank,
    P.comm_notify_p: _notify,
    P.comm_wait_p: _wait,
    P.comm_remote_load_p: _remote_load,
    P.comm_remote_store_p: _remote_store,
    P.comm_put_p: lambda em, e: _transfer(em, e, "tput"),
    P.comm_get_p: lambda em, e: _transfer(em, e, "tget"),
    P.comm_allreduce_p: _collective,
    P.comm_reduce_scatter_p: _collective,
    P.comm_allgather_p: _collective,
    P.comm_all_to_all_p: _collective,
    P.comm_barrier_p: _collective,
    P.comm_broadcast_p: _collective,
}
# the backend's instrumented local window accesses (backend/comm_instrument.py) are the plain
# TSTORE / TLOAD on the device: the same text
COMM_PTO_RULES[P.comm_window_store_p] = pto_rules[P.tile_store_p]
COMM_PTO_RULES[P.comm_window_load_p] = pto_rules[P.tile_load_p]
pto_rules.update(COMM_PTO_RULES)
