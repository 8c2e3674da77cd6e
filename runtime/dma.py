"""The burst DMA primitive shared by every load/store model, and register-field helpers.

One ``copy_gm_to_cbuf`` / ``copy_cbuf_to_gm`` (hardware-model.md §2.3) copies ``n_burst``
bursts of ``len_burst`` 32-byte blocks; consecutive bursts are ``len_burst + gap`` blocks apart
(gap = tail-to-head, in 32-B blocks) on each side.  All four fields are 16 bits wide: the
*caller* computes 32/64-bit values as pto-isa does and this module narrows them, which is where
the pto-isa#317 wrap comes from.

The bursts (and any outer batch loops of the pto-isa code) form one affine family of byte
ranges, so a whole instruction is a single strided-view assignment.  When destination ranges
overlap, the hardware semantics are "in order, later burst wins"; that is reproduced by
writing the outermost axis in order (only in that degenerate case).
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable, Sequence
from typing import Protocol, TypedDict

import numpy as np

from ._strided import byte_span, overlaps_itself
from .errors import DeviceError, HardwareDefectWarning

__all__ = [
    "Memory",
    "u16",
    "ceil16",
    "static_check",
    "pto_assert",
    "defect_warning",
    "copy_bursts",
    "dma_burst",
    "write_in_order",
    "MAX_N_BURST",
]

#: nBurst is a 16-bit field but the DMA engine only accepts 1..4095 [ASC].
MAX_N_BURST = 4095


class Memory(Protocol):
    """Anything an instruction can address: GM or a tile's byte image."""

    def view(self, addr: int, shape: tuple[int, ...], byte_strides: tuple[int, ...]) -> np.ndarray:
        """A numpy view of ``shape`` with ``byte_strides`` starting at byte ``addr``."""


def u16(x: int) -> int:
    """Narrow to an unsigned 16-bit register field (two's complement for negatives, like C++)."""
    return int(x) & 0xFFFF


def ceil16(x: int) -> int:
    """Round ``x`` up to a multiple of 16 (the fractal row count)."""
    return (int(x) + 15) // 16 * 16


def defect_warning(msg: str) -> None:
    """Report a silent hardware defect that the simulator reproduces."""
    warns = _REC.warns
    if warns is not None:  # decoding an instruction: replayed on every run of its plan
        warns.append((msg, HardwareDefectWarning))
        return
    warnings.warn(msg, HardwareDefectWarning, stacklevel=3)


# ------------------------------------------------------------------------ decoded instructions
class _Recorder(threading.local):
    ops: list[Callable[..., None]] | None = None
    warns: list[tuple[str, type[Warning]]] | None = None


_REC = _Recorder()


#: a recorded op's ``copy`` attribute: (plan, source is GM, source offset, destination offset)
_Copy = tuple["_CopyPlan", bool, int, int]


