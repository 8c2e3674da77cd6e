"""The errors of the simulated communication world (runtime/comm.py), in a module of their own so
that the window memory (runtime/comm_window.py) and the world can both raise them."""

from __future__ import annotations

from .errors import DeviceError

__all__ = ["CommError", "CommHangError", "CommRaceError", "UnwrittenWindowReadWarning"]


class CommError(DeviceError):
    """A communication error of the simulated world (a bad region, mismatched collectives...)."""


class CommHangError(CommError):
    """Every live rank is blocked and none can proceed: on the device the program would hang."""


class CommRaceError(CommError):
    """Two accesses of window bytes by different ranks that no synchronisation orders."""


class UnwrittenWindowReadWarning(UserWarning):
    """A remote read of window bytes that no rank wrote since the window was allocated."""
