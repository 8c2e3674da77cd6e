"""The rule table seen as ``primitive -> impl`` (kept for code written against it).

New rules are registered with `rule.rule` / `rule.register` in a module of `rules/`; ``impl_rules[p]
= fn`` and ``@impl(p)`` still work and register an impl-only rule (see rule.py).
"""

from __future__ import annotations

from .rule import impl, impl_rules
from .steps import alloc, check_window, clamp, concrete, split, static_valid

__all__ = ["impl", "impl_rules", "alloc", "check_window", "clamp", "concrete", "split", "static_valid"]