class InstrPlan:
    """A decoded TLOAD / TSTORE: the warnings its checks raised and its copies, replayed for a new
    GM address. Decoding runs the instruction model once on a view at address 0 with copies
    recorded instead of performed, so every check, refusal and field narrowing is the model's
    own; only the work that depends on the geometry is done once."""

    __slots__ = ("ops", "warns", "copies", "single", "fill_bytes", "dense", "replay")

    def __init__(self, ops: list[Callable[..., None]], warns: list[tuple[str, type[Warning]]]) -> None:
        self.ops, self.warns = tuple(ops), tuple(warns)
        #: the burst copies, when the instruction is nothing else: (plan, source is GM,
        #: source offset, destination offset) -- the GM offset is relative to the view address
        copies: list[_Copy] = [c for c in (getattr(op, "copy", None) for op in self.ops) if c is not None]
        self.copies = tuple(copies) if len(copies) == len(self.ops) else None
        self.single = self.ops[0] if len(self.ops) == 1 and not self.warns else None
        self.fill_bytes = self._fill_bytes()
        #: (source is GM, GM bytes lo, hi relative to the view address, tile bytes lo, hi) when the
        #: instruction is one copy that is dense in view order on both sides and warns nothing
        self.dense = self._dense()
        #: ``run`` without its dispatch: ``replay(gm, addr, tile)`` does exactly what it does
        self.replay = self._replay()

    def fills(self, nbytes: int) -> bool:
        """True when the instruction writes every byte of an ``nbytes`` tile (one GM -> tile burst
        copy that is a bijection onto the image): the tile need not be zeroed first."""
        return self.fill_bytes == nbytes

    def _fill_bytes(self) -> int:
        if self.copies is None or len(self.copies) != 1:
            return -1
        cp, src_is_gm, _, do = self.copies[0]
        n = 1
        for d in cp.shape:
            n *= d
        return n if src_is_gm and do == 0 and cp.d_span == (0, n) and not cp.ordered else -1

    def _dense(self) -> tuple[bool, int, int, int, int] | None:
        if self.single is None or self.copies is None:
            return None
        cp, src_is_gm, so, do = self.copies[0]
        (slo, shi), (dlo, dhi) = cp.s_span, cp.d_span
        if not (cp.s_dense and cp.d_dense and cp.add_dtype is None and shi > slo):
            return None
        if src_is_gm:
            return True, so + slo, so + shi, do + dlo, do + dhi
        return False, do + dlo, do + dhi, so + slo, so + shi

    def _replay(self) -> Callable[..., None]:
        dense = self.dense
        if dense is None:
            return self.single or self.run
        src_is_gm, glo, ghi, tlo, thi = dense
        if src_is_gm:

            def load(gm: object, addr: int, tile: object) -> None:
                s = gm.span(addr + glo, addr + ghi)  # type: ignore[attr-defined]
                tile.span(tlo, thi)[...] = s  # type: ignore[attr-defined]

            return load

        def store(gm: object, addr: int, tile: object) -> None:
            s = tile.span(tlo, thi)  # type: ignore[attr-defined]
            gm.span(addr + glo, addr + ghi)[...] = s  # type: ignore[attr-defined]

        return store

    def run(self, gm: object, addr: int, tile: object) -> None:
        """Replay the decoded instruction at GM ``addr`` into ``tile`` (its defect warnings first)."""
        single = self.single
        if single is not None:
            single(gm, addr, tile)
            return
        for msg, cat in self.warns:
            warnings.warn(msg, cat, stacklevel=3)
        for op in self.ops:
            op(gm, addr, tile)


def decode(model: Callable[..., None], gm: object, view0: object, tile: object, **kw: object) -> InstrPlan:
    """Run ``model(gm, view0, tile, **kw)`` in recording mode (``view0`` at address 0)."""
    if _REC.ops is not None:
        raise RuntimeError("nested instruction decode")
    ops: list[Callable[..., None]] = []
    warns: list[tuple[str, type[Warning]]] = []
    _REC.ops, _REC.warns = ops, warns
    try:
        model(gm, view0, tile, **kw)
    except BaseException:
        _REC.ops = _REC.warns = None
        for msg, cat in warns:  # a refused instruction still warns first, as the model does
            warnings.warn(msg, cat, stacklevel=3)
        raise
    _REC.ops = _REC.warns = None
    return InstrPlan(ops, warns)


def recording() -> bool:
    """True while ``decode`` is recording an instruction model's operations instead of running them."""
    return _REC.ops is not None


def record_call(fn: Callable[..., None]) -> None:
    """In recording mode: replay ``fn(gm, addr, tile)`` at run time (paths that are not bursts)."""
    _REC.ops.append(fn)  # type: ignore[union-attr]


Message = str | Callable[[], str]


def _text(msg: Message) -> str:
    return msg() if callable(msg) else msg


def static_check(cond: bool, msg: Message) -> None:
    """A pto-isa ``static_assert``: the kernel would not compile, so the simulator refuses.

    ``msg`` may be a callable so that the (hot) passing path formats nothing.
    """
    if not cond:
        raise DeviceError(f"static check failed: {_text(msg)}")


def pto_assert(cond: bool, msg: Message, debug: bool) -> None:
    """``PTO_ASSERT``: compiled out in release builds [DBG], so only a warning unless ``debug``."""
    if cond:
        return
    if debug:
        raise DeviceError(f"PTO_ASSERT failed: {_text(msg)}")
    if _REC.warns is not None:
        _REC.warns.append((f"PTO_ASSERT (no-op in release) would fail: {_text(msg)}", HardwareDefectWarning))
        return
    warnings.warn(
        f"PTO_ASSERT (no-op in release) would fail: {_text(msg)}", HardwareDefectWarning, stacklevel=3
    )


