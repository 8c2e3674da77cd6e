"""``runtime``: a simulated Ascend A2/A3 NPU whose memory holds real bytes.

Global memory, on-chip tiles and the TLOAD / TSTORE / TMOV / TMATMUL instructions behave like
pto-isa on the device, defects included (``/work/shared/spec/hardware-model.md``), so a
compiler bug or a hardware defect yields exactly the wrong bytes the device would produce.
This package never imports the compiler (``nzjit``); the compiler depends on it.
"""

from __future__ import annotations

from . import comm, dispatch, isa  # comm: the communication world of issue 28
from .device import Cluster, DeviceTensor, StackedDeviceTensor, Worker
from .dtypes import c0_of, itemsize_bits
from .errors import DeviceError, DispatchError, HardwareDefectWarning, SimulatorLimitError
from .gmview import GmView
from .layout_marks import NzArray
from .memory import GlobalMemory, OnChip
from .nz import as_nz, nz_blocked_shape, pack_nz, unpack_nz
from .races import LaneRaceError
from .tile import TileBuf

__all__ = [
    "pack_nz",
    "as_nz",
    "NzArray",
    "unpack_nz",
    "nz_blocked_shape",
    "c0_of",
    "itemsize_bits",
    "Worker",
    "DeviceTensor",
    "StackedDeviceTensor",
    "Cluster",
    "DispatchError",
    "DeviceError",
    "LaneRaceError",
    "SimulatorLimitError",
    "HardwareDefectWarning",
    "GmView",
    "TileBuf",
    "GlobalMemory",
    "OnChip",
    "isa",
    "dispatch",
    "comm",
]
