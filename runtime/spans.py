"""Byte-range arithmetic of strided views, public: what a compiler needs to reason about the bytes
an instruction touches (``byte_span``) and whether a view writes a byte twice
(``overlaps_itself``). The implementation is shared with GM, tiles and the DMA model."""

from __future__ import annotations

from ._strided import byte_span, overlaps_itself

__all__ = ["byte_span", "overlaps_itself"]
