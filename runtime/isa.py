"""Instruction models of the simulated A2/A3 cube core (hardware-model.md §8), one import point.

The compiler's backend programs against this module: ``tload`` / ``tstore`` move data between
GM (:class:`GmView` windows of a :class:`GlobalMemory`) and on-chip :class:`TileBuf` s, ``tmov``
moves between tiles, ``tmatmul`` runs ``mad``.  Each is vectorised (one strided copy or one
``np.matmul``) and byte-exact, defects included; see the per-path modules for details.
"""

from __future__ import annotations

from .cube import MATMUL_DTYPES, tmatmul, tmov
from .dma import copy_bursts, dma_burst
from .errors import DeviceError, HardwareDefectWarning
from .gmview import GmView, row_major_strides
from .load import nd2nd_load_l1, nd2nd_load_ub, nd2nz_load, nz_load, nz_load_ub, tload
from .store import mat_store_nz, nd_store_acc, nz_store_acc, read_acc, tstore, vec_store_nd
from .tile import TileBuf

__all__ = [
    "GmView",
    "TileBuf",
    "DeviceError",
    "HardwareDefectWarning",
    "row_major_strides",
    "tload",
    "tstore",
    "tmov",
    "tmatmul",
    "MATMUL_DTYPES",
    "nz_load",
    "nz_load_ub",
    "nd2nz_load",
    "nd2nd_load_l1",
    "nd2nd_load_ub",
    "nz_store_acc",
    "nd_store_acc",
    "vec_store_nd",
    "mat_store_nz",
    "read_acc",
    "dma_burst",
    "copy_bursts",
]
