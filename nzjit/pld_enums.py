"""The enumerations of PyPTO's distributed language (`pypto.language.distributed`): how a notify
deposits, what a wait compares, how a collective reduces and how a remote store combines. Used as
`pld.NotifyOp.AtomicAdd` & co.; nzjit/pld.py re-exports them."""

from __future__ import annotations

import enum

__all__ = ["NotifyOp", "WaitCmp", "ReduceOp", "AtomicType"]


class NotifyOp(enum.Enum):
    """How `notify` deposits its value: `AtomicAdd` adds it to the peer's cell (several writers of
    one cell, barriers), `Set` overwrites it (one writer per cell)."""

    AtomicAdd = "atomic_add"
    Set = "set"


class WaitCmp(enum.Enum):
    """The condition `wait` blocks on: `Eq` cell == expected, `Ge` cell >= expected."""

    Eq = "eq"
    Ge = "ge"


class ReduceOp(enum.Enum):
    """The reduction of a collective (`reduce_scatter` accepts only `Sum`)."""

    Sum = "sum"
    Max = "max"
    Min = "min"
    Prod = "prod"


class AtomicType(enum.Enum):
    """How a remote store combines: `None_` overwrites, `Add` adds to the peer's bytes."""

    None_ = "none"
    Add = "add"