def write_in_order(dst: np.ndarray, values: np.ndarray, add: bool = False) -> None:
    """``dst[...] = values`` (or ``+=``) with the hardware's in-order semantics on overlap."""
    if dst.ndim == 0 or not overlaps_itself(dst.shape, dst.strides, dst.itemsize):
        if add:
            dst[...] = dst + values
        else:
            dst[...] = values
        return
    values = np.broadcast_to(values, dst.shape)
    for i in range(dst.shape[0]):  # degenerate overlapping bursts only
        write_in_order(dst[i], values[i], add)


class CopyFields(TypedDict):
    """The burst fields of :func:`copy_bursts`, for a caller that repeats one call per batch."""

    n_burst: int
    nbytes: int
    src_pitch: int
    dst_pitch: int


class BurstFields(TypedDict):
    """The register fields of :func:`dma_burst`, for a caller that repeats one call per batch."""

    n_burst: int
    len_burst: int
    src_gap: int
    dst_gap: int


def copy_bursts(
    src: Memory,
    src_addr: int,
    dst: Memory,
    dst_addr: int,
    *,
    n_burst: int,
    nbytes: int,
    src_pitch: int,
    dst_pitch: int,
    batch: Sequence[tuple[int, int, int]] = (),
    add_dtype: np.dtype | None = None,
) -> None:
    """Copy ``n_burst`` runs of ``nbytes`` bytes, runs ``src_pitch`` / ``dst_pitch`` bytes apart.

    ``batch`` adds outer loops ``(count, src_step, dst_step)`` (bytes), outermost first.  With
    ``add_dtype`` the destination is atomically accumulated in that dtype instead of overwritten.
    """
    key = (n_burst, nbytes, src_pitch, dst_pitch, tuple(batch), add_dtype)
    plan = _COPIES.get(key)
    if plan is None:
        plan = _copy_plan(key)
    ops = _REC.ops
    if ops is None:
        plan.run(src, src_addr, dst, dst_addr)
    elif getattr(src, "is_gm", False):  # GM -> tile: the GM side is relative to the view address
        run, so, do = plan.run, src_addr, dst_addr
        op = lambda gm, addr, tile: run(gm, addr + so, tile, do)  # noqa: E731
        op.copy = (plan, True, so, do)  # type: ignore[attr-defined]
        ops.append(op)
    else:
        run, so, do = plan.run, src_addr, dst_addr
        op = lambda gm, addr, tile: run(tile, so, gm, addr + do)  # noqa: E731
        op.copy = (plan, False, so, do)  # type: ignore[attr-defined]
        ops.append(op)


class _CopyPlan:
    """One decoded ``copy_bursts``: view shapes, strides, touched byte spans and the overlap test
    are computed once per geometry; running it is two bounds-checked views and one assignment.
    A side whose bytes are dense and in view order (a whole-row burst family) is viewed as one
    flat slice, which is much cheaper than a strided view; two such sides copy flat."""

    __slots__ = (
        "shape",
        "s_strides",
        "d_strides",
        "s_span",
        "d_span",
        "ordered",
        "add_dtype",
        "s_dense",
        "d_dense",
    )

    def __init__(
        self,
        shape: tuple[int, ...],
        s_strides: tuple[int, ...],
        d_strides: tuple[int, ...],
        add_dtype: np.dtype | None,
    ) -> None:
        self.shape, self.s_strides, self.d_strides, self.add_dtype = shape, s_strides, d_strides, add_dtype
        self.s_span = byte_span(0, shape, s_strides)
        self.d_span = byte_span(0, shape, d_strides)
        item = 1 if add_dtype is None else np.dtype(add_dtype).itemsize
        self.ordered = len(shape) > 0 and overlaps_itself(shape, d_strides, 1) if item == 1 else None
        self.s_dense, self.d_dense = _dense(shape, s_strides), _dense(shape, d_strides)

    def run(self, src: Memory, src_addr: int, dst: Memory, dst_addr: int) -> None:
        slo, shi = self.s_span
        if shi <= slo:  # an empty transfer touches nothing (the views check nothing either)
            return
        dlo, dhi = self.d_span
        if self.s_dense:  # both views check their bounds first (source, then destination), as before
            s = src.span(src_addr + slo, src_addr + shi)  # type: ignore[attr-defined]
            if self.d_dense and self.add_dtype is None:  # same bytes in the same order: a flat copy
                dst.span(dst_addr + dlo, dst_addr + dhi)[...] = s  # type: ignore[attr-defined]
                return
            s = s.reshape(self.shape)
        else:
            s = src.view_span(src_addr, self.shape, self.s_strides, slo, shi)  # type: ignore[attr-defined]
        if self.d_dense:
            d = dst.span(dst_addr + dlo, dst_addr + dhi).reshape(self.shape)  # type: ignore[attr-defined]
        else:
            d = dst.view_span(dst_addr, self.shape, self.d_strides, dlo, dhi)  # type: ignore[attr-defined]
        if self.add_dtype is not None:
            write_in_order(d.view(self.add_dtype), s.view(self.add_dtype), add=True)
        elif self.ordered:
            write_in_order(d, s)
        else:
            d[...] = s


