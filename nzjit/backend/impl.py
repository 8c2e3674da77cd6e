"""The rule table seen as ``primitive -> impl`` (kept for code written against it).

New rules are registered with `rule.rule` / `rule.register` in a module of `rules/`; ``impl_rules[p]
= fn`` and ``@impl(p)`` still work and register an impl-only rule (see rule.py). The helpers the
old impl module offered are re-exported under their old names.
"""

from __future__ import annotations

from .rule import impl, impl_rules
from .rules.tensor import reference_matmul, squeeze2
from .rules.vector import ELEMENTWISE
from .steps import alloc, check_window, clamp, concrete, split, static_valid

_split, _squeeze2, _ELEMENTWISE = split, squeeze2, ELEMENTWISE

__all__ = [
    "impl",
    "impl_rules",
    "alloc",
    "check_window",
    "clamp",
    "concrete",
    "split",
    "static_valid",
    "reference_matmul",
    "squeeze2",
    "ELEMENTWISE",
]
