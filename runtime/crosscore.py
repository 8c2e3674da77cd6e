"""The cube <-> vector pipe of a mixed kernel on A2/A3 (pto-isa TPUSH / TPOP over a GM FIFO).

On A2/A3 the cube core (AIC) and the vector cores (AIV) are separate: L0C has no path to the
unified buffer, and the UB none to L1. A cube result reaches the vector unit through global
memory: TPUSH of an Acc tile is the fixpipe's store (with its dtype conversion, optional ReLU)
into the current FIFO slot followed by a data-ready flag; the vector core's TPOP waits for the
flag, loads the slot into UB and frees the slot (TFREE). Vector -> cube is the mirror image:
UB -> GM slot, then GM -> L1 (ND -> NZ). PyPTO's A2/A3 backend injects this GM pipe buffer
(``RequiresGMPipeBuffer``); A5 moves on chip instead (``cube.tmov`` Acc -> Vec).

The FIFO has ``slot_num`` slots (PTOAS's default is 8 for a one-way pipe): a producer that
pushes into a full FIFO waits for the consumer forever, and a consumer that pops an empty one
waits for a producer forever; both are refused here as the deadlocks they are.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import numpy as np

from .errors import DeviceError
from .gmview import GmView, row_major_strides
from .load import tload
from .memory import GlobalMemory
from .store import tstore
from .tile import TileBuf

__all__ = [
    "PipeSlot",
    "CrossCorePipe",
    "pipe_of",
    "pipe_fill",
    "SLOT_NUM",
    "F16_MAX",
    "dequant_fp16",
    "vector_quant_scale",
]

#: PTOAS's default slot count of a one-way pipe.
SLOT_NUM = 8


#: The largest finite fp16: DEQF16 / VDEQF16 saturate to it.
F16_MAX = 65504.0


def vector_quant_scale(scales: np.ndarray) -> np.ndarray:
    """The per-channel fp32 scales as the fixpipe's vector quantisation (VDEQF16) applies them: its
    parameter keeps 19 bits of each scale (bits 13..31 of the fp32: sign, 8 exponent bits, the top
    10 mantissa bits), so a scale is truncated to 11 significant bits; a zero exponent and mantissa
    is 0, any other exponent e reads as (1 + m / 1024) * 2^(e - 127) (pto-isa's reference model)."""
    bits = np.ascontiguousarray(scales, np.float32).view(np.uint32) >> np.uint32(13)
    sign = np.where((bits >> 18) & 1, -1.0, 1.0)
    exponent = ((bits >> 10) & 0xFF).astype(np.int64)
    mantissa = (bits & 0x3FF).astype(np.float64)
    with np.errstate(over="ignore"):
        v = sign * (1.0 + mantissa / 1024.0) * np.exp2(exponent - 127.0)
        v = v.astype(np.float32)  # exact for every exponent but 255 (2^128: inf, as in fp32)
    return np.where((exponent == 0) & (mantissa == 0), np.float32(0), v).astype(np.float32)


def dequant_fp16(acc: np.ndarray, scale: float | np.ndarray, relu: bool = False) -> np.ndarray:
    """The fixpipe's int32 -> fp16 dequantisation, as pto-isa's reference model computes it: each sum
    converted to fp32 (RNE), times the fp32 scale in fp32 (RNE), saturated to +-65504 (NaN stays
    NaN), then the optional ReLU (NaN -> 0), rounded to fp16 (RNE). `scale` is one float (DEQF16,
    the scalar mode) or one fp32 per column (VDEQF16: pass it through `vector_quant_scale` first)."""
    s = np.asarray(scale, np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        v = acc.astype(np.float32) * s
        v = np.where(np.isnan(v), v, np.clip(v, -F16_MAX, F16_MAX)).astype(np.float32)
        if relu:
            v = np.where(v > 0, v, np.float32(0))
        return v.astype(np.float16)


#: The address of a slot that holds no GM bytes (`CrossCorePipe.reserve`).
NO_BYTES = -1


@dataclass
class PipeSlot:
    """One FIFO entry: its GM bytes, the logical shape / dtype it holds, and whether the
    producer's data-ready flag is set (and not yet consumed)."""

    addr: int
    shape: tuple[int, int]
    dtype: np.dtype
    direction: str  # "c2v" or "v2c"
    ready: bool = False

    def view(self) -> GmView:
        """The slot as an ND GM window."""
        return GmView(self.addr, self.dtype, self.shape, row_major_strides(self.shape), "ND")


class CrossCorePipe:
    """The FIFO between the cube and the vector cores of one device (both directions)."""

    def __init__(self, gm: GlobalMemory, slot_num: int = SLOT_NUM) -> None:
        # held weakly: `pipe_of` keeps one pipe per GM in a WeakKeyDictionary, whose value must
        # not keep its key alive (every GM that ever had a pipe would stay)
        self._gm = weakref.ref(gm)
        self.slot_num = slot_num
        self.in_flight = {"c2v": 0, "v2c": 0}

    @property
    def gm(self) -> GlobalMemory:
        """The device memory whose slots this pipe allocates (DeviceError once it is gone)."""
        gm = self._gm()
        if gm is None:
            raise DeviceError("the cross-core pipe's device memory is gone")
        return gm

    def _slot(
        self, direction: str, shape: tuple[int, int], dtype: np.dtype, gm_bytes: bool = True
    ) -> PipeSlot:
        if self.in_flight[direction] >= self.slot_num:
            raise DeviceError(
                f"TPUSH ({direction}): all {self.slot_num} FIFO slots hold data nobody popped; "
                "the producer core would wait for a free slot forever"
            )
        dtype = np.dtype(dtype)
        nbytes = int(shape[0]) * int(shape[1]) * dtype.itemsize
        self.in_flight[direction] += 1
        return PipeSlot(self.gm.alloc(max(nbytes, 32)) if gm_bytes else NO_BYTES, shape, dtype, direction)

    def push_acc(
        self, acc: TileBuf, dtype: np.dtype, relu: bool = False, scale: float | np.ndarray | None = None
    ) -> PipeSlot:
        """TPUSH of an Acc tile (cube -> vector): the fixpipe stores its valid region, converted to
        `dtype` (int32 -> fp16 through `scale`: one float, DEQF16, or one fp32 per valid column,
        VDEQF16), into a fresh slot and sets data-ready."""
        if acc.space != "Acc":
            raise DeviceError(f"TPUSH to the vector core takes an Acc tile, got {acc.space}")
        if scale is not None and (acc.dtype != np.int32 or np.dtype(dtype) != np.float16):
            raise DeviceError(
                f"the fixpipe dequantises int32 to fp16, not {acc.dtype.name} -> {np.dtype(dtype).name}"
            )
        if isinstance(scale, np.ndarray) and scale.shape != (acc.valid_col,):
            raise DeviceError(f"VDEQF16: {scale.size} per-channel scales for {acc.valid_col} valid columns")
        slot = self._slot("c2v", (acc.valid_row, acc.valid_col), dtype)
        if scale is not None:
            per = vector_quant_scale(scale) if isinstance(scale, np.ndarray) else scale
            vals = dequant_fp16(acc.logical()[: acc.valid_row, : acc.valid_col], per, relu)
            self.gm.write(slot.addr, np.ascontiguousarray(vals).view(np.uint8).reshape(-1))
        else:
            tstore(self.gm, slot.view(), acc, relu=relu)
        slot.ready = True
        return slot

    def push_vec(self, tile: TileBuf) -> PipeSlot:
        """TPUSH of a Vec tile (vector -> cube): UB -> GM slot, then data-ready."""
        if tile.space != "Vec":
            raise DeviceError(f"TPUSH to the cube core takes a Vec tile, got {tile.space}")
        slot = self._slot("v2c", (tile.valid_row, tile.valid_col), tile.dtype)
        tstore(self.gm, slot.view(), tile)
        slot.ready = True
        return slot

    def pop(self, slot: PipeSlot, tile: TileBuf) -> None:
        """TPOP into `tile` (Vec for c2v, Mat for v2c): wait for data-ready, load, TFREE the slot."""
        want = "Vec" if slot.direction == "c2v" else "Mat"
        if tile.space != want:
            raise DeviceError(f"TPOP of a {slot.direction} slot lands in {want}, got a {tile.space} tile")
        self._ready(slot)
        tile.valid_row, tile.valid_col = slot.shape
        tload(self.gm, slot.view(), tile)
        self.release(slot)

    def _ready(self, slot: PipeSlot) -> None:
        if not slot.ready:
            raise DeviceError(
                f"TPOP ({slot.direction}) of a slot whose data-ready flag is not set (popped "
                "twice, or never pushed): the consumer core would wait forever"
            )

    def reserve(self, direction: str, shape: tuple[int, int], dtype: np.dtype) -> PipeSlot:
        """TPUSH's FIFO accounting without its bytes, data-ready set: the slot one lane pushes,
        standing for every lane's in a batched run whose caller carries the lanes' values (each lane
        is its own core pair with its own FIFO; the lanes' accounting is the same). The slot holds
        no GM allocation (its address is `NO_BYTES`): nothing reads or writes its bytes, and GM
        has no capacity to refuse one (`GlobalMemory.alloc`), so allocating it per push only cost
        time (its poison fill) and left one allocation record per push."""
        slot = self._slot(direction, shape, dtype, gm_bytes=False)
        slot.ready = True
        return slot

    def release(self, slot: PipeSlot) -> None:
        """TPOP's wait and TFREE without the load (the counterpart of `reserve`; `pop` ends with it)."""
        self._ready(slot)
        slot.ready = False
        self.in_flight[slot.direction] -= 1
        if slot.addr != NO_BYTES:
            self.gm.free(slot.addr)


_PIPES: weakref.WeakKeyDictionary[GlobalMemory, CrossCorePipe] = weakref.WeakKeyDictionary()


def pipe_of(gm: GlobalMemory) -> CrossCorePipe:
    """The one pipe of the device whose global memory is `gm`."""
    p = _PIPES.get(gm)
    if p is None:
        p = _PIPES[gm] = CrossCorePipe(gm)
    return p


def pipe_fill(gm: GlobalMemory) -> tuple[tuple[str, int], ...]:
    """The FIFO fill of `gm`'s pipe per direction (nothing in flight: ``()``), without making one."""
    p = _PIPES.get(gm)
    return () if p is None or not any(p.in_flight.values()) else tuple(p.in_flight.items())