def _dense(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """True when the uint8 view's bytes are contiguous and in row-major index order (unit axes
    aside), so that ``view == flat[lo:hi].reshape(shape)``."""
    expect = 1
    for n, st in zip(reversed(shape), reversed(strides)):
        if n == 1:
            continue
        if n < 1 or st != expect:
            return False
        expect *= n
    return True


#: a ``copy_bursts`` call's geometry: (n_burst, nbytes, src_pitch, dst_pitch, batch, add_dtype)
_CopyKey = tuple[int, int, int, int, tuple[tuple[int, int, int], ...], "np.dtype | None"]
_COPIES: dict[_CopyKey, _CopyPlan] = {}


def record_copy_call(
    fn: Callable[..., None],
    *,
    n_burst: int,
    nbytes: int,
    src_pitch: int,
    dst_pitch: int,
    batch: Sequence[tuple[int, int, int]] = (),
) -> None:
    """In recording mode: replay ``fn(gm, addr, tile)`` (a GM -> tile move done by a faster kernel
    of its own) and declare that it is exactly the burst copy with these ``copy_bursts`` fields,
    GM side relative to the view address, tile side from byte 0.  Plan consumers may then treat
    the instruction as that copy (e.g. read the tile's bytes straight from GM)."""
    key = (n_burst, nbytes, src_pitch, dst_pitch, tuple(batch), None)
    plan = _COPIES.get(key) or _copy_plan(key)
    fn.copy = (plan, True, 0, 0)  # type: ignore[attr-defined]
    _REC.ops.append(fn)  # type: ignore[union-attr]


def _copy_plan(key: _CopyKey) -> _CopyPlan:
    n_burst, nbytes, src_pitch, dst_pitch, batch, add_dtype = key
    counts = tuple(int(b[0]) for b in batch)
    shape = (*counts, int(n_burst), int(nbytes))
    s_strides = (*(int(b[1]) for b in batch), int(src_pitch), 1)
    d_strides = (*(int(b[2]) for b in batch), int(dst_pitch), 1)
    plan = _CopyPlan(shape, s_strides, d_strides, add_dtype)
    if len(_COPIES) < 8192:
        _COPIES[key] = plan
    return plan


def dma_burst(
    src: Memory,
    src_addr: int,
    dst: Memory,
    dst_addr: int,
    *,
    n_burst: int,
    len_burst: int,
    src_gap: int,
    dst_gap: int,
    batch: Sequence[tuple[int, int, int]] = (),
) -> None:
    """One ``copy_gm_to_cbuf`` / ``copy_cbuf_to_gm`` (units of 32 B, all fields 16-bit).

    Fields are narrowed here, silently, as the intrinsic does.  nBurst outside 1..4095 or a zero
    burst length is hardware-undefined and raises :class:`DeviceError`.
    """
    n, ln, sg, dg = u16(n_burst), u16(len_burst), u16(src_gap), u16(dst_gap)
    if not 1 <= n <= MAX_N_BURST:
        raise DeviceError(
            f"DMA nBurst = {n} (from {n_burst}) is outside 1..{MAX_N_BURST}: hardware-undefined"
        )
    if ln < 1:
        raise DeviceError(f"DMA lenBurst = {ln} (from {len_burst}) must be >= 1 block of 32 B")
    copy_bursts(
        src,
        src_addr,
        dst,
        dst_addr,
        n_burst=n,
        nbytes=ln * 32,
        src_pitch=(ln + sg) * 32,
        dst_pitch=(ln + dg) * 32,
        batch=batch,
    )
