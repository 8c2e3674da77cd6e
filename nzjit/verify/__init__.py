"""nzjit.verify: z3-checked proofs (optional: `pip install nzjit[verify]`).

- `prover_rules`: one z3 query per rule of `nzjit/passes/proofs.py` (`proofs.RULES`): the fact a
  rule claims (multiple of d, non-negative, in [lo, hi]) holds for every value at the declared bit
  width that satisfies its premises.
- `translation`: translation validation of one lowered kernel (`Lowered.validate()`): every NZ
  load, slice, reshape and store of the lowered graph addresses exactly the bytes of its logical
  window, for every value of the loop variables and lanes.

The compiler never imports this package; z3 is needed only here.
"""

from __future__ import annotations

from types import ModuleType

EXTRA = "pip install nzjit[verify]"


class VerifyUnavailable(ImportError):
    """z3 (the `z3-solver` package) is not installed: the verify extra is missing."""


def require_z3() -> ModuleType:
    """The z3 module, or a VerifyUnavailable that names the extra to install."""
    try:
        import z3
    except ImportError as err:
        raise VerifyUnavailable(
            f"translation validation and the prover's rule checks need z3: {EXTRA} (or pip install z3-solver)"
        ) from err
    return z3
