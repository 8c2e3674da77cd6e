"""Error and warning categories of the simulated device.

Two failure families are kept apart because they have different owners:

* :class:`DispatchError` -- the *host* refused an argument before anything ran (wrong rank,
  dtype, worker, a freed tensor).  It subclasses ``TypeError`` because, like a Python call with
  the wrong argument types, nothing has happened yet and nothing was written.
* :class:`DeviceError` -- the *device* was asked to do something the hardware leaves undefined
  (a GM access outside any live allocation, ``nBurst`` outside 1..4095, an on-chip buffer over
  capacity, a tile used after free, a pto-isa ``static_assert``).  A real NPU would fault, hang or
  scribble; the simulator refuses instead, so a bug is never silently masked.

:class:`HardwareDefectWarning` flags the *release-mode* behaviours that pto-isa lets through
silently (``PTO_ASSERT`` is a no-op without ``_DEBUG``, 16-bit register fields wrap): the
simulator reproduces the wrong bytes exactly and warns, as the hardware would not.
"""

from __future__ import annotations

__all__ = ["DispatchError", "DeviceError", "SimulatorLimitError", "HardwareDefectWarning"]


class DispatchError(TypeError):
    """An argument was refused on the host, before dispatch; no output was touched."""


class DeviceError(RuntimeError):
    """A hardware-undefined operation (out-of-bounds access, field out of range, overflow...)."""


class SimulatorLimitError(DeviceError):
    """A program the simulator cannot run to the end (e.g. a loop of more trips than it can
    count), refused before it starts instead of failing with an empty MemoryError."""


class HardwareDefectWarning(UserWarning):
    """A silent pto-isa / hardware defect was hit (release-mode assert skipped, field wrapped)."""
